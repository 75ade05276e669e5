/**
 * Checks of a pretrained model: does it know the formats and keep its choices open?
 *
 * 1. Sampled play (temperature 1, no truncation) through the real trial runner on fresh trials
 *    with the game's default pool, seats mixed, compact prompts, 3 attempts, the corpus's memory
 *    mode (`CORPUS_MEMORY`):
 *    the share of play answers the task accepts (Kuhn: well-formed; TicTacToe and the puzzles:
 *    well-formed and legal), the share of reflections that are a valid `<remark>` (`judgeRemark`:
 *    non-empty, no markup, within the cap, not only action commands) and, where the task judges
 *    it, the share that are informative (reported, no target).
 * 2. Entropy of the first decision of a trial, exactly: the model's probability of each
 *    canonical well-formed answer (`<action>BET</action>` and the template's end-of-turn token, …)
 *    is scored by an `AnswerScorer` (the embedded model in one forward pass, a torch model through
 *    the worker's `logprobs`), renormalised over those answers, and its entropy taken in bits (Kuhn: per seat, the
 *    mean over the cards of the mean over the opening states with that card; TicTacToe: the first
 *    move on the empty board). `mass` is the probability the answers have before renormalising.
 *    The plug-in entropy of the sampled first answers is reported alongside as a cross-check
 *    (biased low for small samples).
 */

import { Rng } from "../../core/rng.js";
import { extractTag } from "../../core/tags.js";
import { countTactics, type TacticsCount } from "../../evaluate/tictactoe-tactics.js";
import { renderChat } from "../../model/chat-template.js";
import type { Kernels } from "../../model/kernels/types.js";
import type { ModelParams } from "../../model/params.js";
import type { Tokenizer } from "../../model/tokenizer.js";
import { scoreBatch } from "../../model/transformer.js";
import type { ChatMessage, Policy, SamplingParams } from "../../policy/types.js";
import { runTrials } from "../../rollout/runner.js";
import type { Row, TrialRecord, TrialSpec } from "../../rollout/types.js";
import { TrialEnv } from "../../tasks/env.js";
import { assignGroups } from "../../tasks/population.js";
import { loadTask, type TaskDefinition } from "../../tasks/registry.js";
import { allCellTexts, tictactoeCellFormat } from "../../tasks/tictactoe.js";
import type { Seat, TaskOptions } from "../../tasks/types.js";
import { CORPUS_MEMORY, checkPretrainGame, DEFAULT_POOLS, type PretrainGame } from "./corpus.js";

/** Sampling of the checks: temperature 1, no truncation. */
export const CHECK_SAMPLING: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] };

export interface PretrainTargets {
  playValid: number;
  remarkValid: number;
  kuhnFirstDecisionBits: number;
  tictactoeFirstMoveBits: number;
}

/** The targets of the model issue. */
export const PRETRAIN_TARGETS: PretrainTargets = {
  playValid: 0.99,
  remarkValid: 0.95,
  kuhnFirstDecisionBits: 0.8,
  tictactoeFirstMoveBits: 2,
};

export interface FirstDecisionState {
  seat: Seat | null;
  /** The observation the decision answers (compact), e.g. "Card: Q. Opp: BET.". */
  state: string;
  /** Kuhn: the agent's card. */
  card?: string;
  /** Renormalised probability of each candidate answer. */
  probs: Record<string, number>;
  /** Probability the model gives the canonical answers together (before renormalising). */
  mass: number;
  bits: number;
}

export interface EntropyReport {
  states: FirstDecisionState[];
  /** Kuhn: per seat, mean over cards; TicTacToe: "first" = the empty board. Puzzles: every initial state found. */
  bySeat: Record<string, number>;
  /** Plug-in entropy of the sampled first answers of attempt 1, per seat (averaged like `bySeat`). */
  sampledBySeat: Record<string, number>;
}

export interface TargetCheck {
  name: string;
  value: number;
  threshold: number;
  met: boolean;
}

