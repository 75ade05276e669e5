/**
 * Trial memory: everything one environment did across the attempts of a trial, as plain JSON
 * data (attempts → turns, reflections). Prompts are pure functions of it (see `prompts.ts`), so a
 * transcript can be stored, replayed and compared byte for byte.
 */
import type { RemarkResult } from "../core/tags.js";
import type { Seat, StepResult } from "./types.js";

export interface TurnRecord extends StepResult {
  /** The raw model response of this turn. */
  response: string;
  /** The sampled token ids of the response, when the caller supplied them (compact prompts reuse them). */
  tokenIds?: number[];
}

export interface ReflectionRecord extends RemarkResult {
  response: string;
  tokenIds?: number[];
}

export interface AttemptRecord {
  /** 0-based attempt index. */
  index: number;
  initialObservation: string;
  compactInitialObservation: string;
  /** The initial state's legal actions, kept only for tasks whose prompts list them (see `StepResult.legalActions`). */
  initialLegalActions?: string[];
  turns: TurnRecord[];
  /** The reflection written after this attempt ended (before the next attempt). */
  reflection?: ReflectionRecord;
}

export interface TrialMemory {
  task: string;
  opponent: string | null;
  seat: Seat | null;
  attempts: AttemptRecord[];
}

export function newTrialMemory(task: string, opponent: string | null, seat: Seat | null): TrialMemory {
  return { task, opponent, seat, attempts: [] };
}

/** Opens a new attempt from the (identical) initial observation. */
export function startAttempt(
  memory: TrialMemory,
  initialObservation: string,
  compactInitial: string,
  initialLegalActions?: readonly string[],
): void {
  memory.attempts.push({
    index: memory.attempts.length,
    initialObservation,
    compactInitialObservation: compactInitial,
    ...(initialLegalActions ? { initialLegalActions: [...initialLegalActions] } : {}),
    turns: [],
  });
}

/** The legal actions of the attempt's current state, for tasks that keep them (else undefined). */
export function currentLegalActions(attempt: AttemptRecord): string[] | undefined {
  const last = attempt.turns[attempt.turns.length - 1];
  return last ? last.legalActions : attempt.initialLegalActions;
}

export function currentAttempt(memory: TrialMemory): AttemptRecord {
  const a = memory.attempts[memory.attempts.length - 1];
  if (!a) throw new Error("trial memory has no attempt yet; call reset() first");
  return a;
}

export function recordTurn(
  memory: TrialMemory,
  result: StepResult,
  response: string,
  tokenIds?: readonly number[],
): TurnRecord {
  const rec: TurnRecord = { ...stripUndefined(result), response };
  if (tokenIds) rec.tokenIds = [...tokenIds];
  currentAttempt(memory).turns.push(rec);
  return rec;
}

export function recordReflection(
  memory: TrialMemory,
  remark: RemarkResult,
  response: string,
  tokenIds?: readonly number[],
): ReflectionRecord {
  const attempt = currentAttempt(memory);
  if (attempt.reflection) throw new Error(`attempt ${attempt.index + 1} already has a reflection`);
  const rec: ReflectionRecord = { ...stripUndefined(remark), response };
  if (tokenIds) rec.tokenIds = [...tokenIds];
  attempt.reflection = rec;
  return rec;
}

/** Whether the attempt's last turn finished the game. */
export function attemptFinished(attempt: AttemptRecord): boolean {
  const last = attempt.turns[attempt.turns.length - 1];
  return last?.done ?? false;
}

export function attemptWon(attempt: AttemptRecord): boolean {
  return attempt.turns.some((t) => t.won);
}

/** Full-style sentence on how an attempt ended. */
export function attemptOutcome(attempt: AttemptRecord): string {
  const last = attempt.turns[attempt.turns.length - 1];
  if (!last) return "No move was made.";
  if (last.done) return last.outcome ?? (last.won ? "You won." : "You did not win.");
  return "The attempt ran out of turns before the game was finished.";
}

/** Compact outcome of an attempt ("Lost -2.", "Out of turns."). */
export function compactAttemptOutcome(attempt: AttemptRecord): string {
  const last = attempt.turns[attempt.turns.length - 1];
  if (!last) return "No move.";
  if (last.done) return last.compactOutcome ?? (last.won ? "Won." : "Not won.");
  return "Out of turns.";
}

export interface HistoryWindow {
  /** How many of the most recent turns to list (reference: 7). */
  historyLength: number;
  /** For how many of the most recent listed turns the observation is shown (play 2, reflect 7). */
  obsLength: number;
  /** Use hindsight observations where a turn has them (training reflections). */
  hindsight?: boolean;
}

/**
 * The reference's memory fetch: the last `historyLength` turns of an attempt as
 * `Step n - <Word>: <action>` lines (with what happened), with the observation after the move
 * shown for the last `obsLength` of them. Turns after the first `done` turn are never listed.
 */
export function formatHistory(attempt: AttemptRecord, actionWord: string, w: HistoryWindow): string {
  let turns = attempt.turns;
  const doneAt = turns.findIndex((t) => t.done);
  if (doneAt >= 0) turns = turns.slice(0, doneAt + 1);
  const start = Math.max(0, turns.length - w.historyLength);
  const lines: string[] = [];
  for (let i = start; i < turns.length; i++) {
    const t = turns[i];
    let line: string;
    if (t.valid) {
      line = `Step ${i + 1} - ${actionWord}: ${t.action}`;
      if (t.feedback) line += ` (${t.feedback.replace(/\.$/, "")})`;
    } else {
      const act = t.action === "" ? "(none)" : t.action;
      line = `Step ${i + 1} - ${actionWord}: ${act}, but it is invalid (${t.invalidReason ?? "unreadable"})`;
    }
    if (i >= turns.length - w.obsLength) {
      const obs =
        w.hindsight && t.hindsightObservation !== undefined ? t.hindsightObservation : t.observation;
      line += `\nObservation:\n${obs}`;
    }
    lines.push(line);
  }
  return lines.join("\n");
}

function stripUndefined<T extends object>(o: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out as T;
}
