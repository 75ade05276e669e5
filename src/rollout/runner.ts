import type { Rng } from "../core/rng.js";
import type { GenerateRequest, Generation, Policy, SamplingParams } from "../policy/types.js";
import { TrialEnv } from "../tasks/env.js";
import type { TrialMemory } from "../tasks/memory.js";
import { buildPrompt } from "../tasks/prompts.js";
import type { PromptStyle, ReflectionType, TextTask } from "../tasks/types.js";
import type { AttemptSummary, Row, TrialRecord, TrialSpec } from "./types.js";

/**
 * The trial runner: for each trial, attempts 1..K of play (up to `maxTurns` policy calls), and
 * between attempts, when the trial was not won, a reflect call and a restart to the identical
 * start. A won trial stops. Policy calls of all live trials are batched into `generate` calls;
 * every request's seed is keyed by (trial, attempt, phase, turn), so results never depend on how
 * calls were batched or ordered.
 */
export interface RunnerOptions {
  attempts: number;
  maxTurns: number;
  /** "none": attempts are independent (no reflection, no earlier attempts in the prompt). */
  reflection: ReflectionType | "none";
  promptStyle: PromptStyle;
  hindsight: boolean;
  sampling: SamplingParams;
  /** Most requests in one generate call. */
  maxBatch: number;
  /** Generate calls in flight at once (1 for the embedded model; more for remote servers). */
  concurrency: number;
  /**
   * When a request does not fit the policy's context (`policy.contextError`): "stop" (default)
   * ends the trial with `stopReason: "context: …"`; "drop-oldest" rebuilds the prompt without
   * the oldest earlier attempts, one at a time, until it fits, and stops the trial only when
   * the current attempt alone does not fit. Dropped attempts stay dropped for the trial's later
   * calls. Such a trial's prompts are no longer append-only (the trainer scores its rows one
   * sequence per row).
   */
  contextOverflow?: ContextOverflow;
}

export type ContextOverflow = "stop" | "drop-oldest";
export const CONTEXT_OVERFLOW_POLICIES: readonly ContextOverflow[] = ["stop", "drop-oldest"];

export interface RunHooks {
  /** Called once per trial as soon as it ends (in completion order). */
  onTrialEnd?: (trial: TrialRecord) => void;
  /** Checked before each batch of generations; true stops the rollout with a RolloutStoppedError cause. */
  shouldStop?: () => boolean;
}

/** The cause of a RolloutAbortedError when the caller asked the rollout to stop (Ctrl-C). */
export class RolloutStoppedError extends Error {
  constructor() {
    super("stop requested");
    this.name = "RolloutStoppedError";
  }
}

/** Whether an error from runTrials (or anything that rethrows it) is a requested stop. */
export function isRolloutStop(err: unknown): boolean {
  return err instanceof RolloutAbortedError && err.cause instanceof RolloutStoppedError;
}

/** A failure of the policy backend; trials not finished are recorded as aborted, never as losses. */
export class RolloutAbortedError extends Error {
  constructor(
    message: string,
    readonly finished: TrialRecord[],
    readonly aborted: TrialRecord[],
    override readonly cause: unknown,
  ) {
    super(message);
    this.name = "RolloutAbortedError";
  }
}

type Stage = "play" | "reflect" | "done";

interface LiveTrial {
  spec: TrialSpec;
  task: TextTask;
  env: TrialEnv;
  stage: Stage;
  attempt: number;
  turn: number;
  rows: Row[];
  attempts: AttemptSummary[];
  current: AttemptSummary;
  /** Earlier attempts left out of the prompt ("drop-oldest" overflow policy). */
  dropped: number;
}

function emptyAttempt(): AttemptSummary {
  return { won: false, draw: false, score: 0, reward: 0, turns: 0, invalidActions: 0, finished: false };
}

