/**
 * The one prompt builder: trial memory (plain data) + the task's prompt text → chat messages.
 *
 * Two styles:
 * - `full` (the reference's way): one user message rebuilt on every call — rules, earlier
 *   attempts as `reflectionType` says, the initial state, a window over the current attempt
 *   (last 7 turns, observations for the last 2 in play and all 7 when reflecting), and the
 *   answer format. The reflect prompt sees only the attempt that just ended.
 * - `compact` (for small models): a chat. The system message holds the terse rules; each call
 *   adds one user message (what happened since the last call plus the new observation), each
 *   response stays as an assistant message (with its sampled token ids). Within an attempt every
 *   call's list extends the previous call's list plus its response. What earlier attempts leave
 *   depends on `reflectionType`, as LaMer defines the three memory modes:
 *   - `reflection_only`: one line per earlier attempt (its outcome) and its reflection, in the
 *     first user message of the attempt; none of its turns. Each attempt starts a new chat.
 *   - `history_only`: every earlier turn, no reflections (and no reflect call).
 *   - `history_and_reflection`: every earlier turn and reflect exchange; the whole trial is one
 *     append-only token stream.
 *
 * In both styles `history_only` makes no reflect call: nothing would ever read it.
 */
import type { ChatMessage } from "../policy/types.js";
import {
  type AttemptRecord,
  attemptOutcome,
  attemptWon,
  compactAttemptOutcome,
  currentLegalActions,
  formatHistory,
  type TrialMemory,
} from "./memory.js";
import type { Phase, PromptStyle, ReflectionType, TaskPromptText } from "./types.js";

export interface PromptOptions {
  style: PromptStyle;
  reflectionType: ReflectionType;
  /** Reflections see hidden information (Kuhn: the opponent's card), as the reference's training does. */
  hindsight?: boolean;
  /** Turns listed per attempt in full prompts (reference 7). */
  historyLength?: number;
  /** Turns with observations in full play prompts (reference 2). */
  playObsLength?: number;
  /** Turns with observations in full reflect prompts (reference 7). */
  reflectObsLength?: number;
  /**
   * Leave out the first `dropOldest` earlier attempts (context overflow policy "drop-oldest"):
   * `full` drops their past-attempt blocks; `compact` drops their messages after the system
   * message. Never drops the current attempt (clamped to the number of earlier attempts).
   * Attempt numbers shown stay the true ones. Default 0.
   */
  dropOldest?: number;
}

export const DEFAULT_PROMPT_OPTIONS: Required<PromptOptions> = {
  style: "full",
  reflectionType: "reflection_only",
  hindsight: false,
  historyLength: 7,
  playObsLength: 2,
  reflectObsLength: 7,
  dropOldest: 0,
};

/** Whether a trial with these options makes reflect calls between attempts (`style` kept for callers). */
export function reflectCallExpected(_style: PromptStyle, reflectionType: ReflectionType): boolean {
  return reflectionType !== "history_only";
}

/** Builds the messages for the next call (`phase`) of the trial in `memory`. */
export function buildPrompt(
  memory: TrialMemory,
  text: TaskPromptText,
  phase: Phase,
  options: PromptOptions,
): ChatMessage[] {
  const o: Required<PromptOptions> = {
    ...DEFAULT_PROMPT_OPTIONS,
    ...taskHistory(text),
    ...stripUndefined(options),
  };
  if (memory.attempts.length === 0) throw new Error("trial memory has no attempt yet; call reset() first");
  if (phase === "reflect" && !reflectCallExpected(o.style, o.reflectionType)) {
    throw new Error('reflectionType "history_only" makes no reflect call');
  }
  if (o.style === "full") {
    return [
      { role: "user", content: phase === "play" ? fullPlay(memory, text, o) : fullReflect(memory, text, o) },
    ];
  }
  return compactMessages(memory, text, phase, o);
}

// ---------------------------------------------------------------------------------------------
// full style

