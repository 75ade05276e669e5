import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import {
  EMPTY_BOARD,
  emptyCells,
  randomPlayoutValue,
  stateFromMoves,
  type TicTacToeState,
  tictactoe,
  winnerOf,
} from "../../src/games/tictactoe.js";
import type { Game } from "../../src/games/types.js";
import { MctsOpponent, MctsSearcher } from "../../src/opponents/mcts.js";
import { createOpponent } from "../../src/opponents/registry.js";
import { tictactoeMcts, tictactoeSolver } from "../../src/opponents/tictactoe/index.js";

/** Take-away Nim: take 1..3 stones, taking the last stone wins. Winning move: take n mod 4. */
interface NimState {
  stones: number;
  toMove: number;
  lastMover: number;
}
const nim: Game<NimState, number> = {
  name: "nim",
  numPlayers: 2,
  initialState: () => ({ stones: 10, toMove: 0, lastMover: -1 }),
  currentPlayer: (s) => (s.stones === 0 ? -1 : s.toMove),
  legalMoves: (s) => [1, 2, 3].filter((k) => k <= s.stones),
  apply: (s, k) => ({ stones: s.stones - k, toMove: 1 - s.toMove, lastMover: s.toMove }),
  isTerminal: (s) => s.stones === 0,
  returns: (s) => (s.stones > 0 ? [0, 0] : s.lastMover === 0 ? [1, -1] : [-1, 1]),
  moveToString: (k) => `take ${k}`,
  render: (s) => `${s.stones} stones, player ${s.toMove} to move`,
};

function randomStates(n: number, seed: number): TicTacToeState[] {
  const rng = Rng.seeded(seed);
  const out: TicTacToeState[] = [];
  while (out.length < n) {
    let s = EMPTY_BOARD;
    const depth = rng.int(8);
    for (let d = 0; d < depth && !tictactoe.isTerminal(s); d++)
      s = tictactoe.apply(s, rng.pick(emptyCells(s)));
    if (!tictactoe.isTerminal(s)) out.push(s);
  }
  return out;
}

