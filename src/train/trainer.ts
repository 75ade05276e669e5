import { existsSync, writeFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { configDifferences, isRuntimeOnlyField } from "../core/config-diff.js";
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import type { TrainingLeague } from "../league/training.js";
import type { VllmServerOptions } from "../learner/torch/vllm-server.js";
import type { TorchWorkerOptions } from "../learner/torch/worker.js";
import { latestRunCheckpoint, loadCheckpoint } from "../model/checkpoint.js";
import { selectKernels } from "../model/kernels/select.js";
import type { TaskDefinition } from "../tasks/registry.js";
import { embeddedBackend, type TrainBackend, torchBackend } from "./backend.js";
import { checkBaseKnobs } from "./base-knobs.js";
import { configToYaml, type MageConfig, readConfigFile } from "./config.js";
import { finalEvaluation } from "./final-eval.js";
import { runIteration } from "./iteration.js";
import { leagueForRun } from "./league-setup.js";
import { RunLogger } from "./logging/run-logger.js";
import { ProgressBar } from "./progress.js";
import { type RunEval, runEvaluator } from "./run-eval.js";
import { appendEval, appendIteration, saveRunCheckpoint, truncateRunLogs } from "./run-files.js";
import { collectRunMeta, type RunMeta } from "./run-meta.js";
import { evalScore, type RunIdentity, RunProgress, type TrainingJson } from "./run-state.js";
import { type RunSummary, writeSummary } from "./summary.js";
import { evalTaskForConfig, harderTaskForConfig, taskForConfig } from "./task-for-config.js";

/**
 * `mage train`: the run loop. A run directory holds the resolved config, metrics.jsonl (one
 * line per iteration), sampled transcripts, periodic evaluations, checkpoints (atomic, the last
 * few and the best kept) and summary.json. Every iteration is keyed by (seed, iteration), so a
 * run resumed from its last checkpoint ends exactly where an uninterrupted run ends.
 */
export interface TrainOptions {
  config: MageConfig;
  outDir: string;
  resume: boolean;
  /** Returns a pretrained checkpoint directory when the config names none. */
  pretrain?: (config: MageConfig, dir: string, log: (m: string) => void) => Promise<string>;
  log?: (message: string) => void;
  /** Checked between iterations; when true the run checkpoints and stops. */
  shouldStop?: () => boolean;
  /** For tests: stop (without checkpointing) after this many iterations of this process. */
  crashAfterIterations?: number;
  progress?: boolean;
  /** For tests: options of the PyTorch worker (a fake command, extra environment), the rollout server's fetch, the managed vLLM server's. */
  torch?: { worker?: Partial<TorchWorkerOptions>; fetch?: typeof fetch; vllm?: Partial<VllmServerOptions> };
  /** For tests: the environment of the W&B sidecar (default: this process's). */
  loggingEnv?: NodeJS.ProcessEnv;
  /** For tests: called once the learner and policy are open. */
  onBackend?: (backend: TrainBackend) => void;
}

export interface TrainResult {
  outDir: string;
  summary: RunSummary;
  stopped: boolean;
}

/**
 * What a resumed run may change: how long it trains, how often it checkpoints, how it is
 * evaluated, which kernels compute it, where a vLLM server runs and how weights reach it and
 * how many requests it gets at once (the same policy, sampled per request's seed), how many worker processes
 * (FSDP ranks) train it, since its checkpoints hold the full state keyed by parameter name, and
 * how its processes run (`isRuntimeOnlyField`). Anything else would splice two different runs
 * into one.
 */
const RESUMABLE_CHANGES =
  /^(train\.iterations|train\.maxMinutes|train\.checkpointEvery|eval(\..*)?|model\.kernels|model\.torch\.rolloutUrl|model\.torch\.processes|model\.torch\.vllm\.(push|concurrency))$/;

function refuseChangedConfig(outDir: string, config: MageConfig): void {
  const file = join(outDir, "config.yaml");
  if (!existsSync(file)) return;
  let stored: unknown;
  try {
    stored = readConfigFile(file);
  } catch {
    return;
  }
  const diff = configDifferences(
    stored,
    JSON.parse(JSON.stringify(config)),
    (p) => RESUMABLE_CHANGES.test(p) || isRuntimeOnlyField(p),
  );
  if (diff.length === 0) return;
  throw new UsageError(
    `run directory ${outDir} was started with another config, so --resume would mix two runs:\n  ` +
      `${diff.join("\n  ")}\n` +
      "Restore those settings to continue it, or choose a new --out. (A resumed run may change " +
      "train.iterations, train.maxMinutes, train.checkpointEvery, eval, logging, model.kernels, model.torch.python, " +
      "model.torch.timeoutSeconds, model.torch.prefixCacheMB, model.torch.rolloutUrl, model.torch.processes " +
      "and model.torch.vllm's python, port, startTimeoutS, push and concurrency.)",
  );
}

export async function train(opts: TrainOptions): Promise<TrainResult> {
  const { config, outDir } = opts;
  const log = opts.log ?? ((m: string) => console.error(m));
  const task = await taskForConfig(config);
  const maxTurns = config.task.maxTurns ?? task.maxTurns;
  await mkdir(outDir, { recursive: true });

  const resumeFrom = await latestRunCheckpoint(outDir);
  if (resumeFrom && !opts.resume) {
    throw new UsageError(
      `run directory ${outDir} already has checkpoints; pass --resume to continue it or choose a new --out`,
    );
  }
  if (opts.resume && !resumeFrom) log(`no checkpoint in ${outDir} yet: starting from the beginning`);

  if (resumeFrom && opts.resume) refuseChangedConfig(outDir, config);

  const torch = config.model.backend === "torch";
  checkBaseKnobs(config);
  const kernels = torch ? null : await selectKernels(config.model.kernels);
  const meta: RunMeta = collectRunMeta(kernels?.name ?? "torch");
  writeFileSync(join(outDir, "config.yaml"), configToYaml(config));

  // The base model: a Hugging Face directory (torch); or given, already pretrained in this run
  // directory, or pretrained now (embedded).
  let pretrainSeconds = 0;
  let backend: TrainBackend;
  if (torch) {
    backend = await torchBackend(config, outDir, opts.torch ?? {});
    if (backend.describe.precision)
      log(`torch worker on ${config.model.torch.device}: ${backend.describe.precision}`);
    const server = backend.rolloutServer;
    if (server)
      log(
        `vLLM server for the rollouts at ${server.url} (process group ${server.pid}; log ${server.logFile})`,
      );
  } else {
    let baseDir = config.model.checkpoint;
    if (!baseDir) {
      const dir = join(outDir, "pretrained");
      if (!existsSync(join(dir, "config.json"))) {
        if (!opts.pretrain)
          throw new UsageError("model.checkpoint is not set and this command cannot pretrain");
        const t0 = performance.now();
        await opts.pretrain(config, dir, log);
        pretrainSeconds = (performance.now() - t0) / 1000;
      }
      baseDir = dir;
    }
    backend = embeddedBackend(config, await loadCheckpoint(baseDir), kernels!);
  }
  const logging: { logger: RunLogger | null } = { logger: null };
  try {
    return await trainWith(opts, {
      task,
      maxTurns,
      resumeFrom,
      meta,
      pretrainSeconds,
      backend,
      log,
      logging,
    });
  } finally {
    await logging.logger?.close();
    await backend.close();
  }
}

interface RunContext {
  task: TaskDefinition;
  maxTurns: number;
  resumeFrom: string | null;
  meta: RunMeta;
  pretrainSeconds: number;
  backend: TrainBackend;
  log: (m: string) => void;
  /** Where the run's scalars also go (TensorBoard, W&B); opened here, closed by the caller. */
  logging: { logger: RunLogger | null };
}

async function trainWith(opts: TrainOptions, ctx: RunContext): Promise<TrainResult> {
  const { config, outDir } = opts;
  const { task, maxTurns, backend, log } = ctx;
  opts.onBackend?.(backend);
  const { progress, startIteration } = await startOrRestore(opts, ctx);
  // Lines written after the checkpoint by the interrupted process are rewritten by this one.
  truncateRunLogs(outDir, startIteration);
  // TensorBoard and W&B get the checkpoint's history again; whatever the interrupted process
  // logged after it is replaced (TensorBoard) or skipped (W&B), so each step is logged once.
  const logger = RunLogger.open({
    config,
    outDir,
    resumed: ctx.resumeFrom !== null,
    history: progress.history,
    periodicEval: progress.periodicEval,
    wallBefore: progress.wall(),
    log,
    ...(opts.loggingEnv ? { env: opts.loggingEnv } : {}),
  });
  ctx.logging.logger = logger;
  // The league: restored with the checkpoint's pool and ratings, or fresh (its first snapshot now).
  const league = await leagueForRun(config, task, backend, outDir, progress.league);
  if (league && startIteration === 0) await league.maybeSnapshot(0);
  progress.league = league?.toJSON() ?? null;
  // A served rollout model gets the weights the run (re)starts from.
  await backend.syncPolicy(startIteration);
  const evalTask = await evalTaskForConfig(config, task);
  const runEval = runEvaluator({
    config,
    task: evalTask,
    harderTask: await harderTaskForConfig(config),
    maxTurns,
    backend,
    progress: opts.progress !== false,
    snapshots: () => league?.evalSource() ?? null,
    log,
  });
  const identity: RunIdentity = { config, meta: ctx.meta, baseModel: backend.baseModel };

  if (startIteration === 0 && config.eval.atStart) {
    const snap = await runEval(0, config.eval.trials);
    progress.addStartEval(snap);
    appendEval(outDir, snap);
    logger.evaluation(snap);
    log(`eval before training: mean final score ${evalScore(snap).toFixed(3)}`);
  }
  const loop = await trainIterations(opts, ctx, {
    progress,
    startIteration,
    runEval,
    identity,
    logger,
    league,
  });
  if (loop.crashed) return { outDir, summary: loop.crashed, stopped: true };
  if (loop.stopped) {
    const done = loop.done;
    await saveRunCheckpoint(outDir, config, backend, progress, done);
    const summary = progress.summary(identity, null, done);
    await writeSummary(join(outDir, "summary.json"), summary);
    log(`stopped at iteration ${done}; checkpoint saved — continue with --resume`);
    return { outDir, summary, stopped: true };
  }
  const final = await finalEvaluation({
    config,
    outDir,
    total: loop.done,
    runEval,
    progress,
    identity,
    logger,
    log,
    ...(opts.shouldStop ? { shouldStop: opts.shouldStop } : {}),
  });
  return { outDir, ...final };
}

/** A fresh run's progress, or the progress and learner state of the checkpoint it resumes from. */
async function startOrRestore(
  opts: TrainOptions,
  ctx: RunContext,
): Promise<{ progress: RunProgress; startIteration: number }> {
  if (!ctx.resumeFrom)
    return { progress: RunProgress.start(opts.config, ctx.pretrainSeconds), startIteration: 0 };
  const state = (await ctx.backend.learner.restore(ctx.resumeFrom)) as TrainingJson | null;
  if (!state) throw new Error(`checkpoint ${ctx.resumeFrom} has no training state to resume from`);
  ctx.log(`resuming ${opts.outDir} from ${ctx.resumeFrom} (iteration ${state.iteration})`);
  return { progress: RunProgress.restore(opts.config, state), startIteration: state.iteration };
}

/**
 * Iterations from `startIteration` to the config's total: each one's rollouts and update, its
 * records, the periodic evaluation and checkpoint when due. Ends early when asked to stop (between
 * iterations) or, for tests, to crash.
 */
async function trainIterations(
  opts: TrainOptions,
  ctx: RunContext,
  run: {
    progress: RunProgress;
    startIteration: number;
    runEval: RunEval;
    identity: RunIdentity;
    logger: RunLogger;
    league: TrainingLeague | null;
  },
): Promise<{ done: number; stopped: boolean; crashed: RunSummary | null }> {
  const { config, outDir } = opts;
  const { backend } = ctx;
  const { progress, startIteration, logger, league } = run;
  const total = config.train.iterations;
  const bar = opts.progress === false ? null : new ProgressBar({ label: `train ${config.name}`, total });
  let ranHere = 0;
  if (startIteration > 0 && startIteration < total && timeBoxReached(config, progress)) {
    // Resumed after the box ran out (say, stopped during the final evaluation): go straight to it.
    // A larger box, or none, lets the run train on to `total` instead.
    bar?.finish();
    progress.stoppedBy = "maxMinutes";
    ctx.log(timeBoxMessage(config, startIteration, total));
    return { done: startIteration, stopped: false, crashed: null };
  }
  for (let it = startIteration; it < total; it++) {
    if (opts.shouldStop?.()) {
      bar?.finish();
      return { done: it, stopped: true, crashed: null };
    }
    const opponents = league
      ? await league.forIteration(
          it,
          config.rollout.tasksPerIteration,
          Rng.seeded(config.seed).derive("iteration", it, "league"),
        )
      : undefined;
    const { trials, metrics } = await runIteration(
      {
        config,
        task: ctx.task,
        maxTurns: ctx.maxTurns,
        learner: backend.learner,
        policy: backend.policy,
        recomputeOldLogp: backend.recomputeOldLogp,
        roleBaselines: progress.roleBaselines,
        ...(opponents ? { opponents } : {}),
        ...(bar ? { onProgress: (phase: string) => bar.update(it, { iteration: it + 1, phase }) } : {}),
      },
      it,
    );
    if (metrics.optimizer_steps > 0) await backend.syncPolicy(it + 1);
    if (league) {
      league.recordTrials(trials);
      Object.assign(metrics, league.metrics());
    }
    metrics.wall_s = progress.wall();
    progress.history.push(metrics);
    appendIteration(outDir, it, metrics, trials, config.train.transcriptsPerIteration);
    logger.iteration(metrics);
    const done = it + 1;
    if (league) {
      await league.maybeSnapshot(done);
      progress.league = league.toJSON();
    }
    const newBest = await periodicEvaluation(config, outDir, run, done, bar ? (m) => bar.log(m) : ctx.log);
    bar?.update(done, {
      reward: metrics.env_reward,
      [`succ@${config.task.attempts}`]: metrics[`success@${config.task.attempts}`] ?? 0,
      valid: metrics.valid_action,
      ...(metrics.loss !== undefined ? { loss: metrics.loss } : {}),
    });
    ranHere += 1;
    if (opts.crashAfterIterations !== undefined && ranHere >= opts.crashAfterIterations)
      return { done, stopped: true, crashed: progress.summary(run.identity, null, done) };
    const timeUp = done < total && timeBoxReached(config, progress);
    if (timeUp) progress.stoppedBy = "maxMinutes";
    if (done % config.train.checkpointEvery === 0 || done === total || newBest || timeUp) {
      await saveRunCheckpoint(outDir, config, backend, progress, done);
      await league?.pruneFiles();
    }
    await writeSummary(join(outDir, "summary.json"), progress.summary(run.identity, null, done));
    if (timeUp) {
      bar?.finish();
      ctx.log(timeBoxMessage(config, done, total));
      return { done, stopped: false, crashed: null };
    }
  }
  bar?.finish();
  return { done: total, stopped: false, crashed: null };
}

function timeBoxMessage(config: MageConfig, done: number, total: number): string {
  return (
    `train.maxMinutes (${config.train.maxMinutes}) reached after ${done} of ${total} iterations: ` +
    "the run is incomplete (summary.json: complete false); --resume with a larger box, or none, trains the rest"
  );
}

/** Whether `train.maxMinutes` of training wall time (resumed runs included) have passed. */
function timeBoxReached(config: MageConfig, progress: RunProgress): boolean {
  const box = config.train.maxMinutes;
  return box !== null && progress.wall() >= box * 60;
}

/** The evaluation every `eval.every` iterations (none after the last: the final one follows); true when it is the best so far. */
async function periodicEvaluation(
  config: MageConfig,
  outDir: string,
  run: { progress: RunProgress; runEval: RunEval; logger: RunLogger },
  done: number,
  log: (m: string) => void,
): Promise<boolean> {
  const every = config.eval.every;
  if (every <= 0 || done % every !== 0 || done >= config.train.iterations) return false;
  const snap = await run.runEval(done, config.eval.trials);
  const newBest = run.progress.addPeriodicEval(snap);
  appendEval(outDir, snap);
  run.logger.evaluation(snap);
  log(`eval @${done}: mean final score ${evalScore(snap).toFixed(3)}`);
  return newBest;
}
