/**
 * Runs of issue 56's coin-collector grid (`coin-real-v2`) for the report tests (not a test file
 * itself): served `twx-coin` runs of a real model (`model.backend: torch`), one cell, with a final
 * evaluation, its independent replay (`independentEval`) and a harder set, each a histogram of 1,000
 * trials.
 */
import type { Experiment } from "../../src/report/experiments.js";
import { validateConfig } from "../../src/train/config.js";
import type { EvalSnapshot, RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";
import { metricsOf } from "./histograms.js";

const N = 1000;

export interface CoinV2Spec {
  /** Trials of 1,000 won first at attempt 2 in the final evaluation (300 more win at attempt 1). */
  late: number;
  /** The same with no memory between attempts; null: no independent evaluation in the summary. */
  independent?: number | null;
  /** The harder set's (default `late`). */
  harder?: number;
}

const MEMORY: Record<string, "history_only" | "history_and_reflection" | "none"> = {
  "mage-history": "history_only",
  "mage-both": "history_and_reflection",
  grpo: "none",
  gigpo: "none",
  zeroshot: "none",
};

function snapshot(late: number): EvalSnapshot {
  const metrics = metricsOf({ W1: 300, "L0 W1": late, "L0 L0 L0": N - 300 - late });
  return {
    iteration: 2,
    attempts: 3,
    trialsPerCell: N,
    cells: [{ opponent: "none", seat: "none", unseen: false, metrics }],
  };
}

/** One run; seed s adds 10·s late wins to every evaluation (seeds differ, their differences do not). */
export function coinV2Summary(method: string, seed: number, spec: CoinV2Spec): RunSummary {
  const base = makeSummary({
    name: method,
    seed,
    game: "sokoban",
    opponents: [],
    cells: [{ opponent: "none", seat: "none", unseen: false }],
    iterations: 2,
    evalEvery: 0,
  });
  const plain = JSON.parse(JSON.stringify(base.config));
  const memory = MEMORY[method];
  const config = validateConfig({
    ...plain,
    game: "remote",
    env: { url: "http://127.0.0.1:1", name: "twx-coin" },
    model: { ...plain.model, backend: "torch", torch: { path: "/models/smollm2-135m-instruct/" } },
    ...(memory && memory !== "none" ? { task: { ...plain.task, reflection: memory } } : {}),
    ...(memory === "none" ? { eval: { ...plain.eval, reflection: "none" } } : {}),
  });
  const shift = 10 * seed;
  const independent =
    spec.independent === undefined || spec.independent === null ? null : snapshot(spec.independent + shift);
  return {
    ...base,
    game: "twx-coin",
    config,
    meta: { ...base.meta, kernels: "torch" },
    finalEval: snapshot(spec.late + shift),
    independentEval: memory === "none" ? null : independent,
    harderEval: snapshot((spec.harder ?? spec.late) + shift),
  };
}

/** The grid: each method's runs on seeds 0–2, under the name `coin-real-v2` (or `name`). */
export function coinV2Grid(specs: Record<string, CoinV2Spec>, name = "coin-real-v2"): Experiment {
  const runs = Object.entries(specs).flatMap(([m, spec]) =>
    [0, 1, 2].map((seed) => ({
      path: `/x/${name}/${m}-s${seed}.json`,
      summary: coinV2Summary(m, seed, spec),
    })),
  );
  return { name, dir: `/x/${name}`, info: null, runs, diversity: [] };
}

/** Stops `method`'s runs of these seeds at 1 of their 2 iterations, as `train.maxMinutes` would. */
export function stopEarly(e: Experiment, method: string, seeds: readonly number[]): Experiment {
  for (const r of e.runs) {
    if (r.summary.name !== method || !seeds.includes(r.summary.seed)) continue;
    Object.assign(r.summary, { iterationsDone: 1, complete: false, stoppedBy: "maxMinutes" });
  }
  return e;
}
