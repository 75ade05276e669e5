/**
 * Synthetic run summaries for the report tests: a real config (validated by the schema), a
 * training history with trends plus seeded noise, and evaluation snapshots whose estimates come
 * from `computeTrialMetrics` over simulated trials. Not a test file itself (no `.test.ts`).
 */
import { Rng } from "../../src/core/rng.js";
import type { CellResult } from "../../src/evaluate/evaluate.js";
import { computeTrialMetrics, type TrialOutcome } from "../../src/evaluate/metrics.js";
import { validateConfig } from "../../src/train/config.js";
import type { RunMeta } from "../../src/train/run-meta.js";
import { type EvalSnapshot, type RunSummary, SUMMARY_FORMAT } from "../../src/train/summary.js";

export interface FixtureOptions {
  name: string;
  game?: "kuhn" | "tictactoe" | "sokoban" | "minesweeper";
  seed?: number;
  attempts?: number;
  iterations?: number;
  evalEvery?: number;
  trials?: number;
  finalTrials?: number;
  /** Training opponents (two-player games). */
  opponents?: string[];
  /** Evaluation cells. */
  cells?: { opponent: string; seat: "first" | "second" | "none"; unseen: boolean }[];
  /** Base win probability at attempt 1 before training, and the gain per attempt. */
  skill?: number;
  adapt?: number;
  credit?: "differential" | "per-attempt";
  updates?: boolean;
  lr?: number;
  withFinal?: boolean;
}

const META: RunMeta = {
  commit: "0123456789abcdef0123456789abcdef01234567",
  dirty: false,
  node: "v20.19.0",
  platform: "linux 6.1",
  cpu: "test cpu",
  cores: 2,
  memoryGiB: 8,
  host: "test",
  kernels: "wasm",
  startedAt: "2026-01-01T00:00:00.000Z",
};

function simulate(
  rng: Rng,
  trials: number,
  attempts: number,
  p: (k: number) => number,
  cell: { opponent: string; seat: string },
  chips: boolean,
): TrialOutcome[] {
  return Array.from({ length: trials }, (_, i) => {
    const list: TrialOutcome["attempts"] = [];
    for (let k = 1; k <= attempts; k++) {
      const won = rng.bernoulli(Math.min(0.98, Math.max(0.01, p(k))));
      const draw = !won && rng.bernoulli(0.3);
      const score = chips ? (won ? 1 + rng.int(2) : draw ? 0 : -1 - rng.int(2)) : won ? 1 : draw ? 0 : -1;
      list.push({ won, draw, score, reward: score, turns: 3, invalidActions: rng.bernoulli(0.05) ? 1 : 0 });
      if (won) break;
    }
    return { opponent: cell.opponent, seat: cell.seat, taskId: String(i), attempts: list };
  });
}

export function makeSummary(o: FixtureOptions): RunSummary {
  const game = o.game ?? "kuhn";
  const seed = o.seed ?? 0;
  const attempts = o.attempts ?? 3;
  const iterations = o.iterations ?? 12;
  const evalEvery = o.evalEvery ?? 4;
  const opponents = o.opponents ?? ["cfr", "always-bet"];
  const cells = o.cells ?? [
    { opponent: "cfr", seat: "first" as const, unseen: false },
    { opponent: "caller", seat: "second" as const, unseen: true },
  ];
  const skill = o.skill ?? 0.3;
  const adapt = o.adapt ?? 0.1;
  const config = validateConfig({
    name: o.name,
    seed,
    game,
    population: { opponents: opponents.map((spec) => ({ spec })) },
    task: { attempts },
    credit: { mode: o.credit ?? "differential" },
    optim: { lr: o.lr ?? 1e-4 },
    train: { iterations, updates: o.updates ?? true },
    // Puzzle cells ("none"/"none") are what evaluation reports, not something a config names.
    eval: { every: evalEvery, cells: cells.filter((c) => c.seat !== "none") },
  });
  const rng = Rng.seeded(seed).derive("fixture", o.name);
  const progress = (it: number) => (iterations > 0 ? it / iterations : 0);
  const history: Record<string, number>[] = [];
  for (let it = 0; it < iterations; it++) {
    const r = rng.derive("history", it);
    const p = skill + 0.3 * progress(it);
    const h: Record<string, number> = { iteration: it, rollout_ms: 900 + 100 * r.float() };
    if (o.updates !== false) {
      h.loss = 0.5 - 0.3 * progress(it) + 0.05 * r.normal();
      h.entropy = 1.2 - 0.4 * progress(it);
      h.update_ms = 1500 + 50 * r.float();
    }
    h.valid_action = Math.min(1, 0.8 + 0.2 * progress(it));
    for (let k = 1; k <= attempts; k++) {
      h[`success@${k}`] = Math.min(1, p + adapt * (k - 1) + 0.05 * r.normal());
      h[`score@${k}`] = 2 * (p + adapt * (k - 1)) - 1 + 0.1 * r.normal();
    }
    for (const [j, opp] of opponents.entries()) {
      h[`success/${opp}`] = Math.min(1, Math.max(0, p - 0.1 * j + 0.05 * r.normal()));
      h[`final_score/${opp}`] = 2 * (p - 0.1 * j) - 1 + 0.1 * r.normal();
    }
    history.push(h);
  }
  const chips = game === "kuhn";
  const snapshot = (iteration: number, trials: number): EvalSnapshot => ({
    iteration,
    attempts,
    trialsPerCell: trials,
    cells: cells.map((c, ci): CellResult => {
      const outcomes = simulate(
        rng.derive("eval", iteration, ci),
        trials,
        attempts,
        (k) => skill + 0.3 * progress(iteration) + adapt * (k - 1) - (c.unseen ? 0.1 : 0),
        c,
        chips,
      );
      return {
        opponent: c.opponent,
        seat: c.seat,
        unseen: c.unseen,
        metrics: computeTrialMetrics(outcomes, attempts, seed),
      };
    }),
  });
  const periodicEval: EvalSnapshot[] = [];
  if (evalEvery > 0) {
    for (let done = evalEvery; done < iterations; done += evalEvery) {
      periodicEval.push(snapshot(done, o.trials ?? 24));
    }
  }
  return {
    format: SUMMARY_FORMAT,
    name: o.name,
    game,
    seed,
    config,
    meta: META,
    wallSeconds: 125 + seed,
    pretrainSeconds: 0,
    iterationsDone: iterations,
    history,
    periodicEval,
    finalEval: o.withFinal === false ? null : snapshot(iterations, o.finalTrials ?? 60),
  };
}