/** Messages of the next call; with no reflection the attempts are independent (only the current one is shown). */
function messagesFor(t: LiveTrial, phase: "play" | "reflect", opts: RunnerOptions) {
  if (opts.reflection !== "none") {
    if (t.dropped === 0) return t.env.messages(phase);
    return buildPrompt(t.env.memory, t.task.promptText(), phase, { ...t.env.options, dropOldest: t.dropped });
  }
  const memory: TrialMemory = { ...t.env.memory, attempts: [{ ...t.env.currentAttempt, index: 0 }] };
  return buildPrompt(memory, t.task.promptText(), phase, t.env.options);
}

function promptOptions(opts: RunnerOptions) {
  return {
    style: opts.promptStyle,
    reflectionType: opts.reflection === "none" ? ("history_only" as const) : opts.reflection,
    hindsight: opts.hindsight,
  };
}

export function requestSeed(
  root: Rng,
  trialId: number,
  attempt: number,
  phase: string,
  turn: number,
): number {
  return root.derive("sample", trialId, attempt, phase, turn).nextU32();
}

export async function runTrials(
  specs: readonly TrialSpec[],
  makeTask: (spec: TrialSpec) => TextTask,
  policy: Policy,
  root: Rng,
  opts: RunnerOptions,
  hooks: RunHooks = {},
): Promise<TrialRecord[]> {
  const rollout = new Rollout(specs, makeTask, policy, root, opts, hooks);
  await rollout.reset();
  try {
    await rollout.playAll();
  } catch (err) {
    throw await rollout.abort(err);
  }
  await rollout.closed();
  return specs.map((s) => rollout.record(s.trialId));
}

/** One runTrials call: its live trials, the records of those that ended, and their tasks' closing. */
class Rollout {
  private readonly live: LiveTrial[];
  private readonly records = new Map<number, TrialRecord>();
  private readonly closing: Promise<void>[] = [];

  constructor(
    specs: readonly TrialSpec[],
    makeTask: (spec: TrialSpec) => TextTask,
    private readonly policy: Policy,
    private readonly root: Rng,
    private readonly opts: RunnerOptions,
    private readonly hooks: RunHooks,
  ) {
    this.live = specs.map((spec) => {
      const task = makeTask(spec);
      const env = new TrialEnv(task, promptOptions(opts));
      return {
        spec,
        task,
        env,
        stage: "play",
        attempt: 0,
        turn: 0,
        rows: [],
        attempts: [],
        current: emptyAttempt(),
        dropped: 0,
      };
    });
  }

  record(trialId: number): TrialRecord {
    return this.records.get(trialId)!;
  }

  /** Every trial's task instance, reset concurrently (a served task waits on its server here). */
  async reset(): Promise<void> {
    const resets = await Promise.allSettled(
      this.live.map((t) =>
        t.env.reset(
          this.root.derive("task", t.spec.taskSeed),
          this.root.derive("opponent", t.spec.groupId, t.spec.taskSeed),
        ),
      ),
    );
    const failed = resets.find((r) => r.status === "rejected");
    if (!failed) return;
    // No trial was played: release what was created, and report the first failure as it is.
    for (const t of this.live) this.closeTask(t.task);
    await this.closed();
    throw failed.reason;
  }

  /** Rounds of batched policy calls until every trial is done. */
  async playAll(): Promise<void> {
    const { maxBatch, concurrency } = this.opts;
    const atOnce = Math.max(1, concurrency);
    for (;;) {
      const pending = this.live.filter((t) => t.stage !== "done");
      if (pending.length === 0) return;
      const batches: LiveTrial[][] = [];
      for (let i = 0; i < pending.length; i += maxBatch) batches.push(pending.slice(i, i + maxBatch));
      for (let i = 0; i < batches.length; i += atOnce) {
        if (this.hooks.shouldStop?.()) throw new RolloutStoppedError();
        await Promise.all(batches.slice(i, i + atOnce).map((b) => this.runBatch(b)));
      }
    }
  }

