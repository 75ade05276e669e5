import type { CellResult } from "../evaluate/evaluate.js";
import type { Estimate, TrialMetrics } from "../evaluate/metrics.js";
import { type EvalSnapshot, type RunSummary, trainingOf } from "../train/summary.js";
import { cellLabel, cellKey as keyOf } from "./compare.js";
import {
  DASH,
  formatDuration,
  formatEstimate,
  formatPercent,
  formatScore,
  formatSmall,
  table,
} from "./format.js";
import type { LoadedSummary } from "./load.js";
import { modelColumn } from "./model.js";
import { ratingSection } from "./ratings.js";
import { barChart, type LineSeries, lineChart, PALETTE, type Point } from "./svg.js";

/**
 * Report assembly for `mage report`: from run summaries alone, a markdown document (runs table,
 * headline numbers, final-evaluation tables with intervals) and the SVG plots it links to
 * (training curves, periodic evaluation, per-attempt bars). Pure: the caller writes the files.
 * Runs sharing a game and a name are one method; with several seeds the method is shown as the
 * mean over seeds (bracket = range of the seed means) and every seed is listed on its own.
 */

export {
  DASH,
  formatDuration,
  formatEstimate,
  formatPercent,
  formatScore,
  formatSmall,
  table,
} from "./format.js";

export interface ReportOptions {
  title?: string;
  /** Relative link from the markdown file to the plots folder (e.g. "plots"). */
  plotsLink: string;
  /** How a summary path is linked from the markdown (default: as stored). */
  linkOf?: (summaryPath: string) => string;
  /** Moving-average window (iterations) for training curves; default chosen from the run length. */
  smooth?: number;
}

export interface ReportPlot {
  /** File name inside the plots folder. */
  file: string;
  svg: string;
}

export interface Report {
  markdown: string;
  plots: ReportPlot[];
}

// ---------------------------------------------------------------------------------------------
// Aggregation over seeds

/** One value per seed aggregated: the mean, and either the run's own interval or the seed range. */
export interface Aggregate {
  mean: number;
  lo: number;
  hi: number;
  /** Seeds that contributed. */
  seeds: number;
  /** "interval": one seed, lo/hi its 95% bootstrap interval; "range": min/max over seeds. */
  kind: "interval" | "range";
}

export function aggregate(values: readonly Estimate[]): Aggregate {
  const ok = values.filter((v) => Number.isFinite(v.mean));
  if (ok.length === 0)
    return { mean: Number.NaN, lo: Number.NaN, hi: Number.NaN, seeds: 0, kind: "interval" };
  if (ok.length === 1) return { mean: ok[0].mean, lo: ok[0].lo, hi: ok[0].hi, seeds: 1, kind: "interval" };
  const means = ok.map((v) => v.mean);
  return {
    mean: means.reduce((a, b) => a + b, 0) / means.length,
    lo: Math.min(...means),
    hi: Math.max(...means),
    seeds: ok.length,
    kind: "range",
  };
}

interface Method {
  game: string;
  name: string;
  runs: LoadedSummary[];
  color: string;
  /** Legend text: the name, with the seed count when there are several. */
  label: string;
}

interface CellKey {
  key: string;
  opponent: string;
  seat: string;
  unseen: boolean;
}

/** Evaluation cells of a game in first-seen order over its (sorted) runs. */
function cellsOf(snapshots: readonly (EvalSnapshot | null)[]): CellKey[] {
  const out = new Map<string, CellKey>();
  for (const snap of snapshots) {
    for (const c of snap?.cells ?? []) {
      const key = keyOf(c);
      if (!out.has(key)) out.set(key, { key, opponent: c.opponent, seat: c.seat, unseen: c.unseen });
    }
  }
  return [...out.values()];
}

function findCell(snap: EvalSnapshot | null | undefined, key: string): CellResult | undefined {
  return snap?.cells.find((c) => keyOf(c) === key);
}

type MetricFamily = "successAt" | "nonLossAt" | "scoreAt";

function attemptEstimate(m: TrialMetrics, family: MetricFamily, k: number): Estimate | undefined {
  return m[family]?.[k - 1];
}

/** Attempts evaluated for one method (the largest over its runs' evaluations). */
function methodEvalAttempts(m: Method): number {
  return maxAttempts([m]);
}

