import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  BET,
  dealState,
  KUHN_INFOSETS,
  type KuhnInfoSet,
  type KuhnMove,
  type KuhnState,
  kuhn,
  PASS,
} from "../../src/games/kuhn.js";
import { cfrAveragePolicy } from "../../src/opponents/kuhn/cfr.js";
import { kuhnPolicyFromSpec } from "../../src/opponents/kuhn/index.js";
import { createOpponent, opponentKindsFor } from "../../src/opponents/registry.js";
import type { Opponent } from "../../src/opponents/types.js";

/** A state where the player to move sees information set `s` (the other card is any card left). */
function stateFor(s: string): KuhnState {
  const card = Number(s[0]);
  const history = s.slice(1);
  const player = history.length % 2;
  const other = card === 0 ? 1 : 0;
  let st = dealState(player === 0 ? [card, other] : [other, card]);
  for (const ch of history) st = kuhn.apply(st, ch === "b" ? BET : PASS);
  return st;
}

const make = (spec: string, seed: number | string = 1, replay = false) =>
  createOpponent<KuhnState, KuhnMove>("kuhn", spec, { rng: Rng.seeded(seed).derive("opponent"), replay });

function frequencyOfBet(opp: Opponent<KuhnState, KuhnMove>, s: string, n: number): number {
  const st = stateFor(s);
  let bets = 0;
  for (let i = 0; i < n; i++) if (opp.act(st) === BET) bets++;
  return bets / n;
}

describe("kuhn opponents", () => {
  it("registers every family", () => {
    const names = opponentKindsFor("kuhn").map((k) => k.name);
    for (const n of [
      "random",
      "conservative",
      "aggressive",
      "intermediate",
      "always-pass",
      "always-bet",
      "cfr",
      "cfr-mixed",
      "cfr-plus",
    ]) {
      assert.ok(names.includes(n), `missing ${n}`);
    }
  });

  it("rule bots act on the information state of the player to move", () => {
    const conservative = make("conservative");
    const aggressive = make("aggressive");
    const intermediate = make("intermediate");
    // player 1 with the King after a pass bets; with the Jack after a bet folds
    assert.equal(conservative.act(stateFor("2p")), BET);
    assert.equal(conservative.act(stateFor("1p")), PASS);
    assert.equal(aggressive.act(stateFor("0p")), BET);
    assert.equal(aggressive.act(stateFor("0b")), PASS);
    assert.equal(aggressive.act(stateFor("1pb")), BET);
    assert.equal(intermediate.act(stateFor("1")), BET);
    assert.equal(intermediate.act(stateFor("1b")), PASS);
    // the card that matters is the mover's own: same history, different mover card
    assert.equal(conservative.act(dealState([2, 0])), BET);
    assert.equal(conservative.act(dealState([0, 2])), PASS);
    assert.equal(make("always-pass").act(stateFor("2b")), PASS);
    assert.equal(make("always-bet").act(stateFor("0b")), BET);
    assert.throws(() => conservative.act(kuhn.apply(kuhn.apply(dealState([0, 1]), PASS), PASS)), /over/);
  });

  it("cfr:N plays the argmax of the N-iteration average (default 1000), ties → PASS", () => {
    const avg = cfrAveragePolicy("cfr", 1000);
    for (const spec of ["cfr", "cfr:1000"]) {
      const opp = make(spec);
      assert.equal(opp.name, spec);
      for (const s of KUHN_INFOSETS) {
        const expected = avg[s] > 0.5 ? BET : PASS;
        for (let k = 0; k < 3; k++) assert.equal(opp.act(stateFor(s)), expected, `${spec} at "${s}"`);
      }
    }
    // one iteration from uniform: the average is still uniform everywhere → ties → always PASS
    const one = make("cfr:1");
    assert.ok(KUHN_INFOSETS.every((s) => one.act(stateFor(s)) === PASS));
  });

  it("cfr-mixed and cfr-plus sample their average strategies", () => {
    const n = 4000;
    const mixed = make("cfr-mixed:1000", 3);
    const avg = cfrAveragePolicy("cfr", 1000);
    for (const s of ["1pb", "2", "0p", "1b"] as KuhnInfoSet[]) {
      const f = frequencyOfBet(mixed, s, n);
      assert.ok(Math.abs(f - avg[s]) < 0.04, `cfr-mixed at "${s}": ${f} vs ${avg[s]}`);
    }
    const plus = make("cfr-plus:200", 4);
    const avgPlus = cfrAveragePolicy("cfr+", 200);
    for (const s of ["0", "1pb", "0p", "1b"] as KuhnInfoSet[]) {
      const f = frequencyOfBet(plus, s, n);
      assert.ok(Math.abs(f - avgPlus[s]) < 0.04, `cfr-plus at "${s}": ${f} vs ${avgPlus[s]}`);
    }
    const random = make("random", 5);
    assert.ok(Math.abs(frequencyOfBet(random, "1", n) - 0.5) < 0.04);
  });

  it("restart continues the stream by default and rewinds it with replay", () => {
    const st = stateFor("1pb");
    const seq = (o: Opponent<KuhnState, KuhnMove>) => Array.from({ length: 40 }, () => o.act(st));
    for (const spec of ["random", "cfr-mixed:500"]) {
      const cont = make(spec, 9, false);
      const first = seq(cont);
      cont.restart();
      const second = seq(cont);
      assert.notDeepEqual(first, second, `${spec} without replay continues`);
      const rep = make(spec, 9, true);
      const a = seq(rep);
      rep.restart();
      const b = seq(rep);
      assert.deepEqual(a, b, `${spec} with replay repeats`);
      assert.deepEqual(a, first, "same seed, same stream");
      assert.notDeepEqual(seq(make(spec, 10)), first, "another seed differs");
    }
  });

  it("bad specs are usage errors naming the valid choices", () => {
    assert.throws(() => make("cfr:abc"), UsageError);
    assert.throws(() => make("cfr:0"), UsageError);
    assert.throws(() => make("cfr:99999999"), UsageError);
    assert.throws(() => make("conservative:3"), UsageError);
    assert.throws(
      () => make("bluffer"),
      (e: unknown) => e instanceof UsageError && /cfr-mixed/.test(e.message),
    );
  });

  it("policy specs resolve to tables", () => {
    assert.equal(kuhnPolicyFromSpec("uniform")["1"], 0.5);
    assert.equal(kuhnPolicyFromSpec("cfr-mixed:1000"), cfrAveragePolicy("cfr", 1000));
    assert.equal(kuhnPolicyFromSpec("cfr:1000")["1pb"], 1);
    assert.throws(
      () => kuhnPolicyFromSpec("random"),
      (e: unknown) => e instanceof UsageError && /valid choices: .*uniform/.test(e.message),
    );
    assert.throws(() => kuhnPolicyFromSpec("cfr-plus:-3"), UsageError);
    assert.throws(() => kuhnPolicyFromSpec("uniform:2"), UsageError);
  });
});
