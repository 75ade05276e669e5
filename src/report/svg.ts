/**
 * A small dependency-free SVG plotting module for reports: line charts (several series, legend,
 * shaded interval bands or error bars, markers, dashed series) and grouped bar charts with error
 * bars. Output is a standalone SVG document with a white background, so it reads the same in a
 * light or dark markdown viewer. Deterministic: the same input always gives the same bytes
 * (coordinates are rounded to 0.01, no ids, no timestamps).
 */

/** Colour-blind-safe (Okabe–Ito, yellow left out) followed by a few extra distinct hues. */
export const PALETTE: readonly string[] = [
  "#0072B2",
  "#D55E00",
  "#009E73",
  "#CC79A7",
  "#E69F00",
  "#56B4E9",
  "#333333",
  "#8C564B",
  "#7F7F7F",
  "#9467BD",
];

export interface AxisOptions {
  label?: string;
  /** Fixed ends of the axis; data decides the missing ones (widened to round numbers). */
  min?: number;
  max?: number;
  /** Tick labels as percentages (values are fractions, 0.25 → 25%). */
  percent?: boolean;
  /** Only whole-number ticks (iterations, attempts). */
  integer?: boolean;
  /** Draw a darker line at 0 when it lies inside the axis. */
  zeroLine?: boolean;
}

export interface Point {
  x: number;
  y: number;
  /** Interval around y (drawn as a band, or as an error bar for isolated points). */
  lo?: number;
  hi?: number;
}

export interface LineSeries {
  name: string;
  points: readonly Point[];
  color?: string;
  dashed?: boolean;
  /** Draw a marker at every point (default: when the series has at most 15 points). */
  markers?: boolean;
}

export interface LineChartOptions {
  title: string;
  subtitle?: string;
  x?: AxisOptions;
  y?: AxisOptions;
  series: readonly LineSeries[];
  /**
   * How intervals are drawn: shaded bands, error bars at each point, or "auto" (default): bands
   * when at most two series have intervals, otherwise error bars nudged apart so they stay legible.
   */
  intervals?: "band" | "bars" | "auto";
  /** Legend entries instead of one per series (e.g. colours for methods plus a line-style key). */
  legend?: readonly { name: string; color: string; dashed?: boolean }[];
  width?: number;
  height?: number;
}

export interface BarValue {
  mean: number;
  lo?: number;
  hi?: number;
}

export interface BarSeries {
  name: string;
  /** One value per category; null (or a non-finite mean) leaves the slot empty. */
  values: readonly (BarValue | null)[];
  color?: string;
}

export interface BarChartOptions {
  title: string;
  subtitle?: string;
  categories: readonly string[];
  series: readonly BarSeries[];
  y?: AxisOptions;
  xLabel?: string;
  /** Print each bar's value above it (default: when the labels fit the bar width). */
  valueLabels?: boolean;
  width?: number;
  height?: number;
}

const FONT = "Helvetica, Arial, sans-serif";
const CHAR_W = 7.4; // generous width of a 12px sans-serif character (DejaVu runs wider than Helvetica)
const LEGEND_MAX_CHARS = 34;

export function escapeXml(s: string): string {
  return s
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&apos;");
}

/** A coordinate as short, stable text (0.01 precision, no "-0"). */
function n(v: number): string {
  const r = Math.round(v * 100) / 100;
  return Object.is(r, -0) || r === 0 ? "0" : String(r);
}

function clean(v: number): number {
  return Number(v.toPrecision(12));
}

function niceStep(span: number, target: number, integer: boolean): number {
  const raw = span / Math.max(1, target);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  let step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer) step = Math.max(1, Math.round(step));
  return clean(step);
}

/**
 * Round-number ticks covering [min, max]: the domain is widened to whole steps.
 * Returns the (possibly widened) domain and the tick values.
 */
export function niceTicks(
  min: number,
  max: number,
  target = 5,
  opts: { integer?: boolean; fixedMin?: boolean; fixedMax?: boolean } = {},
): { min: number; max: number; ticks: number[]; step: number } {
  if (!Number.isFinite(min) || !Number.isFinite(max)) {
    min = 0;
    max = 1;
  }
  if (max < min) [min, max] = [max, min];
  if (max === min) {
    const pad = min === 0 ? 1 : Math.abs(min) * 0.5;
    if (!opts.fixedMin) min -= pad;
    if (!opts.fixedMax) max += pad;
    if (max === min) max = min + 1;
  }
  const step = niceStep(max - min, target, opts.integer ?? false);
  const lo = opts.fixedMin ? min : clean(Math.floor(min / step + 1e-9) * step);
  const hi = opts.fixedMax ? max : clean(Math.ceil(max / step - 1e-9) * step);
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step - 1e-9); t * step <= hi + step * 1e-9; t++) ticks.push(clean(t * step));
  return { min: lo, max: hi, ticks, step };
}