/** Attempts evaluated for a game (the largest over its runs). */
function maxAttempts(methods: readonly Method[]): number {
  let k = 1;
  for (const m of methods) {
    for (const r of m.runs) {
      for (const c of r.summary.finalEval?.cells ?? []) k = Math.max(k, c.metrics.successAt?.length ?? 0);
      for (const s of r.summary.periodicEval) {
        for (const c of s.cells) k = Math.max(k, c.metrics.successAt?.length ?? 0);
      }
    }
  }
  return k;
}

// ---------------------------------------------------------------------------------------------
// Run table

export function shortCommit(s: RunSummary): string {
  const c = s.meta?.commit;
  if (!c) return DASH;
  return `${c.slice(0, 7)}${s.meta?.dirty ? "+dirty" : ""}`;
}

function methodOf(s: RunSummary): string {
  if (s.config?.train?.updates === false) return "no updates";
  return s.config?.advantage?.estimator ?? DASH;
}

function attemptsText(s: RunSummary): string {
  const train = s.config?.task?.attempts;
  const ev = s.config?.eval?.attempts;
  if (train === undefined) return DASH;
  return ev !== undefined && ev !== train ? `${train} (eval ${ev})` : String(train);
}

function wallText(s: RunSummary): string {
  const w = formatDuration(s.wallSeconds);
  return s.pretrainSeconds > 0 ? `${w} + ${formatDuration(s.pretrainSeconds)} pretrain` : w;
}

function runsTable(runs: readonly LoadedSummary[], linkOf: (p: string) => string): string {
  const model = modelColumn(runs.map((r) => r.summary));
  const head = [
    "run",
    "game",
    "seed",
    "estimator",
    "credit",
    "scope",
    "reflection",
    "attempts",
    "group",
    "lr",
    model.head,
    "iterations",
    "wall-clock",
    "kernels",
    "commit",
  ];
  const rows = runs.map(({ path, summary: s }) => {
    const c = s.config;
    const updates = c?.train?.updates !== false;
    return [
      `[${s.name.replace(/[[\]]/g, "")}](${linkOf(path)})`,
      s.game,
      String(s.seed),
      methodOf(s),
      updates ? (c?.credit?.mode ?? DASH) : DASH,
      updates ? (c?.advantage?.scope ?? DASH) : DASH,
      c?.task?.reflection ?? DASH,
      attemptsText(s),
      updates ? String(c?.rollout?.groupSize ?? DASH) : DASH,
      updates ? formatSmall(c?.optim?.lr) : DASH,
      model.cell(s),
      `${s.iterationsDone}/${c?.train?.iterations ?? "?"}${s.finalEval && !trainingOf(s).complete ? " (incomplete)" : ""}`,
      wallText(s),
      s.meta?.kernels ?? DASH,
      shortCommit(s),
    ];
  });
  return table(head, rows);
}

// ---------------------------------------------------------------------------------------------
// Plot bookkeeping

