import { Rng } from "../core/rng.js";

/**
 * Evaluation measures over finished trials. Definitions used everywhere in mage:
 *  - success@k: won in ANY of the first k attempts (cumulative);
 *  - outcome@k, score@k (chips@k for Kuhn): the result of attempt k, where a trial that stopped
 *    earlier (it won) carries its last played attempt forward;
 *  - final: the last attempt played;
 *  - non-loss@k: attempt k (carried forward) not lost;
 *  - in-trial gain: score@final − score@1.
 */

export interface AttemptOutcome {
  won: boolean;
  draw: boolean;
  /** Game score of the attempt: chips for Kuhn, +1/0/−1 for TicTacToe, env return for puzzles. */
  score: number;
  /** Summed environment reward of the attempt. */
  reward: number;
  turns: number;
  invalidActions: number;
}

export interface TrialOutcome {
  opponent: string;
  seat: string;
  taskId: string;
  /** The task instance's category (a served ALFWorld game: "<split>/<task type>"), when it has one. */
  category?: string;
  /** Attempts actually played, in order (a won trial stops early). */
  attempts: AttemptOutcome[];
  /** The trial's reflect calls, when known (`reflectionCounts`); absent in outcomes rebuilt from patterns. */
  reflections?: ReflectionCounts;
}

/** A trial's reflect calls: how many, how many valid, and how many of those judged were informative. */
export interface ReflectionCounts {
  calls: number;
  valid: number;
  /** Calls the task judged for informativeness (0 when it has no rule). */
  judged: number;
  informative: number;
}

/** The reflection counts of reflect rows (`valid`, and `informative` where the task judged it). */
export function reflectionCounts(
  rows: readonly { phase: string; valid: boolean; informative?: boolean }[],
): ReflectionCounts {
  const out: ReflectionCounts = { calls: 0, valid: 0, judged: 0, informative: 0 };
  for (const r of rows) {
    if (r.phase !== "reflect") continue;
    out.calls++;
    if (r.valid) out.valid++;
    if (r.informative !== undefined) {
      out.judged++;
      if (r.informative) out.informative++;
    }
  }
  return out;
}

export interface Estimate {
  mean: number;
  lo: number;
  hi: number;
  n: number;
}

export interface TrialMetrics {
  trials: number;
  attempts: number;
  successAt: Estimate[];
  nonLossAt: Estimate[];
  scoreAt: Estimate[];
  final: Estimate;
  gain: Estimate;
  invalidRate: number;
  meanAttemptsPlayed: number;
  /** Reflect calls of the trials (absent when none was made or none was known). */
  reflections?: number;
  /** Share of reflect calls whose remark was valid (`judgeRemark`); absent without reflect calls. */
  validReflectionRate?: number;
  /** Share of the judged reflect calls whose remark was informative; absent when the task has no rule. */
  informativeReflectionRate?: number;
  /**
   * Per attempt k, the turns of the trials whose attempt k won (steps to the goal: the coin
   * collector's path length, which a remembered map shortens); n is how many won there. Absent in
   * summaries written before it existed.
   */
  wonTurnsAt?: Estimate[];
  /**
   * How many trials ended with each outcome pattern (`outcomePattern`): the trials themselves in
   * compressed form, so a report can resample trials (e.g. a bootstrap over seeds and trials).
   */
  outcomes?: Record<string, number>;
  /**
   * Which pattern each trial had, in trial order (`encodeOutcomeOrder`): with it a report can pair
   * two methods' trials by deal (trial i of a cell plays the same held-out deal for every method
   * of a seed). Absent in summaries written before it existed.
   */
  outcomeOrder?: string;
}

/**
 * A trial's attempts as one key: per attempt W/D/L and its score, e.g. "L-1 L-2 W1". Trials with
 * the same key are interchangeable for every measure here except the invalid-action rate.
 */
export function outcomePattern(trial: TrialOutcome): string {
  return trial.attempts.map((a) => `${a.won ? "W" : a.draw ? "D" : "L"}${a.score}`).join(" ");
}

/** Rebuilds trial outcomes (scores and results only) from a pattern histogram. */
export function trialsFromPatterns(outcomes: Record<string, number>): TrialOutcome[] {
  const out: TrialOutcome[] = [];
  for (const [key, count] of Object.entries(outcomes)) {
    const attempts: AttemptOutcome[] = key.split(" ").map((tok) => ({
      won: tok[0] === "W",
      draw: tok[0] === "D",
      score: Number(tok.slice(1)),
      reward: 0,
      turns: 0,
      invalidActions: 0,
    }));
    for (let i = 0; i < count; i++) out.push({ opponent: "", seat: "", taskId: key, attempts });
  }
  return out;
}

