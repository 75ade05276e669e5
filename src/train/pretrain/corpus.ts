/**
 * The pretraining corpus: whole compact-style trials played by unskilled scripted players
 * through the real trial runner.
 *
 * The players know the answer format and the rules' surface, never the strategy:
 * - play: a uniformly random legal action read off the current observation
 *   (`<action>BET</action>`, `<action>(2, 3)</action>`, `<action>up, left</action>`), except that
 *   a share `malformedRate` (default 2%) of play answers is deliberately malformed, in varied
 *   ways (missing tags, an unclosed tag, a wrong word, an off-board or occupied cell, too many
 *   moves), so the transcripts show the task's invalid-action feedback;
 * - reflect: `<remark>…</remark>` filled from templates that say what happened in the attempt
 *   (the card held, the moves made, the opponent's replies, how it ended, the result), never
 *   what would have been better.
 *
 * The puzzles' player is deliberately imperfect instead (`epsilon`, issue 18): with
 * probability 1 − ε a move comes from a solver — Sokoban: the next move of a BFS shortest
 * solution of the current position, re-solved every turn; MineSweeper: a cell that the numbers
 * prove safe, else a random closed cell not proven a mine — and with probability ε it is a
 * random direction or a random closed cell. ε = 1 is the old random player.
 *
 * A MineSweeper player that heeds its reflections (`heedReflections`) never reveals, in a later
 * attempt, a cell that an earlier attempt's reflection named a mine ("(2, 3) was a mine."),
 * unless nothing else is left: the corpus then shows a reflection changing the next attempt.
 *
 * Everything is keyed by the caller's `Rng`: the same seed gives the same corpus byte for byte.
 */
import { expectChoice } from "../../core/errors.js";
import type { Rng } from "../../core/rng.js";
import { extractTag } from "../../core/tags.js";
import { completingCells } from "../../evaluate/tictactoe-tactics.js";
import { parseSokoban, type SokobanMove, solve } from "../../games/sokoban/index.js";
import { lastUserMessage, ScriptedAgent, type ScriptedBehaviour } from "../../policy/scripted-agent.js";
import type { ChatMessage, SamplingParams } from "../../policy/types.js";
import { runTrials } from "../../rollout/runner.js";
import type { Row, TrialRecord, TrialSpec } from "../../rollout/types.js";
import { type CellFormat, cellName } from "../../tasks/cell-format.js";
import { minesweeperCellFormatOfPrompt } from "../../tasks/minesweeper.js";
import { assignGroups, type PoolEntry } from "../../tasks/population.js";
import { loadTask } from "../../tasks/registry.js";
import {
  allCellTexts,
  cellFormatOfPrompt,
  cellText,
  type TicTacToeCellFormat,
} from "../../tasks/tictactoe.js";
import type { TaskOptions } from "../../tasks/types.js";
import { prefixChains } from "../batch.js";
import type { ServedCorpusStats } from "./served-corpus-stats.js";

export const PRETRAIN_GAMES = ["kuhn", "tictactoe", "sokoban", "minesweeper"] as const;
export type PretrainGame = (typeof PRETRAIN_GAMES)[number];

/** The reference's training pools (mage-reference §6): Kuhn 0.3/0.3/0.4; TicTacToe MCTS, 6 preferred orders, random ×2. */
export const DEFAULT_POOLS: Record<PretrainGame, readonly PoolEntry[] | null> = {
  kuhn: [
    { spec: "conservative", weight: 0.3 },
    { spec: "aggressive", weight: 0.3 },
    { spec: "intermediate", weight: 0.4 },
  ],
  tictactoe: [
    { spec: "mcts:100", weight: 1 },
    ...[1, 2, 3, 4, 5, 6].map((i) => ({ spec: `preferred:${i}`, weight: 1 })),
    { spec: "random", weight: 2 },
  ],
  sokoban: null,
  minesweeper: null,
};

/**
 * The memory mode of the built-in games' corpora and checks: the whole trial as one append-only
 * chat. Their scripted players read their own earlier remarks back from it (MineSweeper's heeding
 * player, Sokoban's listed moves), and the built-in game configs train in this mode.
 */
export const CORPUS_MEMORY = "history_and_reflection" as const;

/**
 * What a corpus trial's assistant message is. A `detour` is an accepted move the corpus player made
 * at random to vary the states it visits: kept in the transcript, so the answers after it show how
 * to recover, but never a target of the SFT (a served corpus with `scoreRandomMoves: false`).
 */
export type ResponseKind = "action" | "malformed" | "reflection" | "detour";

/** One chat of a played trial: the whole trial, or one attempt of a `reflection_only` trial. */
export interface CorpusTrial {
  opponent: string | null;
  seat: string | null;
  /** Whether the runner used hindsight reflect prompts for this trial. */
  hindsight: boolean;
  /** One append-only chat (system, then user/assistant turns), no token ids. */
  messages: ChatMessage[];
  /** Kind of each assistant message, in order. */
  kinds: ResponseKind[];
  /**
   * Served corpora: per assistant message, the answers its state admitted and the ones the
   * environment's expert judged a waste there (`avoid`), for the unlikelihood term; null where
   * it named none. Absent: the built-in games read theirs off the prompt (`answerChoices`).
   */
  choices?: (AnswerChoices | null)[];
  attempts: number;
  won: boolean;
}

