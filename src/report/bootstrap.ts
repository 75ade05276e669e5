import { Rng } from "../core/rng.js";
import {
  decodeOutcomeOrder,
  nonLossAt,
  scoreAt,
  successAt,
  type TrialMetrics,
  type TrialOutcome,
  trialsFromPatterns,
} from "../evaluate/metrics.js";

/**
 * Paired hierarchical bootstrap over seeds and trials, for the results report.
 *
 * Data: for one method and one evaluation cell, one `TrialMetrics` per seed, whose `outcomes`
 * histogram (outcome pattern → count) holds that seed's trials. The statistic of a method is the
 * mean over seeds of the per-seed metric (chips@k = score@k, final, in-trial gain, success@k,
 * non-loss@k, or a difference of two of them such as `success@5-success@3`).
 *
 * One bootstrap replicate: draw the seeds with replacement; for every drawn seed, draw its trials
 * with replacement (a multinomial draw of the seed's trial count from its histogram); the replicate's
 * value is the mean over the drawn seeds of the per-seed metric of the drawn trials. 2,000
 * replicates, 95% percentile interval. For a difference A − B the seeds present in both are drawn
 * once per replicate and used for both methods (paired), and each drawn seed's value is
 * metric(A's trials) − metric(B's trials).
 *
 * Implementation: the trial level is precomputed. For every (seed, histogram) a bank of
 * `resamples` trial resamples is drawn once (all metrics at once) and each replicate takes one
 * bank row per drawn seed, at a position drawn by the replicate (shared by A and B in a
 * difference). The bank is keyed by the seed and the histogram's CONTENT (not the method's name),
 * so identical data always give identical resamples: a method compared with itself gives exactly 0
 * with a zero-width interval. When any seed lacks its `outcomes` histogram, only the seeds are
 * resampled (each seed's metric is its stored mean) and the result says so (`trials: false`).
 *
 * Trial pairing. Trial i of a cell plays the same held-out deal for every method of a seed, and
 * `outcomeOrder` records each trial's pattern in trial order. When both sides of a difference
 * have it for a seed, with the same trial count, that seed's trials are paired by deal: a
 * replicate draws trial INDICES once and takes both methods' trials at them. Drawing n indices with
 * replacement is, in distribution, a multinomial draw of the seed's JOINT histogram
 * ((A's pattern, B's pattern) → count), which is how it is done: one bank of `resamples` joint
 * draws per (seed, joint histogram), holding metric(A's drawn trials) − metric(B's), taken at the
 * replicate's row position like the unpaired banks. Other seeds of the same difference keep the
 * independent draws above; `trialPairedSeeds` lists the paired ones.
 */

export interface SeedMetrics {
  seed: number;
  metrics: TrialMetrics;
}

export interface BootstrapOptions {
  /** Bootstrap replicates (default 2,000); also the number of trial resamples kept per seed. */
  resamples?: number;
  /** Seed of the bootstrap's Rng (default 0). */
  seed?: number;
  /** Confidence level of the percentile interval (default 0.95). */
  confidence?: number;
}

export interface BootstrapEstimate {
  /** Mean over seeds of the per-seed metric (for a difference: of the per-seed differences). */
  mean: number;
  lo: number;
  hi: number;
  /** The seeds used (for a difference: those present for both methods), ascending. */
  seeds: number[];
  /** True when trials within seeds were resampled; false: seeds only (some `outcomes` missing). */
  trials: boolean;
  /**
   * The seeds (ascending) whose trials were paired by deal in a difference (both sides carry
   * `outcomeOrder` with the same trial count); empty for a single method's estimate.
   */
  trialPairedSeeds: number[];
}

/** A per-seed metric: `score@k` (chips@k), `success@k`, `nonloss@k`, `final`, `gain`. */
export type MetricName = string;

const METRIC_RE = /^(score|chips|success|nonloss|non-loss)@(\d+)$/;

