import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { RoleBaselines } from "../algo/advantages.js";
import { writeFileAtomic } from "../core/atomic-write.js";
import { configDifferences, isRuntimeOnlyField } from "../core/config-diff.js";
import { UsageError } from "../core/errors.js";
import {
  type EvalCell,
  evaluate,
  formatBeforeAfter,
  formatCells,
  HARDER_SEED_RANGE,
} from "../evaluate/evaluate.js";
import { EvalProgressBar } from "../evaluate/progress.js";
import type { TorchWorkerOptions } from "../learner/torch/worker.js";
import { latestRunCheckpoint, loadCheckpoint, RUN_CHECKPOINTS_DIR } from "../model/checkpoint.js";
import { selectKernels } from "../model/kernels/select.js";
import type { OptimizerState } from "../model/learner.js";
import { type ContextOverflow, isRolloutStop } from "../rollout/runner.js";
import type { TrialRecord } from "../rollout/types.js";
import type { TaskDefinition } from "../tasks/registry.js";
import { embeddedBackend, type TrainBackend, torchBackend } from "./backend.js";
import { checkBaseKnobs } from "./base-knobs.js";
import { configToYaml, type MageConfig, readConfigFile, taskKnobOptions } from "./config.js";
import { type FinalEvalPhase, FinalEvalPhases } from "./final-eval-phases.js";
import { runIteration } from "./iteration.js";
import { RunLogger } from "./logging/run-logger.js";
import { ProgressBar } from "./progress.js";
import { collectRunMeta, type RunMeta } from "./run-meta.js";
import { type EvalSnapshot, type RunSummary, SUMMARY_FORMAT, writeSummary } from "./summary.js";
import { gameName, taskForConfig } from "./task-for-config.js";

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
  /** For tests: options of the PyTorch worker (a fake command, extra environment) and the rollout server's fetch. */
  torch?: { worker?: Partial<TorchWorkerOptions>; fetch?: typeof fetch };
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

interface TrainingJson {
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
}

function ckptName(iteration: number): string {
  return `iter-${String(iteration).padStart(6, "0")}`;
}

function defaultEvalCells(config: MageConfig, task: TaskDefinition): EvalCell[] {
  if (config.eval.cells.length > 0) return config.eval.cells;
  if (!task.twoPlayer) return [{ opponent: null, seat: null, unseen: false }];
  return config.population.opponents.flatMap((o) => [
    { opponent: o.spec, seat: "first" as const, unseen: false },
    { opponent: o.spec, seat: "second" as const, unseen: false },
  ]);
}

/** The number a run tries to maximise at evaluation: mean final score over cells. */
function evalScore(snap: EvalSnapshot): number {
  return snap.cells.reduce((s, c) => s + c.metrics.final.mean, 0) / Math.max(1, snap.cells.length);
}

function readJsonl(path: string): Record<string, unknown>[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.trim().length > 0)
    .map((l) => JSON.parse(l));
}

/** Keeps only the lines of a JSONL file whose `iteration` is below `limit` (a resumed run rewrites the rest). */
function truncateJsonl(path: string, limit: number): void {
  if (!existsSync(path)) return;
  const kept = readJsonl(path).filter((r) => typeof r.iteration !== "number" || r.iteration < limit);
  writeFileSync(path, kept.map((r) => `${JSON.stringify(r)}\n`).join(""));
}

/**
 * What a resumed run may change: how long it trains, how often it checkpoints, how it is
 * evaluated, which kernels compute it, where a vLLM server runs, and how its processes run
 * (`isRuntimeOnlyField`). Anything else would splice two different runs into one.
 */
const RESUMABLE_CHANGES =
  /^(train\.iterations|train\.checkpointEvery|eval(\..*)?|model\.kernels|model\.torch\.rolloutUrl)$/;

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
      "train.iterations, train.checkpointEvery, eval, logging, model.kernels, model.torch.python, " +
      "model.torch.timeoutSeconds, model.torch.prefixCacheMB and model.torch.rolloutUrl.)",
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

