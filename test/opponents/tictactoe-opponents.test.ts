import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  EMPTY_BOARD,
  emptyCells,
  stateFromMoves,
  type TicTacToeState,
  tictactoe,
} from "../../src/games/tictactoe.js";
import { createOpponent } from "../../src/opponents/registry.js";
import { tictactoeSolver } from "../../src/opponents/tictactoe/index.js";
import type { Opponent } from "../../src/opponents/types.js";

type TOpp = Opponent<TicTacToeState, number>;
const make = (spec: string, rng: Rng, replay = false): TOpp =>
  createOpponent<TicTacToeState, number>("tictactoe", spec, { rng, replay });

/** Plays one game (all TicTacToe opponents act synchronously); returns the moves and returns. */
function play(first: TOpp, second: TOpp): { moves: number[]; returns: number[] } {
  let s = EMPTY_BOARD;
  const moves: number[] = [];
  while (!tictactoe.isTerminal(s)) {
    const m = (tictactoe.currentPlayer(s) === 0 ? first : second).act(s) as number;
    moves.push(m);
    s = tictactoe.apply(s, m);
  }
  return { moves, returns: tictactoe.returns(s) };
}

/** `games` games of `agent` vs `opponent`, alternating seats; counts from the agent's side. */
function match(agent: string, opponent: string, games: number, seed: string) {
  const root = Rng.seeded(seed);
  const tally = { wins: 0, draws: 0, losses: 0, lossGames: [] as string[] };
  for (let i = 0; i < games; i++) {
    const a = make(agent, root.derive(i, "agent"));
    const o = make(opponent, root.derive(i, "opponent"));
    const agentFirst = i % 2 === 0;
    const { moves, returns } = agentFirst ? play(a, o) : play(o, a);
    const r = returns[agentFirst ? 0 : 1];
    if (r > 0) tally.wins++;
    else if (r < 0) {
      tally.losses++;
      tally.lossGames.push(`${agentFirst ? "first" : "second"}: ${moves.join(",")}`);
    } else tally.draws++;
  }
  return tally;
}

// The six orders exactly as written in mage-reference §6.2 (0-based [row, col]).
const SPEC_ORDERS = [
  "[1,1],[0,0],[0,2],[2,0],[2,2],[0,1],[1,0],[1,2],[2,1]",
  "[0,0],[0,2],[2,0],[2,2],[1,1],[0,1],[1,0],[1,2],[2,1]",
  "[0,1],[1,0],[1,2],[2,1],[1,1],[0,0],[0,2],[2,0],[2,2]",
  "[0,0],[1,1],[2,2],[0,2],[2,0],[0,1],[1,0],[1,2],[2,1]",
  "[0,2],[1,1],[2,0],[0,0],[2,2],[0,1],[1,0],[1,2],[2,1]",
  "[2,2],[2,0],[0,2],[0,0],[1,1],[2,1],[1,2],[1,0],[0,1]",
].map((text) => [...text.matchAll(/\[(\d),(\d)\]/g)].map((m) => 3 * Number(m[1]) + Number(m[2])));

/** Random reachable non-terminal states. */
function randomStates(n: number, seed: number): TicTacToeState[] {
  const rng = Rng.seeded(seed);
  const out: TicTacToeState[] = [];
  while (out.length < n) {
    let s = EMPTY_BOARD;
    const depth = rng.int(9);
    for (let d = 0; d < depth && !tictactoe.isTerminal(s); d++)
      s = tictactoe.apply(s, rng.pick(emptyCells(s)));
    if (!tictactoe.isTerminal(s)) out.push(s);
  }
  return out;
}

describe("tictactoe minimax", () => {
  it("values the empty board as a draw and solves all 5,478 reachable states", () => {
    const solver = tictactoeSolver();
    assert.equal(solver.value(EMPTY_BOARD), 0);
    assert.equal(solver.size, 5478);
    // After an opening corner the only non-losing reply is the centre.
    assert.deepEqual(solver.bestMoves(stateFromMoves([0])), [4]);
    // X to move with two in a row wins; X on opposite corners around O's centre: O must take an edge.
    assert.equal(solver.valueForMover(stateFromMoves([0, 3, 1, 4])), 1);
    assert.deepEqual(solver.bestMoves(stateFromMoves([0, 4, 8])), [1, 3, 5, 7]);
    // X on two adjacent cells against a lone edge O: O is already lost whatever it does.
    assert.equal(solver.valueForMover(stateFromMoves([0, 3, 1])), -1);
  });

  it("minimax-first plays the first best move; minimax spreads over all best moves", () => {
    const first = make("minimax-first", Rng.seeded(1));
    assert.equal(first.act(EMPTY_BOARD), 0); // every opening draws: the first cell
    const seen = new Set<number>();
    const m = make("minimax", Rng.seeded(2));
    for (let i = 0; i < 300; i++) seen.add(m.act(EMPTY_BOARD) as number);
    assert.equal(seen.size, 9);
    for (const s of randomStates(300, 5)) {
      const best = tictactoeSolver().bestMoves(s);
      assert.equal(first.act(s), best[0]);
      assert.ok(best.includes(m.act(s) as number));
    }
  });

  for (const agent of ["minimax", "minimax-first"]) {
    it(`${agent} never loses 10,000 games against random (both seats)`, () => {
      const t = match(agent, "random", 10_000, `${agent}-vs-random`);
      assert.equal(t.losses, 0, t.lossGames.slice(0, 3).join("\n"));
      assert.ok(t.wins > 7_000, `only ${t.wins} wins`);
    });
    it(`${agent} never loses 10,000 games against mcts:100 (both seats)`, () => {
      const t = match(agent, "mcts:100", 10_000, `${agent}-vs-mcts`);
      assert.equal(t.losses, 0, t.lossGames.slice(0, 3).join("\n"));
      assert.ok(t.wins > 0 && t.draws > 0);
    });
  }
});