/** The metric's value for one trial (undefined when the name is unknown or k is out of range). */
function trialValue(t: TrialOutcome, name: string, attempts: number): number | undefined {
  if (name === "final") return t.attempts[t.attempts.length - 1].score;
  if (name === "gain") return t.attempts[t.attempts.length - 1].score - t.attempts[0].score;
  const m = METRIC_RE.exec(name);
  if (!m) return undefined;
  const k = Number(m[2]);
  if (k < 1 || k > attempts) return undefined;
  if (m[1] === "success") return successAt(t, k) ? 1 : 0;
  if (m[1] === "nonloss" || m[1] === "non-loss") return nonLossAt(t, k) ? 1 : 0;
  return scoreAt(t, k);
}

/** The stored mean of a metric (for seeds without a histogram). */
function storedMean(m: TrialMetrics, name: string): number | undefined {
  if (name === "final") return m.final?.mean;
  if (name === "gain") return m.gain?.mean;
  const r = METRIC_RE.exec(name);
  if (!r) return undefined;
  const k = Number(r[2]);
  const list =
    r[1] === "success" ? m.successAt : r[1] === "score" || r[1] === "chips" ? m.scoreAt : m.nonLossAt;
  return list?.[k - 1]?.mean;
}

/** A statistic: one metric, or `a-b` (the per-seed difference of two metrics, e.g. success@5-success@3). */
function parseStatistic(stat: string): { plus: string; minus: string | null } {
  const parts = stat.split("-").filter((p) => p !== "");
  // "non-loss@k" contains a hyphen: rejoin it.
  const tokens: string[] = [];
  for (const p of parts) {
    if (tokens.length > 0 && tokens[tokens.length - 1] === "non") tokens[tokens.length - 1] = `non-${p}`;
    else tokens.push(p);
  }
  if (tokens.length === 1) return { plus: tokens[0], minus: null };
  if (tokens.length === 2) return { plus: tokens[0], minus: tokens[1] };
  throw new Error(`bootstrap: cannot read the statistic "${stat}"`);
}

// ---------------------------------------------------------------------------------------------
// Exact binomial and multinomial draws (a trial resample is a multinomial draw of the histogram)

/** log(k!) − [(k + ½) log(k + 1) − (k + 1) + ½ log(2π)]: Stirling's correction, as BTRD needs it. */
const FC_TABLE = [
  0.08106146679532726, 0.04134069595540929, 0.02767792568499834, 0.02079067210376509, 0.01664469118982119,
  0.01387612882307075, 0.01189670994589177, 0.01041126526197209, 0.009255462182712733, 0.008330563433362871,
];

function stirlingCorrection(k: number): number {
  if (k < FC_TABLE.length) return FC_TABLE[k];
  const r = 1 / (k + 1);
  const r2 = r * r;
  return (1 / 12 - (1 / 360 - r2 / 1260) * r2) * r;
}

/** Inversion for small n·p (p ≤ ½): expected n·p + 1 steps, one uniform. */
function binomialInversion(rng: Rng, n: number, p: number): number {
  const q = 1 - p;
  const s = p / q;
  const a = (n + 1) * s;
  for (;;) {
    let r = q ** n;
    let u = rng.float();
    let x = 0;
    while (u > r) {
      u -= r;
      x++;
      if (x > n) break;
      r *= a / x - s;
    }
    if (x <= n) return x;
  }
}