export interface CorpusStats {
  /** Trials the scripted player won (in any attempt) and won at its first attempt. */
  won?: number;
  wonFirst?: number;
  trials: number;
  playResponses: number;
  malformed: number;
  reflections: number;
  /** A served environment's corpus: what it holds for teaching the reflection (`served-corpus.ts`). */
  served?: ServedCorpusStats;
}

export interface Corpus {
  game: PretrainGame;
  trials: CorpusTrial[];
  stats: CorpusStats;
}

export interface CorpusOptions {
  game: string;
  /** Number of trials (each its own task instance). */
  trials: number;
  rng: Rng;
  /** Attempts per trial (default 3). */
  attempts?: number;
  /** Share of play answers that are deliberately malformed (default 0.02). */
  malformedRate?: number;
  /** Share of TicTacToe moves that take a one-move win or block when there is one (default 0). */
  tacticalRate?: number;
  /** Opponent pool (default `DEFAULT_POOLS[game]`). */
  pool?: readonly PoolEntry[] | null;
  /** Share of trials run with hindsight reflect prompts (default 0.5). */
  hindsightShare?: number;
  /** Puzzles: share of the scripted player's moves that are random instead of the solver's (default 1). */
  epsilon?: number;
  /** Puzzles: most moves (Sokoban) or cells (MineSweeper) a reflection lists, the rest counted (default 0: all). */
  reflectionMoves?: number;
  /** MineSweeper: later attempts never reveal a cell an earlier reflection named a mine (default false). */
  heedReflections?: boolean;
  /** Task knobs: the puzzles' difficulty, TicTacToe's cell format (`taskKnobOptions`). */
  taskOptions?: Pick<TaskOptions, "knobs" | "movesPerTurn" | "maxSteps">;
}

/** The answers a play decision admits (tagged, as written) and those to push down there. */
export interface AnswerChoices {
  legal: string[];
  illegal: string[];
}

/**
 * The play answers of a decision, legal and not, written as the scripted player writes them
 * (`<action>(2, 3)</action>`), for games with a small answer set (TicTacToe: the illegal ones are
 * the taken cells); null for the others, and for decisions without an illegal answer.
 * `messages` ends with the prompt of the decision.
 */
export function answerChoices(game: PretrainGame, messages: readonly ChatMessage[]): AnswerChoices | null {
  const player = PLAYERS[game];
  if (!player.answerSet) return null;
  const legal = new Set(player.legal(messages));
  const illegal = player.answerSet(messages).filter((a) => !legal.has(a));
  if (illegal.length === 0) return null;
  const tag = (a: string) => `<action>${a}</action>`;
  return { legal: [...legal].map(tag), illegal: illegal.map(tag) };
}

/** The game name, or a UsageError listing the valid ones. */
export function checkPretrainGame(game: string): PretrainGame {
  return expectChoice("game", game, PRETRAIN_GAMES);
}

// ---------------------------------------------------------------------------------------------
// reading the prompt

/** The messages of the attempt in progress: its first user message and what followed. */
interface AttemptView {
  /** First user message of the attempt (holds "Attempt N." and the initial observation). */
  lead: string;
  /** The agent's responses in the attempt, each with the user message that answered it. */
  turns: { response: string; after: string }[];
}

const ATTEMPT_LINE = /^Attempt \d+\.$/m;

function attemptView(messages: readonly ChatMessage[]): AttemptView {
  let start = -1;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === "user" && ATTEMPT_LINE.test(messages[i].content)) {
      start = i;
      break;
    }
  }
  if (start < 0) return { lead: lastUserMessage(messages), turns: [] };
  const turns: { response: string; after: string }[] = [];
  for (let i = start + 1; i < messages.length; i++) {
    if (messages[i].role !== "assistant") continue;
    const next = messages[i + 1];
    turns.push({ response: messages[i].content, after: next?.role === "user" ? next.content : "" });
  }
  return { lead: messages[start].content, turns };
}

/** The moves of valid turns (a turn is invalid when the reply to it starts with "Invalid:"). */
function validMoves(view: AttemptView): string[] {
  const out: string[] = [];
  for (const t of view.turns) {
    if (t.after.startsWith("Invalid:")) continue;
    const tag = extractTag(t.response, "action");
    if (tag.ok) out.push(tag.content);
  }
  return out;
}

function invalidCount(view: AttemptView): number {
  return view.turns.filter((t) => t.after.startsWith("Invalid:")).length;
}

/** Lines of the reflect prompt before its question: how the attempt ended. */
function endLines(messages: readonly ChatMessage[]): string[] {
  return lastUserMessage(messages)
    .split("\n")
    .filter((l) => l.length > 0 && !l.startsWith("Reflect:"));
}

/** The compact outcome line ("Lost -2.", "Draw.", "Out of turns."): the last end line that looks like one. */
function outcomeLine(lines: readonly string[]): string {
  const known = /^(Won|Lost|Draw|Out of|No move|Not won|Cleared|Solved|Stuck)/;
  for (let i = lines.length - 1; i >= 0; i--) if (known.test(lines[i])) return lines[i];
  return lines[lines.length - 1] ?? "No result.";
}

function listText(items: readonly string[], empty: string): string {
  return items.length === 0 ? empty : items.join(", ");
}

function invalidNote(n: number): string {
  return n === 0 ? "" : n === 1 ? " One answer was invalid." : ` ${n} answers were invalid.`;
}