  /** After a failure: trials not finished are recorded as aborted, never as losses. */
  async abort(err: unknown): Promise<RolloutAbortedError> {
    const finished = [...this.records.values()];
    const aborted = this.live.filter((t) => t.stage !== "done").map((t) => this.finish(t, true));
    await this.closed();
    return new RolloutAbortedError(
      `rollout stopped: ${(err as Error).message}; ${finished.length} finished trials kept, ${aborted.length} in flight recorded as aborted`,
      finished,
      aborted,
      err,
    );
  }

  closed(): Promise<unknown> {
    return Promise.all(this.closing);
  }

  private closeTask(task: TextTask): void {
    if (task.close) this.closing.push(task.close().catch(() => undefined));
  }

  private finish(t: LiveTrial, aborted: boolean, stopReason?: string): TrialRecord {
    t.stage = "done";
    const rec: TrialRecord = {
      trialId: t.spec.trialId,
      groupId: t.spec.groupId,
      taskSeed: t.spec.taskSeed,
      task: t.task.name,
      opponent: t.task.opponent ?? "none",
      seat: t.task.seat ?? "none",
      ...categoryOf(t.task),
      attempts: t.attempts,
      aborted,
      ...(stopReason ? { stopReason } : {}),
      memory: t.env.memory,
      rows: t.rows,
    };
    this.records.set(t.spec.trialId, rec);
    this.closeTask(t.task);
    this.hooks.onTrialEnd?.(rec);
    return rec;
  }

  /** An attempt cut off unfinished: games where stalling would beat playing charge a forfeit, on the last play row. */
  private chargeForfeit(t: LiveTrial): void {
    if (t.current.finished) return;
    const f = t.task.forfeit?.() ?? null;
    if (!f) return;
    t.current.reward += f.reward;
    t.current.score = f.score;
    t.current.forfeited = true;
    const last = t.rows[t.rows.length - 1];
    if (last?.phase === "play" && last.attempt === t.attempt) last.reward += f.reward;
  }

  private async endAttempt(t: LiveTrial): Promise<void> {
    this.chargeForfeit(t);
    t.attempts.push(t.current);
    const won = t.current.won;
    t.current = emptyAttempt();
    if (won || t.attempts.length >= this.opts.attempts) {
      this.finish(t, false);
      return;
    }
    if (this.opts.reflection !== "none" && t.env.reflectCallExpected) {
      t.stage = "reflect";
    } else {
      await this.restartTrial(t);
    }
  }

  private async restartTrial(t: LiveTrial): Promise<void> {
    const pending = t.env.restart();
    if (pending) await pending;
    t.attempt += 1;
    t.turn = 0;
    t.stage = "play";
  }

  private callOf(t: LiveTrial): GenerateRequest {
    const phase = t.stage === "reflect" ? "reflect" : "play";
    return {
      messages: messagesFor(t, phase, this.opts),
      sampling: this.opts.sampling,
      seed: requestSeed(this.root, t.spec.trialId, t.attempt, phase, t.turn),
      trial: { trialId: t.spec.trialId, attempt: t.attempt, phase, turn: t.turn },
    };
  }

  /** One batch: each trial's next request (fitted to the context, or the trial stops), one generate call, then each answer applied. */
  private async runBatch(all: LiveTrial[]): Promise<void> {
    const batch: LiveTrial[] = [];
    const requests: GenerateRequest[] = [];
    // Checked together so that a policy whose check is a round trip (the torch worker's render)
    // can answer the whole batch with one request.
    const first = all.map((t) => this.callOf(t));
    const firstErrors = await Promise.all(first.map((r) => this.policy.contextError?.(r) ?? null));
    for (const [k, t] of all.entries()) {
      const fitted = await this.fitContext(t, first[k], firstErrors[k]);
      if (fitted.tooLong === null) {
        batch.push(t);
        requests.push(fitted.req);
        continue;
      }
      // The trial outgrew the model's context: the attempt in progress ends unfinished and the trial stops.
      if (t.stage === "play") {
        this.chargeForfeit(t);
        t.attempts.push(t.current);
      }
      const dropped = t.dropped > 0 ? ` (even with the ${t.dropped} oldest earlier attempts dropped)` : "";
      this.finish(t, false, `context: ${fitted.tooLong}${dropped}`);
    }
    if (batch.length === 0) return;
    const generations = await this.policy.generate(requests);
    if (generations.length !== requests.length) {
      throw new Error(
        `policy ${this.policy.name} returned ${generations.length} generations for ${requests.length} requests`,
      );
    }
    for (let i = 0; i < batch.length; i++) await this.apply(batch[i], requests[i], generations[i]);
  }