function fullPlay(memory: TrialMemory, text: TaskPromptText, o: Required<PromptOptions>): string {
  const attempts = memory.attempts;
  const k = attempts.length - 1;
  const cur = attempts[k];
  const parts: string[] = [text.rules];
  const from = Math.min(k, Math.max(0, o.dropOldest));
  if (k > from) {
    const blocks = attempts.slice(from, k).map((a) => pastAttemptBlock(a, text, o));
    parts.push(`## Your earlier attempts at this same game\n${blocks.join("\n\n")}`);
  }
  parts.push(`## Initial state\n${cur.initialObservation}`);
  const t = cur.turns.length;
  const history = () =>
    formatHistory(cur, text.actionWord, { historyLength: o.historyLength, obsLength: o.playObsLength });
  if (k === 0 && t > 0) parts.push(`## This game so far\nYou have already made these moves:\n${history()}`);
  if (k > 0 && t === 0) {
    parts.push(`## Now\nThis is attempt #${k + 1}. The game starts again from the initial state above.`);
  }
  if (k > 0 && t > 0) parts.push(`## Now\nThis is attempt #${k + 1}. Moves made so far in it:\n${history()}`);
  if (text.legalActionsHeading !== undefined) {
    parts.push(`${text.legalActionsHeading} [${(currentLegalActions(cur) ?? []).join(", ")}]`);
  }
  parts.push(text.playInstruction);
  return parts.join("\n\n");
}

/** The history window a task asks for, as prompt options (explicit options still win). */
function taskHistory(text: TaskPromptText): Partial<PromptOptions> {
  if (!text.history) return {};
  return {
    historyLength: text.history.turns,
    playObsLength: text.history.playObservations,
    reflectObsLength: text.history.reflectObservations,
  };
}

function pastAttemptBlock(a: AttemptRecord, text: TaskPromptText, o: Required<PromptOptions>): string {
  const n = a.index + 1;
  const verdict = attemptWon(a) ? "was successful" : "was NOT successful";
  const outcome = `Attempt #${n} ${verdict}: ${attemptOutcome(a)}`;
  const reflection = `Your reflection after attempt #${n}:\n${a.reflection?.valid ? a.reflection.text : "(no reflection was written)"}`;
  const history = () =>
    `In attempt #${n} you made these moves:\n${formatHistory(a, text.actionWord, {
      historyLength: o.historyLength,
      obsLength: o.playObsLength,
    })}`;
  switch (o.reflectionType) {
    case "reflection_only":
      return `${outcome}\n${reflection}`;
    case "history_only":
      return `${history()}\n${outcome}`;
    case "history_and_reflection":
      return `${history()}\n${outcome}\n${reflection}`;
  }
}

function fullReflect(memory: TrialMemory, text: TaskPromptText, o: Required<PromptOptions>): string {
  const cur = memory.attempts[memory.attempts.length - 1];
  const verdict = attemptWon(cur) ? "The game was won." : "The game was NOT won.";
  const history = formatHistory(cur, text.actionWord, {
    historyLength: o.historyLength,
    obsLength: o.reflectObsLength,
    hindsight: o.hindsight,
  });
  return [
    text.rules,
    "## Your task now: learn from the attempt you just played\n" +
      "You will play this exact game again from the same initial state. Look back at the attempt, " +
      "find the moves that cost you, and work out a short, better plan for the next attempt.",
    `## Initial state\n${cur.initialObservation}`,
    `## The attempt\n${history === "" ? "(no moves)" : history}\nOutcome: ${attemptOutcome(cur)} ${verdict}`,
    "Reason step by step about what went wrong and why. Then state a concise plan for the next attempt " +
      "that names concrete moves. End your answer with the reflection inside <remark> </remark>, " +
      "for example <remark>Open in the center, then block the diagonal.</remark>",
  ].join("\n\n");
}

// ---------------------------------------------------------------------------------------------
// compact style