function remark(text: string): string {
  return `<remark>${text.replace(/\s+/g, " ").trim()}</remark>`;
}

// ---------------------------------------------------------------------------------------------
// the players

/** A deliberately malformed play answer: which kinds a game has and how each is written. */
type MalformedWriter = (legal: readonly string[], messages: readonly ChatMessage[], rng: Rng) => string;

interface GamePlayer {
  legal(messages: readonly ChatMessage[]): string[];
  malformed: Record<string, MalformedWriter>;
  /** `maxMoves`: Sokoban lists at most this many moves, the rest counted (0: every move). */
  reflection(messages: readonly ChatMessage[], rng: Rng, maxMoves: number): string;
  /** The one-move tactical answers of the position (a win, else a block), when the game has any. */
  tactical?(messages: readonly ChatMessage[]): string[];
  /**
   * Puzzles: the ε-imperfect solver's answer (the tag content), or null when it has none. With
   * `heed`, what the trial's earlier reflections say went wrong is never done again.
   */
  skilled?(messages: readonly ChatMessage[], rng: Rng, epsilon: number, heed: boolean): string | null;
  /** Whether `skilled` can heed reflections (the games that can say what a reflection warns of). */
  heedsReflections?: boolean;
  /** Every tag content a play answer could name, legal or not, where that set is small (TicTacToe's cells). */
  answerSet?(messages: readonly ChatMessage[]): readonly string[];
}

function playerBehaviour(
  p: GamePlayer,
  malformedRate: number,
  tacticalRate: number,
  epsilon = 1,
  reflectionMoves = 0,
  heed = false,
): ScriptedBehaviour {
  const kinds = Object.keys(p.malformed);
  return {
    play(messages, rng) {
      const legal = p.legal(messages);
      if (legal.length === 0) throw new Error("scripted player: no legal action in the prompt");
      if (rng.derive("malformed?").float() < malformedRate) {
        const kind = rng.derive("kind").pick(kinds);
        return p.malformed[kind](legal, messages, rng.derive("malformed", kind));
      }
      // Drawn only when asked for, so a corpus without tactics is the same as before the option.
      if (tacticalRate > 0 && p.tactical && rng.derive("tactical?").float() < tacticalRate) {
        const moves = p.tactical(messages);
        if (moves.length > 0) return `<action>${rng.derive("tactical").pick(moves)}</action>`;
      }
      if (epsilon < 1 && p.skilled) {
        const answer = p.skilled(messages, rng.derive("skilled"), epsilon, heed);
        if (answer !== null) return `<action>${answer}</action>`;
      }
      return `<action>${rng.derive("move").pick(legal)}</action>`;
    },
    reflect(messages, rng) {
      return p.reflection(messages, rng, reflectionMoves);
    },
  };
}

// ---- Kuhn ----

const KUHN_MOVES = ["PASS", "BET"];

/** The action sequence of the hand as far as the prompt shows it, as ["You: BET", "Opp: PASS", …]. */
function kuhnSequence(view: AttemptView, end: readonly string[]): string[] {
  let seq: string[] = [];
  const obs = [view.lead, ...view.turns.map((t) => t.after)];
  for (const text of obs) {
    const line = text.split("\n").find((l) => l.startsWith("Card:"));
    if (line) seq = [...line.matchAll(/(You|Opp): (PASS|BET)\./g)].map((m) => `${m[1]}: ${m[2]}`);
  }
  const last = view.turns[view.turns.length - 1];
  if (last && !last.after.startsWith("Invalid:") && !last.after.includes("Card:")) {
    // The final turn: the reflect prompt's first line holds the replies that ended the hand.
    const tag = extractTag(last.response, "action");
    if (tag.ok) seq.push(`You: ${tag.content.toUpperCase()}`);
    for (const m of (end[0] ?? "").matchAll(/Opp: (PASS|BET)\./g)) seq.push(`Opp: ${m[1]}`);
  }
  return seq;
}

const kuhnPlayer: GamePlayer = {
  legal: () => [...KUHN_MOVES],
  malformed: {
    "no-tags": (legal, _m, rng) => rng.pick(legal),
    unclosed: (legal, _m, rng) => `<action>${rng.pick(legal)}`,
    "wrong-word": (_l, _m, rng) => `<action>${rng.pick(["CALL", "FOLD", "CHECK", "RAISE"])}</action>`,
    empty: () => "<action></action>",
  },
  reflection(messages, rng) {
    const view = attemptView(messages);
    const end = endLines(messages);
    const card = /Card: ([JQK])\./.exec(view.lead)?.[1] ?? "?";
    const seq = kuhnSequence(view, end);
    const mine = seq.filter((s) => s.startsWith("You")).map((s) => s.slice(5));
    const showdown = end.map((l) => /Showdown: you ([JQK]), opp ([JQK])\./.exec(l)).find((m) => m);
    const hindsight = end.map((l) => /Opp had ([JQK])\./.exec(l)).find((m) => m);
    const oppCard = showdown?.[2] ?? hindsight?.[1];
    const folded = end.find((l) => /folded\./.test(l));
    const how = showdown
      ? `Showdown, opp had ${showdown[2]}.`
      : folded
        ? `${folded.includes("You folded") ? "I folded" : "Opp folded"}${oppCard ? `, opp had ${oppCard}` : ""}.`
        : "";
    const result = outcomeLine(end);
    const seqText = listText(
      seq.map((s) => (s.startsWith("You") ? `me ${s.slice(5)}` : `opp ${s.slice(5)}`)),
      "no actions",
    );
    const inv = invalidNote(invalidCount(view));
    const templates = [
      () => `${card}: ${seqText}. ${how} ${result}${inv}`,
      () => `Had ${card}, played ${listText(mine, "nothing")}. ${how} ${result}${inv}`,
      () => `${result} ${card}, ${seqText}.${inv}`,
    ];
    return remark(rng.pick(templates)());
  },
};