  /** With "drop-oldest", the oldest earlier attempts are dropped one at a time until the request fits. */
  private async fitContext(
    t: LiveTrial,
    req: GenerateRequest,
    tooLong: string | null,
  ): Promise<{ req: GenerateRequest; tooLong: string | null }> {
    if (tooLong === null || this.opts.contextOverflow !== "drop-oldest" || this.opts.reflection === "none")
      return { req, tooLong };
    const earlier = t.env.memory.attempts.length - 1;
    let fitted: { req: GenerateRequest; tooLong: string | null } = { req, tooLong };
    while (fitted.tooLong !== null && t.dropped < earlier) {
      t.dropped += 1;
      const next = this.callOf(t);
      fitted = { req: next, tooLong: (await this.policy.contextError?.(next)) ?? null };
    }
    return fitted;
  }

  private async apply(t: LiveTrial, req: GenerateRequest, gen: Generation): Promise<void> {
    const base = {
      trialId: t.spec.trialId,
      groupId: t.spec.groupId,
      taskSeed: t.spec.taskSeed,
      opponent: t.task.opponent ?? "none",
      seat: t.task.seat ?? "none",
      attempt: t.attempt,
      prompt: [...req.messages],
      response: gen.text,
      responseTokenIds: gen.tokenIds,
      behaviourLogprobs: gen.logprobs,
      promptTokens: gen.promptTokens,
      finishReason: gen.finishReason,
    };
    if (t.stage === "reflect") {
      const remark = t.env.reflect(gen.text, gen.tokenIds);
      // As in the reference, a reflect row belongs to the attempt it prepares.
      t.rows.push({
        ...base,
        attempt: t.attempt + 1,
        phase: "reflect",
        turn: 0,
        reward: 0,
        valid: remark.valid,
        ...(remark.invalidReason ? { invalidReason: remark.invalidReason } : {}),
        ...(remark.informative !== undefined ? { informative: remark.informative } : {}),
        anchor: t.env.anchor("reflect"),
        done: false,
        won: false,
      });
      await this.restartTrial(t);
      return;
    }
    const anchor = t.env.anchor("play");
    const result = await t.env.play(gen.text, gen.tokenIds);
    t.rows.push({
      ...base,
      phase: "play",
      turn: t.turn,
      reward: result.reward,
      valid: result.valid,
      ...(result.invalidReason ? { invalidReason: result.invalidReason } : {}),
      anchor,
      done: result.done,
      won: result.won,
    });
    const cur = t.current;
    cur.turns += 1;
    cur.reward += result.reward;
    // An invalid answer changes nothing, so the score so far stands: a served environment with a
    // running score (ScienceWorld) reports none for it, and an attempt cut off after it keeps its own.
    if (result.valid || result.done) cur.score = result.score;
    if (!result.valid) cur.invalidActions += 1;
    if (result.won) cur.won = true;
    if (result.done) {
      cur.draw = result.draw;
      cur.finished = true;
    }
    t.turn += 1;
    if (result.done || t.turn >= this.opts.maxTurns) await this.endAttempt(t);
  }
}

/** A task's category for the record, when it has one (a task that failed before reset has none). */
function categoryOf(task: TextTask): { category?: string } {
  try {
    const c = task.info().category;
    return c !== undefined ? { category: c } : {};
  } catch {
    return {};
  }
}