export interface PretrainEvaluation {
  /** The built-in game, or "remote" for a served environment's checks (`served-checks.ts`). */
  game: PretrainGame | "remote";
  trials: number;
  playAnswers: number;
  validPlayAnswers: number;
  playValidRate: number;
  /** What the invalid play answers got wrong, by reason. */
  invalidReasons: Record<string, number>;
  /** A few invalid answers as sampled (play and reflect), for reading. */
  invalidExamples: { phase: "play" | "reflect"; response: string; finishReason: string }[];
  reflections: number;
  /** Reflections that were a valid remark (`judgeRemark`: well-formed, not only action commands). */
  validRemarks: number;
  remarkValidRate: number;
  /** Why the invalid reflections were invalid (`RemarkFailure`: missing-tag, markup, echo, …), counted. */
  remarkInvalidReasons?: Record<string, number>;
  /** Reflections the task judged informative, and their share of the judged ones (absent: no rule, e.g. Sokoban). */
  informativeRemarks?: number;
  remarkInformativeRate?: number;
  /** Trials won (in any attempt) by the sampled model, for information. */
  winRate: number;
  /** Served environments: success@1..K of the sampled trials, overall and per category. */
  successAt?: number[];
  byCategory?: Record<string, { trials: number; successAt: number[] }>;
  /** TicTacToe: one-move wins taken and threats blocked in the sampled play, for information. */
  tactics?: TacticsCount;
  entropy: EntropyReport;
  targets: TargetCheck[];
  ms: number;
}

// ---------------------------------------------------------------------------------------------
// exact first-decision entropy

function bitsOf(p: readonly number[]): number {
  let h = 0;
  for (const x of p) if (x > 0) h -= x * Math.log2(x);
  return h;
}

/**
 * The model's probability of each candidate answer `<action>c</action>` (closed by the chat
 * template's end-of-turn token) as the reply to `messages`.
 */
export type AnswerScorer = (
  messages: readonly ChatMessage[],
  candidates: readonly string[],
) => Promise<number[]>;

/** The embedded model's `AnswerScorer`. */
export function embeddedAnswerScorer(params: ModelParams, tok: Tokenizer, kernels: Kernels): AnswerScorer {
  return async (messages, candidates) => answerProbabilities(params, tok, kernels, messages, candidates);
}

/** Probability of each `<action>c</action><|end|>` answer to `messages`, in one scoring pass. */
export function answerProbabilities(
  params: ModelParams,
  tok: Tokenizer,
  kernels: Kernels,
  messages: readonly ChatMessage[],
  candidates: readonly string[],
): number[] {
  const prompt = renderChat(tok, messages, { addGenerationPrompt: true }).ids;
  const sequences: Int32Array[] = [];
  const lossMask: Uint8Array[] = [];
  for (const c of candidates) {
    const answer = [...tok.encode(`<action>${c}</action>`), tok.endId];
    const seq = Int32Array.from([...prompt, ...answer]);
    const mask = new Uint8Array(seq.length);
    mask.fill(1, prompt.length);
    sequences.push(seq);
    lossMask.push(mask);
  }
  const stats = scoreBatch(params, { sequences, lossMask }, kernels);
  const logp = new Float64Array(candidates.length);
  for (let i = 0; i < stats.logp.length; i++) logp[stats.sequence[i]] += stats.logp[i];
  return Array.from(logp, (l) => Math.exp(l));
}

interface OpeningState {
  seat: Seat | null;
  messages: ChatMessage[];
  state: string;
  candidates: string[];
  card?: string;
}

/**
 * The distinct first-decision prompts of attempt 1 that the evaluation scores; `taskOptions` holds
 * TicTacToe's cell format, which both the prompt and the candidate answers follow.
 */
