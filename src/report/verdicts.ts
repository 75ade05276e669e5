import type { BootstrapEstimate } from "./bootstrap.js";
import { formatPercent, formatScore } from "./markdown.js";
import { hasLeftOut, leftOutText, MIN_PAIRED_SEEDS, tooFewPaired } from "./pairing.js";

/** Target verdicts and how a measured value reads in them (shared by targets.ts and real-targets.ts). */

/** Slack for float comparisons with a threshold. */
export const EPS = 1e-9;

/** "not judged": a paired comparison left with too few seeds once incomplete runs are left out. */
export type Verdict = "met" | "missed" | "not run" | "not judged";

export interface TargetLine {
  game: string;
  /** What is asked, in words. */
  target: string;
  /** The measured value(s) with intervals, or why nothing was measured. */
  measured: string;
  verdict: Verdict;
  /** A qualifier (e.g. the interval straddles the threshold). */
  note?: string;
}

/** "0.120 [0.050, 0.190] (3 seeds)"; a paired difference that left seeds out names them. */
export function formatInterval(e: BootstrapEstimate, kind: "score" | "rate"): string {
  const leftOut = hasLeftOut(e) ? leftOutText(e.leftOut) : null;
  if (!Number.isFinite(e.mean)) return leftOut ? `no seed left to pair (${leftOut})` : "–";
  const f = kind === "score" ? formatScore : (x: number) => formatPercent(x);
  const n = `${e.seeds.length}${leftOut ? " paired" : ""} seed${e.seeds.length === 1 ? "" : "s"}`;
  const seeds = `${n}${e.trials ? "" : ", seeds only"}${leftOut ? `; ${leftOut}` : ""}`;
  return `${f(e.mean)} [${f(e.lo)}, ${f(e.hi)}] (${seeds})`;
}

/** The verdict of a paired difference left with too few seeds to judge, or null when it can be judged. */
export function notJudged(e: BootstrapEstimate): { verdict: Verdict; note: string } | null {
  if (!tooFewPaired(e)) return null;
  const n = e.seeds.length;
  return {
    verdict: "not judged",
    note: `${n === 0 ? "no" : `only ${n}`} paired seed${n === 1 ? "" : "s"} left once incomplete runs are left out; a paired verdict needs ${MIN_PAIRED_SEEDS}`,
  };
}

/** Point target: the mean reaches the threshold (the interval is reported alongside). */
export function atLeast(e: BootstrapEstimate, threshold: number): { verdict: Verdict; note?: string } {
  if (!Number.isFinite(e.mean)) return { verdict: "not run" };
  if (e.mean >= threshold - EPS) {
    return e.lo < threshold - EPS
      ? { verdict: "met", note: "the mean reaches the threshold; the lower end of the interval does not" }
      : { verdict: "met" };
  }
  return e.hi >= threshold - EPS
    ? { verdict: "missed", note: "the upper end of the interval reaches the threshold; the mean does not" }
    : { verdict: "missed" };
}

/** Comparison target: the paired interval lies above 0 (and, when given, the mean reaches `margin`). */
export function clearlyAbove(e: BootstrapEstimate, margin?: number): { verdict: Verdict; note?: string } {
  const unjudged = notJudged(e);
  if (unjudged) return unjudged;
  if (!Number.isFinite(e.mean)) return { verdict: "not run" };
  const above = e.lo > EPS;
  const enough = margin === undefined || e.mean >= margin - EPS;
  if (above && enough) return { verdict: "met" };
  const why: string[] = [];
  if (!above) why.push("the paired interval does not lie above 0");
  if (!enough) why.push(`the mean is below ${margin}`);
  return { verdict: "missed", note: why.join("; ") };
}
