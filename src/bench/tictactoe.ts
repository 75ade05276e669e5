import { Rng } from "../core/rng.js";
import { EMPTY_BOARD, emptyCells, type TicTacToeState, tictactoe } from "../games/tictactoe.js";
import { createOpponent } from "../opponents/registry.js";
import { tictactoeMcts } from "../opponents/tictactoe/index.js";
import type { Opponent } from "../opponents/types.js";

/**
 * TicTacToe: environment steps/s with random actions, MCTS decisions/s, and the calibration
 * table of reference-facts.md measured with our MCTS: an agent moving first against MCTS-100
 * and MCTS-1000, each trial up to 3 attempts of the same game from the empty board against
 * the same opponent instance (its stream continues across attempts), stopping at the first win.
 */

const TRIALS = 200;
const ATTEMPTS = 3;

type TOpp = Opponent<TicTacToeState, number>;

function timeLoop(budgetMs: number, body: () => number): { perSec: number; count: number } {
  body(); // warm-up
  let count = 0;
  const t0 = performance.now();
  let ms = 0;
  while (ms < budgetMs) {
    count += body();
    ms = performance.now() - t0;
  }
  return { perSec: (count / ms) * 1000, count };
}

function environmentSpeed(): void {
  const rng = Rng.seeded("bench-tictactoe").derive("env");
  const { perSec, count } = timeLoop(1000, () => {
    let steps = 0;
    for (let game = 0; game < 1000; game++) {
      let s = tictactoe.initialState(rng);
      while (!tictactoe.isTerminal(s)) {
        const legal = tictactoe.legalMoves(s);
        s = tictactoe.apply(s, legal[rng.int(legal.length)]);
        steps++;
      }
      tictactoe.returns(s);
    }
    return steps;
  });
  console.log(
    `environment (legalMoves + apply + isTerminal, random actions): ${(perSec / 1e6).toFixed(2)} M steps/s (${count} steps)`,
  );
}

/** Non-terminal positions met in random games, for decision timing beyond the opening. */
function samplePositions(n: number): TicTacToeState[] {
  const rng = Rng.seeded("bench-tictactoe").derive("positions");
  const out: TicTacToeState[] = [];
  while (out.length < n) {
    let s = EMPTY_BOARD;
    while (!tictactoe.isTerminal(s)) {
      out.push(s);
      s = tictactoe.apply(s, rng.pick(emptyCells(s)));
    }
  }
  return out.slice(0, n);
}

function mctsSpeed(): void {
  const positions = samplePositions(500);
  for (const sims of [100, 1000]) {
    const opp = tictactoeMcts(sims, Rng.seeded("bench-tictactoe").derive("mcts", sims));
    const empty = timeLoop(1500, () => {
      for (let i = 0; i < 10; i++) opp.searcher.search(EMPTY_BOARD, Rng.seeded(i));
      return 10;
    });
    let simulations = 0;
    let decisions = 0;
    const batch = positions.slice(0, sims === 100 ? 500 : 50);
    const rng = Rng.seeded("bench-tictactoe").derive("mcts-mixed", sims);
    const mixed = timeLoop(1500, () => {
      for (const s of batch) simulations += opp.searcher.search(s, rng).simulations;
      decisions += batch.length;
      return batch.length;
    });
    console.log(
      `MCTS-${sims}: ${empty.perSec.toFixed(0)} decisions/s from the empty board ` +
        `(${((empty.perSec * sims) / 1e6).toFixed(2)} M simulations/s); ` +
        `${mixed.perSec.toFixed(0)} decisions/s over positions from random games ` +
        `(mean ${(simulations / decisions).toFixed(0)} simulations: the search stops once the root is proven)`,
    );
  }
}

interface CellResult {
  success: number[]; // cumulative wins by attempt k (index k-1)
  nonLoss: number;
}

