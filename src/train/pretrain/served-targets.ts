/**
 * The targets of a served warm start's checks (`served-checks.ts`), each written met or missed:
 * the share of play answers the environment accepts, the share of reflections that are informative,
 * and whether a lost attempt 1 is followed by a won attempt 2 at least as often as a fresh attempt 1
 * is won (what a reflection is for). The numbers come from the config's `checks.targets`.
 */
import type { TrialRecord } from "../../rollout/types.js";
import type { PretrainEvaluation, TargetCheck } from "./evaluate.js";

export interface ServedTargets {
  /** Play answers the environment accepts (admissible commands). */
  playValid: number;
  /** Reflections that are informative (until a judge of that is in: a well-formed `<remark>`). */
  remarkInformative: number;
  /** Attempt 2's success rate after a lost attempt 1 must reach attempt 1's success rate plus this. */
  recoveryMargin: number;
}

export const SERVED_TARGETS: ServedTargets = { playValid: 0.95, remarkInformative: 0.9, recoveryMargin: 0 };

/**
 * The informative-remark rate, the hook for a judge of informative remarks: the evaluation's
 * `remarkInformativeRate` where the environment's rule judged its reflections (informative of the
 * judged ones), else the valid-remark rate, named as what it is.
 */
export function informativeRate(e: PretrainEvaluation): { value: number; judged: boolean } {
  const rate = (e as PretrainEvaluation & { remarkInformativeRate?: number }).remarkInformativeRate;
  const judged = typeof rate === "number" && Number.isFinite(rate);
  return { value: judged ? rate : e.remarkValidRate, judged };
}

/** Trials whose attempt 1 was lost and that had an attempt 2; those of them won at attempt 2. */
export function recovery(records: readonly TrialRecord[]): { lost: number; won: number } {
  const lost = records.filter((r) => r.attempts.length > 1 && !r.attempts[0].won);
  return { lost: lost.length, won: lost.filter((r) => r.attempts[1].won).length };
}

export function servedTargetChecks(
  e: PretrainEvaluation,
  records: readonly TrialRecord[],
  t: ServedTargets = SERVED_TARGETS,
): TargetCheck[] {
  const check = (name: string, value: number, threshold: number): TargetCheck => ({
    name,
    value,
    threshold,
    met: value >= threshold,
  });
  const remarks = informativeRate(e);
  const first = records.length > 0 ? records.filter((r) => r.attempts[0]?.won).length / records.length : 0;
  const rec = recovery(records);
  return [
    check("play answers admissible", e.playValidRate, t.playValid),
    check(
      remarks.judged ? "remarks informative" : "remarks informative (not judged here: valid <remark>)",
      remarks.value,
      t.remarkInformative,
    ),
    // No attempt 1 lost: nothing to recover, met.
    check(
      `attempt 2 won after a lost attempt 1 (${rec.won}/${rec.lost}; target: attempt 1's success rate${t.recoveryMargin !== 0 ? ` + ${t.recoveryMargin}` : ""})`,
      rec.lost > 0 ? rec.won / rec.lost : 1,
      Math.min(1, first + t.recoveryMargin),
    ),
  ];
}
