import type { RoleBaselines } from "../algo/advantages.js";
import type { PpoLossOptions } from "../algo/ppo-loss.js";
import { Rng } from "../core/rng.js";
import { TRAIN_SEED_RANGE } from "../evaluate/evaluate.js";
import { countingAnswers } from "../evaluate/progress.js";
import type { TrainLearner } from "../learner/types.js";
import { type Policy, reuseSince } from "../policy/types.js";
import { runTrials } from "../rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../rollout/types.js";
import { assignGroups, type PoolEntry } from "../tasks/population.js";
import type { TaskDefinition } from "../tasks/registry.js";
import { newEnvClock, timedTask } from "../tasks/timed.js";
import type { TaskOptions } from "../tasks/types.js";
import { computeRowCredit } from "./advantage-pipeline.js";
import { buildTokenBatchWith, rowsPerSequence, sliceTokenBatch } from "./batch.js";
import { type MageConfig, taskKnobOptions } from "./config.js";

/**
 * One training iteration: sample the population, roll out trials with the current policy,
 * assign credit and advantages, then PPO epochs over mini-batches through the learner.
 * Every random choice is keyed by (seed, iteration, purpose), so an iteration's result depends
 * only on the config, the seed, the iteration index and the model state it starts from.
 */
export interface IterationContext {
  config: MageConfig;
  task: TaskDefinition;
  maxTurns: number;
  /** Renders, scores and updates (the embedded model or the PyTorch worker); keeps the reference model for the KL term. */
  learner: TrainLearner;
  policy: Policy;
  /**
   * The policy's log-probs are not the learner's (a served model): the old log-probs of the PPO
   * ratio are recomputed by the learner before the first update.
   */
  recomputeOldLogp?: boolean;
  roleBaselines: RoleBaselines | null;
  /**
   * The league's opponents for this iteration (`src/league/`): the pool the population sampler
   * uses instead of `population.opponents`, and the factory that builds snapshot opponents.
   */
  opponents?: { pool: PoolEntry[]; makeOpponent: NonNullable<TaskOptions["makeOpponent"]> };
  /** Told what the iteration is doing ("rollout 37 answers", "update"), for a progress display. */
  onProgress?: (phase: string) => void;
}

export interface IterationResult {
  trials: TrialRecord[];
  metrics: Record<string, number>;
}

/** Trial specs for an iteration: groups from the population sampler; with the `task` scope, opponents mix inside a group. */
export function iterationSpecs(
  config: MageConfig,
  rng: Rng,
  twoPlayer: boolean,
  poolOverride?: readonly PoolEntry[],
): TrialSpec[] {
  const G = config.rollout.tasksPerIteration;
  const n = config.rollout.groupSize;
  const pool = twoPlayer
    ? (poolOverride ?? config.population.opponents).map((o) => ({ spec: o.spec, weight: o.weight }))
    : null;
  const seats = { mode: config.population.seats, secondRatio: config.population.secondRatio };
  const groups = assignGroups({
    numGroups: G,
    pool,
    seats,
    rng: rng.derive("population"),
    seedRange: TRAIN_SEED_RANGE,
  });
  if (config.advantage.scope !== "task" || !twoPlayer) {
    return groups.flatMap((g) =>
      Array.from({ length: n }, (_, m) => ({
        trialId: g.group * n + m,
        groupId: g.group,
        taskSeed: g.taskSeed,
        opponent: g.opponent,
        seat: g.seat,
      })),
    );
  }
  // "No agent normalisation": each trial draws its own opponent and seat; the group shares only the task.
  const perTrial = assignGroups({
    numGroups: G * n,
    pool,
    seats,
    rng: rng.derive("population-per-trial"),
    seedRange: TRAIN_SEED_RANGE,
  });
  return perTrial.map((a, i) => {
    const g = groups[Math.floor(i / n)];
    return { trialId: i, groupId: g.group, taskSeed: g.taskSeed, opponent: a.opponent, seat: a.seat };
  });
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((s, x) => s + x, 0) / xs.length;
}