// ---- TicTacToe ----

/** A compact board row: X, O, or an empty cell shown as its row and column digits ("23"). */
const BOARD_ROW = /^(X|O|[1-3][1-3])( (X|O|[1-3][1-3])){2}$/;

/** Board lines of the last observation in `text` (3 rows of 3 cells), or null. */
function tictactoeBoard(text: string): string[][] | null {
  const rows = text.split("\n").filter((l) => BOARD_ROW.test(l));
  if (rows.length < 3) return null;
  return rows.slice(-3).map((r) => r.split(" "));
}

function isEmptyCell(m: string): boolean {
  return m !== "X" && m !== "O";
}

/** The trial's rules: its first messages, where a board game's prompt names its cell format. */
function promptRules(messages: readonly ChatMessage[]): string {
  return messages
    .slice(0, 2)
    .map((m) => m.content)
    .join("\n");
}

/** The cell format the trial's prompt asks for. */
function promptCellFormat(messages: readonly ChatMessage[]): TicTacToeCellFormat {
  return cellFormatOfPrompt(promptRules(messages));
}

function cellsWhere(board: string[][], mark: (m: string) => boolean, format: TicTacToeCellFormat): string[] {
  const out: string[] = [];
  for (let cell = 0; cell < 9; cell++)
    if (mark(board[Math.floor(cell / 3)][cell % 3])) out.push(cellText(cell, format));
  return out;
}

/** "(2, 3)" as its digits, "23" (the digits format of the same cell). */
function cellDigits(pair: string): string {
  return pair.replace(/[^0-9]/g, "");
}

/** An opponent's move as the compact feedback writes it ("Opp: (2, 3)." or "Opp: 23."). */
const OPP_MOVE = /Opp: (\(\d, \d\)|\d\d)/g;

const tictactoePlayer: GamePlayer = {
  answerSet: (messages) => allCellTexts(promptCellFormat(messages)),
  legal(messages) {
    const board = tictactoeBoard(lastUserMessage(messages));
    if (!board) throw new Error("scripted TicTacToe player: no board in the prompt");
    return cellsWhere(board, isEmptyCell, promptCellFormat(messages));
  },
  tactical(messages) {
    const compact = tictactoeBoard(lastUserMessage(messages));
    if (!compact) return [];
    const board = compact.map((row) => row.map((m) => (isEmptyCell(m) ? "." : m)));
    const wins = completingCells(board, "X");
    const format = promptCellFormat(messages);
    return [...(wins.size > 0 ? wins : completingCells(board, "O"))]
      .map((c) => (format === "digits" ? cellDigits(c) : c))
      .sort();
  },
  malformed: {
    "no-tags": (legal, _m, rng) => rng.pick(legal),
    unclosed: (legal, _m, rng) => `<action>${rng.pick(legal)}`,
    "off-board": (_l, messages, rng) => {
      const cell = rng.pick(["(4, 1)", "(0, 2)", "(2, 4)", "(3, 0)", "(4, 4)"]);
      return `<action>${promptCellFormat(messages) === "digits" ? cellDigits(cell) : cell}</action>`;
    },
    occupied: (_l, messages, rng) => {
      const board = tictactoeBoard(lastUserMessage(messages));
      const taken = board ? cellsWhere(board, (m) => !isEmptyCell(m), promptCellFormat(messages)) : [];
      return `<action>${taken.length > 0 ? rng.pick(taken) : "(4, 2)"}</action>`;
    },
    "wrong-word": (_l, _m, rng) => `<action>${rng.pick(["center", "corner", "2 3", "middle"])}</action>`,
  },
  reflection(messages, rng) {
    const view = attemptView(messages);
    const end = endLines(messages);
    const mine = validMoves(view);
    const theirs: string[] = [];
    for (const text of [...view.turns.map((t) => t.after), end[0] ?? ""]) {
      for (const m of text.matchAll(OPP_MOVE)) theirs.push(m[1]);
    }
    const openBoard = tictactoeBoard(view.lead);
    const opening = openBoard ? cellsWhere(openBoard, (m) => m === "O", promptCellFormat(messages)) : [];
    const opp = [...opening, ...theirs.filter((c, i) => theirs.indexOf(c) === i)];
    const result = outcomeLine(end);
    const line = end.some((l) => l.includes("three in a row") || l.includes("Three in a row"))
      ? end.some((l) => l.startsWith("You made"))
        ? " I made three in a row."
        : " Opp made three in a row."
      : "";
    const inv = invalidNote(invalidCount(view));
    const mineText = listText(mine, "nothing");
    const lastOpp = opp.length > 0 ? opp[opp.length - 1] : "nothing";
    const templates = [
      () => `I played ${mineText}.${line} ${result}${inv}`,
      () => `${result} My moves: ${mineText}.${inv}`,
      () => `Opp last played ${lastOpp}.${line} ${result}${inv}`,
    ];
    return remark(rng.pick(templates)());
  },
};

