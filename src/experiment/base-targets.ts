/**
 * Whether a grid's base model met its own pretraining or warm-start targets, read from the
 * `pretrain-report.json` that `mage pretrain` writes beside it. A grid does not stop on a missed
 * check (a base slightly under a target can still be trained, and a grid in flight should not lose
 * a seed to it), but it says so in its log, in experiment.json and in `mage report`.
 */
import { readPretrainReport } from "../train/pretrain/run.js";
import { parseTargetValue, type TargetValue } from "../train/pretrain/target-text.js";

export interface BaseTargets {
  met: boolean;
  missed: TargetValue[];
}

/** The targets of the base in `dir`, or null when it has no report or the report holds no targets. */
export function readBaseTargets(dir: string): BaseTargets | null {
  const report = readPretrainReport(dir);
  const targets = (report as { evaluation?: { targets?: unknown } } | null)?.evaluation?.targets;
  if (!Array.isArray(targets)) return null;
  const missed = targets
    .filter((t) => (t as { met?: unknown } | null)?.met === false)
    .map(parseTargetValue)
    .filter((t): t is TargetValue => t !== null);
  return { met: missed.length === 0, missed };
}

/**
 * The pretraining seconds the base's own report measured, or null without one: the record's
 * fallback for a base built by another invocation (another worktree, a record mended by hand).
 */
export function readBaseSeconds(dir: string): number | null {
  const report = readPretrainReport(dir) as { timings?: { totalMs?: unknown } } | null;
  const ms = report?.timings?.totalMs;
  return typeof ms === "number" && Number.isFinite(ms) ? ms / 1000 : null;
}
