/**
 * Credit assignment over one trial (all attempts of one environment), as pure functions.
 *
 * Input: the trial's rows in the order they were produced (a reflect row of attempt k comes
 * before the play rows of attempt k). Output per row: the episode-level score (what GiGPO's
 * episode term and GRPO normalise) and the step return (GiGPO's step term).
 */

export type Phase = "play" | "reflect";

export interface CreditRow {
  phase: Phase;
  attempt: number;
  /** Environment reward of this call (reflect rows' rewards are ignored). */
  reward: number;
}

export type RewardMode =
  /** MAGE's final-episode objective: attempt k is paid D[k] = C[k] − C[k−1] on its last play row. */
  | "differential"
  /** LaMer: every play row keeps its own environment reward; attempt scores are C[k]. */
  | "per-attempt";

export type ReturnForm =
  /**
   * The reference code's backward recursion: γ_step between play rows of one attempt, γ_traj
   * when crossing into the next attempt, so a later attempt's value is also discounted by the
   * steps left in the current one.
   */
  | "reference"
  /** The paper's cross-episode return G_t⁽ⁿ⁾ = g_t⁽ⁿ⁾ + Σ_{m>n} γ_traj^{m−n} g_0⁽ᵐ⁾. */
  | "paper";

export interface CreditOptions {
  mode: RewardMode;
  stepGamma: number;
  trajGamma: number;
  returnForm: ReturnForm;
}

export interface Credit {
  /** Per row: the episode-level score (D[k] or C[k] for play rows, 0 for reflect rows). */
  episodeRewards: number[];
  /** Per row: the discounted return (reflect rows inherit the next play row's return). */
  stepReturns: number[];
  /** C[k]: summed environment reward of each attempt (attempts with no rows count 0). */
  attemptReturns: number[];
}

/** C[k] for k = 0..max attempt present. */
export function attemptReturns(rows: readonly CreditRow[]): number[] {
  let maxAttempt = -1;
  for (const r of rows) maxAttempt = Math.max(maxAttempt, r.attempt);
  const c = new Array<number>(maxAttempt + 1).fill(0);
  for (const r of rows) if (r.phase === "play") c[r.attempt] += r.reward;
  return c;
}

/** D[0] = C[0], D[k] = C[k] − C[k−1]. */
export function differentialRewards(c: readonly number[]): number[] {
  return c.map((v, k) => (k === 0 ? v : v - c[k - 1]));
}

/** The per-row reward signal the returns are computed from. */
function rowSignals(rows: readonly CreditRow[], mode: RewardMode, c: readonly number[]): number[] {
  const signal = new Array<number>(rows.length).fill(0);
  if (mode === "per-attempt") {
    rows.forEach((r, i) => {
      if (r.phase === "play") signal[i] = r.reward;
    });
    return signal;
  }
  const d = differentialRewards(c);
  // The last play row of each attempt carries D[k].
  const lastPlay = new Map<number, number>();
  rows.forEach((r, i) => {
    if (r.phase === "play") lastPlay.set(r.attempt, i);
  });
  for (const [k, i] of lastPlay) signal[i] = d[k];
  return signal;
}

export function assignCredit(rows: readonly CreditRow[], opts: CreditOptions): Credit {
  for (let i = 1; i < rows.length; i++) {
    if (rows[i].attempt < rows[i - 1].attempt) {
      throw new Error(
        `assignCredit: rows must be in attempt order (row ${i} goes back to attempt ${rows[i].attempt})`,
      );
    }
  }
  const c = attemptReturns(rows);
  const d = differentialRewards(c);
  const signal = rowSignals(rows, opts.mode, c);
  const episodeRewards = rows.map((r) => {
    if (r.phase !== "play") return 0;
    return opts.mode === "differential" ? d[r.attempt] : c[r.attempt];
  });
  const stepReturns =
    opts.returnForm === "reference"
      ? referenceReturns(rows, signal, opts.stepGamma, opts.trajGamma)
      : paperReturns(rows, signal, opts.stepGamma, opts.trajGamma);
  return { episodeRewards, stepReturns, attemptReturns: c };
}

function referenceReturns(
  rows: readonly CreditRow[],
  signal: readonly number[],
  gStep: number,
  gTraj: number,
): number[] {
  const out = new Array<number>(rows.length).fill(0);
  let running = 0;
  let current = rows.length > 0 ? rows[rows.length - 1].attempt : 0;
  for (let i = rows.length - 1; i >= 0; i--) {
    const r = rows[i];
    if (r.phase === "reflect") {
      out[i] = running;
      continue;
    }
    running = signal[i] + (r.attempt === current ? gStep : gTraj) * running;
    current = r.attempt;
    out[i] = running;
  }
  return out;
}

function paperReturns(
  rows: readonly CreditRow[],
  signal: readonly number[],
  gStep: number,
  gTraj: number,
): number[] {
  const out = new Array<number>(rows.length).fill(0);
  // Within-attempt discounted returns g_t, then the attempt's start value g_0.
  const startValue = new Map<number, number>();
  const within = new Array<number>(rows.length).fill(0);
  let running = 0;
  let current = Number.NaN;
  for (let i = rows.length - 1; i >= 0; i--) {
    const r = rows[i];
    if (r.phase !== "play") continue;
    if (r.attempt !== current) {
      running = 0;
      current = r.attempt;
    }
    running = signal[i] + gStep * running;
    within[i] = running;
    startValue.set(r.attempt, running);
  }
  const attempts = [...startValue.keys()].sort((a, b) => a - b);
  const future = (n: number): number => {
    let s = 0;
    for (const m of attempts) if (m > n) s += gTraj ** (m - n) * (startValue.get(m) ?? 0);
    return s;
  };
  rows.forEach((r, i) => {
    if (r.phase === "play") out[i] = within[i] + future(r.attempt);
  });
  // Reflect rows take the return of the first play row of their attempt.
  for (let i = rows.length - 1; i >= 0; i--) {
    if (rows[i].phase !== "reflect") continue;
    let j = i + 1;
    while (j < rows.length && rows[j].phase !== "play") j++;
    out[i] = j < rows.length ? out[j] : 0;
  }
  return out;
}