// ---- Sokoban ----

const DIRECTIONS = ["up", "down", "left", "right"];
const SOKOBAN_ROW = /^[#_OX√PS]+$/u;

/** The last board drawn in the prompt's last user message (compact rows of symbols). */
export function sokobanBoardLines(text: string): string[] {
  const lines = text.split("\n");
  let end = -1;
  for (let i = lines.length - 1; i >= 0; i--) {
    if (SOKOBAN_ROW.test(lines[i])) {
      end = i;
      break;
    }
  }
  if (end < 0) return [];
  let start = end;
  while (start > 0 && SOKOBAN_ROW.test(lines[start - 1])) start--;
  return lines.slice(start, end + 1);
}

/** Up to `k` moves: the BFS solution's next moves, each replaced by a random direction with probability ε. */
export function imperfectSokobanMoves(
  board: readonly string[],
  k: number,
  rng: Rng,
  epsilon: number,
): SokobanMove[] | null {
  let plan: readonly SokobanMove[] = [];
  try {
    const r = solve(parseSokoban(board), { maxDepth: 60, maxStates: 200_000 });
    if (r.status === "solved") plan = r.moves;
  } catch {
    return null;
  }
  const n = Math.max(1, Math.min(k, plan.length || k));
  const out: SokobanMove[] = [];
  for (let i = 0; i < n; i++) {
    const random = i >= plan.length || rng.derive("eps", i).float() < epsilon;
    out.push(random ? (rng.derive("dir", i).pick(DIRECTIONS) as SokobanMove) : plan[i]);
    // after a random move the rest of the plan no longer applies: stop the turn there
    if (random && i < plan.length) break;
  }
  return out;
}

/**
 * The first `most` moves and a count of the rest (`most` 0: all of them), so a reflection of a long
 * attempt fits the answer limit instead of being cut off unclosed (docs/design.md, puzzles).
 */
function boundedMoves(answers: readonly string[], most: number): string[] {
  if (most === 0) return [...answers];
  return boundedList(
    answers.flatMap((a) => a.split(/[\s,]+/).filter((w) => w.length > 0)),
    most,
  );
}

/** The first `most` items and a count of the rest (0: all of them). */
function boundedList(items: readonly string[], most: number): string[] {
  if (most === 0 || items.length <= most) return [...items];
  return [...items.slice(0, most), `and ${items.length - most} more`];
}

const sokobanPlayer: GamePlayer = {
  legal() {
    // Every list of 1-3 directions is a well-formed answer; list a representative set.
    const out: string[] = [];
    for (const a of DIRECTIONS) {
      out.push(a);
      for (const b of DIRECTIONS) {
        out.push(`${a}, ${b}`);
        for (const c of DIRECTIONS) out.push(`${a}, ${b}, ${c}`);
      }
    }
    return out;
  },
  malformed: {
    "no-tags": (legal, _m, rng) => rng.pick(legal),
    unclosed: (legal, _m, rng) => `<action>${rng.pick(legal)}`,
    "wrong-word": (_l, _m, rng) => `<action>${rng.pick(["north", "forward", "push", "west"])}</action>`,
    "too-many": (_l, _m, rng) =>
      `<action>${[0, 1, 2, 3].map(() => rng.pick(DIRECTIONS)).join(", ")}</action>`,
  },
  skilled(messages, rng, epsilon) {
    const board = sokobanBoardLines(lastUserMessage(messages));
    if (board.length === 0) return null;
    const moves = imperfectSokobanMoves(board, 3, rng, epsilon);
    return moves === null ? null : moves.join(", ");
  },
  reflection(messages, rng, maxMoves) {
    const view = attemptView(messages);
    const end = endLines(messages);
    const moves = boundedMoves(validMoves(view), maxMoves);
    const boxes = [...end, ...view.turns.map((t) => t.after)]
      .map((l) => /Boxes on targets: (\d+\/\d+)\./.exec(l)?.[1])
      .filter((x) => x !== undefined);
    const result = outcomeLine(end);
    const inv = invalidNote(invalidCount(view));
    const boxText = boxes.length > 0 ? ` Boxes on targets: ${boxes[boxes.length - 1]}.` : "";
    const templates = [
      () => `I moved ${listText(moves, "nowhere")}.${boxText} ${result}${inv}`,
      () => `${result} Moves made: ${listText(moves, "none")}.${boxText}${inv}`,
      () => `Last attempt: ${listText(moves, "no moves")}. ${result}${boxText}${inv}`,
    ];
    return remark(rng.pick(templates)());
  },
};

// ---- MineSweeper ----

const MS_ROW = /^(\d+):(\S+)$/;
/** A row of the `digits` compact board: closed cells as their two digits, the others as symbols. */
const MS_DIGITS_ROW = /^(?:[1-9][1-9]|[.1-8*])(?: (?:[1-9][1-9]|[.1-8*]))+$/;

/** The board rows of a MineSweeper observation, one symbol per cell (`?` closed), in either format. */
function minesweeperBoard(text: string): string[] {
  const rows: string[] = [];
  for (const line of text.split("\n")) {
    const pair = MS_ROW.exec(line)?.[2];
    if (pair !== undefined) rows.push(pair);
    else if (MS_DIGITS_ROW.test(line))
      rows.push(
        line
          .split(" ")
          .map((t) => (t.length === 2 ? "?" : t))
          .join(""),
      );
  }
  return rows;
}

/** The cell format the MineSweeper trial's prompt asks for. */
function minesweeperFormat(messages: readonly ChatMessage[]): CellFormat {
  return minesweeperCellFormatOfPrompt(promptRules(messages));
}

function minesweeperCells(rows: readonly string[], closed: boolean, format: CellFormat): string[] {
  const out: string[] = [];
  rows.forEach((row, r) => {
    for (let c = 0; c < row.length; c++) {
      if ((row[c] === "?") === closed) out.push(cellName(r + 1, c + 1, format));
    }
  });
  return out;
}

/**
 * The closed cells the numbers prove safe, and those they prove mines (0-based [r, c] as
 * `r * cols + c`), by the two single-cell rules iterated to a fixed point: a number whose closed
 * neighbours are as many as it says makes them all mines; a number with that many proven mines
 * around it makes its other closed neighbours safe.
 */
export function minesweeperDeductions(rows: readonly string[]): { safe: number[]; mines: number[] } {
  const R = rows.length;
  const C = rows[0]?.length ?? 0;
  const mine = new Set<number>();
  const safe = new Set<number>();
  const neighbours = (r: number, c: number) => {
    const out: number[] = [];
    for (let dr = -1; dr <= 1; dr++)
      for (let dc = -1; dc <= 1; dc++) {
        if (dr === 0 && dc === 0) continue;
        const rr = r + dr;
        const cc = c + dc;
        if (rr >= 0 && rr < R && cc >= 0 && cc < C) out.push(rr * C + cc);
      }
    return out;
  };
  const closed = (i: number) => rows[Math.floor(i / C)][i % C] === "?";
  for (let changed = true; changed; ) {
    changed = false;
    for (let r = 0; r < R; r++)
      for (let c = 0; c < C; c++) {
        const ch = rows[r][c];
        if (!/[1-8]/.test(ch)) continue;
        const n = Number(ch);
        const around = neighbours(r, c).filter(closed);
        const known = around.filter((i) => mine.has(i)).length;
        if (around.length === n) {
          for (const i of around) {
            if (mine.has(i)) continue;
            mine.add(i);
            changed = true;
          }
        } else if (known === n) {
          for (const i of around) {
            if (mine.has(i) || safe.has(i)) continue;
            safe.add(i);
            changed = true;
          }
        }
      }
  }
  return { safe: [...safe].sort((a, b) => a - b), mines: [...mine].sort((a, b) => a - b) };
}

/** The cells (1-based row, col) that the trial's reflections so far named as mines. */
export function minesNamedInReflections(messages: readonly ChatMessage[]): Set<string> {
  const named = new Set<string>();
  for (const m of messages) {
    if (m.role !== "assistant") continue;
    const remark = extractTag(m.content, "remark");
    if (!remark.ok) continue;
    for (const hit of remark.content.matchAll(/(?:\((\d+), (\d+)\)|\b([1-9])([1-9])) was a mine/g))
      named.add(`${hit[1] ?? hit[3]},${hit[2] ?? hit[4]}`);
  }
  return named;
}

const minesweeperPlayer: GamePlayer = {
  heedsReflections: true,
  skilled(messages, rng, epsilon, heed) {
    const rows = minesweeperBoard(lastUserMessage(messages));
    if (rows.length === 0) return null;
    const C = rows[0].length;
    const format = minesweeperFormat(messages);
    const cell = (i: number) => cellName(Math.floor(i / C) + 1, (i % C) + 1, format);
    const closed: number[] = [];
    rows.forEach((row, r) => {
      for (let c = 0; c < row.length; c++) if (row[c] === "?") closed.push(r * C + c);
    });
    if (closed.length === 0) return null;
    // A heeding player skips the cells its reflections named as mines (unless nothing else is left).
    const warned = heed ? minesNamedInReflections(messages) : new Set<string>();
    const unwarned = (cells: readonly number[]) => {
      const kept = cells.filter((i) => !warned.has(`${Math.floor(i / C) + 1},${(i % C) + 1}`));
      return kept.length > 0 ? kept : cells;
    };
    if (rng.derive("eps").float() < epsilon) return cell(rng.derive("random").pick(unwarned(closed)));
    const { safe, mines } = minesweeperDeductions(rows);
    if (safe.length > 0) return cell(rng.derive("safe").pick(safe));
    const guesses = closed.filter((i) => !mines.includes(i));
    return cell(rng.derive("guess").pick(unwarned(guesses.length > 0 ? guesses : closed)));
  },
  legal(messages) {
    const rows = minesweeperBoard(lastUserMessage(messages));
    if (rows.length === 0) throw new Error("scripted MineSweeper player: no board in the prompt");
    return minesweeperCells(rows, true, minesweeperFormat(messages));
  },
  // Every cell of the board: the unlikelihood term pushes down the revealed ones.
  answerSet(messages) {
    const rows = minesweeperBoard(lastUserMessage(messages));
    const format = minesweeperFormat(messages);
    return [...minesweeperCells(rows, true, format), ...minesweeperCells(rows, false, format)];
  },
  malformed: {
    "no-tags": (legal, _m, rng) => rng.pick(legal),
    unclosed: (legal, _m, rng) => `<action>${rng.pick(legal)}`,
    "off-board": (_l, messages, rng) =>
      `<action>${rng.pick(minesweeperFormat(messages) === "digits" ? ["71", "29", "77"] : ["(7, 1)", "(0, 3)", "(2, 9)"])}</action>`,
    revealed: (_l, messages, rng) => {
      const format = minesweeperFormat(messages);
      const open = minesweeperCells(minesweeperBoard(lastUserMessage(messages)), false, format);
      return `<action>${open.length > 0 ? rng.pick(open) : cellName(7, 1, format)}</action>`;
    },
  },
  reflection(messages, rng, maxMoves) {
    const view = attemptView(messages);
    const end = endLines(messages);
    const cells = validMoves(view);
    const listed = boundedList(cells, maxMoves);
    const mine = end.some((l) => l.includes("Mine!"));
    const result = outcomeLine(end);
    const inv = invalidNote(invalidCount(view));
    const hit = mine && cells.length > 0 ? ` ${cells[cells.length - 1]} was a mine.` : "";
    const templates = [
      () => `I opened ${listText(listed, "nothing")}.${hit} ${result}${inv}`,
      () => `${result} Cells opened: ${listText(listed, "none")}.${hit}${inv}`,
      () => `Last attempt: ${listText(listed, "no cells")}.${hit} ${result}${inv}`,
    ];
    return remark(rng.pick(templates)());
  },
};

const PLAYERS: Record<PretrainGame, GamePlayer> = {
  kuhn: kuhnPlayer,
  tictactoe: tictactoePlayer,
  sokoban: sokobanPlayer,
  minesweeper: minesweeperPlayer,
};

/**
 * The scripted player of `game`: random legal moves and template reflections; with `tacticalRate`
 * > 0, that share of its TicTacToe moves completes its own line when it can, else blocks the
 * opponent's (one-move tactics, no deeper strategy).
 */
export function unskilledBehaviour(
  game: string,
  opts: {
    malformedRate?: number;
    tacticalRate?: number;
    epsilon?: number;
    reflectionMoves?: number;
    heedReflections?: boolean;
  } = {},
): ScriptedBehaviour {
  const rate = opts.malformedRate ?? 0.02;
  if (!(rate >= 0 && rate <= 1)) throw new RangeError(`malformedRate must be in [0, 1], got ${rate}`);
  const tactical = opts.tacticalRate ?? 0;
  if (!(tactical >= 0 && tactical <= 1))
    throw new RangeError(`tacticalRate must be in [0, 1], got ${tactical}`);
  const epsilon = opts.epsilon ?? 1;
  if (!(epsilon >= 0 && epsilon <= 1)) throw new RangeError(`epsilon must be in [0, 1], got ${epsilon}`);
  const moves = opts.reflectionMoves ?? 0;
  if (!(Number.isInteger(moves) && moves >= 0))
    throw new RangeError(`reflectionMoves must be an integer >= 0, got ${moves}`);
  const player = PLAYERS[checkPretrainGame(game)];
  const heed = opts.heedReflections ?? false;
  if (heed && !player.heedsReflections)
    throw new RangeError(`heedReflections is built for minesweeper only, not ${game}`);
  if (heed && epsilon === 1)
    throw new RangeError("heedReflections needs epsilon < 1 (the random player heeds nothing)");
  return playerBehaviour(player, rate, tactical, epsilon, moves, heed);
}

/** Whether `game`'s corpus player can heed its reflections (`heedReflections`). */
export function heedsReflections(game: string): boolean {
  return PLAYERS[checkPretrainGame(game)].heedsReflections === true;
}

/** Names of the malformed-answer kinds of `game` (for tests and logs). */
export function malformedKinds(game: string): string[] {
  return Object.keys(PLAYERS[checkPretrainGame(game)].malformed);
}

// ---------------------------------------------------------------------------------------------
// the corpus

/** Sampling fields the runner passes on; the scripted agent ignores them. */
const SCRIPTED_SAMPLING: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 64, stop: [] };