/** Hörmann's BTRD (transformed rejection with decomposition) for n·p ≥ 10, p ≤ ½. */
function binomialBtrd(rng: Rng, n: number, p: number): number {
  const q = 1 - p;
  const m = Math.floor((n + 1) * p);
  const r = p / q;
  const nr = (n + 1) * r;
  const npq = n * p * q;
  const sq = Math.sqrt(npq);
  const b = 1.15 + 2.53 * sq;
  const a = -0.0873 + 0.0248 * b + 0.01 * p;
  const c = n * p + 0.5;
  const alpha = (2.83 + 5.1 / b) * sq;
  const vr = 0.92 - 4.2 / b;
  const urvr = 0.86 * vr;
  for (;;) {
    let v = rng.float();
    let u: number;
    if (v <= urvr) {
      u = v / vr - 0.43;
      return Math.floor(((2 * a) / (0.5 - Math.abs(u)) + b) * u + c);
    }
    if (v >= vr) {
      u = rng.float() - 0.5;
    } else {
      u = v / vr - 0.93;
      u = Math.sign(u) * 0.5 - u;
      v = rng.float() * vr;
    }
    const us = 0.5 - Math.abs(u);
    const k = Math.floor(((2 * a) / us + b) * u + c);
    if (k < 0 || k > n) continue;
    v = (v * alpha) / (a / (us * us) + b);
    const km = Math.abs(k - m);
    if (km <= 15) {
      // Recursive evaluation of f(k) / f(m).
      let f = 1;
      if (m < k) {
        for (let i = m + 1; i <= k; i++) f *= nr / i - r;
      } else if (m > k) {
        for (let i = k + 1; i <= m; i++) v *= nr / i - r;
      }
      if (v <= f) return k;
      continue;
    }
    // Squeeze, then the exact log-density test.
    v = Math.log(v);
    const rho = (km / npq) * (((km / 3 + 0.625) * km + 1 / 6) / npq + 0.5);
    const t = (-km * km) / (2 * npq);
    if (v < t - rho) return k;
    if (v > t + rho) continue;
    const nm = n - m + 1;
    const h = (m + 0.5) * Math.log((m + 1) / (r * nm)) + stirlingCorrection(m) + stirlingCorrection(n - m);
    const nk = n - k + 1;
    if (
      v <=
      h +
        (n + 1) * Math.log(nm / nk) +
        (k + 0.5) * Math.log((nk * r) / (k + 1)) -
        stirlingCorrection(k) -
        stirlingCorrection(n - k)
    ) {
      return k;
    }
  }
}

/** An exact Binomial(n, p) draw. */
export function binomial(rng: Rng, n: number, p: number): number {
  if (!Number.isInteger(n) || n < 0)
    throw new RangeError(`binomial: n must be a non-negative integer, got ${n}`);
  if (!(p >= 0 && p <= 1)) throw new RangeError(`binomial: p must be in [0, 1], got ${p}`);
  if (n === 0 || p === 0) return 0;
  if (p === 1) return n;
  if (p > 0.5) return n - binomial(rng, n, 1 - p);
  return n * p < 10 ? binomialInversion(rng, n, p) : binomialBtrd(rng, n, p);
}

/** An exact Multinomial(n, probs) draw into `out` (conditional binomials; probs sum to 1). */
export function multinomial(rng: Rng, n: number, probs: readonly number[], out: Float64Array): void {
  let left = n;
  let mass = 1;
  for (let j = 0; j < probs.length; j++) {
    if (j === probs.length - 1 || left === 0) {
      out[j] = left;
      left = 0;
      continue;
    }
    const pj = mass > 0 ? Math.min(1, Math.max(0, probs[j] / mass)) : 1;
    const c = binomial(rng, left, pj);
    out[j] = c;
    left -= c;
    mass -= probs[j];
  }
}

/** Whether a statistic can be computed from these metrics (attempts large enough, name known). */
export function hasStatistic(m: TrialMetrics, stat: string): boolean {
  const { plus, minus } = parseStatistic(stat);
  const ok = (name: string) => {
    const v = storedMean(m, name);
    return v !== undefined && Number.isFinite(v);
  };
  return ok(plus) && (minus === null || ok(minus));
}

/** The per-seed point value of a statistic (from the histogram when present, else the stored means). */
export function seedValue(m: TrialMetrics, stat: string): number {
  const { plus, minus } = parseStatistic(stat);
  const one = (name: string): number => {
    if (m.outcomes && Object.keys(m.outcomes).length > 0) {
      const trials = trialsFromPatterns(m.outcomes);
      let s = 0;
      for (const t of trials) s += trialValue(t, name, m.attempts) ?? Number.NaN;
      return s / trials.length;
    }
    return storedMean(m, name) ?? Number.NaN;
  };
  return minus === null ? one(plus) : one(plus) - one(minus);
}

