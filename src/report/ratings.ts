/**
 * League ratings in reports (`mage report`, the results document and the dashboard, which shows
 * the report): for runs whose iterations carry openskill ratings (`population.league` or
 * `population.rate`; `src/league/`), a table of each run's final agent rating with its 95%
 * interval (mu ± 1.96 sigma) and the agent's win probability against each scripted opponent and
 * the league's newest snapshot, and a plot of the agent's rating over iterations. Read from the
 * summaries' iteration history alone (`rating/agent`, `rating/agent_sigma`, `rating/<opponent>`,
 * `win_prob/<opponent>`, `league/newest`).
 */
import type { RunSummary } from "../train/summary.js";
import { DASH, formatPercent, table } from "./format.js";
import { type LineSeries, lineChart, PALETTE, type Point } from "./svg.js";

/** z of the 95% interval of a rating (as `src/league/ratings.ts`). */
const Z = 1.96;
const SNAPSHOT = "snapshot:";
const NEWEST = "newest snapshot";

export interface RatedMethod {
  label: string;
  color?: string;
  runs: readonly RunSummary[];
}

type Row = Record<string, unknown>;

function num(h: Row, key: string): number | undefined {
  const v = h[key];
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** Whether a run's iterations carry the agent's rating. */
export function isRated(s: RunSummary): boolean {
  return s.history.some((h) => num(h, "rating/agent") !== undefined);
}

/** The run's last iteration with a rating, or null. */
function lastRated(s: RunSummary): Row | null {
  for (let i = s.history.length - 1; i >= 0; i--) {
    if (num(s.history[i], "rating/agent") !== undefined) return s.history[i];
  }
  return null;
}

/** The scripted opponents rated in the runs' last rated iterations, in first-seen order. */
function scriptedOpponents(runs: readonly RunSummary[]): string[] {
  const out: string[] = [];
  for (const r of runs) {
    const h = lastRated(r);
    for (const k of Object.keys(h ?? {})) {
      if (!k.startsWith("win_prob/")) continue;
      const o = k.slice("win_prob/".length);
      if (!o.startsWith(SNAPSHOT) && !out.includes(o)) out.push(o);
    }
  }
  return out;
}

export interface FinalRating {
  iteration: number;
  mu: number;
  sigma: number;
  lo: number;
  hi: number;
  /** P(agent wins) per scripted opponent, and against the newest snapshot (`newest snapshot`). */
  winProb: Record<string, number>;
  /** The newest snapshot's spec, when the run has a league pool. */
  newest?: string;
}

/** The run's final rating: the last rated iteration's agent rating, interval and win probabilities. */
export function finalRating(s: RunSummary): FinalRating | null {
  const h = lastRated(s);
  if (!h) return null;
  const mu = num(h, "rating/agent")!;
  const sigma = num(h, "rating/agent_sigma") ?? Number.NaN;
  const winProb: Record<string, number> = {};
  for (const [k, v] of Object.entries(h)) {
    if (k.startsWith("win_prob/") && typeof v === "number" && !k.startsWith(`win_prob/${SNAPSHOT}`))
      winProb[k.slice("win_prob/".length)] = v;
  }
  const newestIt = num(h, "league/newest");
  const newest = newestIt !== undefined && newestIt >= 0 ? `${SNAPSHOT}${newestIt}` : undefined;
  const pNewest = newest !== undefined ? num(h, `win_prob/${newest}`) : undefined;
  if (pNewest !== undefined) winProb[NEWEST] = pNewest;
  const iteration = (num(h, "iteration") ?? s.history.length - 1) + 1;
  return {
    iteration,
    mu,
    sigma,
    lo: mu - Z * sigma,
    hi: mu + Z * sigma,
    winProb,
    ...(newest !== undefined ? { newest } : {}),
  };
}

function rating(x: number): string {
  return Number.isFinite(x) ? x.toFixed(2) : DASH;
}

/**
 * One row per rated run: method, seed, the iteration rated last, the agent's rating with its 95%
 * interval, then P(agent wins) against each scripted opponent and the newest snapshot. Null when
 * no run is rated.
 */
export function ratingTable(methods: readonly RatedMethod[]): string | null {
  const rated = methods.flatMap((m) => m.runs.filter(isRated).map((r) => ({ m, r })));
  if (rated.length === 0) return null;
  const opponents = scriptedOpponents(rated.map((x) => x.r));
  const withNewest = rated.some((x) => finalRating(x.r)?.winProb[NEWEST] !== undefined);
  const columns = [...opponents, ...(withNewest ? [NEWEST] : [])];
  const rows = rated.map(({ m, r }) => {
    const f = finalRating(r)!;
    return [
      m.label,
      String(r.seed),
      String(f.iteration),
      `${rating(f.mu)} [${rating(f.lo)}, ${rating(f.hi)}]`,
      ...columns.map((o) => {
        const p = f.winProb[o];
        if (p === undefined) return DASH;
        return o === NEWEST && f.newest ? `${formatPercent(p)} (${f.newest})` : formatPercent(p);
      }),
    ];
  });
  return table(
    ["method", "seed", "iteration", "agent rating [95%]", ...columns.map((o) => `P(win) vs ${o}`)],
    rows,
    ["---", "---:", "---:", "---:", ...columns.map(() => "---:")],
  );
}

/** A run's series `key` by iteration (counted from 1). */
function series(s: RunSummary, key: string): Map<number, number> {
  const out = new Map<number, number>();
  s.history.forEach((h, i) => {
    const v = num(h, key);
    if (v !== undefined) out.set((num(h, "iteration") ?? i) + 1, v);
  });
  return out;
}

/**
 * The agent's rating over iterations: one line per method, the mean over its rated runs. A
 * method of one run is shaded with the rating's 95% interval (mu ± 1.96 sigma), several runs with
 * the min–max over seeds. With one method, each scripted opponent's rating is drawn dashed beside.
 * Null when no run is rated.
 */
export function ratingChart(methods: readonly RatedMethod[], title: string): string | null {
  const rated = methods.map((m) => ({ ...m, runs: m.runs.filter(isRated) })).filter((m) => m.runs.length > 0);
  if (rated.length === 0) return null;
  const lines: LineSeries[] = rated.map((m, i) => {
    const color = m.color ?? PALETTE[i % PALETTE.length];
    const perRun = m.runs.map((r) => ({
      mu: series(r, "rating/agent"),
      sigma: series(r, "rating/agent_sigma"),
    }));
    const xs = [...new Set(perRun.flatMap((p) => [...p.mu.keys()]))].sort((a, b) => a - b);
    const points: Point[] = xs.map((x) => {
      const vals = perRun.map((p) => p.mu.get(x)).filter((v): v is number => v !== undefined);
      const y = vals.reduce((a, b) => a + b, 0) / vals.length;
      if (perRun.length === 1) {
        const sd = perRun[0].sigma.get(x);
        return sd !== undefined ? { x, y, lo: y - Z * sd, hi: y + Z * sd } : { x, y };
      }
      return vals.length > 1 ? { x, y, lo: Math.min(...vals), hi: Math.max(...vals) } : { x, y };
    });
    return { name: `${m.label} (agent)`, color, points };
  });
  if (rated.length === 1) {
    scriptedOpponents(rated[0].runs).forEach((o, j) => {
      const perRun = rated[0].runs.map((r) => series(r, `rating/${o}`));
      const xs = [...new Set(perRun.flatMap((p) => [...p.keys()]))].sort((a, b) => a - b);
      lines.push({
        name: o,
        color: PALETTE[(j + 1) % PALETTE.length],
        dashed: true,
        points: xs.map((x) => {
          const vals = perRun.map((p) => p.get(x)).filter((v): v is number => v !== undefined);
          return { x, y: vals.reduce((a, b) => a + b, 0) / vals.length };
        }),
      });
    });
  }
  return lineChart({
    title,
    subtitle: "openskill mean skill; shaded: 95% interval (one run) or min–max over seeds",
    x: { label: "iteration", integer: true },
    y: { label: "rating" },
    series: lines,
    intervals: "band",
  });
}

/** The text above the table: what the numbers are. */
export const RATING_NOTE =
  "Openskill (Weng-Lin) ratings from every training game, at each run's last iteration: the agent's mean skill with its 95% interval (mu ± 1.96 sigma), and P(win) the ratings give the agent against each scripted opponent and the league's newest snapshot. Ratings rank by games won, not by margin.";

/**
 * The report's "League ratings" section for one game: the table and the plot, when any run is
 * rated; nothing otherwise.
 */
export function ratingSection(
  out: string[],
  plots: { add(parts: readonly string[], svg: string, alt: string): string },
  game: string,
  methods: readonly RatedMethod[],
  heading = "###",
): void {
  const t = ratingTable(methods);
  if (t === null) return;
  out.push(`${heading} League ratings`, "", RATING_NOTE, "", t, "");
  const svg = ratingChart(methods, `agent rating over iterations — ${game}`);
  if (svg) out.push(plots.add([game, "rating"], svg, `agent rating over iterations — ${game}`), "");
}