function slug(s: string, keepDots: boolean): string {
  const t = s
    .toLowerCase()
    .replace(keepDots ? /[^a-z0-9.]+/g : /[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  return t.length > 0 ? t.slice(0, 60) : "x";
}

export class Plots {
  readonly list: ReportPlot[] = [];
  private readonly used = new Set<string>();
  /** `keepDots`: file names keep "." (method names such as mage-gamma0.9 stay readable). */
  constructor(
    private readonly link: string,
    private readonly keepDots = false,
  ) {}

  /** Stores an SVG under a unique file name; returns the markdown image that shows it. */
  add(parts: readonly string[], svg: string, alt: string): string {
    const base = parts.map((p) => slug(p, this.keepDots)).join("-");
    let file = `${base}.svg`;
    for (let i = 2; this.used.has(file); i++) file = `${base}-${i}.svg`;
    this.used.add(file);
    this.list.push({ file, svg });
    const href = this.link === "" || this.link === "." ? file : `${this.link.replace(/\/+$/, "")}/${file}`;
    return `![${alt.replace(/[[\]]/g, "")}](${href})`;
  }
}

// ---------------------------------------------------------------------------------------------
// Series helpers

/** Centered moving average over `window` points (truncated at the ends); non-finite values are ignored. */
export function movingAverage(values: readonly number[], window: number): number[] {
  if (window <= 1) return [...values];
  const half = Math.floor(window / 2);
  return values.map((_, i) => {
    let s = 0;
    let c = 0;
    for (let j = Math.max(0, i - half); j <= Math.min(values.length - 1, i + half); j++) {
      if (Number.isFinite(values[j])) {
        s += values[j];
        c++;
      }
    }
    return c > 0 ? s / c : Number.NaN;
  });
}

export function autoWindow(iterations: number): number {
  if (iterations < 30) return 1;
  const w = Math.min(21, Math.round(iterations / 15));
  return w % 2 === 0 ? w + 1 : w;
}

/** A training metric of one run as (iteration, value) pairs, iterations counted from 1. */
function historySeries(s: RunSummary, key: string, window: number): Map<number, number> {
  const xs: number[] = [];
  const ys: number[] = [];
  s.history.forEach((h, i) => {
    const v = h[key];
    if (typeof v !== "number" || !Number.isFinite(v)) return;
    xs.push((typeof h.iteration === "number" ? h.iteration : i) + 1);
    ys.push(v);
  });
  const sm = movingAverage(ys, window);
  return new Map(xs.map((x, i) => [x, sm[i]]));
}

/** A training metric over a method's runs, smoothed per run, then the mean over runs at each iteration. */
export function historyCurve(runs: readonly RunSummary[], key: string, window: number): Point[] {
  return combine(runs.map((s) => historySeries(s, key, window)));
}

/** Mean over seeds at every x; with several seeds the band is the min–max over seeds. */
function combine(perSeed: readonly Map<number, number>[]): Point[] {
  const xs = [...new Set(perSeed.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
  return xs.map((x) => {
    const vals = perSeed
      .map((m) => m.get(x))
      .filter((v): v is number => v !== undefined && Number.isFinite(v));
    if (vals.length === 0) return { x, y: Number.NaN };
    const y = vals.reduce((a, b) => a + b, 0) / vals.length;
    return vals.length > 1 ? { x, y, lo: Math.min(...vals), hi: Math.max(...vals) } : { x, y };
  });
}

function hasData(points: readonly Point[]): boolean {
  return points.some((p) => Number.isFinite(p.y));
}

function hasKey(methods: readonly Method[], key: string, nonZero = false): boolean {
  return methods.some((m) =>
    m.runs.some((r) =>
      r.summary.history.some(
        (h) => typeof h[key] === "number" && Number.isFinite(h[key]) && (!nonZero || h[key] !== 0),
      ),
    ),
  );
}

function opponentsInHistory(methods: readonly Method[], prefix: string): string[] {
  const seen: string[] = [];
  for (const m of methods) {
    for (const r of m.runs) {
      for (const h of r.summary.history) {
        for (const k of Object.keys(h)) {
          const o = k.slice(prefix.length);
          // League snapshots come and go: their ratings are in the league section, not a curve each.
          if (k.startsWith(prefix) && !o.startsWith("snapshot:") && !seen.includes(o)) seen.push(o);
        }
      }
    }
  }
  return seen;
}

/** Periodic evaluations and the final one (as the last point), sorted by iteration. */
function snapshotsOf(s: RunSummary): EvalSnapshot[] {
  const list = [...s.periodicEval];
  if (s.finalEval && !list.some((p) => p.iteration === s.finalEval!.iteration)) list.push(s.finalEval);
  return list.sort((a, b) => a.iteration - b.iteration);
}

// ---------------------------------------------------------------------------------------------
// Sections

const KEY_COLOR = "#555555";

/** Legend for charts with two lines per method: the method colours, then the line-style key. */
function attemptLegend(methods: readonly Method[], label: string, K: number | string) {
  return [
    ...methods.map((m) => ({ name: m.label, color: m.color })),
    { name: `${label}@${K}`, color: KEY_COLOR },
    { name: `${label}@1`, color: KEY_COLOR, dashed: true },
  ];
}

const SCORE_NAME: Record<string, string> = { kuhn: "chips" };

export function scoreName(game: string): string {
  return SCORE_NAME[game] ?? "score";
}

/** Games whose headline is the score (chips) rather than the success rate. */
export function scoreFirst(game: string): boolean {
  return game === "kuhn";
}

function methodsOf(runs: readonly LoadedSummary[]): Method[] {
  const byKey = new Map<string, Method>();
  for (const r of runs) {
    const key = `${r.summary.game}\u0000${r.summary.name}`;
    let m = byKey.get(key);
    if (!m) {
      m = { game: r.summary.game, name: r.summary.name, runs: [], color: "", label: r.summary.name };
      byKey.set(key, m);
    }
    m.runs.push(r);
  }
  const out = [...byKey.values()];
  out.forEach((m, i) => {
    m.color = PALETTE[i % PALETTE.length];
    m.label = m.runs.length > 1 ? `${m.name} (${m.runs.length} seeds)` : m.name;
  });
  return out;
}

interface GameContext {
  game: string;
  methods: Method[];
  plots: Plots;
  smooth?: number;
  out: string[];
}

function headline(ctx: GameContext, cells: readonly CellKey[], K: number): void {
  const { out, methods, game } = ctx;
  const byScore = scoreFirst(game);
  const family: MetricFamily = byScore ? "scoreAt" : "successAt";
  const what = byScore ? scoreName(game) : "success";
  const fmt = (x: number) => (byScore ? formatScore(x) : formatPercent(x));
  out.push(
    `Headline (final evaluation): ${what}@1${K > 1 ? ` → ${what}@${K}` : ""} per evaluation cell` +
      `${methods.some((m) => m.runs.length > 1) ? " (mean over seeds)" : ""}.`,
    "",
  );
  const rows = methods.map((m) => [
    m.label,
    ...cells.map((c) => {
      const first = aggregate(
        m.runs.flatMap((r) => {
          const e = findCell(r.summary.finalEval, c.key);
          const v = e && attemptEstimate(e.metrics, family, 1);
          return v ? [v] : [];
        }),
      );
      const last = aggregate(
        m.runs.flatMap((r) => {
          const e = findCell(r.summary.finalEval, c.key);
          const n = e?.metrics[family]?.length ?? 0;
          const v = e && n > 0 ? e.metrics[family][n - 1] : undefined;
          return v ? [v] : [];
        }),
      );
      if (!Number.isFinite(first.mean)) return DASH;
      return K > 1 && Number.isFinite(last.mean) ? `${fmt(first.mean)} → ${fmt(last.mean)}` : fmt(first.mean);
    }),
  ]);
  out.push(table(["method", ...cells.map(cellLabel)], rows), "");
}

function finalSection(ctx: GameContext): void {
  const { out, methods, game } = ctx;
  const withFinal = methods
    .map((m) => ({ ...m, runs: m.runs.filter((r) => r.summary.finalEval !== null) }))
    .filter((m) => m.runs.length > 0);
  const missing = methods.flatMap((m) =>
    m.runs
      .filter((r) => r.summary.finalEval === null)
      .map((r) => `${r.summary.name} (seed ${r.summary.seed})`),
  );
  out.push("### Final evaluation", "");
  if (missing.length > 0) {
    out.push(`No final evaluation (run unfinished or stopped): ${missing.join(", ")}.`, "");
  }
  if (withFinal.length === 0) return;
  const cells = cellsOf(withFinal.flatMap((m) => m.runs.map((r) => r.summary.finalEval)));
  const K = maxAttempts(withFinal);
  const first = withFinal[0].runs[0].summary.finalEval!;
  out.push(
    `Held-out task seeds, ${first.trialsPerCell} trials per cell and ${first.attempts} attempt${first.attempts === 1 ? "" : "s"} per trial` +
      `${withFinal.some((m) => m.runs.some((r) => r.summary.finalEval!.trialsPerCell !== first.trialsPerCell)) ? " (some runs differ; see the trials column)" : ""}. ` +
      "Brackets: 95% bootstrap interval over trials for one seed; for a method with several seeds, " +
      "the mean over seeds and the range (min, max) of the seed means.",
    "",
  );
  headline({ ...ctx, methods: withFinal }, cells, K);
  const ks = Array.from({ length: K }, (_, i) => i + 1);
  for (const cell of cells) {
    out.push(`#### ${game}: ${cellLabel(cell)}`, "");
    out.push(finalCellCharts(ctx, withFinal, cell, ks).join("\n"), "");
    out.push(finalCellTable(game, withFinal, cell, ks), "");
    const byCategory = categoryTable(withFinal, cell, ks);
    if (byCategory) out.push(`Success@k per category (${CATEGORY_NOTE}):`, "", byCategory, "");
  }
}

const CATEGORY_NOTE = "a served environment's instance categories; ALFWorld: the split, and split/task type";

/** Success@k per category of a final-evaluation cell (mean over a method's seeds), or null without categories. */
function categoryTable(withFinal: Method[], cell: CellKey, ks: number[]): string | null {
  const cats = new Set<string>();
  for (const m of withFinal)
    for (const r of m.runs)
      for (const k of Object.keys(findCell(r.summary.finalEval, cell.key)?.byCategory ?? {})) cats.add(k);
  if (cats.size === 0) return null;
  const rows: string[][] = [];
  for (const cat of [...cats].sort()) {
    for (const m of withFinal) {
      const per = m.runs.flatMap((r) => {
        const c = findCell(r.summary.finalEval, cell.key)?.byCategory?.[cat];
        return c ? [c] : [];
      });
      if (per.length === 0) continue;
      rows.push([
        cat,
        m.label,
        per.map((c) => c.trials).join("+"),
        ...ks.map((k) =>
          formatEstimate(aggregate(per.flatMap((c) => attemptEstimate(c, "successAt", k) ?? [])), "rate"),
        ),
      ]);
    }
  }
  return table(["category", "method", "trials", ...ks.map((k) => `success@${k}`)], rows);
}

/** A final-evaluation cell's success@k and score@k bar charts, one bar per method and attempt. */
function finalCellCharts(ctx: GameContext, withFinal: Method[], cell: CellKey, ks: number[]): string[] {
  const { game, plots } = ctx;
  const barsNote = withFinal.some((m) => m.runs.length > 1)
    ? "error bars: 95% bootstrap interval (one seed) or min–max over seeds"
    : "error bars: 95% bootstrap interval over trials";
  const families: { family: MetricFamily; label: string; percent: boolean }[] = [
    { family: "successAt", label: "success@k", percent: true },
    { family: "scoreAt", label: `${scoreName(game)}@k`, percent: false },
  ];
  if (scoreFirst(game)) families.reverse();
  return families.map((f) => {
    const series = withFinal.map((m) => ({
      name: m.label,
      color: m.color,
      values: ks.map((k) => {
        const a = aggregate(
          m.runs.flatMap((r) => {
            const e = findCell(r.summary.finalEval, cell.key);
            const v = e && attemptEstimate(e.metrics, f.family, k);
            return v ? [v] : [];
          }),
        );
        return Number.isFinite(a.mean) ? a : null;
      }),
    }));
    const svg = barChart({
      title: `${f.label} — ${game}, ${cellLabel(cell)}`,
      subtitle: `final evaluation; ${barsNote}`,
      categories: ks.map((k) => `attempt ${k}`),
      // Methods not evaluated in this cell are left out (not shown as empty slots).
      series: series.filter((x) => x.values.some((v) => v !== null)),
      y: f.percent ? { label: f.label, percent: true, min: 0, max: 1 } : { label: f.label, zeroLine: true },
    });
    return plots.add(
      [game, "final", f.label, cell.opponent, cell.seat],
      svg,
      `${f.label}, ${cellLabel(cell)}`,
    );
  });
}

type Pick = (mm: TrialMetrics) => Estimate | undefined;

/** A final-evaluation cell's table: per method its mean over seeds (when several) and each seed. */
function finalCellTable(game: string, withFinal: Method[], cell: CellKey, ks: number[]): string {
  const head = [
    "run",
    "trials",
    ...ks.map((k) => `success@${k}`),
    ...ks.map((k) => `non-loss@${k}`),
    ...ks.map((k) => `${scoreName(game)}@${k}`),
    "final",
    "in-trial gain",
    "invalid",
  ];
  const rows: string[][] = [];
  for (const m of withFinal) {
    const per = m.runs.map((r) => ({ r, c: findCell(r.summary.finalEval, cell.key) }));
    const present = per.filter((p): p is { r: LoadedSummary; c: CellResult } => p.c !== undefined);
    if (present.length === 0) continue;
    if (present.length > 1) {
      const agg = (pick: Pick) =>
        aggregate(present.flatMap((p) => (pick(p.c.metrics) ? [pick(p.c.metrics)!] : [])));
      const inv = present.map((p) => p.c.metrics.invalidRate).filter(Number.isFinite);
      rows.push(
        finalRow(
          `**${m.name}** (mean of ${present.length} seeds)`,
          `${present.length}×${present[0].c.metrics.trials}`,
          agg,
          inv.length > 0 ? formatPercent(inv.reduce((a, b) => a + b, 0) / inv.length) : DASH,
          ks,
        ),
      );
    }
    for (const p of present) {
      const single = (pick: Pick) => {
        const e = pick(p.c.metrics);
        return aggregate(e ? [e] : []);
      };
      const label =
        present.length > 1 ? `${m.name} seed ${p.r.summary.seed}` : `${m.name} (seed ${p.r.summary.seed})`;
      rows.push(
        finalRow(label, String(p.c.metrics.trials), single, formatPercent(p.c.metrics.invalidRate), ks),
      );
    }
  }
  return table(head, rows);
}

function finalRow(
  label: string,
  trials: string,
  pick: (f: Pick) => Aggregate,
  invalid: string,
  ks: number[],
): string[] {
  return [
    label,
    trials,
    ...ks.map((k) =>
      formatEstimate(
        pick((mm) => attemptEstimate(mm, "successAt", k)),
        "rate",
      ),
    ),
    ...ks.map((k) =>
      formatEstimate(
        pick((mm) => attemptEstimate(mm, "nonLossAt", k)),
        "rate",
      ),
    ),
    ...ks.map((k) =>
      formatEstimate(
        pick((mm) => attemptEstimate(mm, "scoreAt", k)),
        "score",
      ),
    ),
    formatEstimate(
      pick((mm) => mm.final),
      "score",
    ),
    formatEstimate(
      pick((mm) => mm.gain),
      "score",
    ),
    invalid,
  ];
}

interface PeriodicFamily {
  family: MetricFamily;
  label: string;
  percent: boolean;
}

/** One method's periodic evaluations of one cell at attempt k, over its seeds, by iteration. */
function periodicCurve(
  m: Method,
  cell: CellKey,
  family: MetricFamily,
  k: number,
  withBand: boolean,
): Point[] {
  const iters = [...new Set(m.runs.flatMap((r) => snapshotsOf(r.summary).map((s) => s.iteration)))].sort(
    (a, b) => a - b,
  );
  return iters.map((it) => {
    const ests = m.runs.flatMap((r) => {
      const snap = snapshotsOf(r.summary).find((s) => s.iteration === it);
      const e = findCell(snap, cell.key);
      const v = e && attemptEstimate(e.metrics, family, k);
      return v ? [v] : [];
    });
    const a = aggregate(ests);
    return withBand ? { x: it, y: a.mean, lo: a.lo, hi: a.hi } : { x: it, y: a.mean };
  });
}

/** One metric family's chart of one cell during training; returns its image reference. */
function periodicChart(ctx: GameContext, cell: CellKey, f: PeriodicFamily, K: number): string {
  const { methods, game, plots } = ctx;
  const series: LineSeries[] = [];
  const shown: Method[] = [];
  const Ks: number[] = [];
  for (const m of methods) {
    const Km = methodEvalAttempts(m);
    const main = periodicCurve(m, cell, f.family, Km, true);
    if (!hasData(main)) continue;
    shown.push(m);
    Ks.push(Km);
    series.push({ name: K > 1 ? `${m.label} @${Km}` : m.label, color: m.color, points: main });
    if (Km > 1)
      series.push({
        name: `${m.label} @1`,
        color: m.color,
        dashed: true,
        points: periodicCurve(m, cell, f.family, 1, false),
      });
  }
  const same = Ks.every((k) => k === K);
  const svg = lineChart({
    ...(K > 1 ? { legend: attemptLegend(shown, f.label, same ? K : "last") } : {}),
    title: `${f.label} — ${game}, ${cellLabel(cell)}`,
    subtitle: "evaluation on held-out seeds during training",
    x: { label: "iteration", integer: true },
    y: f.percent ? { label: f.label, percent: true, min: 0, max: 1 } : { label: f.label, zeroLine: true },
    series,
  });
  return plots.add(
    [game, "eval", f.label, cell.opponent, cell.seat],
    svg,
    `${f.label} during training, ${cellLabel(cell)}`,
  );
}

function periodicSection(ctx: GameContext): void {
  const { out, methods, game } = ctx;
  const any = methods.some((m) => m.runs.some((r) => r.summary.periodicEval.length > 0));
  if (!any) return;
  const cells = cellsOf(methods.flatMap((m) => m.runs.flatMap((r) => snapshotsOf(r.summary))));
  const K = maxAttempts(methods);
  const multiSeed = methods.some((m) => m.runs.length > 1);
  out.push(
    "### Evaluation during training",
    "",
    `Periodic evaluations on held-out seeds; the last point of each line is the final evaluation. ` +
      `Solid: attempt ${K}${K > 1 ? " (cumulative for success)" : ""}, with its ${multiSeed ? "95% interval (one seed) or min–max over seeds (several)" : "95% bootstrap interval"} shaded` +
      `${K > 1 ? "; dashed: attempt 1" : ""}.`,
    "",
  );
  const families: PeriodicFamily[] = [
    { family: "successAt", label: "success", percent: true },
    { family: "scoreAt", label: scoreName(game), percent: false },
  ];
  if (scoreFirst(game)) families.reverse();
  for (const cell of cells) {
    const images = families.map((f) => periodicChart(ctx, cell, f, K));
    out.push(`#### ${game}: ${cellLabel(cell)} during training`, "", images.join("\n"), "");
  }
}

const DIAGNOSTICS: { key: string; label: string; percent?: boolean; nonZero?: boolean }[] = [
  { key: "valid_action", label: "valid actions", percent: true },
  // Only runs whose reflections were judged log it (none of the committed grids): no chart otherwise.
  { key: "informative_reflection", label: "informative reflections", percent: true },
  { key: "env_reward", label: "environment reward" },
  { key: "entropy", label: "policy entropy (nats/token)" },
  { key: "loss", label: "PPO loss" },
  { key: "kl", label: "KL to reference", nonZero: true },
  { key: "clipfrac", label: "clipped fraction", percent: true },
  { key: "response_tokens", label: "response tokens" },
  { key: "rollout_ms", label: "rollout time (ms)" },
  { key: "update_ms", label: "update time (ms)" },
];

/** Draws the training curves of one report section: the moving-average window, series and charts. */
interface TrainingCharts {
  methods: Method[];
  /** The moving average of `key` over a method's runs (mean over seeds, min–max band). */
  curve(m: Method, key: string): Point[];
  chart(
    title: string,
    yLabel: string,
    percent: boolean,
    series: LineSeries[],
    parts: string[],
    legend?: ReturnType<typeof attemptLegend>,
  ): string;
}

function trainingSection(ctx: GameContext): void {
  const { out, game, plots } = ctx;
  // Methods without training iterations (prompting baselines) have no curves.
  const methods = ctx.methods.filter((m) => m.runs.some((r) => r.summary.history.length > 0));
  if (methods.length === 0) return;
  const longest = Math.max(...methods.flatMap((m) => m.runs.map((r) => r.summary.history.length)));
  const window = ctx.smooth ?? autoWindow(longest);
  const multiSeed = methods.some((m) => m.runs.length > 1);
  out.push(
    "### Training curves",
    "",
    `Metrics of the training rollouts per iteration${window > 1 ? `, moving average over ${window} iterations` : ""}` +
      `${multiSeed ? "; methods with several seeds: mean over seeds, min–max shaded" : ""}.`,
    "",
  );
  const charts: TrainingCharts = {
    methods,
    curve: (m, key) =>
      historyCurve(
        m.runs.map((r) => r.summary),
        key,
        window,
      ),
    chart: (title, yLabel, percent, series, parts, legend) =>
      plots.add(
        [game, "train", ...parts],
        lineChart({
          ...(legend ? { legend } : {}),
          title,
          subtitle: `training rollouts${window > 1 ? `, moving average over ${window}` : ""}`,
          x: { label: "iteration", integer: true },
          y: percent ? { label: yLabel, percent: true, min: 0, max: 1 } : { label: yLabel, zeroLine: true },
          series,
        }),
        title,
      ),
  };
  out.push([...attemptCharts(game, charts), ...opponentCharts(game, charts)].join("\n"), "");
  const diag = diagnosticCharts(game, charts);
  if (diag.length > 0) out.push("Diagnostics:", "", diag.join("\n"), "");
}

/** The most attempts a method's training rollouts recorded success@k for. */
function historyAttempts(m: Method): number {
  return Math.max(
    1,
    ...m.runs
      .flatMap((r) => r.summary.history.flatMap((h) => Object.keys(h)))
      .filter((k) => /^success@\d+$/.test(k))
      .map((k) => Number(k.slice(8))),
  );
}

/** Overall success and score at attempt 1 and at each method's last attempt. */
function attemptCharts(game: string, c: TrainingCharts): string[] {
  const { methods } = c;
  const Ks = methods.map(historyAttempts);
  const K = Math.max(...Ks);
  const fams = [
    { prefix: "success@", label: "success", percent: true },
    { prefix: "score@", label: scoreName(game), percent: false },
  ];
  if (scoreFirst(game)) fams.reverse();
  const images: string[] = [];
  for (const f of fams) {
    if (!hasKey(methods, `${f.prefix}1`)) continue;
    const series: LineSeries[] = [];
    const shown: Method[] = [];
    methods.forEach((m, i) => {
      const main = c.curve(m, `${f.prefix}${Ks[i]}`);
      if (!hasData(main)) return;
      shown.push(m);
      series.push({ name: K > 1 ? `${m.label} @${Ks[i]}` : m.label, color: m.color, points: main });
      if (Ks[i] > 1)
        series.push({
          name: `${m.label} @1`,
          color: m.color,
          dashed: true,
          points: c.curve(m, `${f.prefix}1`),
        });
    });
    const same = Ks.every((k) => k === K);
    images.push(
      c.chart(
        `${f.label}@k — ${game}, all opponents`,
        f.label,
        f.percent,
        series,
        [f.label, "all"],
        K > 1 ? attemptLegend(shown, f.label, same ? String(K) : "last") : undefined,
      ),
    );
  }
  return images;
}

/** Success and final score per opponent: one chart of all opponents for one method, else one per opponent. */
function opponentCharts(game: string, c: TrainingCharts): string[] {
  const { methods } = c;
  const perOpp = [
    { prefix: "success/", label: "success (any attempt)", percent: true, part: "success" },
    { prefix: "final_score/", label: `final ${scoreName(game)}`, percent: false, part: "final-score" },
  ];
  if (scoreFirst(game)) perOpp.reverse();
  const images: string[] = [];
  for (const f of perOpp) {
    const opps = opponentsInHistory(methods, f.prefix);
    if (opps.length === 0) continue;
    if (methods.length === 1) {
      const m = methods[0];
      const series = opps.map((o, i) => ({
        name: `vs ${o}`,
        color: PALETTE[i % PALETTE.length],
        points: c.curve(m, `${f.prefix}${o}`),
      }));
      images.push(
        c.chart(`${f.label} per opponent — ${game}, ${m.label}`, f.label, f.percent, series, [
          f.part,
          "by-opponent",
        ]),
      );
    } else {
      for (const o of opps) {
        const series = methods
          .map((m) => ({ name: m.label, color: m.color, points: c.curve(m, `${f.prefix}${o}`) }))
          .filter((x) => hasData(x.points));
        images.push(c.chart(`${f.label} vs ${o} — ${game}`, f.label, f.percent, series, [f.part, o]));
      }
    }
  }
  return images;
}

function diagnosticCharts(game: string, c: TrainingCharts): string[] {
  const out: string[] = [];
  for (const d of DIAGNOSTICS) {
    if (!hasKey(c.methods, d.key, d.nonZero)) continue;
    const series = c.methods
      .map((m) => ({ name: m.label, color: m.color, points: c.curve(m, d.key) }))
      .filter((x) => hasData(x.points));
    out.push(c.chart(`${d.label} — ${game}`, d.label, d.percent ?? false, series, [d.key]));
  }
  return out;
}

/** Builds the whole report. The same runs and options always give the same bytes. */
export function buildReport(runs: readonly LoadedSummary[], o: ReportOptions): Report {
  const linkOf = o.linkOf ?? ((p: string) => p);
  const plots = new Plots(o.plotsLink);
  const methods = methodsOf(runs);
  const games = [...new Set(runs.map((r) => r.summary.game))];
  const out: string[] = [];
  out.push(`# ${o.title ?? "mage report"}`, "");
  out.push(
    `${runs.length} run${runs.length === 1 ? "" : "s"} (${methods.length} method${methods.length === 1 ? "" : "s"}) ` +
      `on ${games.join(", ")}, rebuilt from run summaries by \`mage report\`. ` +
      "Rates are percentages, scores have 3 decimals.",
    "",
    "## Runs",
    "",
    runsTable(runs, linkOf),
    "",
  );
  for (const game of games) {
    const ctx: GameContext = {
      game,
      methods: methods.filter((m) => m.game === game),
      plots,
      out,
      ...(o.smooth !== undefined ? { smooth: o.smooth } : {}),
    };
    out.push(`## ${game}`, "");
    finalSection(ctx);
    periodicSection(ctx);
    ratingSection(
      out,
      plots,
      game,
      ctx.methods.map((m) => ({ label: m.name, color: m.color, runs: m.runs.map((r) => r.summary) })),
    );
    trainingSection(ctx);
  }
  return {
    markdown: `${out
      .join("\n")
      .replace(/\n{3,}/g, "\n\n")
      .trimEnd()}\n`,
    plots: plots.list,
  };
}
