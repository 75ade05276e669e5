import { type RunSummary, trainingOf } from "../train/summary.js";
import type { BootstrapEstimate } from "./bootstrap.js";

/**
 * Which runs of a seed a paired difference may set side by side. A run that `train.maxMinutes`
 * stopped before its `train.iterations` is incomplete: paired with a complete run, the difference
 * would mix the method with the training time the machine's load left it. Such seeds are left out
 * of the pair, and the difference names them. Untrained baselines (0 iterations) are complete.
 */

export interface LeftOutSeed {
  seed: number;
  why: string;
}

/** A paired difference, with the seeds both methods have that it left out. */
export interface PairedEstimate extends BootstrapEstimate {
  leftOut: LeftOutSeed[];
}

/**
 * Paired seeds a verdict needs once seeds are left out (or every seed the two methods share, when
 * they share fewer): one seed cannot tell the method from the seed's base model.
 */
export const MIN_PAIRED_SEEDS = 2;

/** "mage stopped at 3 of 6 iterations" for a run `train.maxMinutes` stopped early, else null. */
export function incompleteRun(s: RunSummary): string | null {
  const t = trainingOf(s);
  return t.complete ? null : `${s.name} stopped at ${t.done} of ${t.planned} iterations`;
}

/** Why two runs of one seed cannot be paired, or null when they can. */
export function pairingProblem(a: RunSummary, b: RunSummary): string | null {
  const runs = [a, b].map((s) => ({ name: s.name, ...trainingOf(s) }));
  const [first, ...rest] = runs.filter((r) => !r.complete);
  if (first)
    return [
      `${first.name} stopped at ${first.done} of ${first.planned} iterations`,
      ...rest.map((r) => `${r.name} at ${r.done} of ${r.planned}`),
    ].join(" and ");
  const [x, y] = runs;
  // Both complete with the same plan means the same count; a summary saying otherwise is not trusted.
  if (x.planned > 0 && x.planned === y.planned && x.done !== y.done)
    return `${x.name} trained ${x.done} iterations, ${y.name} ${y.done}`;
  return null;
}

export function hasLeftOut(e: BootstrapEstimate): e is PairedEstimate {
  return "leftOut" in e && (e as PairedEstimate).leftOut.length > 0;
}

/** "seed 1 left out: lamer stopped at 3 of 6 iterations; seed 2 left out: …". */
export function leftOutText(leftOut: readonly LeftOutSeed[]): string {
  return leftOut.map((l) => `seed ${l.seed} left out: ${l.why}`).join("; ");
}

/** True when a paired estimate kept fewer seeds than a verdict needs after leaving some out. */
export function tooFewPaired(e: BootstrapEstimate): boolean {
  if (!hasLeftOut(e)) return false;
  const shared = e.seeds.length + e.leftOut.length;
  return e.seeds.length < Math.min(MIN_PAIRED_SEEDS, shared);
}