describe("tictactoe preferred opponents", () => {
  it("take the first empty cell of their order (mage-reference §6.2)", () => {
    const states = randomStates(500, 11);
    for (let k = 1; k <= 6; k++) {
      const opp = make(`preferred:${k}`, Rng.seeded(k));
      const order = SPEC_ORDERS[k - 1];
      assert.equal(opp.act(EMPTY_BOARD), order[0]);
      for (const s of states) {
        const empty = emptyCells(s);
        assert.equal(
          opp.act(s),
          order.find((c) => empty.includes(c)),
        );
      }
    }
  });

  it("reject orders outside 1..6 and a missing argument", () => {
    for (const spec of ["preferred:0", "preferred:7", "preferred", "preferred:x"]) {
      assert.throws(() => make(spec, Rng.seeded(0)), UsageError, spec);
    }
  });
});

describe("tictactoe random opponent", () => {
  it("plays every empty cell about equally often", () => {
    const opp = make("random", Rng.seeded(9));
    const s = stateFromMoves([4, 0]);
    const counts = new Map<number, number>();
    const n = 14_000;
    for (let i = 0; i < n; i++) {
      const m = opp.act(s) as number;
      counts.set(m, (counts.get(m) ?? 0) + 1);
    }
    assert.deepEqual([...counts.keys()].sort(), [1, 2, 3, 5, 6, 7, 8]);
    for (const c of counts.values()) assert.ok(Math.abs(c - n / 7) < 5 * Math.sqrt((n * (1 / 7) * 6) / 7));
  });
});

describe("tictactoe opponent registry", () => {
  it("rejects unknown kinds and stray arguments with usage errors", () => {
    for (const spec of ["alphazero", "minimax:3", "random:1", "mcts:0", "mcts:abc", "mcts:-5"]) {
      assert.throws(() => make(spec, Rng.seeded(0)), UsageError, spec);
    }
    assert.equal(make("mcts", Rng.seeded(0)).name, "mcts");
    assert.equal(make("mcts:25", Rng.seeded(0)).name, "mcts:25");
  });
});

describe("tictactoe opponents: determinism and restart", () => {
  const stochastic = ["random", "minimax", "mcts:50", "mcts"];

  it("same seed gives the same moves; different seeds differ", () => {
    for (const spec of stochastic) {
      const run = (seed: number) => {
        const a = make(spec, Rng.seeded(seed).derive("a"));
        const b = make("random", Rng.seeded(seed).derive("b"));
        const games: string[] = [];
        for (let i = 0; i < 20; i++) games.push(play(a, b).moves.join(""), play(b, a).moves.join(""));
        return games.join("|");
      };
      assert.equal(run(1), run(1), spec);
      assert.notEqual(run(1), run(2), spec);
    }
  });

  it("with replay, restart() answers the same moves the same way in every attempt", () => {
    for (const spec of stochastic) {
      for (let trial = 0; trial < 5; trial++) {
        const opp = make(spec, Rng.seeded("replay").derive(spec, trial), true);
        // A fixed, deterministic agent so the attempts present identical states.
        const agent = make("minimax-first", Rng.seeded(0));
        const first = play(agent, opp).moves.join(",");
        for (let attempt = 0; attempt < 3; attempt++) {
          opp.restart();
          assert.equal(play(agent, opp).moves.join(","), first, `${spec} attempt ${attempt + 2}`);
        }
      }
    }
  });

  it("without replay, restart() continues the stream", () => {
    for (const spec of stochastic) {
      const restarted = make(spec, Rng.seeded("continue").derive(spec));
      const untouched = make(spec, Rng.seeded("continue").derive(spec));
      const agent = make("random", Rng.seeded(3));
      const agentCopy = make("random", Rng.seeded(3));
      const seqA: string[] = [];
      const seqB: string[] = [];
      for (let attempt = 0; attempt < 8; attempt++) {
        restarted.restart();
        seqA.push(play(restarted, agent).moves.join(","));
        seqB.push(play(untouched, agentCopy).moves.join(","));
      }
      assert.deepEqual(seqA, seqB, spec); // restart() is a no-op on the stream
      // ...and the stream moves on: against a fixed agent the opponent's games are not all identical.
      const opp = make(spec, Rng.seeded("continue2").derive(spec));
      const fixed = make("minimax-first", Rng.seeded(0));
      const games = new Set<string>();
      for (let attempt = 0; attempt < 10; attempt++) {
        opp.restart();
        games.add(play(fixed, opp).moves.join(","));
      }
      assert.ok(games.size > 1, `${spec}: ${[...games]}`);
    }
  });
});
