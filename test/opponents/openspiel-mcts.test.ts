import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { tictactoe } from "../../src/games/tictactoe.js";
import { RandomOpponent } from "../../src/opponents/random.js";
import { tictactoeMcts } from "../../src/opponents/tictactoe/index.js";
import { runPythonJson } from "../openspiel/python.js";

/**
 * Cross-check against OpenSpiel (issue 19): mage's MCTS-100 (`mcts:100`: UCT c = 1.4, one
 * uniformly random rollout per leaf, MCTS-Solver backup) and OpenSpiel's MCTSBot with the same
 * settings (`pyspiel.MCTSBot`, OpenSpiel's C++ bot: uct_c 1.4, 100 simulations,
 * RandomRolloutEvaluator with 1 rollout, solve=True) each play 1,000 TicTacToe games per seat
 * against a uniformly random player. Per seat, the win, draw and loss rates agree: the 95%
 * interval of their difference (Newcombe's hybrid Wilson score interval) contains 0.
 *
 * Why against a random player rather than head to head: each side runs alone in its own
 * language with a fully specified opponent, so the games are independent draws and the binomial
 * intervals hold without any coupling between the two processes.
 */

const GAMES = 1000;
type Wdl = [number, number, number];

function playOurs(simulations: number, seat: 0 | 1, games: number, seed: string): Wdl {
  const root = Rng.seeded(seed).derive("seat", seat);
  const bot = tictactoeMcts(simulations, root.derive("mcts"));
  const random = new RandomOpponent("random", tictactoe, root.derive("random"));
  const wdl: Wdl = [0, 0, 0];
  for (let g = 0; g < games; g++) {
    let s = tictactoe.initialState(root);
    while (!tictactoe.isTerminal(s)) {
      s = tictactoe.apply(s, tictactoe.currentPlayer(s) === seat ? bot.act(s) : random.act(s));
    }
    const r = tictactoe.returns(s)[seat];
    wdl[r > 0 ? 0 : r === 0 ? 1 : 2]++;
  }
  return wdl;
}

function wilson(k: number, n: number, z = 1.959964): [number, number] {
  const p = k / n;
  const den = 1 + (z * z) / n;
  const centre = (p + (z * z) / (2 * n)) / den;
  const half = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / den;
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

/** Newcombe's (1998, method 10) 95% interval for p1 − p2. */
export function differenceInterval(k1: number, n1: number, k2: number, n2: number): [number, number] {
  const [p1, p2] = [k1 / n1, k2 / n2];
  const [l1, u1] = wilson(k1, n1);
  const [l2, u2] = wilson(k2, n2);
  const d = p1 - p2;
  return [d - Math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + Math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)];
}

/** Outcomes whose rates differ (0 outside the difference's 95% interval). */
function disagreements(ours: Wdl, theirs: Wdl, n: number): string[] {
  const names = ["win", "draw", "loss"];
  const out: string[] = [];
  for (let i = 0; i < 3; i++) {
    const [lo, hi] = differenceInterval(ours[i], n, theirs[i], n);
    if (lo > 0 || hi < 0) out.push(`${names[i]}: mage ${ours[i]}/${n}, OpenSpiel ${theirs[i]}/${n}`);
  }
  return out;
}

interface Answer {
  wdl: Record<string, Wdl>;
  games: number;
}

describe("MCTS-100 against OpenSpiel's MCTSBot (1,000 games per seat vs uniform random)", () => {
  const theirs = runPythonJson<Answer>(
    "mage_envs.crosscheck",
    ["mcts"],
    JSON.stringify({ games: GAMES, simulations: 100, uct_c: 1.4, solve: true, seed: 19, impl: "cpp" }),
  );

  for (const seat of [0, 1] as const) {
    it(`seat ${seat}: win/draw/loss rates agree within their 95% intervals`, () => {
      const ours = playOurs(100, seat, GAMES, "openspiel-mcts");
      const os = theirs.wdl[String(seat)];
      assert.equal(
        os.reduce((a, b) => a + b),
        GAMES,
      );
      assert.deepEqual(disagreements(ours, os, GAMES), [], `mage ${ours}, OpenSpiel ${os}`);
    });
  }

  it("the comparison can fail: MCTS with 3 simulations is told apart from OpenSpiel's MCTS-100", () => {
    const weak = playOurs(3, 1, GAMES, "openspiel-mcts");
    assert.notDeepEqual(disagreements(weak, theirs.wdl["1"], GAMES), []);
  });

  it("Newcombe's interval: equal rates contain 0, 50% vs 60% of 1,000 does not", () => {
    const [lo, hi] = differenceInterval(500, 1000, 500, 1000);
    assert.ok(lo < 0 && hi > 0);
    assert.ok(differenceInterval(500, 1000, 600, 1000)[1] < 0);
    const [zl, zh] = differenceInterval(0, 1000, 0, 1000);
    assert.ok(zl <= 0 && zh >= 0);
  });
});