interface Bank {
  /** Metric names, in column order. */
  names: string[];
  /** rows × names.length per-seed metric values of trial resamples. */
  values: Float64Array;
  rows: number;
  /** The observed per-seed metric values (column order). */
  observed: Float64Array;
}

function canonical(outcomes: Record<string, number>): string {
  return Object.keys(outcomes)
    .sort()
    .map((k) => `${k}=${outcomes[k]}`)
    .join(";");
}

function metricNames(attempts: number): string[] {
  const names = ["final", "gain"];
  for (let k = 1; k <= attempts; k++) names.push(`score@${k}`, `success@${k}`, `nonloss@${k}`);
  return names;
}

function normalName(name: string): string {
  return name.replace(/^chips@/, "score@").replace(/^non-loss@/, "nonloss@");
}

/**
 * The bootstrap engine. Keeps the trial-resample banks it has drawn, so the many tables of a
 * report (and the two sides of a paired difference) reuse them.
 */
export class HierarchicalBootstrap {
  readonly resamples: number;
  readonly confidence: number;
  private readonly root: Rng;
  private readonly banks = new Map<string, Bank>();
  private readonly jointBanks = new Map<string, Bank>();
  /** Decoded `outcomeOrder` per metrics object (null: none). */
  private decoded = new WeakMap<TrialMetrics, { patterns: string[]; order: Int32Array } | null>();

  constructor(o: BootstrapOptions = {}) {
    this.resamples = o.resamples ?? 2000;
    this.confidence = o.confidence ?? 0.95;
    if (!Number.isInteger(this.resamples) || this.resamples < 1) {
      throw new RangeError(`bootstrap: resamples must be a positive integer, got ${this.resamples}`);
    }
    this.root = Rng.seeded(o.seed ?? 0).derive("hierarchical-bootstrap");
  }

  /** Drops the cached banks (memory). */
  clear(): void {
    this.banks.clear();
    this.jointBanks.clear();
    this.decoded = new WeakMap();
  }

  private order(m: TrialMetrics): { patterns: string[]; order: Int32Array } | null {
    let d = this.decoded.get(m);
    if (d === undefined) {
      d = decodeOutcomeOrder(m);
      this.decoded.set(m, d);
    }
    return d;
  }

  /** Whether a seed's trials of A and B can be paired by deal (both orders, same trial count). */
  private pairable(a: TrialMetrics, b: TrialMetrics): boolean {
    const da = this.order(a);
    const db = this.order(b);
    return da !== null && db !== null && da.order.length > 0 && da.order.length === db.order.length;
  }

  /**
   * The bank of a seed's trial-paired differences: `resamples` multinomial draws of the joint
   * histogram of (A's pattern, B's pattern) over the trials, each row holding metric(A) − metric(B)
   * of the drawn trials for every metric both sides have.
   */
  private jointBank(seed: number, a: TrialMetrics, b: TrialMetrics): Bank {
    const da = this.order(a)!;
    const db = this.order(b)!;
    const n = da.order.length;
    const PB = db.patterns.length;
    const jointCount = new Map<number, number>();
    for (let i = 0; i < n; i++) {
      const key = da.order[i] * PB + db.order[i];
      jointCount.set(key, (jointCount.get(key) ?? 0) + 1);
    }
    const cells = [...jointCount.keys()].sort((x, y) => x - y);
    const text = cells
      .map((c) => `${da.patterns[Math.floor(c / PB)]}\u0001${db.patterns[c % PB]}=${jointCount.get(c)}`)
      .join(";");
    const attempts = Math.min(a.attempts, b.attempts);
    const key = `${seed}|${a.attempts}|${b.attempts}|${text}`;
    const cached = this.jointBanks.get(key);
    if (cached) return cached;
    const names = metricNames(attempts);
    const F = names.length;
    const featOf = (pattern: string, m: TrialMetrics) => {
      const t = trialsFromPatterns({ [pattern]: 1 })[0];
      return names.map((name) => trialValue(t, name, m.attempts) ?? Number.NaN);
    };
    const J = cells.length;
    const feat = new Float64Array(J * F);
    const counts = cells.map((c) => jointCount.get(c)!);
    cells.forEach((c, j) => {
      const fa = featOf(da.patterns[Math.floor(c / PB)], a);
      const fb = featOf(db.patterns[c % PB], b);
      for (let f = 0; f < F; f++) feat[j * F + f] = fa[f] - fb[f];
    });
    // The observed difference, summed per side in the same order as the unpaired banks do.
    const observedOf = (d: { patterns: string[] }, m: TrialMetrics) => {
      const o = new Float64Array(F);
      for (const p of d.patterns) {
        const fp = featOf(p, m);
        for (let f = 0; f < F; f++) o[f] += (m.outcomes![p] * fp[f]) / n;
      }
      return o;
    };
    const obsA = observedOf(da, a);
    const obsB = observedOf(db, b);
    const observed = new Float64Array(F);
    for (let f = 0; f < F; f++) observed[f] = obsA[f] - obsB[f];
    const rng = this.root.derive("paired-trials", seed, text);
    const bank: Bank = { names, values: this.resample(rng, counts, feat, F), rows: this.resamples, observed };
    this.jointBanks.set(key, bank);
    return bank;
  }

