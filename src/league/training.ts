/**
 * The league of a training run: its snapshot pool, the ratings of the agent and every opponent
 * it met, and what an iteration plays. The trainer asks it for each iteration's opponents, tells
 * it every trial played, and lets it take a snapshot when one is due. Its whole state is plain
 * data (`LeagueState`) kept in each run checkpoint, so a resumed run goes on exactly.
 */
import { join } from "node:path";
import type { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import { createOpponent } from "../opponents/registry.js";
import type { Opponent } from "../opponents/types.js";
import type { SamplingParams } from "../policy/types.js";
import type { TrialRecord } from "../rollout/types.js";
import type { PoolEntry } from "../tasks/population.js";
import type { TaskDefinition } from "../tasks/registry.js";
import type { PromptStyle, TaskOptions } from "../tasks/types.js";
import type { LeagueConfig, RatingConfig } from "./config.js";
import type { SnapshotEvalSource } from "./eval-snapshots.js";
import { type ModelMoveStats, ModelOpponent } from "./model-opponent.js";
import { addSnapshot, isSnapshotSpec, newSnapshotEntry, type SnapshotEntry, snapshotDue } from "./pool.js";
import { outcomeOf, Ratings, type RatingsJson } from "./ratings.js";
import { iterationPool } from "./sampler.js";
import { pruneSnapshotDirs, SnapshotPolicies, type SnapshotStore } from "./snapshots.js";

/** The agent's name in the ratings. */
export const AGENT = "agent";

export interface LeagueState {
  snapshots: SnapshotEntry[];
  ratings: RatingsJson;
}

export interface TrainingLeagueOptions {
  /** null: no snapshots, ratings only (`population.rate`). */
  league: LeagueConfig | null;
  ratings: RatingConfig;
  /** The scripted opponents of `population.opponents`. */
  scripted: readonly PoolEntry[];
  runDir: string;
  game: Game<unknown, unknown>;
  task: TaskDefinition;
  /** How snapshots are prompted and sample (the run's rollout settings). */
  play: { promptStyle: PromptStyle; sampling: SamplingParams; taskOptions: Pick<TaskOptions, "knobs"> };
  /** Writes and loads snapshots; required with a league. */
  store: SnapshotStore | null;
  /** What a snapshot's meta.json says besides its iteration (game, prompt style, knobs: what `mage league` needs). */
  snapshotMeta: Record<string, unknown>;
  /** From a run checkpoint; absent for a fresh run. */
  state?: LeagueState | null;
}

/** What the trainer hands an iteration: its pool, and the opponents it builds. */
export interface IterationOpponents {
  pool: PoolEntry[];
  makeOpponent: NonNullable<TaskOptions["makeOpponent"]>;
}

export class TrainingLeague {
  private snapshots: SnapshotEntry[];
  readonly ratings: Ratings;
  private readonly policies: SnapshotPolicies | null;
  private moveStats: ModelMoveStats = { moves: 0, invalid: 0 };
  private snapshotGroups = 0;
  private groups = 0;

  constructor(private readonly o: TrainingLeagueOptions) {
    if (o.league && !o.store) throw new Error("league: snapshots need a snapshot store");
    this.snapshots = o.state?.snapshots.map((s) => ({ ...s })) ?? [];
    this.ratings = o.state ? Ratings.fromJSON(o.state.ratings) : new Ratings(o.ratings);
    this.policies = o.league && o.store ? new SnapshotPolicies(o.store, o.runDir) : null;
    this.ratings.ensure(AGENT);
    for (const p of o.scripted) this.ratings.ensure(p.spec);
  }

  get pool(): readonly SnapshotEntry[] {
    return this.snapshots;
  }

  toJSON(): LeagueState {
    return { snapshots: this.snapshots.map((s) => ({ ...s })), ratings: this.ratings.toJSON() };
  }

  /**
   * Takes the snapshot due after `done` iterations, if any: saves the weights, adds it to the
   * pool (the oldest leaving past the cap) with the agent's rating as its start. True when taken.
   */
  async maybeSnapshot(done: number): Promise<boolean> {
    const l = this.o.league;
    if (!l || !snapshotDue(done, l.every, l.atStart)) return false;
    if (this.snapshots.some((s) => s.iteration === done)) return false;
    const entry = newSnapshotEntry(done);
    await this.o.store!.save(join(this.o.runDir, entry.dir), {
      ...this.o.snapshotMeta,
      iteration: done,
      snapshot: entry.spec,
    });
    const agent = this.ratings.ensure(AGENT);
    this.ratings.ensure(entry.spec, { mu: agent.mu, sigma: agent.sigma });
    this.snapshots = addSnapshot(this.snapshots, entry, l.maxSnapshots).pool;
    return true;
  }

  /**
   * Where an evaluation finds this league's snapshots (`snapshot:latest` is the pool's newest now)
   * and how they play: as in training. null without snapshots (ratings only).
   */
  evalSource(): SnapshotEvalSource | null {
    const store = this.o.store;
    if (!this.o.league || !store) return null;
    return {
      runDir: this.o.runDir,
      pool: this.snapshots.map((s) => ({ ...s })),
      play: this.o.play,
      game: this.o.game,
      task: this.o.task,
      load: (dir, name) => store.load(dir, name),
    };
  }

  /** Removes snapshot folders no kept checkpoint and not the pool names (after a checkpoint is saved). */
  pruneFiles(): Promise<string[]> {
    return pruneSnapshotDirs(this.o.runDir, this.snapshots);
  }

  /**
   * The opponents of iteration `iteration` over `groups` rollout groups: the pool from the
   * league's sampler (`rng`: the iteration's own), its snapshots loaded. Without a league, the
   * scripted pool as configured.
   */
  async forIteration(iteration: number, groups: number, rng: Rng): Promise<IterationOpponents> {
    this.moveStats = { moves: 0, invalid: 0 };
    const l = this.o.league;
    const pool = l
      ? iterationPool({
          groups,
          scripted: this.o.scripted,
          snapshots: this.snapshots,
          league: l,
          iteration,
          winProbability: (spec) => this.ratings.winProbability(AGENT, spec),
          rng,
        })
      : this.o.scripted.map((p) => ({ ...p }));
    if (this.policies) {
      const playing = new Set(pool.map((p) => p.spec));
      await this.policies.keepOnly(this.snapshots.filter((s) => playing.has(s.spec)));
    }
    this.groups = groups;
    this.snapshotGroups = pool.filter((p) => isSnapshotSpec(p.spec)).reduce((a, p) => a + p.weight, 0);
    return { pool, makeOpponent: (spec, ctx) => this.makeOpponent(spec, ctx) };
  }

  /** A scripted opponent from the registry, or a snapshot of this iteration's pool as a model opponent. */
  makeOpponent(spec: string, ctx: { rng: Rng; replay: boolean }): Opponent<unknown, unknown> {
    if (!isSnapshotSpec(spec)) return createOpponent(this.o.task.name, spec, ctx);
    if (!this.policies) throw new Error(`opponent ${spec}: this run keeps no snapshots`);
    const player = { policy: this.policies.get(spec), ...this.o.play };
    return new ModelOpponent(spec, this.o.game, this.o.task, player, ctx.rng, ctx.replay, this.moveStats);
  }

  /**
   * Rates every game of the trials: each attempt of a trial not aborted is a game of the agent
   * against the trial's opponent, won, drawn or lost by the sign of its score; in trial order,
   * attempts in order.
   */
  recordTrials(trials: readonly TrialRecord[]): void {
    const ordered = [...trials].sort((a, b) => a.trialId - b.trialId);
    for (const t of ordered) {
      if (t.aborted || t.opponent === "none") continue;
      for (const a of t.attempts) this.ratings.record(AGENT, t.opponent, outcomeOf(a.score));
    }
  }

  /**
   * The iteration's league numbers: the agent's rating (mu, sigma), each scripted and live
   * snapshot opponent's mean rating and the agent's win probability against it, the pool's size
   * and the groups that played snapshots.
   */
  metrics(): Record<string, number> {
    const m: Record<string, number> = {};
    const agent = this.ratings.ensure(AGENT);
    m["rating/agent"] = agent.mu;
    m["rating/agent_sigma"] = agent.sigma;
    const rated = [...this.o.scripted.map((p) => p.spec), ...this.snapshots.map((s) => s.spec)];
    for (const spec of rated) {
      const r = this.ratings.get(spec);
      if (!r) continue;
      m[`rating/${spec}`] = r.mu;
      m[`win_prob/${spec}`] = this.ratings.winProbability(AGENT, spec);
    }
    if (this.o.league) {
      m["league/snapshots"] = this.snapshots.length;
      m["league/newest"] = this.snapshots.at(-1)?.iteration ?? -1;
      m["league/snapshot_share"] = this.groups > 0 ? this.snapshotGroups / this.groups : 0;
      if (this.moveStats.moves > 0)
        m["league/snapshot_invalid"] = this.moveStats.invalid / this.moveStats.moves;
    }
    return m;
  }
}
