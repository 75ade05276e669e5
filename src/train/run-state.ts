import { RoleBaselines } from "../algo/advantages.js";
import type { LeagueState } from "../league/training.js";
import type { OptimizerState } from "../model/learner.js";
import type { MageConfig } from "./config.js";
import type { RunMeta } from "./run-meta.js";
import { type EvalSnapshot, type RunSummary, SUMMARY_FORMAT } from "./summary.js";
import { gameName } from "./task-for-config.js";

/** What a run checkpoint holds besides the learner's weights and optimizer (`training-state.json`). */
export interface TrainingJson {
  iteration: number;
  roleBaselines: ReturnType<RoleBaselines["toJSON"]> | null;
  history: Record<string, number>[];
  periodicEval: EvalSnapshot[];
  wallSeconds: number;
  pretrainSeconds: number;
  bestIteration: number | null;
  bestScore: number | null;
  /** The embedded learner's optimizer state (the torch worker keeps its own in learner/optimizer.pt). */
  optimizerMeta?: OptimizerState["meta"];
  /** The league's snapshot pool and ratings (runs with `population.league` or `population.rate`). */
  league?: LeagueState;
}

/** The number a run tries to maximise at evaluation: mean final score over cells. */
export function evalScore(snap: EvalSnapshot): number {
  return snap.cells.reduce((s, c) => s + c.metrics.final.mean, 0) / Math.max(1, snap.cells.length);
}

function freshRoleBaselines(config: MageConfig): RoleBaselines | null {
  const decay = config.advantage.roleBaselineDecay;
  return decay !== null ? new RoleBaselines(decay) : null;
}

/** What the summary names besides the run's progress. */
export interface RunIdentity {
  config: MageConfig;
  meta: RunMeta;
  baseModel: RunSummary["baseModel"];
}

/**
 * A run's progress so far: per-iteration metrics, periodic evaluations, the best of them, the
 * role baselines of the advantage, and its wall clock (the time of earlier processes included, so
 * a resumed run reports its whole time).
 */
export class RunProgress {
  readonly history: Record<string, number>[];
  readonly periodicEval: EvalSnapshot[];
  best: { iteration: number | null; score: number | null };
  readonly roleBaselines: RoleBaselines | null;
  readonly pretrainSeconds: number;
  /** The league's state after the iterations so far (kept in every checkpoint); null without one. */
  league: LeagueState | null = null;
  /** Set when `train.maxMinutes` ends training before the planned iterations (this process's). */
  stoppedBy: "maxMinutes" | null = null;
  private secondsBefore: number;
  private readonly startedAt = performance.now();

  private constructor(init: {
    history: Record<string, number>[];
    periodicEval: EvalSnapshot[];
    best: { iteration: number | null; score: number | null };
    roleBaselines: RoleBaselines | null;
    pretrainSeconds: number;
    secondsBefore: number;
  }) {
    this.history = init.history;
    this.periodicEval = init.periodicEval;
    this.best = init.best;
    this.roleBaselines = init.roleBaselines;
    this.pretrainSeconds = init.pretrainSeconds;
    this.secondsBefore = init.secondsBefore;
  }

  static start(config: MageConfig, pretrainSeconds: number): RunProgress {
    return new RunProgress({
      history: [],
      periodicEval: [],
      best: { iteration: null, score: null },
      roleBaselines: freshRoleBaselines(config),
      pretrainSeconds,
      secondsBefore: 0,
    });
  }

  static restore(config: MageConfig, state: TrainingJson): RunProgress {
    const progress = new RunProgress({
      history: state.history,
      periodicEval: state.periodicEval,
      best: { iteration: state.bestIteration, score: state.bestScore },
      roleBaselines: state.roleBaselines
        ? RoleBaselines.fromJSON(state.roleBaselines)
        : freshRoleBaselines(config),
      pretrainSeconds: state.pretrainSeconds,
      secondsBefore: state.wallSeconds,
    });
    progress.league = state.league ?? null;
    return progress;
  }

  /** Seconds of this run so far, over every process that worked on it. */
  wall(): number {
    return this.secondsBefore + (performance.now() - this.startedAt) / 1000;
  }

  /** Time spent by an earlier process on work this one keeps (a finished evaluation phase). */
  addKeptSeconds(seconds: number): void {
    this.secondsBefore += seconds;
  }

  /** Records the evaluation before training (not ranked: the untrained model is never "best"). */
  addStartEval(snap: EvalSnapshot): void {
    this.periodicEval.push(snap);
  }

  /** Records a periodic evaluation; true when it is the best so far. */
  addPeriodicEval(snap: EvalSnapshot): boolean {
    this.periodicEval.push(snap);
    const score = evalScore(snap);
    if (this.best.score !== null && score <= this.best.score) return false;
    this.best = { iteration: snap.iteration, score };
    return true;
  }

  trainingJson(iteration: number): TrainingJson {
    return {
      iteration,
      roleBaselines: this.roleBaselines?.toJSON() ?? null,
      history: this.history,
      periodicEval: this.periodicEval,
      wallSeconds: this.wall(),
      pretrainSeconds: this.pretrainSeconds,
      bestIteration: this.best.iteration,
      bestScore: this.best.score,
      ...(this.league ? { league: this.league } : {}),
    };
  }

  summary(id: RunIdentity, finalEval: EvalSnapshot | null, done: number): RunSummary {
    return {
      format: SUMMARY_FORMAT,
      name: id.config.name,
      game: gameName(id.config),
      seed: id.config.seed,
      config: id.config,
      meta: id.meta,
      wallSeconds: this.wall(),
      pretrainSeconds: this.pretrainSeconds,
      baseModel: id.baseModel,
      iterationsDone: done,
      complete: done >= id.config.train.iterations,
      stoppedBy: this.stoppedBy,
      history: this.history,
      periodicEval: this.periodicEval,
      finalEval,
    };
  }
}