  private bank(seed: number, m: TrialMetrics): Bank {
    const outcomes = m.outcomes!;
    const text = canonical(outcomes);
    const key = `${seed}|${m.attempts}|${text}`;
    const cached = this.banks.get(key);
    if (cached) return cached;
    const patterns = Object.keys(outcomes).sort();
    const counts = patterns.map((p) => outcomes[p]);
    const n = counts.reduce((a, b) => a + b, 0);
    const names = metricNames(m.attempts);
    const F = names.length;
    // Feature matrix: the metric of one trial of each pattern.
    const feat = new Float64Array(patterns.length * F);
    patterns.forEach((p, j) => {
      const t = trialsFromPatterns({ [p]: 1 })[0];
      names.forEach((name, f) => {
        feat[j * F + f] = trialValue(t, name, m.attempts) ?? Number.NaN;
      });
    });
    const observed = new Float64Array(F);
    for (let j = 0; j < patterns.length; j++) {
      for (let f = 0; f < F; f++) observed[f] += (counts[j] * feat[j * F + f]) / n;
    }
    const rng = this.root.derive("trials", seed, text);
    const bank: Bank = { names, values: this.resample(rng, counts, feat, F), rows: this.resamples, observed };
    this.banks.set(key, bank);
    return bank;
  }

  /**
   * Replicates of the per-trial means: each row redraws the trials' categories (multinomial over
   * `counts`) and averages the categories' feature rows (`feat`, F values per category).
   */
  private resample(rng: Rng, counts: readonly number[], feat: Float64Array, F: number): Float64Array {
    const n = counts.reduce((a, b) => a + b, 0);
    const probs = counts.map((c) => c / n);
    const J = counts.length;
    const values = new Float64Array(this.resamples * F);
    const drawn = new Float64Array(J);
    for (let r = 0; r < this.resamples; r++) {
      multinomial(rng, n, probs, drawn);
      const base = r * F;
      for (let j = 0; j < J; j++) {
        const c = drawn[j];
        if (c === 0) continue;
        for (let f = 0; f < F; f++) values[base + f] += (c * feat[j * F + f]) / n;
      }
    }
    return values;
  }

  /** Percentile interval of sorted replicate values. */
  private interval(reps: Float64Array): { lo: number; hi: number } {
    reps.sort();
    const R = reps.length;
    const a = (1 - this.confidence) / 2;
    return { lo: reps[Math.floor(a * R)], hi: reps[Math.ceil((1 - a) * R) - 1] };
  }

  /** A method's statistic: mean over its seeds, with the hierarchical bootstrap interval. */
  estimate(samples: readonly SeedMetrics[], stat: MetricName): BootstrapEstimate {
    return this.run(
      samples.map((s) => ({ seed: s.seed, a: s.metrics, b: null })),
      stat,
    );
  }

