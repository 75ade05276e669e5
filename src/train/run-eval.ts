import { UsageError } from "../core/errors.js";
import { type EvalCell, evaluate, HARDER_SEED_RANGE } from "../evaluate/evaluate.js";
import { EvalProgressBar } from "../evaluate/progress.js";
import { type SnapshotEvalSource, snapshotCells, withResolvedSnapshot } from "../league/eval-snapshots.js";
import type { ContextOverflow } from "../rollout/runner.js";
import type { TrialRecord } from "../rollout/types.js";
import type { TaskDefinition } from "../tasks/registry.js";
import type { TrainBackend } from "./backend.js";
import { type InstanceMode, type MageConfig, taskKnobOptions } from "./config.js";
import type { EvalSnapshot } from "./summary.js";

/** How one evaluation of a run differs from its periodic one. */
export interface RunEvalOptions {
  /** Every finished trial, with its index in its cell. */
  onTrial?: (trial: TrialRecord, index: number) => void;
  /** `every`: play each of the served task's instances once (`eval.env.instances`); default drawn. */
  instances?: InstanceMode;
  /** Test-time scaling: more attempts, on its own cells. */
  scaling?: { attempts: number; cells?: EvalCell[]; contextOverflow: ContextOverflow };
  shouldStop?: () => boolean;
  /** The harder held-out set: its knobs and seeds. */
  harder?: NonNullable<MageConfig["eval"]["harder"]>;
  /** No memory between attempts (`eval.independent`): each attempt sees only itself. */
  independent?: boolean;
}

export type RunEval = (iteration: number, trials: number, opts?: RunEvalOptions) => Promise<EvalSnapshot>;

/** The cells a run is evaluated on: the config's, or each training opponent in both seats. */
export function defaultEvalCells(config: MageConfig, task: TaskDefinition): EvalCell[] {
  if (config.eval.cells.length > 0) return config.eval.cells;
  if (!task.twoPlayer) return [{ opponent: null, seat: null, unseen: false }];
  return config.population.opponents.flatMap((o) => [
    { opponent: o.spec, seat: "first" as const, unseen: false },
    { opponent: o.spec, seat: "second" as const, unseen: false },
  ]);
}

/** Evaluates the run's current policy with its config's `eval` settings. */
export function runEvaluator(ctx: {
  config: MageConfig;
  task: TaskDefinition;
  maxTurns: number;
  backend: TrainBackend;
  progress: boolean;
  /** A served environment's harder set (`eval.harder.env`); the puzzles' is `task` with knobs. */
  harderTask?: TaskDefinition | null;
  /**
   * The run's league snapshots as they stand when an evaluation starts (cells naming
   * `snapshot:latest` or `snapshot:N`); absent or null: the run keeps none.
   */
  snapshots?: () => SnapshotEvalSource | null;
  /** Told of snapshot cells an evaluation skips (their snapshot not taken yet). */
  log?: (m: string) => void;
}): RunEval {
  const { config, task, maxTurns, backend } = ctx;
  const cells = defaultEvalCells(config, task);
  const evalAttempts = config.eval.attempts ?? config.task.attempts;
  const reflection = config.eval.reflection ?? config.task.reflection;
  return async (iteration, trials, opts = {}) => {
    const { scaling, harder, shouldStop, onTrial, independent } = opts;
    const attempts = scaling?.attempts ?? harder?.attempts ?? evalAttempts;
    const played = (harder && ctx.harderTask) || task;
    const instanceSeeds = opts.instances === "every" ? await everyInstance(played) : undefined;
    await backend.learner.forgetCaches?.();
    // A real model's evaluation takes minutes: show trials and answers as they come.
    const snap = await snapshotCells(scaling?.cells ?? cells, ctx.snapshots?.() ?? null);
    if (snap.skipped.length > 0)
      ctx.log?.(
        `eval @${iteration}: skipped ${snap.skipped.map((c) => `${c.opponent} (agent ${c.seat})`).join(", ")}: no such snapshot yet`,
      );
    const bar = ctx.progress ? new EvalProgressBar({ label: `eval @${iteration}` }) : null;
    const res = await evaluate(backend.evalPolicy, {
      task: played,
      cells: snap.cells,
      ...(snap.makeOpponent ? { makeOpponent: snap.makeOpponent } : {}),
      trials,
      attempts,
      reflection: independent ? "none" : reflection,
      promptStyle: config.task.promptStyle,
      maxTurns,
      contextOverflow: scaling?.contextOverflow ?? config.task.contextOverflow,
      sampling: { ...config.eval.sampling, maxTokens: config.rollout.maxResponseTokens, stop: [] },
      seed: config.seed,
      taskOptions: taskKnobOptions(config.game, config.task, harder ?? {}),
      ...(harder ? { seedRange: HARDER_SEED_RANGE } : {}),
      ...(instanceSeeds ? { instanceSeeds } : {}),
      ...(shouldStop ? { shouldStop } : {}),
      ...(onTrial ? { onTrial: (t: TrialRecord, _cell: EvalCell, i: number) => onTrial(t, i) } : {}),
      ...(bar ? { onProgress: bar.update } : {}),
    }).finally(() => bar?.finish());
    return {
      iteration,
      attempts,
      trialsPerCell: res.trialsPerCell,
      ...(instanceSeeds ? { instances: "every" as const } : {}),
      cells: res.cells.map((c) => withResolvedSnapshot(c, snap.resolved)),
    } satisfies EvalSnapshot;
  };
}

/** Every instance of a served task, each once (a UsageError for a task that cannot list them). */
export async function everyInstance(task: TaskDefinition): Promise<number[]> {
  if (!task.instanceSeeds)
    throw new UsageError(
      `instances: every plays each instance of a served environment once; ${task.name} is not served (game: remote)`,
    );
  return task.instanceSeeds();
}