/**
 * `outcomeOrder` encoding. The patterns of `outcomes`, sorted with the default string order
 * (`Object.keys(outcomes).sort()`, UTF-16 code units), are numbered 0, 1, …; trial i's number is
 * written in base 36 (0-9a-z), left-padded with "0" to a fixed width, and the codes are concatenated
 * in trial order. The width is the smallest w ≥ 1 with 36^w ≥ the number of patterns, so it follows
 * from the histogram alone: one character per trial up to 36 patterns (2,000 trials ≈ 2 KB), two up
 * to 1,296, and so on. A decoder checks the length (trials × width) and that the codes reproduce
 * the histogram's counts.
 */
export function outcomeOrderWidth(patterns: number): number {
  let w = 1;
  for (let cap = 36; cap < patterns; cap *= 36) w++;
  return w;
}

/** The `outcomeOrder` of trials whose patterns (in trial order) are `patterns`; see `outcomeOrderWidth`. */
export function encodeOutcomeOrder(patterns: readonly string[]): string {
  const keys = [...new Set(patterns)].sort();
  const w = outcomeOrderWidth(keys.length);
  const code = new Map(keys.map((k, i) => [k, i.toString(36).padStart(w, "0")]));
  let out = "";
  for (const p of patterns) out += code.get(p)!;
  return out;
}

/**
 * The trials of `outcomeOrder` as indices into `patterns` (the sorted keys of `outcomes`), in
 * trial order; null when either field is missing. Throws when the two disagree (wrong length, a
 * bad code, or counts that differ from the histogram).
 */
export function decodeOutcomeOrder(m: {
  outcomes?: Record<string, number>;
  outcomeOrder?: string;
}): { patterns: string[]; order: Int32Array } | null {
  if (m.outcomes === undefined || m.outcomeOrder === undefined) return null;
  const patterns = Object.keys(m.outcomes).sort();
  const w = outcomeOrderWidth(patterns.length);
  const text = m.outcomeOrder;
  const n = patterns.reduce((a, p) => a + m.outcomes![p], 0);
  if (text.length !== n * w) {
    throw new Error(
      `outcomeOrder has ${text.length} characters; ${n} trials of ${patterns.length} patterns need ${n * w}`,
    );
  }
  const order = new Int32Array(n);
  const counts = new Array<number>(patterns.length).fill(0);
  for (let i = 0; i < n; i++) {
    let j = 0;
    for (let c = i * w; c < (i + 1) * w; c++) {
      const x = text.charCodeAt(c);
      // 0-9 → 0..9, a-z → 10..35, anything else → invalid.
      const digit = x >= 48 && x <= 57 ? x - 48 : x >= 97 && x <= 122 ? x - 87 : -1;
      j = digit < 0 || j < 0 ? -1 : j * 36 + digit;
    }
    if (!(j >= 0 && j < patterns.length)) {
      const code = text.slice(i * w, (i + 1) * w);
      throw new Error(`outcomeOrder: trial ${i} has code "${code}", not one of ${patterns.length} patterns`);
    }
    order[i] = j;
    counts[j]++;
  }
  patterns.forEach((p, j) => {
    if (counts[j] !== m.outcomes![p]) {
      throw new Error(
        `outcomeOrder: pattern "${p}" occurs ${counts[j]} times, the histogram says ${m.outcomes![p]}`,
      );
    }
  });
  return { patterns, order };
}

/** The attempt that counts as "attempt k" (1-based), carrying the last played one forward. */
export function attemptAt(trial: TrialOutcome, k: number): AttemptOutcome {
  if (trial.attempts.length === 0) throw new Error(`trial ${trial.taskId} has no attempts`);
  return trial.attempts[Math.min(k, trial.attempts.length) - 1];
}

export function successAt(trial: TrialOutcome, k: number): boolean {
  return trial.attempts.slice(0, k).some((a) => a.won);
}

export function nonLossAt(trial: TrialOutcome, k: number): boolean {
  const a = attemptAt(trial, k);
  return a.won || a.draw;
}

export function scoreAt(trial: TrialOutcome, k: number): number {
  return attemptAt(trial, k).score;
}

export function inTrialGain(trial: TrialOutcome): number {
  return trial.attempts[trial.attempts.length - 1].score - trial.attempts[0].score;
}

/**
 * Mean with a 95% percentile-bootstrap interval over trials (2,000 resamples, seeded, so the
 * same data always gives the same interval).
 */