function compactMessages(
  memory: TrialMemory,
  text: TaskPromptText,
  phase: Phase,
  o: Required<PromptOptions>,
): ChatMessage[] {
  const out: ChatMessage[] = [{ role: "system", content: text.compactRules }];
  const attempts = memory.attempts;
  const current = attempts.length - 1;
  const from = Math.min(current, Math.max(0, o.dropOldest));
  // reflection_only replays only the current attempt's turns; its first lead summarises the rest.
  const firstReplayed = o.reflectionType === "reflection_only" ? current : from;
  for (let k = firstReplayed; k < attempts.length; k++) {
    const a = attempts[k];
    for (let t = 0; t < a.turns.length; t++) {
      out.push({ role: "user", content: compactPlayLead(attempts, k, t, text, from, o.reflectionType) });
      out.push(assistant(a.turns[t].response, a.turns[t].tokenIds));
    }
    if (a.reflection && o.reflectionType !== "history_only") {
      out.push({ role: "user", content: compactReflectLead(a, o) });
      out.push(assistant(a.reflection.response, a.reflection.tokenIds));
    }
  }
  const cur = attempts[current];
  const lead =
    phase === "play"
      ? compactPlayLead(attempts, current, cur.turns.length, text, from, o.reflectionType)
      : compactReflectLead(cur, o);
  out.push({ role: "user", content: lead });
  return out;
}

function assistant(content: string, tokenIds?: readonly number[]): ChatMessage {
  return tokenIds ? { role: "assistant", content, tokenIds } : { role: "assistant", content };
}

/** The user message before turn `t` of attempt `k`. */
function compactPlayLead(
  attempts: readonly AttemptRecord[],
  k: number,
  t: number,
  text: TaskPromptText,
  from: number,
  reflectionType: ReflectionType,
): string {
  const a = attempts[k];
  if (t === 0) {
    const parts: string[] = [];
    if (reflectionType === "reflection_only") {
      parts.push(...attempts.slice(from, k).map(compactAttemptNote));
    } else {
      // A dropped attempt's ending is dropped with it.
      const prev = k > from ? attempts[k - 1] : undefined;
      // The end of the previous attempt, unless its reflect exchange (kept above) already showed it.
      const endShown = prev?.reflection !== undefined && reflectionType === "history_and_reflection";
      if (prev && !endShown) parts.push(compactEnd(prev));
    }
    parts.push(`Attempt ${k + 1}.`, a.compactInitialObservation, text.compactAsk);
    return joinLines(parts);
  }
  const prev = a.turns[t - 1];
  return joinLines([prev.compactFeedback, prev.compactObservation, text.compactAsk]);
}

/** reflection_only's whole memory of an earlier attempt: its outcome and its reflection. */
function compactAttemptNote(a: AttemptRecord): string {
  const note = a.reflection?.valid ? a.reflection.text : "(no reflection was written)";
  return `Attempt ${a.index + 1}: ${compactAttemptOutcome(a)}\nYour reflection: ${note}`;
}

/**
 * What the last turn of an attempt led to and how the attempt ended: the task's feedback, or,
 * where a task writes none (served environments put it all in the observation), the state the
 * last action left. Without it a coin-collector reflection never saw the room its attempt ended in.
 */
function compactEnd(a: AttemptRecord): string {
  const last = a.turns[a.turns.length - 1];
  const ledTo = last ? last.compactFeedback || last.compactObservation : "";
  return joinLines([ledTo, compactAttemptOutcome(a)]);
}

function compactReflectLead(a: AttemptRecord, o: Required<PromptOptions>): string {
  const last = a.turns[a.turns.length - 1];
  const hind = o.hindsight && last?.compactHindsight ? last.compactHindsight : "";
  return joinLines([
    compactEnd(a),
    hind,
    "Reflect: what to change next attempt? Answer in <remark></remark>.",
  ]);
}

function joinLines(parts: readonly string[]): string {
  return parts.filter((p) => p.length > 0).join("\n");
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out as Partial<T>;
}
