import { readFileSync } from "node:fs";
import { writeFileAtomic } from "../core/atomic-write.js";
import { UsageError } from "../core/errors.js";
import type { CellResult } from "../evaluate/evaluate.js";
import type { MageConfig } from "./config.js";
import type { RunMeta } from "./run-meta.js";

/**
 * The small JSON a run leaves behind (`summary.json`): enough to rebuild every table and plot
 * of a report without the run directory (no weights, no transcripts).
 */
export const SUMMARY_FORMAT = "mage-run-summary-v1";

export interface EvalSnapshot {
  iteration: number;
  attempts: number;
  trialsPerCell: number;
  /** `every`: each served instance was played once, trial i instance i (`eval.env.instances`); absent: drawn. */
  instances?: "every";
  cells: CellResult[];
}

export interface RunSummary {
  format: typeof SUMMARY_FORMAT;
  name: string;
  game: string;
  seed: number;
  config: MageConfig;
  meta: RunMeta;
  /** Wall-clock seconds of the run so far (training + evaluation, pretraining excluded). */
  wallSeconds: number;
  /** Seconds spent pretraining the base model in this run (0 when a checkpoint was given). */
  pretrainSeconds: number;
  /** The base model the run started from, with its weights' SHA-256 (absent in older summaries). */
  baseModel?: { dir: string; sha256: string | null };
  iterationsDone: number;
  /**
   * Whether training reached `config.train.iterations`. False while a run trains, and in a run
   * that `train.maxMinutes` stopped early (`stoppedBy`): its final evaluation measures fewer
   * iterations than planned, so it is *incomplete*. Absent in older summaries: see `trainingOf`.
   */
  complete?: boolean;
  /** What ended training before `config.train.iterations`: the wall-clock box, or null. */
  stoppedBy?: "maxMinutes" | null;
  /** Training metrics per iteration (the lines of metrics.jsonl). */
  history: Record<string, number>[];
  periodicEval: EvalSnapshot[];
  finalEval: EvalSnapshot | null;
  /** The final evaluation replayed without memory (`eval.independent`), when configured and finished. */
  independentEval?: EvalSnapshot | null;
  /** The test-time scaling evaluation (`eval.scaling`), when configured and finished. */
  scalingEval?: EvalSnapshot | null;
  /** The puzzles' harder held-out set (`eval.harder`), when configured and finished. */
  harderEval?: EvalSnapshot | null;
}

/** Iterations a run trained against those its config plans, and whether it trained them all. */
export interface Training {
  done: number;
  planned: number;
  complete: boolean;
}

/**
 * How far a summary's run trained. Summaries written before `complete` existed are judged by
 * `iterationsDone` against `config.train.iterations`; an untrained baseline (0 iterations) is
 * complete by definition. `planned` stands in when the summary's config lacks the count.
 */
export function trainingOf(
  s: Pick<RunSummary, "iterationsDone" | "complete"> & { config?: { train?: { iterations?: number } } },
  planned = s.config?.train?.iterations ?? s.iterationsDone,
): Training {
  const done = s.iterationsDone;
  return { done, planned, complete: s.complete ?? done >= planned };
}

export function writeSummary(path: string, summary: RunSummary): Promise<void> {
  return writeFileAtomic(path, `${JSON.stringify(summary, null, 1)}\n`);
}

export function readSummary(path: string): RunSummary {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new UsageError(`cannot read run summary ${path}: ${(err as Error).message}`);
  }
  const s = raw as Partial<RunSummary>;
  if (s?.format !== SUMMARY_FORMAT) {
    throw new UsageError(
      `${path} is not a mage run summary (format "${String(s?.format)}", expected "${SUMMARY_FORMAT}")`,
    );
  }
  return s as RunSummary;
}
