/**
 * Group-relative advantages (GRPO, GiGPO) with an explicit normalisation scope.
 *
 * Scopes decide which rows share a baseline:
 *  - `agent`: task × opponent × seat — MAGE's agent-specific normalisation, made explicit;
 *  - `task`:  task only — opponents and seats mixed inside a group ("no agent normalisation");
 *  - `batch`: the whole batch.
 * GiGPO's step-level groups additionally require identical anchors inside the scope group.
 */

export type NormScope = "agent" | "task" | "batch";
export type NormMode = "mean_norm" | "mean_std_norm";
export type Estimator = "gigpo" | "grpo";

export interface AdvantageRow {
  taskId: string;
  opponent: string;
  seat: string;
  attempt: number;
  anchor: string;
  /** Episode-level score after penalties. */
  score: number;
  /** Step return (GiGPO's step-level signal). */
  stepReturn: number;
}

export interface AdvantageOptions {
  estimator: Estimator;
  scope: NormScope;
  /** GiGPO episode and step levels; GRPO uses `mean_std_norm` by default as the reference. */
  mode: NormMode;
  stepAdvantageWeight: number;
  /** Prefix anchors with the attempt index so step groups never mix attempts (`use_trial_norm`). */
  anchorPerAttempt: boolean;
  epsilon: number;
}

export const DEFAULT_ADVANTAGE_OPTIONS: AdvantageOptions = {
  estimator: "gigpo",
  scope: "agent",
  mode: "mean_norm",
  stepAdvantageWeight: 1,
  anchorPerAttempt: false,
  epsilon: 1e-6,
};

export function scopeKey(row: Pick<AdvantageRow, "taskId" | "opponent" | "seat">, scope: NormScope): string {
  switch (scope) {
    case "agent":
      return JSON.stringify([row.taskId, row.opponent, row.seat]);
    case "task":
      return JSON.stringify([row.taskId]);
    case "batch":
      return "batch";
  }
}

function groupIndices(keys: readonly string[]): Map<string, number[]> {
  const groups = new Map<string, number[]>();
  keys.forEach((k, i) => {
    const g = groups.get(k);
    if (g) g.push(i);
    else groups.set(k, [i]);
  });
  return groups;
}

/** Mean and unbiased standard deviation; a singleton has std treated as 1 (as the reference). */
export function meanStd(values: readonly number[]): { mean: number; std: number } {
  const n = values.length;
  const mean = values.reduce((s, v) => s + v, 0) / n;
  if (n < 2) return { mean, std: 1 };
  let ss = 0;
  for (const v of values) ss += (v - mean) ** 2;
  return { mean, std: Math.sqrt(ss / (n - 1)) };
}

/**
 * Normalises `values` within the groups given by `keys`.
 * `singleton`: what a group of one row gets — "zero-mean" (baseline 0, advantage = value,
 * the reference's episode level) or "zero" (advantage 0, the reference's step level).
 */
export function normaliseInGroups(
  values: readonly number[],
  keys: readonly string[],
  mode: NormMode,
  epsilon: number,
  singleton: "zero-mean" | "zero",
): number[] {
  const out = new Array<number>(values.length).fill(0);
  for (const idx of groupIndices(keys).values()) {
    if (idx.length === 1) {
      out[idx[0]] = singleton === "zero" ? 0 : values[idx[0]];
      continue;
    }
    const { mean, std } = meanStd(idx.map((i) => values[i]));
    for (const i of idx)
      out[i] = mode === "mean_norm" ? values[i] - mean : (values[i] - mean) / (std + epsilon);
  }
  return out;
}

export interface Advantages {
  advantages: number[];
  episode: number[];
  step: number[];
}

export function computeAdvantages(
  rows: readonly AdvantageRow[],
  options: Partial<AdvantageOptions> = {},
): Advantages {
  const opts = { ...DEFAULT_ADVANTAGE_OPTIONS, ...options };
  const keys = rows.map((r) => scopeKey(r, opts.scope));
  const scores = rows.map((r) => r.score);
  if (opts.estimator === "grpo") {
    const episode = normaliseInGroups(scores, keys, opts.mode, opts.epsilon, "zero-mean");
    return { advantages: episode, episode, step: rows.map(() => 0) };
  }
  const episode = normaliseInGroups(scores, keys, opts.mode, opts.epsilon, "zero-mean");
  const stepKeys = rows.map((r, i) =>
    JSON.stringify([keys[i], opts.anchorPerAttempt ? `Trial ${r.attempt}: ${r.anchor}` : r.anchor]),
  );
  const step = normaliseInGroups(
    rows.map((r) => r.stepReturn),
    stepKeys,
    opts.mode,
    opts.epsilon,
    "zero",
  );
  const advantages = episode.map((a, i) => a + opts.stepAdvantageWeight * step[i]);
  return { advantages, episode, step };
}

/**
 * Role-conditioned running baselines (SPIRAL's RAE): one exponential moving average per key
 * (e.g. game × seat). Order, as SPIRAL's code: the advantage uses the baseline from BEFORE this
 * value's update (A = R − b; then b ← α·b + (1 − α)·R). Decay α defaults to 0.95; baselines start at 0.
 * Values are applied in the order given, so the result is deterministic for a fixed row order.
 */
export class RoleBaselines {
  private readonly values = new Map<string, number>();
  constructor(readonly decay = 0.95) {}

  apply(keys: readonly string[], returns: readonly number[]): number[] {
    return returns.map((r, i) => {
      const b = this.values.get(keys[i]) ?? 0;
      this.values.set(keys[i], this.decay * b + (1 - this.decay) * r);
      return r - b;
    });
  }

  get(key: string): number {
    return this.values.get(key) ?? 0;
  }

  toJSON(): { decay: number; values: Record<string, number> } {
    return { decay: this.decay, values: Object.fromEntries([...this.values].sort()) };
  }

  static fromJSON(state: { decay: number; values: Record<string, number> }): RoleBaselines {
    const b = new RoleBaselines(state.decay);
    for (const [k, v] of Object.entries(state.values)) b.values.set(k, v);
    return b;
  }
}