export async function openingStates(
  game: PretrainGame,
  taskOptions: Pick<TaskOptions, "knobs"> = {},
): Promise<OpeningState[]> {
  const def = await loadTask(game);
  const out = new Map<string, OpeningState>();
  const cells = game === "tictactoe" ? allCellTexts(tictactoeCellFormat(taskOptions.knobs)) : [];
  const observe = async (seat: Seat | null, opponent: string | undefined, seed: number) => {
    const task = def.create(def.twoPlayer ? { ...taskOptions, opponent, seat: seat ?? undefined } : {});
    const env = new TrialEnv(task, { style: "compact", reflectionType: "reflection_only" });
    await env.reset(Rng.seeded("pretrain-openings").derive(game, seed));
    const messages = env.messages("play");
    const state = task.compactObservation();
    const key = `${seat}|${state}`;
    if (!out.has(key)) {
      const card = game === "kuhn" ? /Card: ([JQK])\./.exec(state)?.[1] : undefined;
      const candidates = game === "kuhn" ? ["PASS", "BET"] : cells;
      out.set(key, { seat, messages, state, candidates, ...(card ? { card } : {}) });
    }
  };
  if (game === "kuhn") {
    for (const seat of ["first", "second"] as const) {
      for (const entry of DEFAULT_POOLS.kuhn ?? []) {
        for (let seed = 0; seed < 60; seed++) await observe(seat, entry.spec, seed);
      }
    }
  } else if (game === "tictactoe") {
    await observe("first", undefined, 0);
  }
  return [...out.values()].sort(
    (a, b) => (a.seat ?? "").localeCompare(b.seat ?? "") || a.state.localeCompare(b.state),
  );
}

/** Exact entropy (bits) of the first decision in each opening state. */
export async function firstDecisionEntropy(
  game: PretrainGame,
  scoreAnswers: AnswerScorer,
  taskOptions: Pick<TaskOptions, "knobs"> = {},
): Promise<FirstDecisionState[]> {
  const out: FirstDecisionState[] = [];
  for (const s of await openingStates(game, taskOptions)) {
    const p = await scoreAnswers(s.messages, s.candidates);
    const mass = p.reduce((a, b) => a + b, 0);
    const q = p.map((x) => (mass > 0 ? x / mass : 0));
    const probs: Record<string, number> = {};
    s.candidates.forEach((c, i) => {
      probs[c] = q[i];
    });
    out.push({
      seat: s.seat,
      state: s.state,
      ...(s.card ? { card: s.card } : {}),
      probs,
      mass,
      bits: bitsOf(q),
    });
  }
  return out;
}

/** Per seat: mean over cards of the mean over states with that card (one group per state otherwise). */
function averageBySeat(items: readonly { seat: Seat | null; card?: string; state: string; bits: number }[]) {
  const bySeat: Record<string, number> = {};
  const seats = [...new Set(items.map((s) => s.seat ?? "none"))];
  for (const seat of seats) {
    const groups = new Map<string, number[]>();
    for (const s of items) {
      if ((s.seat ?? "none") !== seat) continue;
      const key = s.card ?? s.state;
      groups.set(key, [...(groups.get(key) ?? []), s.bits]);
    }
    const means = [...groups.values()].map((v) => v.reduce((a, b) => a + b, 0) / v.length);
    bySeat[seat] = means.reduce((a, b) => a + b, 0) / Math.max(1, means.length);
  }
  return bySeat;
}