/** How a corpus reads its player's calls: which were detours, and each call's answer choices. */
export interface CallMarks {
  isDetour?: (row: Row) => boolean;
  choicesOf?: (row: Row) => AnswerChoices | null;
}

/** One prefix chain of a trial as a chat, with each answer's kind and (served corpora) its choices. */
type ChainTranscript = { messages: ChatMessage[]; kinds: ResponseKind[]; choices?: (AnswerChoices | null)[] };

/**
 * A trial's calls as chats: one per maximal prefix chain of its rows (`prefixChains`). A trial
 * of the history memory modes is one chat; a `reflection_only` trial one chat per attempt (each
 * attempt's prompt shows only the earlier attempts' outcomes and reflections).
 */
export function trialTranscripts(rec: TrialRecord, marks: CallMarks = {}): ChainTranscript[] {
  if (rec.rows.length === 0) throw new Error(`trial ${rec.trialId} has no policy calls`);
  return prefixChains(rec.rows).map((rows) => chainTranscript(rec.trialId, rows, marks));
}

function chainTranscript(
  trialId: number,
  rows: readonly Row[],
  { isDetour, choicesOf }: CallMarks,
): ChainTranscript {
  const last = rows[rows.length - 1];
  const messages: ChatMessage[] = [
    ...last.prompt.map((m) => ({ role: m.role, content: m.content })),
    { role: "assistant", content: last.response },
  ];
  const assistants = messages.filter((m) => m.role === "assistant");
  if (assistants.length !== rows.length) {
    throw new Error(
      `trial ${trialId}: transcript has ${assistants.length} assistant messages for ${rows.length} calls (prompt style must be compact)`,
    );
  }
  const kinds: ResponseKind[] = rows.map((row, i) => {
    if (assistants[i].content !== row.response) {
      throw new Error(`trial ${trialId}: assistant message ${i} does not match call ${i}`);
    }
    if (row.phase === "reflect") return "reflection";
    if (!row.valid) return "malformed";
    return isDetour?.(row) ? "detour" : "action";
  });
  if (!choicesOf) return { messages, kinds };
  return { messages, kinds, choices: rows.map((row, i) => (kinds[i] === "action" ? choicesOf(row) : null)) };
}