async function trainWith(
  opts: TrainOptions,
  ctx: {
    task: TaskDefinition;
    maxTurns: number;
    resumeFrom: string | null;
    meta: RunMeta;
    pretrainSeconds: number;
    backend: TrainBackend;
    log: (m: string) => void;
    /** Where the run's scalars also go (TensorBoard, W&B); opened here, closed by the caller. */
    logging: { logger: RunLogger | null };
  },
): Promise<TrainResult> {
  const { config, outDir } = opts;
  const { task, maxTurns, resumeFrom, meta, backend, log } = ctx;
  let pretrainSeconds = ctx.pretrainSeconds;
  const baseModel = backend.baseModel;
  opts.onBackend?.(backend);

  let startIteration = 0;
  let history: Record<string, number>[] = [];
  let periodicEval: EvalSnapshot[] = [];
  let wallBefore = 0;
  let best: { iteration: number | null; score: number | null } = { iteration: null, score: null };
  let roleBaselines =
    config.advantage.roleBaselineDecay !== null
      ? new RoleBaselines(config.advantage.roleBaselineDecay)
      : null;

  if (resumeFrom) {
    const state = (await backend.learner.restore(resumeFrom)) as TrainingJson | null;
    if (!state) throw new Error(`checkpoint ${resumeFrom} has no training state to resume from`);
    startIteration = state.iteration;
    history = state.history;
    periodicEval = state.periodicEval;
    wallBefore = state.wallSeconds;
    pretrainSeconds = state.pretrainSeconds;
    best = { iteration: state.bestIteration, score: state.bestScore };
    if (state.roleBaselines) roleBaselines = RoleBaselines.fromJSON(state.roleBaselines);
    log(`resuming ${outDir} from ${resumeFrom} (iteration ${startIteration})`);
  }
  // Lines written after the checkpoint by the interrupted process are rewritten by this one.
  // (Metrics and transcripts count iterations from 0; evaluations are numbered by iterations done,
  // so the evaluation taken right before the checkpoint is kept.)
  truncateJsonl(join(outDir, "metrics.jsonl"), startIteration);
  truncateJsonl(join(outDir, "transcripts.jsonl"), startIteration);
  truncateJsonl(join(outDir, "eval.jsonl"), startIteration === 0 ? 0 : startIteration + 1);
  // TensorBoard and W&B get the checkpoint's history again; whatever the interrupted process
  // logged after it is replaced (TensorBoard) or skipped (W&B), so each step is logged once.
  const logger = RunLogger.open({
    config,
    outDir,
    resumed: resumeFrom !== null,
    history,
    periodicEval,
    wallBefore,
    log,
    ...(opts.loggingEnv ? { env: opts.loggingEnv } : {}),
  });
  ctx.logging.logger = logger;
  // A served rollout model gets the weights the run (re)starts from.
  await backend.syncPolicy(startIteration);
  const policy = backend.evalPolicy;

  const cells = defaultEvalCells(config, task);
  const evalAttempts = config.eval.attempts ?? config.task.attempts;
  const evalReflection = config.eval.reflection ?? config.task.reflection;
  const runEval = async (
    iteration: number,
    trials: number,
    onTrial?: (trial: TrialRecord) => void,
    scaling?: { attempts: number; cells?: EvalCell[]; contextOverflow: ContextOverflow },
    shouldStop?: () => boolean,
    harder?: NonNullable<MageConfig["eval"]["harder"]>,
  ) => {
    const attempts = scaling?.attempts ?? harder?.attempts ?? evalAttempts;
    // A real model's evaluation takes minutes: show trials and answers as they come.
    await backend.learner.forgetCaches?.();
    const evalBar = opts.progress === false ? null : new EvalProgressBar({ label: `eval @${iteration}` });
    const res = await evaluate(policy, {
      task,
      cells: scaling?.cells ?? cells,
      trials,
      attempts,
      reflection: evalReflection,
      promptStyle: config.task.promptStyle,
      maxTurns,
      contextOverflow: scaling?.contextOverflow ?? config.task.contextOverflow,
      sampling: { ...config.eval.sampling, maxTokens: config.rollout.maxResponseTokens, stop: [] },
      seed: config.seed,
      taskOptions: taskKnobOptions(config.game, config.task, harder ?? {}),
      ...(harder ? { seedRange: HARDER_SEED_RANGE } : {}),
      ...(shouldStop ? { shouldStop } : {}),
      ...(onTrial ? { onTrial } : {}),
      ...(evalBar ? { onProgress: evalBar.update } : {}),
    }).finally(() => evalBar?.finish());
    return {
      iteration,
      attempts,
      trialsPerCell: trials,
      cells: res.cells,
    } satisfies EvalSnapshot;
  };

  const t0 = performance.now();
  const wall = () => wallBefore + (performance.now() - t0) / 1000;
  const summaryOf = (finalEval: EvalSnapshot | null, done: number): RunSummary => ({
    format: SUMMARY_FORMAT,
    name: config.name,
    game: gameName(config),
    seed: config.seed,
    config,
    meta,
    wallSeconds: wall(),
    pretrainSeconds,
    baseModel,
    iterationsDone: done,
    history,
    periodicEval,
    finalEval,
  });

  const saveRun = async (iteration: number) => {
    const json: TrainingJson = {
      iteration,
      roleBaselines: roleBaselines?.toJSON() ?? null,
      history,
      periodicEval,
      wallSeconds: wall(),
      pretrainSeconds,
      bestIteration: best.iteration,
      bestScore: best.score,
    };
    await backend.learner.save(join(outDir, RUN_CHECKPOINTS_DIR, ckptName(iteration)), {
      json,
      meta: {
        ...backend.describe,
        run: config.name,
        game: gameName(config),
        ...(config.env
          ? { env: { url: config.env.url, name: config.env.name, config: config.env.config } }
          : {}),
        iteration,
        // What `mage eval` needs to tell the opponents this model trained against from unseen ones.
        trainingOpponents: config.population.opponents.map((o) => o.spec),
        promptStyle: config.task.promptStyle,
        maxResponseTokens: config.rollout.maxResponseTokens,
        // The task knobs it trained with (puzzle difficulty, TicTacToe's cells), the default of `mage eval --checkpoint`.
        taskKnobs: {
          sokoban: config.task.sokoban,
          minesweeper: config.task.minesweeper,
          tictactoe: config.task.tictactoe,
        },
      },
    });
    await pruneCheckpoints(outDir, config.train.keepLast, best.iteration);
  };

  const total = config.train.iterations;
  const bar = opts.progress === false ? null : new ProgressBar({ label: `train ${config.name}`, total });
  let stopped = false;
  let ranHere = 0;
  if (startIteration === 0 && config.eval.atStart) {
    const snap = await runEval(0, config.eval.trials);
    periodicEval.push(snap);
    appendFileSync(join(outDir, "eval.jsonl"), `${JSON.stringify({ iteration: 0, cells: snap.cells })}\n`);
    logger.evaluation(snap);
    log(`eval before training: mean final score ${evalScore(snap).toFixed(3)}`);
  }
  for (let it = startIteration; it < total; it++) {
    if (opts.shouldStop?.()) {
      stopped = true;
      break;
    }
    const { trials, metrics } = await runIteration(
      {
        config,
        task,
        maxTurns,
        learner: backend.learner,
        policy: backend.policy,
        recomputeOldLogp: backend.recomputeOldLogp,
        roleBaselines,
        ...(bar ? { onProgress: (phase: string) => bar.update(it, { iteration: it + 1, phase }) } : {}),
      },
      it,
    );
    if (metrics.optimizer_steps > 0) await backend.syncPolicy(it + 1);
    metrics.wall_s = wall();
    history.push(metrics);
    appendFileSync(join(outDir, "metrics.jsonl"), `${JSON.stringify(metrics)}\n`);
    logger.iteration(metrics);
    for (const t of trials.slice(0, config.train.transcriptsPerIteration)) {
      appendFileSync(
        join(outDir, "transcripts.jsonl"),
        `${JSON.stringify({ iteration: it, trialId: t.trialId, opponent: t.opponent, seat: t.seat, attempts: t.attempts, memory: t.memory })}\n`,
      );
    }
    const done = it + 1;
    let newBest = false;
    if (config.eval.every > 0 && done % config.eval.every === 0 && done < total) {
      const snap = await runEval(done, config.eval.trials);
      periodicEval.push(snap);
      appendFileSync(
        join(outDir, "eval.jsonl"),
        `${JSON.stringify({ iteration: done, cells: snap.cells })}\n`,
      );
      logger.evaluation(snap);
      const score = evalScore(snap);
      if (best.score === null || score > best.score) {
        best = { iteration: done, score };
        newBest = true;
      }
      (bar ? (m: string) => bar.log(m) : log)(`eval @${done}: mean final score ${score.toFixed(3)}`);
    }
    bar?.update(done, {
      reward: metrics.env_reward,
      [`succ@${config.task.attempts}`]: metrics[`success@${config.task.attempts}`] ?? 0,
      valid: metrics.valid_action,
      ...(metrics.loss !== undefined ? { loss: metrics.loss } : {}),
    });
    ranHere += 1;
    if (opts.crashAfterIterations !== undefined && ranHere >= opts.crashAfterIterations) {
      return { outDir, summary: summaryOf(null, done), stopped: true };
    }
    if (done % config.train.checkpointEvery === 0 || done === total || newBest) await saveRun(done);
    await writeSummary(join(outDir, "summary.json"), summaryOf(null, done));
  }
  bar?.finish();

  const done = Math.min(total, startIteration + ranHere);
  if (stopped) {
    await saveRun(done);
    const summary = summaryOf(null, done);
    await writeSummary(join(outDir, "summary.json"), summary);
    log(`stopped at iteration ${done}; checkpoint saved — continue with --resume`);
    return { outDir, summary, stopped: true };
  }

  // A stop requested during the final evaluation (which can take many minutes) ends the run without
  // it; the last iteration's checkpoint is saved, so --resume plays the phases not yet finished.
  const stoppedInEval = async (err: unknown) => {
    if (!isRolloutStop(err)) throw err;
    const summary = summaryOf(null, total);
    await writeSummary(join(outDir, "summary.json"), summary);
    log(
      "stopped during the final evaluation; continue with --resume to finish it (finished phases are kept)",
    );
    return { outDir, summary, stopped: true };
  };
  // Phases finished before an interruption are kept (final-eval-phases.ts), the others played.
  const phases = FinalEvalPhases.open(outDir, total, config.eval);
  const phase = (name: FinalEvalPhase, play: () => Promise<EvalSnapshot>) =>
    finalPhase(phases, name, play, (seconds) => {
      wallBefore += seconds;
      log(
        `${name === "final" ? "final evaluation" : name}: kept from the interrupted run (${seconds.toFixed(0)} s)`,
      );
    });
  let finalEval: EvalSnapshot;
  let scalingEval: EvalSnapshot | null = null;
  let harderEval: EvalSnapshot | null = null;
  try {
    finalEval = await phase("final", async () => {
      log(`final evaluation: ${config.eval.finalTrials} trials per cell, ${evalAttempts} attempts`);
      return runEval(
        total,
        config.eval.finalTrials,
        await finalTrialLogs(outDir, config.eval.finalTrials, config.eval.transcriptsPerCell, total),
        undefined,
        opts.shouldStop,
      );
    });
    log(formatCells(finalEval.cells));
    const start = periodicEval.find((e) => e.iteration === 0);
    if (start)
      log(
        `\nbefore training vs after ${total} iterations (95% bootstrap intervals):\n${formatBeforeAfter(start.cells, finalEval.cells)}`,
      );
    const scaling = config.eval.scaling;
    if (scaling) {
      scalingEval = await phase("scaling", () => {
        log(`test-time scaling: ${scaling.trials} trials per cell with ${scaling.attempts} attempts`);
        return runEval(total, scaling.trials, undefined, scaling, opts.shouldStop);
      });
      log(formatCells(scalingEval.cells));
    }
    const harder = config.eval.harder;
    if (harder) {
      harderEval = await phase("harder", () => {
        log(
          `harder held-out set: ${harder.trials} trials (${JSON.stringify(taskKnobOptions(config.game, config.task, harder))})`,
        );
        return runEval(total, harder.trials, undefined, undefined, opts.shouldStop, harder);
      });
      log(formatCells(harderEval.cells));
    }
  } catch (err) {
    return stoppedInEval(err);
  }
  const summary = { ...summaryOf(finalEval, total), scalingEval, harderEval };
  await writeSummary(join(outDir, "summary.json"), summary);
  await phases.remove();
  logger.finished(summary);
  return { outDir, summary, stopped: false };
}

