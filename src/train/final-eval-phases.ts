/**
 * The phases of a run's final evaluation (the held-out cells, test-time scaling, the harder set)
 * that finished before the run was stopped or killed, kept in `final-eval-phases.json` so that
 * `--resume` does not play them again. With a real model each phase takes minutes to tens of
 * minutes; the model they measured is the last iteration's checkpoint, the one a resume restores,
 * and every trial's samples are seeded, so a phase played again would give the same snapshot.
 * A phase is kept only for the same final iteration and the same `eval` settings (which a
 * resumed run may change).
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../core/atomic-write.js";
import { readJsonOrNull } from "../core/json-file.js";
import type { MageConfig } from "./config.js";
import type { EvalSnapshot } from "./summary.js";

export const FINAL_EVAL_PHASES_FILE = "final-eval-phases.json";

export type FinalEvalPhase = "final" | "independent" | "scaling" | "harder";

export interface KeptPhase {
  snapshot: EvalSnapshot;
  /** Wall seconds the phase took, added to the resumed run's wall time. */
  seconds: number;
}

interface PhasesFile {
  format: "mage-final-eval-phases";
  iteration: number;
  eval: MageConfig["eval"];
  phases: Partial<Record<FinalEvalPhase, KeptPhase>>;
}

/**
 * JSON writes an empty estimate's NaN mean and bounds (e.g. `wonTurnsAt` of an attempt no trial
 * won) as null; a kept phase gets them back as NaN, so a resumed run's snapshot equals the one
 * the phase measured.
 */
function reviveEmptyEstimates<T>(value: T): T {
  if (Array.isArray(value)) return value.map(reviveEmptyEstimates) as T;
  if (value === null || typeof value !== "object") return value;
  const entries = Object.entries(value).map(([k, v]) => [k, reviveEmptyEstimates(v)] as const);
  const o = Object.fromEntries(entries) as Record<string, unknown>;
  if (o.n === 0 && "mean" in o && "lo" in o && "hi" in o) {
    for (const k of ["mean", "lo", "hi"]) if (o[k] === null) o[k] = Number.NaN;
  }
  return o as T;
}

export class FinalEvalPhases {
  private constructor(
    private readonly path: string,
    private readonly file: PhasesFile,
  ) {}

  /** The phases kept in `outDir` for this iteration and these eval settings (none otherwise). */
  static open(outDir: string, iteration: number, evalConfig: MageConfig["eval"]): FinalEvalPhases {
    const path = join(outDir, FINAL_EVAL_PHASES_FILE);
    const stored = readJsonOrNull(path) as PhasesFile | null;
    const matches =
      stored?.format === "mage-final-eval-phases" &&
      stored.iteration === iteration &&
      JSON.stringify(stored.eval) === JSON.stringify(evalConfig);
    const file: PhasesFile = matches
      ? stored
      : { format: "mage-final-eval-phases", iteration, eval: evalConfig, phases: {} };
    return new FinalEvalPhases(path, file);
  }

  kept(phase: FinalEvalPhase): KeptPhase | undefined {
    const kept = this.file.phases[phase];
    return kept && { ...kept, snapshot: reviveEmptyEstimates(kept.snapshot) };
  }

  async keep(phase: FinalEvalPhase, snapshot: EvalSnapshot, seconds: number): Promise<void> {
    this.file.phases[phase] = { snapshot, seconds };
    await writeFileAtomic(this.path, `${JSON.stringify(this.file)}\n`);
  }

  /** Once the run's summary holds them all. */
  async remove(): Promise<void> {
    await rm(this.path, { force: true });
  }
}