/**
 * The corpus trials of finished trial records and their counts; `played[i]` is record i's spec
 * (its opponent and seat) and whether it was played with hindsight reflect prompts.
 */
export function tallyCorpus(
  records: readonly TrialRecord[],
  played: readonly { opponent: string | null; seat: string | null; hindsight: boolean }[],
  marks: CallMarks = {},
): { trials: CorpusTrial[]; stats: CorpusStats } {
  const stats: CorpusStats = { trials: 0, playResponses: 0, malformed: 0, reflections: 0 };
  const trials: CorpusTrial[] = records.flatMap((rec, i) => {
    const chats = trialTranscripts(rec, marks);
    stats.trials++;
    if (rec.attempts.some((a) => a.won)) stats.won = (stats.won ?? 0) + 1;
    if (rec.attempts[0]?.won) stats.wonFirst = (stats.wonFirst ?? 0) + 1;
    for (const k of chats.flatMap((c) => c.kinds)) {
      if (k === "reflection") stats.reflections++;
      else stats.playResponses++;
      if (k === "malformed") stats.malformed++;
    }
    return chats.map(({ messages, kinds, choices }) => ({
      opponent: played[i].opponent,
      seat: played[i].seat,
      hindsight: played[i].hindsight,
      messages,
      kinds,
      ...(choices ? { choices } : {}),
      attempts: rec.attempts.length,
      won: rec.attempts.some((a) => a.won),
    }));
  });
  return { trials, stats };
}