/** Plays one game with the agent first; returns the agent's return. */
function playFirst(agent: TOpp, opponent: TOpp): number {
  let s = EMPTY_BOARD;
  while (!tictactoe.isTerminal(s)) {
    const mover = tictactoe.currentPlayer(s) === 0 ? agent : opponent;
    s = tictactoe.apply(s, mover.act(s) as number);
  }
  return tictactoe.returns(s)[0];
}

function calibrate(agentSpec: string, sims: number, trials: number): CellResult {
  const root = Rng.seeded("bench-tictactoe").derive("calibration", agentSpec, sims);
  const success = new Array<number>(ATTEMPTS).fill(0);
  let nonLoss = 0;
  for (let t = 0; t < trials; t++) {
    const r = root.derive(t);
    const agent = createOpponent<TicTacToeState, number>("tictactoe", agentSpec, { rng: r.derive("agent") });
    const opponent = createOpponent<TicTacToeState, number>("tictactoe", `mcts:${sims}`, {
      rng: r.derive("opponent"),
      replay: false,
    });
    let last = 0;
    let wonAt = -1;
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      if (attempt > 0) {
        agent.restart();
        opponent.restart();
      }
      last = playFirst(agent, opponent);
      if (last > 0) {
        wonAt = attempt;
        break;
      }
    }
    if (wonAt >= 0) for (let k = wonAt; k < ATTEMPTS; k++) success[k]++;
    if (last >= 0) nonLoss++;
  }
  return { success: success.map((w) => w / trials), nonLoss: nonLoss / trials };
}

/** reference-facts.md, "Calibration of the evaluation settings" (TicTacToe, agent first). */
const REFERENCE: Record<string, { mcts100: string; mcts1000at3: string; nonLoss: string }> = {
  random: { mcts100: "0.020 / 0.035 / 0.055", mcts1000at3: "0.005", nonLoss: "0.17 (MCTS-100)" },
  "minimax-first": { mcts100: "0.500 / 0.790 / 0.900", mcts1000at3: "0.015", nonLoss: "1.00" },
  minimax: { mcts100: "0.500 / 0.700 / 0.860", mcts1000at3: "0.075", nonLoss: "1.00" },
};

function calibrationTable(): void {
  console.log(
    `\ncalibration: agent moves first vs our MCTS (UCT c=1.4, 1 random playout, solver), ` +
      `${TRIALS} trials x up to ${ATTEMPTS} attempts from the empty board, same opponent instance (stream continues)`,
  );
  console.log("success@k = won by attempt k; non-loss = last attempt (a win carried forward) not lost");
  console.log(
    `(±1.96·SE at p = 0.5 with ${TRIALS} trials: ±${(1.96 * Math.sqrt(0.25 / TRIALS)).toFixed(3)})`,
  );
  const rows: string[][] = [];
  for (const agent of ["random", "minimax-first", "minimax"]) {
    const ref = REFERENCE[agent];
    for (const sims of [100, 1000]) {
      const t0 = performance.now();
      const res = calibrate(agent, sims, TRIALS);
      const secs = (performance.now() - t0) / 1000;
      rows.push([
        agent,
        `MCTS-${sims}`,
        res.success.map((x) => x.toFixed(3)).join(" / "),
        res.nonLoss.toFixed(3),
        sims === 100 ? ref.mcts100 : `@3: ${ref.mcts1000at3}`,
        sims === 100 || agent !== "random" ? ref.nonLoss : "-",
        `${secs.toFixed(1)} s`,
      ]);
    }
  }
  const header = [
    "agent (first)",
    "opponent",
    "ours success@1 / @2 / @3",
    "ours non-loss",
    "reference success",
    "reference non-loss",
    "time",
  ];
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
  for (const r of [header, ...rows]) console.log(r.map((cell, c) => cell.padEnd(widths[c])).join("  "));
}

export async function run(): Promise<void> {
  environmentSpeed();
  mctsSpeed();
  calibrationTable();
}
