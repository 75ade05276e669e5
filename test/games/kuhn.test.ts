import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import {
  BET,
  dealState,
  historyString,
  infoStateString,
  KUHN_DEALS,
  KUHN_INFOSETS,
  type KuhnMove,
  type KuhnState,
  kuhn,
  PASS,
  revealedCards,
} from "../../src/games/kuhn.js";
import { GAMES, loadGame } from "../../src/games/registry.js";

const TERMINAL = ["pp", "bp", "bb", "pbp", "pbb"];
const NON_TERMINAL = ["", "p", "b", "pb"];

function play(cards: [number, number], history: string): KuhnState {
  let s = dealState(cards);
  for (const ch of history) s = kuhn.apply(s, ch === "b" ? BET : PASS);
  return s;
}

/** Independent payoff rule: contributions, folder, winner takes pot − own contribution. */
function expectedReturns(cards: [number, number], history: string): [number, number] {
  const put = [1, 1];
  let folded = -1;
  let betOutstanding = false;
  for (let i = 0; i < history.length; i++) {
    const p = i % 2;
    if (history[i] === "b") {
      put[p] += 1;
      betOutstanding = !betOutstanding;
    } else if (betOutstanding) {
      folded = p;
    }
  }
  const winner = folded >= 0 ? 1 - folded : cards[0] > cards[1] ? 0 : 1;
  const pot = put[0] + put[1];
  const r: [number, number] = [-put[0], -put[1]];
  r[winner] = pot - put[winner];
  return r;
}

describe("kuhn game", () => {
  it("is registered under 'kuhn'", async () => {
    assert.ok("kuhn" in GAMES);
    const g = await loadGame("kuhn");
    assert.equal(g.name, "kuhn");
    assert.equal(g.numPlayers, 2);
  });

  it("pays every deal/history combination as OpenSpiel (winner pot − own bet, loser −own bet)", () => {
    let checked = 0;
    for (const deal of KUHN_DEALS) {
      const cards: [number, number] = [deal[0], deal[1]];
      for (const h of TERMINAL) {
        const s = play(cards, h);
        assert.ok(kuhn.isTerminal(s), `${cards} ${h} terminal`);
        assert.equal(kuhn.currentPlayer(s), -1);
        assert.deepEqual(kuhn.legalMoves(s), []);
        const r = kuhn.returns(s);
        assert.deepEqual(r, expectedReturns(cards, h), `returns for cards ${cards} history ${h}`);
        assert.equal(r[0] + r[1], 0);
        assert.ok([1, 2].includes(Math.abs(r[0])));
        checked++;
      }
      for (const h of NON_TERMINAL) {
        const s = play(cards, h);
        assert.equal(kuhn.isTerminal(s), false);
        assert.equal(kuhn.currentPlayer(s), h.length % 2);
        assert.deepEqual(kuhn.legalMoves(s), [PASS, BET]);
        assert.deepEqual(kuhn.returns(s), [0, 0]);
      }
    }
    assert.equal(checked, 30);
    // spot values from the rules: K vs J, bet-call → +2 for K; J vs Q after pass-bet-fold → −1
    assert.deepEqual(kuhn.returns(play([2, 0], "bb")), [2, -2]);
    assert.deepEqual(kuhn.returns(play([0, 1], "pbp")), [-1, 1]);
    assert.deepEqual(kuhn.returns(play([0, 2], "bp")), [1, -1]);
  });

  it("writes OpenSpiel information-state strings", () => {
    const s = dealState([1, 2]);
    assert.equal(infoStateString(s, 0), "1");
    assert.equal(infoStateString(s, 1), "2");
    const p = kuhn.apply(s, PASS);
    assert.equal(infoStateString(p, 1), "2p");
    const pb = kuhn.apply(p, BET);
    assert.equal(infoStateString(pb, 0), "1pb");
    assert.equal(historyString(pb), "pb");
    assert.equal(infoStateString(play([0, 1], "b"), 1), "1b");

    // Over all deals, the decision points give exactly OpenSpiel's 12 information sets.
    const seen = new Set<string>();
    for (const deal of KUHN_DEALS) {
      for (const h of NON_TERMINAL) {
        const st = play([deal[0], deal[1]], h);
        seen.add(infoStateString(st, kuhn.currentPlayer(st)));
      }
    }
    assert.deepEqual(
      [...seen].sort(),
      ["0", "1", "2", "0pb", "1pb", "2pb", "0p", "0b", "1p", "1b", "2p", "2b"].sort(),
    );
    assert.deepEqual([...KUHN_INFOSETS].sort(), [...seen].sort());
  });

  it("deals the 6 ordered deals uniformly from the generator and deterministically per seed", () => {
    const counts = new Map<string, number>();
    const rng = Rng.seeded("kuhn-deal");
    const n = 6000;
    for (let i = 0; i < n; i++) {
      const s = kuhn.initialState(rng);
      assert.notEqual(s.cards[0], s.cards[1]);
      assert.equal(s.moves.length, 0);
      const key = s.cards.join(",");
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    assert.equal(counts.size, 6);
    for (const c of counts.values()) assert.ok(c > 850 && c < 1150, `deal count ${c} of ${n}`);
    const a = kuhn.initialState(Rng.seeded(5).derive("deal"));
    const b = kuhn.initialState(Rng.seeded(5).derive("deal"));
    assert.deepEqual(a, b);
  });

  it("shows both cards after a showdown and nothing after a fold", () => {
    assert.deepEqual(revealedCards(play([2, 1], "pp")), [2, 1]);
    assert.deepEqual(revealedCards(play([0, 1], "pbb")), [0, 1]);
    assert.deepEqual(revealedCards(play([0, 2], "bb")), [0, 2]);
    assert.equal(revealedCards(play([0, 2], "bp")), null);
    assert.equal(revealedCards(play([1, 2], "pbp")), null);
    assert.equal(revealedCards(play([1, 2], "pb")), null);
  });

  it("renders the other card hidden unless revealed", () => {
    const start = dealState([2, 0]);
    const r0 = kuhn.render(start, 0);
    assert.match(r0, /King/);
    assert.doesNotMatch(r0, /Jack/);
    assert.match(r0, /hidden/);
    const r1 = kuhn.render(start, 1);
    assert.match(r1, /Jack/);
    assert.doesNotMatch(r1, /King/);
    const fold = play([2, 0], "bp");
    assert.doesNotMatch(kuhn.render(fold, 1), /King/);
    assert.match(kuhn.render(fold, 1), /player 1 folds/);
    const showdown = play([2, 0], "bb");
    assert.match(kuhn.render(showdown, 1), /King/);
    assert.match(kuhn.render(showdown, 1), /wins 2 chips/);
    assert.match(kuhn.render(play([1, 2], "pb"), 0), /Player 0: Pass -> Player 1: Bet/);
    // Without a perspective (logs) both cards are shown.
    assert.match(kuhn.render(start), /King.*Jack/);
  });

  it("keeps states immutable and rejects bad input", () => {
    const s = dealState([0, 1]);
    const t = kuhn.apply(s, BET);
    assert.equal(s.moves.length, 0);
    assert.equal(t.moves.length, 1);
    assert.throws(() => kuhn.apply(play([0, 1], "pp"), PASS), /over/);
    assert.throws(() => kuhn.apply(s, 2 as KuhnMove), /move/);
    assert.throws(() => dealState([1, 1]), /different/);
    assert.throws(() => dealState([0, 3]), /different/);
    assert.equal(kuhn.moveToString(PASS), "PASS");
    assert.equal(kuhn.moveToString(BET), "BET");
  });
});
