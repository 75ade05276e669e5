import { UsageError } from "../core/errors.js";

/**
 * Learning-rate schedules, as plain JSON-serialisable data. `lrAt(schedule, step)` gives the
 * rate for the optimizer step with 0-based index `step`; the schedule has no state beyond
 * the learner's step counter.
 *
 * - constant: `lr`, after an optional linear warmup of `warmupSteps` steps.
 * - cosine: linear warmup over `warmupSteps` steps to `lr`, then cosine decay to `minLr`
 *   (default 0) at `totalSteps`; constant at `minLr` afterwards.
 *
 * Warmup step i (0-based) uses lr·(i+1)/warmupSteps, so the first step is never zero.
 */
export type LrSchedule =
  | { kind: "constant"; lr: number; warmupSteps?: number }
  | { kind: "cosine"; lr: number; warmupSteps?: number; totalSteps: number; minLr?: number };

export const SCHEDULE_KINDS = ["constant", "cosine"] as const;

export function validateSchedule(s: LrSchedule): LrSchedule {
  const kind = (s as { kind: string }).kind;
  if (!(SCHEDULE_KINDS as readonly string[]).includes(kind))
    throw new UsageError(`unknown lr schedule kind "${kind}"; valid choices: ${SCHEDULE_KINDS.join(", ")}`);
  if (!(Number.isFinite(s.lr) && s.lr >= 0))
    throw new UsageError(`schedule.lr must be a number ≥ 0, got ${s.lr}`);
  const w = s.warmupSteps ?? 0;
  if (!(Number.isInteger(w) && w >= 0))
    throw new UsageError(`schedule.warmupSteps must be an integer ≥ 0, got ${s.warmupSteps}`);
  if (s.kind === "cosine") {
    if (!(Number.isInteger(s.totalSteps) && s.totalSteps > w))
      throw new UsageError(
        `schedule.totalSteps must be an integer greater than warmupSteps (${w}), got ${s.totalSteps}`,
      );
    const minLr = s.minLr ?? 0;
    if (!(Number.isFinite(minLr) && minLr >= 0 && minLr <= s.lr))
      throw new UsageError(`schedule.minLr must be in [0, lr = ${s.lr}], got ${s.minLr}`);
  }
  return s;
}

export function lrAt(s: LrSchedule, step: number): number {
  const w = s.warmupSteps ?? 0;
  if (step < w) return (s.lr * (step + 1)) / w;
  if (s.kind === "constant") return s.lr;
  const minLr = s.minLr ?? 0;
  const progress = Math.min(1, (step - w) / (s.totalSteps - w));
  return minLr + 0.5 * (s.lr - minLr) * (1 + Math.cos(Math.PI * progress));
}
