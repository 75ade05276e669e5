/**
 * `TrialEnv`: one environment of a trial — a text task plus its trial memory and prompt
 * options. This is what the trial runner drives:
 *
 *   await env.reset(rng)                        // attempt 1 begins
 *   loop: msgs = env.messages("play"); gen = policy(msgs); r = await env.play(gen.text, gen.tokenIds)
 *   if not won and more attempts: env.messages("reflect") → env.reflect(text, ids) (when
 *     `env.reflectCallExpected`), then env.restart() // attempt k+1 from the identical start
 *
 * The memory (`env.memory`) is plain JSON; prompts are pure functions of it and of the options.
 */

import { judgeRemark } from "../core/remark.js";
import type { Rng } from "../core/rng.js";
import type { RemarkResult } from "../core/tags.js";
import type { ChatMessage } from "../policy/types.js";
import {
  type AttemptRecord,
  currentAttempt,
  newTrialMemory,
  recordReflection,
  recordTurn,
  startAttempt,
  type TrialMemory,
} from "./memory.js";
import { buildPrompt, DEFAULT_PROMPT_OPTIONS, type PromptOptions, reflectCallExpected } from "./prompts.js";
import { attemptCommands } from "./remark-quality.js";
import type { Phase, StepResult, TaskInfo, TextTask } from "./types.js";

export class TrialEnv {
  readonly task: TextTask;
  /** The options given (the prompt builder fills in the rest: the task's history window, then the defaults). */
  readonly options: PromptOptions;
  private mem: TrialMemory;
  /** The legal actions the task offered in the current attempt (for the remark's echo check). */
  private offered = new Set<string>();

  constructor(task: TextTask, options: Partial<PromptOptions> = {}) {
    this.task = task;
    const given: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(options)) if (v !== undefined) given[k] = v;
    this.options = {
      style: DEFAULT_PROMPT_OPTIONS.style,
      reflectionType: DEFAULT_PROMPT_OPTIONS.reflectionType,
      ...(given as Partial<PromptOptions>),
    };
    this.mem = newTrialMemory(task.name, task.opponent, task.seat);
  }

  /** The trial so far (plain data; treat as read-only). */
  get memory(): TrialMemory {
    return this.mem;
  }

  /** Whether this trial makes reflect calls (false only for compact + history_only). */
  get reflectCallExpected(): boolean {
    return reflectCallExpected(this.options.style, this.options.reflectionType);
  }

  /** Starts a new trial on a new task instance (see `TextTask.reset`). */
  async reset(rng: Rng, opponentRng?: Rng): Promise<void> {
    await this.task.reset(rng, opponentRng);
    this.mem = newTrialMemory(this.task.name, this.task.opponent, this.task.seat);
    this.beginAttempt();
  }

  /**
   * Starts the next attempt from the identical initial state. Synchronous for in-process tasks;
   * a promise when the task restarts asynchronously (a served task).
   */
  restart(): void | Promise<void> {
    const pending = this.task.restart();
    if (pending instanceof Promise) return pending.then(() => this.beginAttempt());
    this.beginAttempt();
  }

  private beginAttempt(): void {
    const listed = this.task.promptText().legalActionsHeading !== undefined;
    const legal = listed ? (this.task.legalActions?.() ?? []) : undefined;
    startAttempt(this.mem, this.task.observation(), this.task.compactObservation(), legal);
    this.offered = new Set();
    this.noteOffered();
  }

  /** Adds the task's current legal actions to those offered in the attempt. */
  private noteOffered(): void {
    for (const a of this.task.legalActions?.() ?? []) this.offered.add(a);
  }

  /** Messages for the next call in `phase`. */
  messages(phase: Phase): ChatMessage[] {
    return buildPrompt(this.mem, this.task.promptText(), phase, this.options);
  }

  /** Plays one response (parsed by the task); records it in memory. */
  async play(response: string, tokenIds?: readonly number[]): Promise<StepResult> {
    if (this.task.done) {
      throw new Error(`play() after the attempt is over (${this.task.name}); restart() or reset() first`);
    }
    const result = await this.task.step(response);
    recordTurn(this.mem, result, response, tokenIds);
    this.noteOffered();
    return result;
  }

  /**
   * Judges and records a reflection response for the attempt that just ended (`judgeRemark`): an
   * invalid one (no remark, markup, over the cap, only the attempt's action commands) is flagged
   * `valid: false`; `informative` by the task's rule, when it has one.
   */
  reflect(response: string, tokenIds?: readonly number[]): RemarkResult {
    const attempt = currentAttempt(this.mem);
    const task = this.task;
    const remark = judgeRemark(response, {
      commands: attemptCommands(attempt, this.offered),
      informative: task.remarkInformative ? (text) => task.remarkInformative!(text, attempt) : null,
    });
    recordReflection(this.mem, remark, response, tokenIds);
    return remark;
  }

  /** Step-group anchor for a call in `phase` (observation + opponent, or "reflection" + opponent). */
  anchor(phase: Phase): string {
    return phase === "play" ? this.task.anchor() : this.task.reflectionAnchor();
  }

  info(): TaskInfo {
    return this.task.info();
  }

  get done(): boolean {
    return this.task.done;
  }

  /** 0-based index of the current attempt. */
  get attemptIndex(): number {
    return this.mem.attempts.length - 1;
  }

  /** Play turns taken in the current attempt. */
  get turnIndex(): number {
    return currentAttempt(this.mem).turns.length;
  }

  get currentAttempt(): AttemptRecord {
    return currentAttempt(this.mem);
  }
}