/** Plays `trials` trials of `game` with the unskilled scripted player and returns their transcripts. */
export async function buildCorpus(opts: CorpusOptions): Promise<Corpus> {
  const game = checkPretrainGame(opts.game);
  if (!(Number.isInteger(opts.trials) && opts.trials > 0))
    throw new RangeError(`trials must be a positive integer, got ${opts.trials}`);
  const def = await loadTask(game);
  const pool = opts.pool === undefined ? DEFAULT_POOLS[game] : opts.pool;
  const groups = assignGroups({
    numGroups: opts.trials,
    pool: def.twoPlayer ? pool : null,
    seats: { mode: "mixed", secondRatio: 0.5 },
    rng: opts.rng.derive("groups"),
  });
  const hindsightShare = opts.hindsightShare ?? 0.5;
  const hindsightRng = opts.rng.derive("hindsight");
  const specs: TrialSpec[] = groups.map((g) => ({
    trialId: g.group,
    groupId: g.group,
    taskSeed: g.taskSeed,
    opponent: g.opponent,
    seat: g.seat,
  }));
  const withHindsight = specs.map(() => hindsightRng.float() < hindsightShare);
  const agent = new ScriptedAgent(
    "unskilled",
    unskilledBehaviour(game, {
      malformedRate: opts.malformedRate,
      tacticalRate: opts.tacticalRate,
      epsilon: opts.epsilon,
      reflectionMoves: opts.reflectionMoves,
      heedReflections: opts.heedReflections,
    }),
  );
  const makeTask = (s: TrialSpec) =>
    def.create({
      ...(opts.taskOptions ?? {}),
      ...(def.twoPlayer ? { opponent: s.opponent ?? undefined, seat: s.seat ?? undefined } : {}),
    });
  const records = new Map<number, TrialRecord>();
  for (const hindsight of [false, true]) {
    const part = specs.filter((_, i) => withHindsight[i] === hindsight);
    if (part.length === 0) continue;
    const recs = await runTrials(part, makeTask, agent, opts.rng.derive("run", hindsight ? 1 : 0), {
      attempts: opts.attempts ?? 3,
      maxTurns: def.maxTurns,
      reflection: CORPUS_MEMORY,
      promptStyle: "compact",
      hindsight,
      sampling: SCRIPTED_SAMPLING,
      maxBatch: 256,
      concurrency: 1,
    });
    for (const r of recs) records.set(r.trialId, r);
  }
  const { trials, stats } = tallyCorpus(
    specs.map((s) => records.get(s.trialId)!),
    specs.map((s, i) => ({ opponent: s.opponent, seat: s.seat, hindsight: withHindsight[i] })),
  );
  return { game, trials, stats };
}

/** Every message text of the corpus (what the tokenizer is trained on). */
export function corpusTexts(corpus: Corpus): string[] {
  const out: string[] = [];
  for (const t of corpus.trials) for (const m of t.messages) out.push(m.content);
  return out;
}
