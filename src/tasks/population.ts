/**
 * Population sampler: which task instance, opponent and seat each rollout group gets.
 *
 * A group is the `n` rollouts that share one task instance; all its members get the same task
 * seed, opponent spec and seat, so group baselines compare like with like (MAGE's
 * "agent-specific normalisation" falls out of this). Assignments are explicit plain data.
 *
 * Allocation (exact and documented):
 * 1. Opponents: the pool's weights are turned into group counts by the largest-remainder
 *    method — each entry gets floor(G·w/Σw) groups, and the groups left over go one each to
 *    the entries with the largest fractional parts (ties: earlier pool entry first). Counts sum
 *    to exactly G. With fewer groups than entries some entries may get 0 groups; the opponents
 *    named in the assignments are exactly the ones that play (no silent fill-ins, no relabels).
 * 2. Seats: `first` / `second` give every group that seat. `mixed` gives exactly
 *    round(G·ratio) groups the second seat, split over the opponents again by largest
 *    remainder in proportion to their group counts, so each opponent sees both seats in
 *    about the ratio.
 * 3. Order: the (opponent, seat) list is shuffled by `rng.derive("order")`; task seeds are
 *    drawn per group index from `rng.derive("task-seed", g)`, uniform in `seedRange`.
 */
import { UsageError } from "../core/errors.js";
import type { Rng } from "../core/rng.js";
import type { Seat } from "./types.js";

export interface PoolEntry {
  /** Opponent spec, e.g. "mcts:100", "preferred:3", "cfr". */
  spec: string;
  /** Relative weight (> 0). */
  weight: number;
}

export type SeatMode = "first" | "second" | "mixed";
export const SEAT_MODES: readonly SeatMode[] = ["first", "second", "mixed"];

export interface SeatPlan {
  mode: SeatMode;
  /** Share of groups where the agent sits second, for `mixed` (default 0.5). */
  secondRatio?: number;
}

export interface GroupAssignment {
  /** Group index 0..G-1. */
  group: number;
  /** The task instance seed (uint32) shared by every member of the group. */
  taskSeed: number;
  /** Opponent spec, or null for single-player tasks. */
  opponent: string | null;
  /** Agent seat, or null for single-player tasks. */
  seat: Seat | null;
}

export interface AssignOptions {
  numGroups: number;
  /** Opponent pool; null/undefined or empty for single-player tasks. */
  pool?: readonly PoolEntry[] | null;
  /** Seat plan; ignored without a pool. Default `{ mode: "first" }`. */
  seats?: SeatPlan | null;
  rng: Rng;
  /** Half-open range [lo, hi) the task seeds are drawn from (default [0, 2^32)). */
  seedRange?: readonly [number, number];
}

/** Largest-remainder apportionment of `total` items over non-negative `weights` (exact sum). */
export function allocateByWeight(weights: readonly number[], total: number): number[] {
  if (!Number.isInteger(total) || total < 0)
    throw new RangeError(`total must be a non-negative integer, got ${total}`);
  let sum = 0;
  for (const w of weights) {
    if (!(w >= 0) || !Number.isFinite(w)) throw new RangeError(`weights must be finite and >= 0, got ${w}`);
    sum += w;
  }
  if (weights.length === 0 || sum <= 0) {
    if (total === 0) return weights.map(() => 0);
    throw new RangeError("weights sum to zero");
  }
  const quotas = weights.map((w) => (total * w) / sum);
  const counts = quotas.map((q) => Math.floor(q));
  let left = total - counts.reduce((a, b) => a + b, 0);
  const order = quotas
    .map((q, i) => ({ i, frac: q - Math.floor(q) }))
    .sort((a, b) => b.frac - a.frac || a.i - b.i);
  for (let j = 0; left > 0; j = (j + 1) % order.length) {
    if (weights[order[j].i] > 0) {
      counts[order[j].i]++;
      left--;
    }
  }
  return counts;
}