describe("MCTS (generic, solver backup)", () => {
  it("mcts:1000 never loses 1,000 seeded games against random (both seats)", () => {
    const root = Rng.seeded("mcts1000-vs-random");
    let losses = 0;
    let wins = 0;
    for (let i = 0; i < 1000; i++) {
      const m = createOpponent<TicTacToeState, number>("tictactoe", "mcts:1000", {
        rng: root.derive(i, "mcts"),
      });
      const r = createOpponent<TicTacToeState, number>("tictactoe", "random", {
        rng: root.derive(i, "random"),
      });
      const mctsSeat = i % 2;
      let s = EMPTY_BOARD;
      while (!tictactoe.isTerminal(s)) {
        const p = tictactoe.currentPlayer(s);
        s = tictactoe.apply(s, (p === mctsSeat ? m : r).act(s) as number);
      }
      const ret = tictactoe.returns(s)[mctsSeat];
      if (ret < 0) losses++;
      if (ret > 0) wins++;
    }
    assert.equal(losses, 0);
    assert.ok(wins > 850, `only ${wins} wins`);
  });

  it("a proven root agrees with exact minimax, and the move is then a best move", () => {
    const solver = tictactoeSolver();
    const searcher = new MctsSearcher(tictactoe, { simulations: 1000, playoutValue: randomPlayoutValue });
    const rng = Rng.seeded("proofs");
    let proven = 0;
    for (const s of randomStates(400, 21)) {
      const res = searcher.search(s, rng);
      if (res.provenValue === undefined) continue;
      proven++;
      assert.equal(res.provenValue, solver.valueForMover(s), tictactoe.render(s));
      if (res.provenValue >= 0) assert.ok(solver.bestMoves(s).includes(res.move), tictactoe.render(s));
      const sign = tictactoe.currentPlayer(s) === 0 ? 1 : -1;
      for (const c of res.children) {
        if (c.proven !== undefined) {
          assert.equal(c.proven, sign * solver.value(tictactoe.apply(s, c.move)), tictactoe.render(s));
        }
      }
    }
    assert.ok(proven > 100, `only ${proven} roots proven`);
  });

  it("takes an immediate win and stops as soon as the root is proven", () => {
    // X to move with 0,1 (wins at 2); X with 0,4 (wins at 8); O with 3,4 (wins at 5).
    const cases = [
      [0, 3, 1, 4],
      [0, 1, 4, 2],
      [0, 3, 1, 4, 8],
    ];
    const rng = Rng.seeded("win");
    for (const moves of cases) {
      const s = stateFromMoves(moves);
      const searcher = new MctsSearcher(tictactoe, { simulations: 100_000 });
      const res = searcher.search(s, rng);
      assert.equal(winnerOf(tictactoe.apply(s, res.move)), tictactoe.currentPlayer(s), `after ${moves}`);
      assert.equal(res.provenValue, 1);
      assert.ok(res.simulations < 1000, `${res.simulations} simulations`);
    }
  });

  it("spends every simulation on the root's children when nothing is proven", () => {
    const searcher = new MctsSearcher(tictactoe, { simulations: 500 });
    const res = searcher.search(EMPTY_BOARD, Rng.seeded(4));
    assert.equal(res.simulations, 500);
    assert.equal(res.provenValue, undefined);
    assert.equal(res.children.length, 9);
    // The first simulation evaluates the root itself; each later one goes through one child.
    assert.equal(
      res.children.reduce((a, c) => a + c.visits, 0),
      499,
    );
    // The move is the most visited child.
    const top = Math.max(...res.children.map((c) => c.visits));
    assert.equal(res.children.find((c) => c.move === res.move)?.visits, top);
  });

  it("is deterministic given its generator; the fast playout matches the generic one exactly", () => {
    const fast = new MctsSearcher(tictactoe, { simulations: 300, playoutValue: randomPlayoutValue });
    const generic = new MctsSearcher(tictactoe, { simulations: 300 });
    for (const s of randomStates(40, 8)) {
      const a = fast.search(s, Rng.seeded(1).derive(s));
      const b = fast.search(s, Rng.seeded(1).derive(s));
      const c = generic.search(s, Rng.seeded(1).derive(s));
      assert.deepEqual(a, b);
      assert.deepEqual(a, c);
    }
    const x = fast.search(EMPTY_BOARD, Rng.seeded(1));
    const y = fast.search(EMPTY_BOARD, Rng.seeded(2));
    assert.notDeepEqual(x.children, y.children);
  });

  it("with one simulation plays a uniformly random legal move", () => {
    const opp = tictactoeMcts(1, Rng.seeded(5));
    const s = stateFromMoves([4]);
    const seen = new Set<number>();
    for (let i = 0; i < 200; i++) {
      const m = opp.act(s);
      assert.ok(emptyCells(s).includes(m));
      seen.add(m);
    }
    assert.equal(seen.size, 8);
  });

  it("works on another game through the generic interface (take-away Nim)", () => {
    const opp = new MctsOpponent("mcts", nim, { simulations: 3000 }, Rng.seeded(6));
    for (const stones of [5, 6, 7, 9, 10, 11, 13, 14, 15]) {
      const s: NimState = { stones, toMove: stones % 2, lastMover: 1 - (stones % 2) };
      assert.equal(opp.act(s), stones % 4, `${stones} stones`);
    }
    const searcher = new MctsSearcher(nim, { simulations: 20_000 });
    const res = searcher.search({ stones: 8, toMove: 0, lastMover: -1 }, Rng.seeded(7));
    assert.equal(res.provenValue, -1); // a multiple of 4 is lost for the mover
    assert.throws(() => new MctsSearcher(nim, { simulations: 0 }), RangeError);
  });
});