/** Tick label text: percentages for rates, otherwise as many decimals as the step needs. */
export function formatTick(v: number, step: number, percent = false): string {
  const value = percent ? v * 100 : v;
  const s = percent ? step * 100 : step;
  // As many decimals as the step itself has (2.5 → 1, 0.25 → 2, 5 → 0).
  let decimals = 0;
  while (decimals < 6 && Math.abs(Math.round(s * 10 ** decimals) - s * 10 ** decimals) > 1e-6) decimals++;
  const text = (Object.is(clean(value), -0) ? 0 : clean(value)).toFixed(decimals);
  const tidy = text === `-${(0).toFixed(decimals)}` ? text.slice(1) : text;
  return percent ? `${tidy}%` : tidy;
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

interface Frame {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

function header(width: number, height: number, title: string): string[] {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${FONT}" font-size="12">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
  ];
}

function titles(out: string[], f: Frame, title: string, subtitle?: string): void {
  // Cut what would run past the right edge (the full title stays in the document's <title>).
  const room = f.width - f.left - 8;
  out.push(
    `<text x="${n(f.left)}" y="20" font-size="14" font-weight="bold" fill="#222222">${escapeXml(truncate(title, Math.floor(room / 8.6)))}</text>`,
  );
  if (subtitle) {
    out.push(
      `<text x="${n(f.left)}" y="36" font-size="11" fill="#555555">${escapeXml(truncate(subtitle, Math.floor(room / 6.2)))}</text>`,
    );
  }
}

interface Scale {
  min: number;
  max: number;
  ticks: number[];
  step: number;
  map: (v: number) => number;
}

function scale(
  values: number[],
  axis: AxisOptions,
  from: number,
  to: number,
  target: number,
  pad: boolean,
): Scale {
  const finite = values.filter(Number.isFinite);
  let lo = axis.min ?? (finite.length > 0 ? Math.min(...finite) : 0);
  let hi = axis.max ?? (finite.length > 0 ? Math.max(...finite) : 1);
  if (pad && axis.min === undefined && axis.max === undefined && hi > lo) {
    const p = (hi - lo) * 0.04;
    lo -= p;
    hi += p;
  }
  const t = niceTicks(lo, hi, target, {
    integer: axis.integer,
    fixedMin: axis.min !== undefined,
    fixedMax: axis.max !== undefined,
  });
  const span = t.max - t.min || 1;
  return { ...t, map: (v: number) => from + ((v - t.min) / span) * (to - from) };
}

function clamp(v: number, a: number, b: number): number {
  return Math.min(Math.max(v, Math.min(a, b)), Math.max(a, b));
}

function yAxis(out: string[], f: Frame, ys: Scale, axis: AxisOptions): void {
  for (const t of ys.ticks) {
    const y = ys.map(t);
    const isZero = axis.zeroLine && t === 0;
    out.push(
      `<line x1="${n(f.left)}" y1="${n(y)}" x2="${n(f.width - f.right)}" y2="${n(y)}" stroke="${isZero ? "#888888" : "#e5e5e5"}" stroke-width="1"/>`,
      `<text x="${n(f.left - 6)}" y="${n(y + 4)}" text-anchor="end" fill="#444444">${escapeXml(formatTick(t, ys.step, axis.percent))}</text>`,
    );
  }
  if (axis.label) {
    const cy = (f.top + f.height - f.bottom) / 2;
    out.push(
      `<text x="14" y="${n(cy)}" text-anchor="middle" transform="rotate(-90 14 ${n(cy)})" fill="#333333">${escapeXml(axis.label)}</text>`,
    );
  }
}

function plotBorder(out: string[], f: Frame): void {
  const x0 = f.left;
  const y0 = f.height - f.bottom;
  out.push(
    `<line x1="${n(x0)}" y1="${n(f.top)}" x2="${n(x0)}" y2="${n(y0)}" stroke="#666666" stroke-width="1"/>`,
    `<line x1="${n(x0)}" y1="${n(y0)}" x2="${n(f.width - f.right)}" y2="${n(y0)}" stroke="#666666" stroke-width="1"/>`,
  );
}

function xLabel(out: string[], f: Frame, label: string | undefined): void {
  if (!label) return;
  const cx = (f.left + f.width - f.right) / 2;
  out.push(
    `<text x="${n(cx)}" y="${n(f.height - 8)}" text-anchor="middle" fill="#333333">${escapeXml(label)}</text>`,
  );
}

interface LegendEntry {
  name: string;
  color: string;
  kind: "line" | "dashed" | "box";
}

function legendWidth(entries: readonly LegendEntry[]): number {
  if (entries.length === 0) return 16;
  const chars = Math.max(...entries.map((e) => Math.min(e.name.length, LEGEND_MAX_CHARS)));
  return Math.ceil(48 + chars * CHAR_W);
}

function legend(out: string[], f: Frame, entries: readonly LegendEntry[]): void {
  const x = f.width - f.right + 14;
  let y = f.top + 6;
  for (const e of entries) {
    if (e.kind === "box") {
      out.push(`<rect x="${n(x)}" y="${n(y - 5)}" width="14" height="10" fill="${e.color}"/>`);
    } else {
      out.push(
        `<line x1="${n(x)}" y1="${n(y)}" x2="${n(x + 20)}" y2="${n(y)}" stroke="${e.color}" stroke-width="2.5"${e.kind === "dashed" ? ' stroke-dasharray="5 3"' : ""}/>`,
      );
    }
    const label = truncate(e.name, LEGEND_MAX_CHARS);
    out.push(
      `<text x="${n(x + 26)}" y="${n(y + 4)}" fill="#222222">${label !== e.name ? `<title>${escapeXml(e.name)}</title>` : ""}${escapeXml(label)}</text>`,
    );
    y += 18;
  }
}

function noData(out: string[], f: Frame): void {
  const cx = (f.left + f.width - f.right) / 2;
  const cy = (f.top + f.height - f.bottom) / 2;
  out.push(`<text x="${n(cx)}" y="${n(cy)}" text-anchor="middle" fill="#999999">no data</text>`);
}

function frameFor(
  width: number,
  height: number,
  entries: readonly LegendEntry[],
  subtitle: string | undefined,
  hasXLabel: boolean,
): Frame {
  const legendH = 24 + entries.length * 18;
  return {
    width,
    height: Math.max(height, legendH + (subtitle ? 44 : 32) + 40),
    left: 64,
    right: legendWidth(entries),
    top: subtitle ? 50 : 36,
    bottom: hasXLabel ? 44 : 28,
  };
}

/** Splits a series into runs of consecutive finite points (a gap breaks the line). */
function segments(points: readonly Point[]): Point[][] {
  const out: Point[][] = [];
  let cur: Point[] = [];
  for (const p of points) {
    if (Number.isFinite(p.x) && Number.isFinite(p.y)) cur.push(p);
    else if (cur.length > 0) {
      out.push(cur);
      cur = [];
    }
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

function hasInterval(p: Point): boolean {
  return p.lo !== undefined && p.hi !== undefined && Number.isFinite(p.lo) && Number.isFinite(p.hi);
}

/** Maps data coordinates to pixels inside the plot area. */
interface Plotter {
  X: (v: number) => number;
  Y: (v: number) => number;
}

function xTicks(out: string[], f: Frame, xs: Scale, axis: AxisOptions): void {
  for (const t of xs.ticks) {
    const x = xs.map(t);
    out.push(
      `<line x1="${n(x)}" y1="${n(f.height - f.bottom)}" x2="${n(x)}" y2="${n(f.height - f.bottom + 4)}" stroke="#666666" stroke-width="1"/>`,
      `<text x="${n(x)}" y="${n(f.height - f.bottom + 16)}" text-anchor="middle" fill="#444444">${escapeXml(formatTick(t, xs.step, axis.percent))}</text>`,
    );
  }
}

/** Intervals as shaded bands (few series) or as error bars nudged apart (many series). */
function intervalMarks(out: string[], o: LineChartOptions, colors: readonly string[], p: Plotter): void {
  const { X, Y } = p;
  const banded = o.series.map((s, i) => (s.points.some(hasInterval) ? i : -1)).filter((i) => i >= 0);
  const mode = o.intervals ?? "auto";
  const useBands = mode === "band" || (mode === "auto" && banded.length <= 2);
  o.series.forEach((s, i) => {
    const color = colors[i];
    const nudge = useBands || banded.length <= 1 ? 0 : (banded.indexOf(i) - (banded.length - 1) / 2) * 4;
    for (const seg of segments(s.points)) {
      const withI = seg.filter(hasInterval);
      if (withI.length === 0) continue;
      if (useBands && withI.length === seg.length && seg.length >= 2) {
        const upper = seg.map((q) => `${n(X(q.x))},${n(Y(q.hi!))}`);
        const lower = [...seg].reverse().map((q) => `${n(X(q.x))},${n(Y(q.lo!))}`);
        out.push(
          `<polygon points="${[...upper, ...lower].join(" ")}" fill="${color}" fill-opacity="0.15" stroke="none"/>`,
        );
      } else {
        for (const q of withI) {
          const x = X(q.x) + nudge;
          out.push(
            `<path d="M${n(x)} ${n(Y(q.lo!))}V${n(Y(q.hi!))}M${n(x - 3)} ${n(Y(q.lo!))}H${n(x + 3)}M${n(x - 3)} ${n(Y(q.hi!))}H${n(x + 3)}" stroke="${color}" stroke-width="1.2" fill="none"/>`,
          );
        }
      }
    }
  });
}

function seriesLines(out: string[], o: LineChartOptions, colors: readonly string[], p: Plotter): void {
  const { X, Y } = p;
  o.series.forEach((s, i) => {
    const color = colors[i];
    const segs = segments(s.points);
    const count = segs.reduce((a, g) => a + g.length, 0);
    const markers = s.markers ?? count <= 15;
    for (const seg of segs) {
      if (seg.length >= 2) {
        const d = seg.map((q, j) => `${j === 0 ? "M" : "L"}${n(X(q.x))} ${n(Y(q.y))}`).join("");
        out.push(
          `<path d="${d}" fill="none" stroke="${color}" stroke-width="2" stroke-linejoin="round"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`,
        );
      }
      if (markers || seg.length === 1) {
        for (const q of seg) {
          out.push(
            `<circle cx="${n(X(q.x))}" cy="${n(Y(q.y))}" r="${s.dashed ? 2.5 : 3}" fill="${s.dashed ? "#ffffff" : color}" stroke="${color}" stroke-width="1.5"/>`,
          );
        }
      }
    }
  });
}

/** A line chart with one line per series, optional intervals, legend on the right. */
export function lineChart(o: LineChartOptions): string {
  const width = o.width ?? 640;
  const xAxis = o.x ?? {};
  const yAxisOpts = o.y ?? {};
  const colors = o.series.map((s, i) => s.color ?? PALETTE[i % PALETTE.length]);
  const entries: LegendEntry[] = o.legend
    ? o.legend.map((e) => ({ name: e.name, color: e.color, kind: e.dashed ? "dashed" : "line" }))
    : o.series.map((s, i) => ({ name: s.name, color: colors[i], kind: s.dashed ? "dashed" : "line" }));
  const f = frameFor(width, o.height ?? 320, entries, o.subtitle, Boolean(xAxis.label));
  const out = header(f.width, f.height, o.title);
  titles(out, f, o.title, o.subtitle);

  const all = o.series.flatMap((s) => s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)));
  const plotW = f.width - f.left - f.right;
  const plotH = f.height - f.top - f.bottom;
  const xTickCount = Math.max(2, Math.min(8, Math.floor(plotW / 60)));
  const xs = scale(
    all.map((p) => p.x),
    xAxis,
    f.left,
    f.width - f.right,
    xTickCount,
    false,
  );
  const yVals = all.flatMap((p) => (hasInterval(p) ? [p.y, p.lo!, p.hi!] : [p.y]));
  const ys = scale(yVals, yAxisOpts, f.height - f.bottom, f.top, Math.max(3, Math.floor(plotH / 50)), true);
  const plotter: Plotter = {
    X: (v) => clamp(xs.map(v), f.left, f.width - f.right),
    Y: (v) => clamp(ys.map(v), f.top, f.height - f.bottom),
  };

  yAxis(out, f, ys, yAxisOpts);
  xTicks(out, f, xs, xAxis);
  plotBorder(out, f);
  xLabel(out, f, xAxis.label);
  if (all.length === 0) noData(out, f);
  // Bands first (under every line), then lines and markers.
  intervalMarks(out, o, colors, plotter);
  seriesLines(out, o, colors, plotter);
  legend(out, f, entries);
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}

/** Where one bar stands, for its error bar and value label. */
interface BarPlace {
  mid: number;
  barW: number;
  y: number;
  base: number;
  f: Frame;
  Y: (v: number) => number;
  labels: boolean;
  percent?: boolean;
}

/** A bar's error bar, then its value label clear of both the bar and the error bar. */
function barInterval(out: string[], v: BarValue, p: BarPlace): void {
  const { mid, barW, y, base, f, Y } = p;
  let top = Math.min(y, base);
  let bottom = Math.max(y, base);
  if (v.lo !== undefined && v.hi !== undefined && Number.isFinite(v.lo) && Number.isFinite(v.hi)) {
    const cap = Math.min(5, barW / 4);
    out.push(
      `<path d="M${n(mid)} ${n(Y(v.lo))}V${n(Y(v.hi))}M${n(mid - cap)} ${n(Y(v.lo))}H${n(mid + cap)}M${n(mid - cap)} ${n(Y(v.hi))}H${n(mid + cap)}" stroke="#222222" stroke-width="1.2" fill="none"/>`,
    );
    top = Math.min(top, Y(v.hi), Y(v.lo));
    bottom = Math.max(bottom, Y(v.hi), Y(v.lo));
  }
  if (!p.labels) return;
  // Percent labels to 0.1%, other values to 3 decimals; below a negative bar, above otherwise.
  const text = formatTick(v.mean, 0.001, p.percent);
  const ty = v.mean < 0 ? Math.min(f.height - f.bottom - 3, bottom + 12) : Math.max(f.top - 3, top - 4);
  out.push(
    `<text x="${n(mid)}" y="${n(ty)}" text-anchor="middle" font-size="10" fill="#222222">${escapeXml(text)}</text>`,
  );
}

/** A grouped bar chart: one group per category, one bar per series, with error bars. */
export function barChart(o: BarChartOptions): string {
  const width = o.width ?? 680;
  const yOpts = o.y ?? {};
  const entries: LegendEntry[] = o.series.map((s, i) => ({
    name: s.name,
    color: s.color ?? PALETTE[i % PALETTE.length],
    kind: "box",
  }));
  const ok = (v: BarValue | null): v is BarValue => v !== null && Number.isFinite(v.mean);
  const vals = o.series.flatMap((s) => s.values.filter(ok));
  const f = frameFor(width, o.height ?? 320, entries, o.subtitle, Boolean(o.xLabel));
  const nCat = Math.max(1, o.categories.length);
  const nSer = Math.max(1, o.series.length);
  const groupW = (f.width - f.left - f.right) / nCat;
  const barW = Math.min(48, (groupW * 0.8) / nSer);
  // Value labels only where they fit above a bar without touching the next one.
  const widest = Math.max(0, ...vals.map((v) => formatTick(v.mean, 0.001, yOpts.percent).length));
  const labels = o.valueLabels ?? widest * 5.6 <= barW + 1;
  // Room above the plot for the value label of a bar reaching the top of the axis.
  if (labels) f.top += 12;
  const out = header(f.width, f.height, o.title);
  titles(out, f, o.title, o.subtitle);

  const yVals = [
    0,
    ...vals.flatMap((v) => [
      v.mean,
      ...(v.lo !== undefined && Number.isFinite(v.lo) ? [v.lo] : []),
      ...(v.hi !== undefined && Number.isFinite(v.hi) ? [v.hi] : []),
    ]),
  ];
  const plotH = f.height - f.top - f.bottom;
  const ys = scale(yVals, yOpts, f.height - f.bottom, f.top, Math.max(3, Math.floor(plotH / 50)), true);
  const Y = (v: number) => clamp(ys.map(v), f.top, f.height - f.bottom);
  yAxis(out, f, ys, { ...yOpts, zeroLine: yOpts.zeroLine ?? true });
  plotBorder(out, f);
  xLabel(out, f, o.xLabel);
  if (vals.length === 0) noData(out, f);

  const base = Y(clamp(0, ys.min, ys.max));
  o.categories.forEach((cat, c) => {
    const cx = f.left + groupW * (c + 0.5);
    out.push(
      `<text x="${n(cx)}" y="${n(f.height - f.bottom + 16)}" text-anchor="middle" fill="#444444">${escapeXml(cat)}</text>`,
    );
    o.series.forEach((s, i) => {
      const v = s.values[c];
      if (!ok(v)) return;
      const color = entries[i].color;
      const x = cx - (barW * nSer) / 2 + barW * i;
      const y = Y(v.mean);
      out.push(
        `<rect x="${n(x + 1)}" y="${n(Math.min(y, base))}" width="${n(Math.max(1, barW - 2))}" height="${n(Math.abs(base - y))}" fill="${color}" fill-opacity="0.85"/>`,
      );
      barInterval(out, v, { mid: x + barW / 2, barW, y, base, f, Y, labels, percent: yOpts.percent });
    });
  });
  legend(out, f, entries);
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