/** Plug-in entropy of the valid first answers (attempt 1, turn 1) per opening state. */
function sampledEntropy(game: PretrainGame, rows: readonly Row[]) {
  const byState = new Map<
    string,
    { seat: Seat | null; card?: string; state: string; counts: Map<string, number> }
  >();
  for (const r of rows) {
    if (r.phase !== "play" || r.attempt !== 0 || r.turn !== 0 || !r.valid) continue;
    if (game === "tictactoe" && r.seat !== "first") continue;
    const lead = r.prompt[r.prompt.length - 1]?.content ?? "";
    const state = lead
      .split("\n")
      .filter((l) => !l.startsWith("Attempt ") && l !== "Your move?")
      .join("\n");
    const tag = extractTag(r.response, "action");
    if (!tag.ok) continue;
    const key = `${r.seat}|${state}`;
    let e = byState.get(key);
    if (!e) {
      const card = game === "kuhn" ? /Card: ([JQK])\./.exec(state)?.[1] : undefined;
      e = { seat: r.seat as Seat, state, counts: new Map(), ...(card ? { card } : {}) };
      byState.set(key, e);
    }
    const a = tag.content.toUpperCase().replace(/\s+/g, " ");
    e.counts.set(a, (e.counts.get(a) ?? 0) + 1);
  }
  const items = [...byState.values()].map((e) => {
    const n = [...e.counts.values()].reduce((a, b) => a + b, 0);
    return { ...e, bits: bitsOf([...e.counts.values()].map((c) => c / n)) };
  });
  return averageBySeat(items);
}

// ---------------------------------------------------------------------------------------------
// the whole evaluation

export interface EvaluateOptions {
  /** Task knobs of the sampled trials and the scored openings: the puzzles' difficulty, TicTacToe's cells. */
  taskOptions?: Pick<TaskOptions, "knobs" | "movesPerTurn" | "maxSteps">;
  game: string;
  /** The sampling policy under test. */
  policy: Policy;
  /** The same model's exact probabilities of the canonical first answers. */
  scoreAnswers: AnswerScorer;
  rng: Rng;
  trials: number;
  sampling?: SamplingParams;
  /** Generate calls of the runner batch at most this many requests (default 64). */
  maxBatch?: number;
  /** Default: `PRETRAIN_TARGETS` (the embedded model's). */
  targets?: PretrainTargets;
}

/** The checks' trials: three attempts each, reflections between them, mixed seats against the pool. */
async function checkTrials(
  opts: EvaluateOptions,
  game: PretrainGame,
  def: TaskDefinition,
): Promise<TrialRecord[]> {
  const groups = assignGroups({
    numGroups: opts.trials,
    pool: def.twoPlayer ? DEFAULT_POOLS[game] : null,
    seats: { mode: "mixed", secondRatio: 0.5 },
    rng: opts.rng.derive("groups"),
  });
  const specs: TrialSpec[] = groups.map((g) => ({
    trialId: g.group,
    groupId: g.group,
    taskSeed: g.taskSeed,
    opponent: g.opponent,
    seat: g.seat,
  }));
  return runTrials(
    specs,
    (s) =>
      def.create({
        ...(opts.taskOptions ?? {}),
        ...(def.twoPlayer ? { opponent: s.opponent ?? undefined, seat: s.seat ?? undefined } : {}),
      }),
    opts.policy,
    opts.rng.derive("run"),
    {
      attempts: 3,
      maxTurns: def.maxTurns,
      reflection: CORPUS_MEMORY,
      promptStyle: "compact",
      hindsight: false,
      sampling: opts.sampling ?? CHECK_SAMPLING,
      maxBatch: opts.maxBatch ?? 64,
      concurrency: 1,
    },
  );
}

/** Invalid play answers counted by reason (cells and quoted text generalised), and a few examples. */
export function invalidAnswers(
  play: readonly Row[],
  reflect: readonly Row[],
): Pick<PretrainEvaluation, "invalidReasons" | "invalidExamples"> {
  const invalidReasons: Record<string, number> = {};
  for (const r of play) {
    if (r.valid) continue;
    const reason = (r.invalidReason ?? "unknown")
      .replace(/\(\d+, \d+\)/g, "(r, c)")
      .replace(/^cell \d\d is/, "cell rc is")
      .replace(/^\d\d is off the board/, "rc is off the board")
      .replace(/"[^"]*"/g, '"…"');
    invalidReasons[reason] = (invalidReasons[reason] ?? 0) + 1;
  }
  const invalidExamples = [
    ...play.filter((r) => !r.valid).slice(0, 4),
    ...reflect.filter((r) => !r.valid).slice(0, 4),
  ].map((r) => ({ phase: r.phase, response: r.response, finishReason: r.finishReason }));
  return { invalidReasons, invalidExamples };
}

