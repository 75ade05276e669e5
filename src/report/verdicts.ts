import type { BootstrapEstimate } from "./bootstrap.js";
import { formatPercent, formatScore } from "./markdown.js";

/** Target verdicts and how a measured value reads in them (shared by targets.ts and real-targets.ts). */

/** Slack for float comparisons with a threshold. */
export const EPS = 1e-9;

export type Verdict = "met" | "missed" | "not run";

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

export function formatInterval(e: BootstrapEstimate, kind: "score" | "rate"): string {
  if (!Number.isFinite(e.mean)) return "–";
  const f = kind === "score" ? formatScore : (x: number) => formatPercent(x);
  const seeds = `${e.seeds.length} seed${e.seeds.length === 1 ? "" : "s"}${e.trials ? "" : ", seeds only"}`;
  return `${f(e.mean)} [${f(e.lo)}, ${f(e.hi)}] (${seeds})`;
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
  if (!Number.isFinite(e.mean)) return { verdict: "not run" };
  const above = e.lo > EPS;
  const enough = margin === undefined || e.mean >= margin - EPS;
  if (above && enough) return { verdict: "met" };
  const why: string[] = [];
  if (!above) why.push("the paired interval does not lie above 0");
  if (!enough) why.push(`the mean is below ${margin}`);
  return { verdict: "missed", note: why.join("; ") };
}