export function bootstrapMean(values: readonly number[], seed = 0, resamples = 2000): Estimate {
  const n = values.length;
  if (n === 0) return { mean: Number.NaN, lo: Number.NaN, hi: Number.NaN, n: 0 };
  const mean = values.reduce((s, v) => s + v, 0) / n;
  const rng = Rng.seeded(seed).derive("bootstrap", n);
  const means = new Float64Array(resamples);
  for (let b = 0; b < resamples; b++) {
    let s = 0;
    for (let i = 0; i < n; i++) s += values[rng.int(n)];
    means[b] = s / n;
  }
  means.sort();
  return { mean, lo: means[Math.floor(0.025 * resamples)], hi: means[Math.ceil(0.975 * resamples) - 1], n };
}

/**
 * The measures per category, for trials that carry one: a category "a/b" counts in "a" and in
 * "a/b" (ALFWorld: per split and per split and task type). Empty when no trial has a category.
 */
export function categoryMetrics(
  trials: readonly TrialOutcome[],
  attempts: number,
  seed = 0,
): Record<string, TrialMetrics> {
  const groups = new Map<string, TrialOutcome[]>();
  for (const t of trials) {
    if (t.category === undefined) continue;
    const parts = t.category.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const key = parts.slice(0, i).join("/");
      const list = groups.get(key) ?? [];
      list.push(t);
      groups.set(key, list);
    }
  }
  const out: Record<string, TrialMetrics> = {};
  for (const key of [...groups.keys()].sort())
    out[key] = computeTrialMetrics(groups.get(key)!, attempts, seed);
  return out;
}

/** The measures of `trials`, given in trial order (`outcomeOrder` keeps that order). */
export function computeTrialMetrics(
  trials: readonly TrialOutcome[],
  attempts: number,
  seed = 0,
): TrialMetrics {
  const ks = Array.from({ length: attempts }, (_, i) => i + 1);
  const est = (f: (t: TrialOutcome) => number) => bootstrapMean(trials.map(f), seed);
  let invalid = 0;
  let turns = 0;
  let played = 0;
  const refl: ReflectionCounts = { calls: 0, valid: 0, judged: 0, informative: 0 };
  const outcomes: Record<string, number> = {};
  const order: string[] = [];
  for (const t of trials) {
    const key = outcomePattern(t);
    outcomes[key] = (outcomes[key] ?? 0) + 1;
    order.push(key);
    played += t.attempts.length;
    for (const a of t.attempts) {
      invalid += a.invalidActions;
      turns += a.turns;
    }
    if (t.reflections) {
      refl.calls += t.reflections.calls;
      refl.valid += t.reflections.valid;
      refl.judged += t.reflections.judged;
      refl.informative += t.reflections.informative;
    }
  }
  return {
    trials: trials.length,
    attempts,
    successAt: ks.map((k) => est((t) => (successAt(t, k) ? 1 : 0))),
    nonLossAt: ks.map((k) => est((t) => (nonLossAt(t, k) ? 1 : 0))),
    scoreAt: ks.map((k) => est((t) => scoreAt(t, k))),
    final: est((t) => t.attempts[t.attempts.length - 1].score),
    gain: est(inTrialGain),
    invalidRate: turns > 0 ? invalid / turns : 0,
    meanAttemptsPlayed: trials.length > 0 ? played / trials.length : 0,
    ...(refl.calls > 0 ? { reflections: refl.calls, validReflectionRate: refl.valid / refl.calls } : {}),
    ...(refl.judged > 0 ? { informativeReflectionRate: refl.informative / refl.judged } : {}),
    wonTurnsAt: ks.map((k) =>
      bootstrapMean(
        trials.flatMap((t) => (t.attempts[k - 1]?.won ? [t.attempts[k - 1].turns] : [])),
        seed,
      ),
    ),
    outcomes,
    outcomeOrder: encodeOutcomeOrder(order),
  };
}

/** Metrics per (opponent, seat) cell, in first-seen order. */
export function metricsByOpponent(
  trials: readonly TrialOutcome[],
  attempts: number,
  seed = 0,
): { opponent: string; seat: string; metrics: TrialMetrics }[] {
  const cells = new Map<string, TrialOutcome[]>();
  for (const t of trials) {
    const key = `${t.opponent}\u0000${t.seat}`;
    const list = cells.get(key);
    if (list) list.push(t);
    else cells.set(key, [t]);
  }
  return [...cells.entries()].map(([key, list]) => {
    const [opponent, seat] = key.split("\u0000");
    return { opponent, seat, metrics: computeTrialMetrics(list, attempts, seed) };
  });
}