export async function runIteration(ctx: IterationContext, iteration: number): Promise<IterationResult> {
  const { config } = ctx;
  const rng = Rng.seeded(config.seed).derive("iteration", iteration);
  const specs = iterationSpecs(config, rng, ctx.task.twoPlayer, ctx.opponents?.pool);
  await ctx.learner.forgetCaches?.(); // the rollout must not depend on what sampled before it
  ctx.learner.takeTimings?.(); // what evaluations between iterations spent is not this iteration's
  const { trials, metrics: rolloutMetrics } = await rollout(ctx, specs, rng);
  const metrics: Record<string, number> = { iteration, ...rolloutMetrics };
  if (config.train.updates && trials.some((t) => t.rows.length > 0)) {
    ctx.onProgress?.("update");
    Object.assign(metrics, await update(ctx, trials, rng));
  }
  Object.assign(metrics, rolloutStats(trials, config.task.attempts));
  // The torch learner's split of the iteration: time inside the worker per op, and the protocol's share.
  Object.assign(metrics, ctx.learner.takeTimings?.() ?? {});
  return { trials, metrics };
}

/** Plays the iteration's trials with the current policy; its time, and the share inside the tasks. */
async function rollout(
  ctx: IterationContext,
  specs: TrialSpec[],
  rng: Rng,
): Promise<{ trials: TrialRecord[]; metrics: Record<string, number> }> {
  const { config } = ctx;
  const t0 = performance.now();
  const clock = newEnvClock();
  let answers = 0;
  const promptTokensAtStart = ctx.policy.promptTokens?.();
  const policy = ctx.onProgress
    ? countingAnswers(ctx.policy, (n) => {
        answers += n;
        const reuse = reuseSince(ctx.policy, promptTokensAtStart);
        ctx.onProgress?.(
          `rollout ${answers} answers${Number.isFinite(reuse) ? `, prompt reuse ${(100 * reuse).toFixed(0)}%` : ""}`,
        );
      })
    : ctx.policy;
  const trials = await runTrials(
    specs,
    (s) =>
      timedTask(
        ctx.task.create({
          ...(s.opponent !== null ? { opponent: s.opponent } : {}),
          ...(s.seat !== null ? { seat: s.seat } : {}),
          replayOpponent: config.task.replayOpponent,
          ...(ctx.opponents ? { makeOpponent: ctx.opponents.makeOpponent } : {}),
          ...taskKnobOptions(config.game, config.task),
        }),
        clock,
      ),
    policy,
    rng.derive("rollout"),
    {
      attempts: config.task.attempts,
      maxTurns: ctx.maxTurns,
      reflection: config.task.reflection,
      promptStyle: config.task.promptStyle,
      hindsight: config.task.hindsight,
      contextOverflow: config.task.contextOverflow,
      sampling: { ...config.rollout.sampling, maxTokens: config.rollout.maxResponseTokens, stop: [] },
      maxBatch: 256,
      concurrency: 1,
    },
  );
  // env_ms: wall time inside the tasks (reset, step, restart), a part of rollout_ms.
  const metrics: Record<string, number> = {
    rollout_ms: performance.now() - t0,
    env_ms: clock.ms,
    env_steps: clock.steps,
  };
  // prompt_reuse: share of the rollout's prompt tokens the backend took from its prefix store.
  const reuse = reuseSince(ctx.policy, promptTokensAtStart);
  if (Number.isFinite(reuse)) metrics.prompt_reuse = reuse;
  return { trials, metrics };
}

/** Credit and advantages of the trials, then PPO epochs over mini-batches through the learner. */
async function update(
  ctx: IterationContext,
  trials: TrialRecord[],
  rng: Rng,
): Promise<Record<string, number>> {
  const { config } = ctx;
  const t1 = performance.now();
  const credit = computeRowCredit(trials, config, ctx.roleBaselines ?? undefined);
  const onePass = config.task.promptStyle === "compact";
  const tb = await buildTokenBatchWith((m) => ctx.learner.render(m), trials, credit.advantage, onePass);
  const microBatchTokens = config.model.backend === "torch" ? config.model.torch.microBatchTokens : 8192;
  const scoring = config.model.backend === "torch" ? { microBatchTokens } : undefined;
  if (ctx.recomputeOldLogp) tb.oldLogp = (await ctx.learner.logprobs(tb.batch, "policy", scoring)).logp;
  if (config.optim.klCoef > 0) tb.refLogp = (await ctx.learner.logprobs(tb.batch, "reference", scoring)).logp;
  // Rows per sequence, to cut mini-batches of about `miniBatchRows` rows out of whole sequences.
  const rowsPerSeq = rowsPerSequence(trials, onePass);
  const lossOptions = lossOptionsOf(config.optim);
  const updates: Record<string, number>[] = [];
  for (let epoch = 0; epoch < config.optim.epochs; epoch++) {
    const order = rng.derive("minibatch-order", epoch).shuffle(tb.batch.sequences.map((_, i) => i));
    for (const miniBatch of miniBatches(order, rowsPerSeq, config.optim.miniBatchRows))
      updates.push(
        await updateOn(ctx.learner, sliceTokenBatch(tb, miniBatch), lossOptions, microBatchTokens),
      );
  }
  const metrics: Record<string, number> = {};
  for (const key of Object.keys(updates[0] ?? {})) metrics[key] = mean(updates.map((u) => u[key]));
  // The first mini-batch is scored before any step: its ratio spread is the sampler/learner gap.
  if (updates[0]?.ratio_dev !== undefined) metrics.ratio_dev_first = updates[0].ratio_dev;
  metrics.optimizer_steps = updates.length;
  metrics.update_ms = performance.now() - t1;
  metrics.scored_tokens = tb.oldLogp.length;
  metrics.advantage_abs = mean(credit.advantage.map(Math.abs));
  metrics.score_mean = mean(credit.score);
  return metrics;
}