/** A phase of the final evaluation: kept from an interrupted run, or played and then kept. */
async function finalPhase(
  phases: FinalEvalPhases,
  name: FinalEvalPhase,
  play: () => Promise<EvalSnapshot>,
  onKept: (seconds: number) => void,
): Promise<EvalSnapshot> {
  const kept = phases.kept(name);
  if (kept) {
    onKept(kept.seconds);
    return kept.snapshot;
  }
  const t = performance.now();
  const snapshot = await play();
  await phases.keep(name, snapshot, (performance.now() - t) / 1000);
  return snapshot;
}

/**
 * The final evaluation's trial logs, emptied: every trial's outcome in `eval-trials.jsonl`, and
 * the whole play of each cell's first `transcriptsPerCell` trials by index (not the first to
 * finish, which would favour trials won early) in `eval-transcripts.jsonl`, for `mage replay`.
 */
async function finalTrialLogs(
  outDir: string,
  trialsPerCell: number,
  transcriptsPerCell: number,
  iteration: number,
): Promise<(t: TrialRecord) => void> {
  const evalPath = join(outDir, "eval-trials.jsonl");
  const transcriptsPath = join(outDir, "eval-transcripts.jsonl");
  await writeFileAtomic(evalPath, "");
  await writeFileAtomic(transcriptsPath, "");
  return (t) => {
    const outcome = {
      iteration,
      trialId: t.trialId,
      opponent: t.opponent,
      seat: t.seat,
      attempts: t.attempts,
    };
    appendFileSync(evalPath, `${JSON.stringify(outcome)}\n`);
    if (t.trialId % trialsPerCell >= transcriptsPerCell) return;
    appendFileSync(transcriptsPath, `${JSON.stringify({ ...outcome, memory: t.memory })}\n`);
  };
}

/** Deletes all but the newest `keep` checkpoints, never the best one. */
async function pruneCheckpoints(outDir: string, keep: number, bestIteration: number | null): Promise<void> {
  const dir = join(outDir, RUN_CHECKPOINTS_DIR);
  const names = (await readdir(dir)).filter((n) => /^iter-\d+$/.test(n)).sort();
  const keepSet = new Set(names.slice(-keep));
  if (bestIteration !== null) keepSet.add(ckptName(bestIteration));
  for (const n of names) if (!keepSet.has(n)) await rm(join(dir, n), { recursive: true, force: true });
}