/** Assigns task seed, opponent and seat to each of `numGroups` rollout groups. */
export function assignGroups(opts: AssignOptions): GroupAssignment[] {
  const G = opts.numGroups;
  if (!Number.isInteger(G) || G <= 0)
    throw new UsageError(`number of groups must be a positive integer, got ${G}`);
  const [lo, hi] = opts.seedRange ?? [0, 0x100000000];
  if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo >= 0 && hi <= 0x100000000 && lo < hi)) {
    throw new UsageError(`seed range must be integers 0 <= lo < hi <= 2^32, got [${lo}, ${hi})`);
  }
  const seeds = Array.from({ length: G }, (_, g) => lo + opts.rng.derive("task-seed", g).int(hi - lo));
  const pool = opts.pool ?? [];
  if (pool.length === 0) {
    return seeds.map((taskSeed, group) => ({ group, taskSeed, opponent: null, seat: null }));
  }
  validatePool(pool);
  const counts = allocateByWeight(
    pool.map((p) => p.weight),
    G,
  );
  const plan = opts.seats ?? { mode: "first" };
  const seconds = secondSeatCounts(counts, plan);
  const slots: { opponent: string; seat: Seat }[] = [];
  pool.forEach((p, i) => {
    for (let j = 0; j < counts[i]; j++) {
      slots.push({ opponent: p.spec, seat: j < seconds[i] ? "second" : "first" });
    }
  });
  opts.rng.derive("order").shuffle(slots);
  return slots.map((s, group) => ({ group, taskSeed: seeds[group], opponent: s.opponent, seat: s.seat }));
}

function secondSeatCounts(counts: readonly number[], plan: SeatPlan): number[] {
  const G = counts.reduce((a, b) => a + b, 0);
  switch (plan.mode) {
    case "first":
      return counts.map(() => 0);
    case "second":
      return [...counts];
    case "mixed": {
      const ratio = plan.secondRatio ?? 0.5;
      if (!(ratio >= 0 && ratio <= 1))
        throw new UsageError(`second-seat ratio must be in [0, 1], got ${ratio}`);
      return allocateByWeight(counts, Math.round(G * ratio));
    }
    default:
      throw new UsageError(
        `unknown seat mode "${(plan as SeatPlan).mode}"; valid choices: ${SEAT_MODES.join(", ")}`,
      );
  }
}

function validatePool(pool: readonly PoolEntry[]): void {
  const seen = new Set<string>();
  for (const p of pool) {
    if (typeof p.spec !== "string" || p.spec.length === 0)
      throw new UsageError("opponent pool entry has an empty spec");
    if (!(p.weight > 0) || !Number.isFinite(p.weight)) {
      throw new UsageError(`opponent pool weight of "${p.spec}" must be a positive number, got ${p.weight}`);
    }
    if (seen.has(p.spec))
      throw new UsageError(`opponent "${p.spec}" appears twice in the pool; merge the weights`);
    seen.add(p.spec);
  }
}

/**
 * Parses a pool written as `SPEC[@WEIGHT],SPEC[@WEIGHT],…` (weight default 1), e.g.
 * `conservative@0.3,aggressive@0.3,intermediate@0.4` or `mcts:100@2,random`.
 * Specs are checked by the caller (e.g. with `createOpponent`).
 */
export function parsePool(text: string): PoolEntry[] {
  const entries = text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (entries.length === 0) throw new UsageError(`opponent pool "${text}" is empty; write SPEC[@WEIGHT],…`);
  const pool = entries.map((e) => {
    const at = e.lastIndexOf("@");
    if (at < 0) return { spec: e, weight: 1 };
    const w = e.slice(at + 1).trim();
    const weight = Number(w);
    if (w === "" || !Number.isFinite(weight) || weight <= 0) {
      throw new UsageError(`opponent pool entry "${e}": weight "${w}" is not a positive number`);
    }
    return { spec: e.slice(0, at).trim(), weight };
  });
  validatePool(pool);
  return pool;
}

/** Group counts per opponent and seat, for logs and tests. */
export function summarizeAssignments(
  groups: readonly GroupAssignment[],
): Record<string, { first: number; second: number }> {
  const out: Record<string, { first: number; second: number }> = {};
  for (const g of groups) {
    const key = g.opponent ?? "(none)";
    out[key] ??= { first: 0, second: 0 };
    if (g.seat === "second") out[key].second++;
    else out[key].first++;
  }
  return out;
}

export interface EnvAssignment extends GroupAssignment {
  /** Environment index 0..G·n-1; envs [g·n, (g+1)·n) form group g. */
  env: number;
  /** Member index inside the group, 0..n-1. */
  member: number;
}

/** The per-environment view of group assignments: `groupSize` consecutive envs per group. */
export function expandGroups(groups: readonly GroupAssignment[], groupSize: number): EnvAssignment[] {
  if (!Number.isInteger(groupSize) || groupSize <= 0) {
    throw new UsageError(`group size must be a positive integer, got ${groupSize}`);
  }
  const out: EnvAssignment[] = [];
  for (const g of groups) {
    for (let m = 0; m < groupSize; m++) out.push({ ...g, env: g.group * groupSize + m, member: m });
  }
  return out;
}
