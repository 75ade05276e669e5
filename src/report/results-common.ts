import type { RunSummary } from "../train/summary.js";
import type { BootstrapEstimate, BootstrapOptions, HierarchicalBootstrap } from "./bootstrap.js";
import {
  allHaveOutcomes,
  type CellRef,
  cellLabel,
  type ExperimentGame,
  type MethodRuns,
  seedMetrics,
} from "./compare.js";
import type { Experiment } from "./experiments.js";
import { DASH, formatPercent, formatScore, type Plots } from "./markdown.js";
import { hasLeftOut, leftOutText } from "./pairing.js";

/** What every section of the results document shares: its options, number formats and context. */

export interface ResultsOptions {
  title?: string;
  /** Relative link from the markdown file to the plots folder. */
  plotsLink: string;
  /** How a file path is linked from the markdown (default: as given). */
  linkOf?: (path: string) => string;
  /** Link to the exact Kuhn calibration (docs/results/kuhn-calibration.md), when found. */
  calibrationLink?: string;
  /** The report command as the user typed it (printed under "Reproduce"). */
  reportCommand?: string;
  /** Skipped files etc., listed at the end. */
  notes?: readonly string[];
  /**
   * Hand-written markdown placed right after the computed targets: what the numbers mean and
   * what was tried (`ACCOUNT.md` in the experiments folder). Its headings should be level 3.
   */
  account?: string;
  bootstrap?: BootstrapOptions;
  /** Moving-average window for training curves (default: automatic). */
  smooth?: number;
}

export type Kind = "score" | "rate";

export function fmt(x: number, kind: Kind): string {
  return kind === "score" ? formatScore(x) : formatPercent(x);
}

/** `mean [lo, hi]`; bold when `signal` and the interval excludes 0. */
export function est(e: BootstrapEstimate, kind: Kind, signal = false): string {
  if (!Number.isFinite(e.mean)) return DASH;
  const text =
    Number.isFinite(e.lo) && Number.isFinite(e.hi)
      ? `${fmt(e.mean, kind)} [${fmt(e.lo, kind)}, ${fmt(e.hi, kind)}]`
      : fmt(e.mean, kind);
  return signal && (e.lo > 1e-9 || e.hi < -1e-9) ? `**${text}**` : text;
}

export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export function mean(xs: readonly number[]): number {
  const ok = xs.filter(Number.isFinite);
  return ok.length > 0 ? ok.reduce((a, b) => a + b, 0) / ok.length : Number.NaN;
}

export const GAME_TITLES: Record<string, string> = {
  kuhn: "Kuhn poker",
  tictactoe: "TicTacToe",
  sokoban: "Sokoban",
  minesweeper: "MineSweeper",
};

export function gameTitle(game: string): string {
  return GAME_TITLES[game] ?? game;
}

export interface Ctx {
  bs: HierarchicalBootstrap;
  plots: Plots;
  out: string[];
  linkOf: (p: string) => string;
  smooth?: number;
  /** Every experiment's games (for the ablation reference and notes). */
  all: readonly ExperimentGame[];
  /** "experiment: method" → cells whose intervals resample seeds only. */
  seedOnly: Map<string, Set<string>>;
}

/** Records (and returns) whether a method's intervals in a cell resample seeds only. */
export function noteSeedOnly(
  ctx: Ctx,
  m: MethodRuns,
  cell: CellRef,
  source: "final" | "scaling" = "final",
): boolean {
  if (allHaveOutcomes(seedMetrics(m, cell.opponent, cell.seat, source))) return false;
  const key = `${m.experiment}: ${m.name}`;
  const set = ctx.seedOnly.get(key) ?? new Set<string>();
  set.add(cellLabel(cell));
  ctx.seedOnly.set(key, set);
  return true;
}

/** The note under a table whose intervals for some methods resample seeds only. */
export function seedOnlyNote(names: readonly string[]): string {
  return names.length === 0
    ? ""
    : `\n\n_Intervals of ${names.join(", ")} resample seeds only: ${names.length === 1 ? "its" : "their"} summaries carry no outcome histograms, so trials within seeds are not resampled._`;
}

/** The note under a table of differences naming the seeds each difference left out (pairing.ts). */
export function leftOutNote(
  diffs: readonly { label: string; estimates: readonly BootstrapEstimate[] }[],
): string {
  const lines = diffs.flatMap((d) => {
    const e = d.estimates.find(hasLeftOut);
    return e ? [`- ${d.label}: ${leftOutText(e.leftOut)}`] : [];
  });
  if (lines.length === 0) return "";
  return (
    "\n\n_Seeds left out of a difference: a run that `train.maxMinutes` stopped before its planned " +
    `iterations is incomplete, and is not paired with its seed's other runs._\n\n${lines.join("\n")}`
  );
}

/**
 * The note under a table of differences saying which were paired by deal within seeds (trial
 * pairing, `outcomeOrder`) and which redraw the two methods' trials independently.
 */
export function trialPairingNote(
  diffs: readonly { label: string; estimates: readonly BootstrapEstimate[] }[],
): string {
  const full: string[] = [];
  const part: string[] = [];
  const none: string[] = [];
  for (const d of diffs) {
    const ok = d.estimates.filter((e) => Number.isFinite(e.mean) && e.trials);
    if (ok.length === 0) continue;
    // The seeds and their pairing are the same for every statistic of a row; take the widest.
    const e = ok.reduce((a, b) => (b.seeds.length > a.seeds.length ? b : a));
    const paired = e.trialPairedSeeds.length;
    if (paired === e.seeds.length) full.push(d.label);
    else if (paired > 0)
      part.push(`${d.label} (seeds ${e.trialPairedSeeds.join(", ")} of ${e.seeds.length})`);
    else none.push(d.label);
  }
  if (full.length + part.length + none.length === 0) return "";
  if (part.length === 0 && none.length === 0) {
    return `\n\n_Trials paired by deal within every seed in ${full.length === 1 ? "this difference" : "these differences"}._`;
  }
  if (full.length === 0 && part.length === 0) {
    return "\n\n_Trials not paired by deal within seeds here (the summaries lack their per-trial order): they are redrawn independently per method, so the intervals err wide._";
  }
  const bits: string[] = [];
  if (full.length > 0) bits.push(`paired by deal within every seed: ${full.join(", ")}`);
  if (part.length > 0) bits.push(`paired by deal within some seeds: ${part.join(", ")}`);
  if (none.length > 0)
    bits.push(
      `not paired within seeds (a summary lacks its per-trial order, so trials are redrawn independently and the interval errs wide): ${none.join(", ")}`,
    );
  return `\n\n_Trials ${bits.join("; ")}._`;
}

export function methodAttempts(m: MethodRuns): number {
  return Math.max(1, ...m.runs.map((r) => r.summary.finalEval?.attempts ?? 0));
}

export function wallOf(s: RunSummary): number {
  return Number.isFinite(s.wallSeconds) ? s.wallSeconds : Number.NaN;
}

/** The name a grid ran under, when its results folder has since been renamed. */
export function renamedFrom(e: Experiment): string | null {
  return e.info?.name && e.info.name !== e.name ? e.info.name : null;
}