  /** The paired difference A − B over the seeds both have. */
  difference(a: readonly SeedMetrics[], b: readonly SeedMetrics[], stat: MetricName): BootstrapEstimate {
    const bySeed = new Map(b.map((s) => [s.seed, s.metrics]));
    const pairs = a
      .filter((s) => bySeed.has(s.seed))
      .map((s) => ({ seed: s.seed, a: s.metrics, b: bySeed.get(s.seed)! }));
    return this.run(pairs, stat);
  }

  private run(
    input: readonly { seed: number; a: TrialMetrics; b: TrialMetrics | null }[],
    stat: MetricName,
  ): BootstrapEstimate {
    const { plus, minus } = parseStatistic(stat);
    const usable = input
      .filter((p) => hasStatistic(p.a, stat) && (p.b === null || hasStatistic(p.b, stat)))
      .sort((x, y) => x.seed - y.seed);
    const seeds = usable.map((p) => p.seed);
    const nS = usable.length;
    if (nS === 0) {
      return { mean: Number.NaN, lo: Number.NaN, hi: Number.NaN, seeds, trials: false, trialPairedSeeds: [] };
    }
    const withTrials = usable.every(
      (p) =>
        p.a.outcomes !== undefined &&
        Object.keys(p.a.outcomes).length > 0 &&
        (p.b === null || (p.b.outcomes !== undefined && Object.keys(p.b.outcomes).length > 0)),
    );
    // The per-seed values of one side: from the banks (trial resamples) or fixed (seeds only).
    type Side = { rows: (row: number) => number; observed: number };
    const fromBank = (bank: Bank): Side => {
      const F = bank.names.length;
      const fp = bank.names.indexOf(normalName(plus));
      const fm = minus === null ? -1 : bank.names.indexOf(normalName(minus));
      if (fp < 0 || (minus !== null && fm < 0)) throw new Error(`bootstrap: unknown metric in "${stat}"`);
      const vals = bank.values;
      return {
        rows: fm < 0 ? (r) => vals[r * F + fp] : (r) => vals[r * F + fp] - vals[r * F + fm],
        observed: fm < 0 ? bank.observed[fp] : bank.observed[fp] - bank.observed[fm],
      };
    };
    const side = (seed: number, m: TrialMetrics): Side => {
      if (!withTrials) {
        const v = seedValue(m, stat);
        return { rows: () => v, observed: v };
      }
      return fromBank(this.bank(seed, m));
    };
    const trialPairedSeeds: number[] = [];
    // A trial-paired seed is one side (its bank already holds A − B) with no B.
    const sides = usable.map((p) => {
      if (withTrials && p.b !== null && this.pairable(p.a, p.b)) {
        trialPairedSeeds.push(p.seed);
        return { a: fromBank(this.jointBank(p.seed, p.a, p.b)), b: null };
      }
      return { a: side(p.seed, p.a), b: p.b === null ? null : side(p.seed, p.b) };
    });
    const value = (i: number, row: number) => {
      const s = sides[i];
      return s.b === null ? s.a.rows(row) : s.a.rows(row) - s.b.rows(row);
    };
    let mean = 0;
    for (const s of sides) mean += s.b === null ? s.a.observed : s.a.observed - s.b.observed;
    mean /= nS;
    // The replicate draws depend only on the number of seeds, so every method with n seeds sees the
    // same seed draws (and a difference's replicate is the difference of its sides' replicates).
    const rng = this.root.derive("replicates", nS);
    const R = this.resamples;
    const reps = new Float64Array(R);
    for (let r = 0; r < R; r++) {
      let s = 0;
      for (let i = 0; i < nS; i++) {
        const pick = rng.int(nS);
        const row = rng.int(R);
        s += value(pick, row);
      }
      reps[r] = s / nS;
    }
    const { lo, hi } = this.interval(reps);
    return { mean, lo, hi, seeds, trials: withTrials, trialPairedSeeds };
  }
}