/** Cuts `order` into runs of whole sequences, each closed once it holds at least `rows` rows. */
export function miniBatches(
  order: readonly number[],
  rowsPerSeq: readonly number[],
  rows: number,
): number[][] {
  const out: number[][] = [];
  let current: number[] = [];
  let currentRows = 0;
  for (const s of order) {
    current.push(s);
    currentRows += rowsPerSeq[s];
    if (currentRows >= rows) {
      out.push(current);
      current = [];
      currentRows = 0;
    }
  }
  if (current.length > 0) out.push(current);
  return out;
}

/** The PPO loss's settings, from the config's optimizer section. */
function lossOptionsOf(optim: MageConfig["optim"]): PpoLossOptions {
  return {
    clipLow: optim.clipLow,
    clipHigh: optim.clipHigh,
    dualClip: optim.dualClip,
    entropyCoef: optim.entropyCoef,
    klCoef: optim.klCoef,
    klClamp: optim.klClamp,
  };
}

/** One optimizer step on a mini-batch; its loss, grad norm, learning rate and the loss's parts. */
async function updateOn(
  learner: TrainLearner,
  sub: ReturnType<typeof sliceTokenBatch>,
  lossOptions: PpoLossOptions,
  microBatchTokens: number,
): Promise<Record<string, number>> {
  const m = await learner.update(
    sub.batch,
    { oldLogp: sub.oldLogp, advantages: sub.advantages, ...(sub.refLogp ? { refLogp: sub.refLogp } : {}) },
    lossOptions,
    { microBatchTokens },
  );
  return { loss: m.loss, grad_norm: m.gradNorm, lr: m.lr, ...m.metrics };
}

/**
 * What the trials played: rewards, valid answers (`valid_action`), valid and informative remarks
 * among reflect calls (`valid_reflection`, `informative_reflection`), answer length, success@k and
 * score@k, per opponent.
 */
export function rolloutStats(trials: readonly TrialRecord[], attempts: number): Record<string, number> {
  const rows = trials.flatMap((t) => t.rows);
  const plays = rows.filter((r) => r.phase === "play");
  const reflects = rows.filter((r) => r.phase === "reflect");
  const metrics: Record<string, number> = {};
  metrics.rows = rows.length;
  metrics.trials = trials.length;
  metrics.env_reward = mean(plays.map((r) => r.reward));
  metrics.valid_action = mean(plays.map((r) => (r.valid ? 1 : 0)));
  // Among reflect calls: valid (well-formed) remarks, and informative ones where the task judges them.
  if (reflects.length > 0) metrics.valid_reflection = mean(reflects.map((r) => (r.valid ? 1 : 0)));
  const judged = reflects.filter((r) => r.informative !== undefined);
  if (judged.length > 0) metrics.informative_reflection = mean(judged.map((r) => (r.informative ? 1 : 0)));
  metrics.response_tokens = mean(rows.map((r) => r.responseTokenIds.length));
  for (let k = 1; k <= attempts; k++) {
    metrics[`success@${k}`] = mean(trials.map((t) => (t.attempts.slice(0, k).some((a) => a.won) ? 1 : 0)));
    metrics[`score@${k}`] = mean(trials.map((t) => t.attempts[Math.min(k, t.attempts.length) - 1].score));
  }
  const byOpponent = new Map<string, TrialRecord[]>();
  for (const t of trials) byOpponent.set(t.opponent, [...(byOpponent.get(t.opponent) ?? []), t]);
  for (const [opp, list] of byOpponent) {
    metrics[`final_score/${opp}`] = mean(list.map((t) => t.attempts[t.attempts.length - 1].score));
    metrics[`success/${opp}`] = mean(list.map((t) => (t.attempts.some((a) => a.won) ? 1 : 0)));
  }
  return metrics;
}