/** The invalid reflections of the trials counted by the rule they failed (their memory's `failure`). */
function remarkFailures(records: readonly TrialRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of records) {
    for (const a of r.memory.attempts) {
      const f = a.reflection && !a.reflection.valid ? (a.reflection.failure ?? "invalid") : null;
      if (f !== null) out[f] = (out[f] ?? 0) + 1;
    }
  }
  return out;
}

/**
 * The checks' answer counts and rates over their trials: well-formed play answers, valid remarks
 * (and why the others were not), informative remarks where the task judges them, wins.
 */
export function answerRates(records: readonly TrialRecord[]) {
  const rows = records.flatMap((r) => r.rows);
  const play = rows.filter((r) => r.phase === "play");
  const reflect = rows.filter((r) => r.phase === "reflect");
  const validPlay = play.filter((r) => r.valid).length;
  const validRemarks = reflect.filter((r) => r.valid).length;
  const judged = reflect.filter((r) => r.informative !== undefined);
  const informativeRemarks = judged.filter((r) => r.informative).length;
  return {
    trials: records.length,
    playAnswers: play.length,
    validPlayAnswers: validPlay,
    playValidRate: play.length > 0 ? validPlay / play.length : 0,
    ...invalidAnswers(play, reflect),
    reflections: reflect.length,
    validRemarks,
    remarkValidRate: reflect.length > 0 ? validRemarks / reflect.length : 0,
    remarkInvalidReasons: remarkFailures(records),
    ...(judged.length > 0
      ? { informativeRemarks, remarkInformativeRate: informativeRemarks / judged.length }
      : {}),
    winRate: records.filter((r) => r.attempts.some((a) => a.won)).length / Math.max(1, records.length),
  };
}

export async function evaluatePretrained(opts: EvaluateOptions): Promise<PretrainEvaluation> {
  const t0 = performance.now();
  const game = checkPretrainGame(opts.game);
  const records = await checkTrials(opts, game, await loadTask(game));
  const rows = records.flatMap((r) => r.rows);
  const states =
    game === "kuhn" || game === "tictactoe"
      ? await firstDecisionEntropy(game, opts.scoreAnswers, opts.taskOptions)
      : [];
  const entropy: EntropyReport = {
    states,
    bySeat: averageBySeat(states),
    sampledBySeat: sampledEntropy(game, rows),
  };
  const evaluation: PretrainEvaluation = {
    game,
    ...answerRates(records),
    ...(game === "tictactoe" ? { tactics: countTactics(records.map((r) => r.memory)) } : {}),
    entropy,
    targets: [],
    ms: 0,
  };
  evaluation.targets = targetChecks(evaluation, opts.targets);
  evaluation.ms = performance.now() - t0;
  return evaluation;
}

/** The model issue's targets for this game, checked against an evaluation. */
export function targetChecks(e: PretrainEvaluation, t: PretrainTargets = PRETRAIN_TARGETS): TargetCheck[] {
  const check = (name: string, value: number, threshold: number): TargetCheck => ({
    name,
    value,
    threshold,
    met: value >= threshold,
  });
  const out = [
    check(
      e.game === "kuhn" ? "play answers well-formed" : "play answers well-formed and legal",
      e.playValidRate,
      t.playValid,
    ),
    check("reflections a valid <remark>", e.remarkValidRate, t.remarkValid),
  ];
  if (e.game === "kuhn") {
    for (const seat of ["first", "second"]) {
      out.push(
        check(
          `first-decision entropy, ${seat} seat (bits)`,
          e.entropy.bySeat[seat] ?? 0,
          t.kuhnFirstDecisionBits,
        ),
      );
    }
  } else if (e.game === "tictactoe") {
    out.push(
      check(
        "first-move entropy on the empty board (bits)",
        e.entropy.bySeat.first ?? 0,
        t.tictactoeFirstMoveBits,
      ),
    );
  }
  return out;
}
