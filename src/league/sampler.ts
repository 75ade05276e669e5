/**
 * Which opponents an iteration's rollout groups play when a league is on: `share` of the groups
 * play snapshots, each group's snapshot drawn by the sampling mode; the rest play the scripted
 * opponents in proportion to their weights. The result is a population pool whose weights are
 * group counts, so the population sampler (`tasks/population.ts`) hands out exactly those counts.
 *
 * Every draw comes from the generator given (keyed by seed and iteration by the caller), so an
 * iteration's picks depend on the seed, the iteration, the pool and the ratings alone.
 */
import type { Rng } from "../core/rng.js";
import { allocateByWeight, type PoolEntry } from "../tasks/population.js";
import type { LeagueConfig } from "./config.js";
import type { SnapshotEntry } from "./pool.js";

export interface SnapshotChoiceContext {
  /** The iteration being played (0-based); a snapshot's age is this minus its iteration. */
  iteration: number;
  league: Pick<LeagueConfig, "sampling" | "lag" | "priority">;
  /** P(agent beats the snapshot) by the ratings (used by `rating`). */
  winProbability: (spec: string) => number;
}

/** The probability weights of each pool snapshot under the league's sampling mode (not all zero). */
export function snapshotWeights(pool: readonly SnapshotEntry[], ctx: SnapshotChoiceContext): number[] {
  if (pool.length === 0) return [];
  switch (ctx.league.sampling) {
    case "latest":
      return pool.map((_, i) => (i === pool.length - 1 ? 1 : 0));
    case "uniform":
      return pool.map(() => 1);
    case "lagged":
      return laggedWeights(pool, ctx.iteration, ctx.league.lag);
    case "rating": {
      const w = pool.map((s) => (1 - ctx.winProbability(s.spec)) ** ctx.league.priority);
      return w.some((x) => x > 0) ? w : pool.map(() => 1);
    }
  }
}

/**
 * `lagged`: uniform over the snapshots `lag.min`..`lag.max` iterations old. When none is that
 * old, the one nearest the window (too young: the oldest; too old: the newest).
 */
function laggedWeights(
  pool: readonly SnapshotEntry[],
  iteration: number,
  lag: { min: number; max: number },
): number[] {
  const ages = pool.map((s) => iteration - s.iteration);
  const inWindow = ages.map((a) => a >= lag.min && a <= lag.max);
  if (inWindow.some((x) => x)) return inWindow.map((x) => (x ? 1 : 0));
  const distance = ages.map((a) => (a < lag.min ? lag.min - a : a - lag.max));
  const best = Math.min(...distance);
  // Ties (one too young, one too old at the same distance): the newer one.
  const pick = distance.lastIndexOf(best);
  return pool.map((_, i) => (i === pick ? 1 : 0));
}

/** How many of `groups` groups play each snapshot: one independent draw per group. */
export function drawSnapshotCounts(weights: readonly number[], groups: number, rng: Rng): number[] {
  const counts = weights.map(() => 0);
  for (let g = 0; g < groups; g++) counts[rng.weighted(weights)] += 1;
  return counts;
}

/**
 * Groups playing snapshots: `share` of `groups` by largest remainder; all of them when there are
 * no scripted opponents, none while the pool is empty.
 */
export function snapshotGroupCount(
  groups: number,
  share: number,
  hasScripted: boolean,
  hasSnapshots: boolean,
): number {
  if (!hasSnapshots) return 0;
  if (!hasScripted) return groups;
  return allocateByWeight([1 - share, share], groups)[1];
}

export interface IterationPoolInput extends SnapshotChoiceContext {
  groups: number;
  scripted: readonly PoolEntry[];
  snapshots: readonly SnapshotEntry[];
  league: LeagueConfig;
  rng: Rng;
}

/** The iteration's pool: scripted entries then snapshots, each weighted by its number of groups (entries with none left out). */
export function iterationPool(input: IterationPoolInput): PoolEntry[] {
  const { groups, scripted, snapshots, league } = input;
  const toSnapshots = snapshotGroupCount(groups, league.share, scripted.length > 0, snapshots.length > 0);
  if (scripted.length === 0 && toSnapshots === 0)
    throw new Error("league: no scripted opponents and no snapshot yet; nothing to play against");
  const scriptedCounts =
    scripted.length > 0
      ? allocateByWeight(
          scripted.map((p) => p.weight),
          groups - toSnapshots,
        )
      : [];
  const snapCounts = drawSnapshotCounts(snapshotWeights(snapshots, input), toSnapshots, input.rng);
  const out: PoolEntry[] = [];
  scripted.forEach((p, i) => {
    if (scriptedCounts[i] > 0) out.push({ spec: p.spec, weight: scriptedCounts[i] });
  });
  snapshots.forEach((s, i) => {
    if (snapCounts[i] > 0) out.push({ spec: s.spec, weight: snapCounts[i] });
  });
  return out;
}
