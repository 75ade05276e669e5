/**
 * The text-task contract: a game (+ opponent + seat) as what a language agent sees and does.
 *
 * A `TextTask` is one task instance: `reset` builds it from a keyed generator (the deal, the
 * level, the opponent and its opening move), `step` takes the raw model response, parses the
 * action and plays it, and `restart` returns to the identical initial state for a new attempt.
 * Everything the prompt builder needs comes back as plain strings in `StepResult`, so a trial's
 * memory is plain JSON data (see `memory.ts`) and prompts are pure functions of it.
 */
import type { Rng } from "../core/rng.js";
import type { Opponent } from "../opponents/types.js";

/** The agent's seat in a two-player game: it moves first or second. */
export type Seat = "first" | "second";
export const SEATS: readonly Seat[] = ["first", "second"];

/** Prompt style: `full` = the reference's rebuilt single user message; `compact` = append-only chat. */
export type PromptStyle = "full" | "compact";
export const PROMPT_STYLES: readonly PromptStyle[] = ["full", "compact"];

/** What each finished attempt contributes to the next attempts' play prompts. */
export type ReflectionType = "reflection_only" | "history_only" | "history_and_reflection";
export const REFLECTION_TYPES: readonly ReflectionType[] = [
  "reflection_only",
  "history_only",
  "history_and_reflection",
];

export type Phase = "play" | "reflect";

/** The outcome of one `step` (one model response in the play phase). */
export interface StepResult {
  /** Environment reward on the reference scale (TicTacToe ±10, Kuhn 5×chips, puzzles as LaMer). */
  reward: number;
  /** The attempt is over (game finished, puzzle solved or lost). */
  done: boolean;
  won: boolean;
  draw: boolean;
  /** Task score so far: Kuhn chips, TicTacToe +1/0/−1, puzzles as documented per task. */
  score: number;
  /** Whether the response held a well-formed, legal action. Invalid actions are flagged, never thrown. */
  valid: boolean;
  invalidReason?: string;
  /** The move as the history shows it ("(2, 3)", "BET", "up, left"); for an invalid action the raw tag content or "". */
  action: string;
  /** One line on what happened ("The opponent played (1, 1).", "You won 2 chips."). */
  feedback: string;
  /** Full-style observation after the step. */
  observation: string;
  /** The observation as a hindsight reflection sees it (Kuhn: with the opponent's card); set only when it differs. */
  hindsightObservation?: string;
  /** Compact-style feedback ("Opp: BET.", "Invalid: cell taken.", "Win +2."). */
  compactFeedback: string;
  /** Compact-style observation after the step. */
  compactObservation: string;
  /** Compact hindsight addition ("Opp had Q."), only when there is hidden information to reveal. */
  compactHindsight?: string;
  /** Full-style outcome sentence when `done` ("You lost 2 chips."). */
  outcome?: string;
  /** Compact outcome when `done` ("Lost -2."). */
  compactOutcome?: string;
  /**
   * The legal actions after the step, kept only for tasks whose full prompts list them
   * (`TaskPromptText.legalActionsHeading`), so the prompt is a pure function of the trial memory.
   */
  legalActions?: string[];
}

/**
 * What one attempt showed, for judging the reflection written after it: the fields of a trial
 * memory's attempt record (`AttemptRecord` in memory.ts is one) that the remark rules read.
 */
export interface AttemptSeen {
  initialObservation: string;
  compactInitialObservation: string;
  initialLegalActions?: readonly string[];
  turns: readonly StepResult[];
}

/** Per-env info the runner and metrics read. */
export interface TaskInfo {
  task: string;
  won: boolean;
  draw: boolean;
  score: number;
  done: boolean;
  /** Opponent spec name (e.g. "mcts:100"), or null for single-player puzzles. */
  opponent: string | null;
  seat: Seat | null;
  /**
   * The instance's category for per-category measures (a served ALFWorld game:
   * "valid_seen/pick_and_place_simple", its split and task type); absent for uncategorised tasks.
   */
  category?: string;
}

/** The history window of full prompts (the reference's default: 7 turns, observations for 2 in play, 7 in reflection). */
export interface HistoryWindowText {
  turns: number;
  playObservations: number;
  reflectObservations: number;
}

/** Text of the prompts that depends on the task (and its seat) but not on the trial so far. */
export interface TaskPromptText {
  /** Full style: the game rules and goal, in natural language. */
  rules: string;
  /** Full style: how to answer in the play phase (reasoning, then the action tag format). */
  playInstruction: string;
  /** Compact style: the terse rules for the system message (including the action format). */
  compactRules: string;
  /** Compact style: the question that asks for the next move ("Your move?"). */
  compactAsk: string;
  /** Word for one action in history lines ("Move", "Action"). */
  actionWord: string;
  /**
   * Full style: when set, play prompts list the current state's legal actions after this heading,
   * before the play instruction (ALFWorld: the admissible commands, as the reference does).
   */
  legalActionsHeading?: string;
  /** Full style: this task's history window, in place of the reference's default (ALFWorld: 15 steps, all observed). */
  history?: HistoryWindowText;
}

export interface TextTask {
  /** Task name in the registry ("tictactoe", "kuhn", "sokoban", "minesweeper"). */
  readonly name: string;
  /** Opponent spec, or null for puzzles. */
  readonly opponent: string | null;
  readonly seat: Seat | null;
  /**
   * Starts a new task instance. `rng` fixes the instance (deal, level, board); `opponentRng`
   * (default `rng.derive("opponent")`) seeds the opponent. If the agent sits second, the
   * opponent's opening move is made here.
   */
  reset(rng: Rng, opponentRng?: Rng): Promise<void>;
  /**
   * Back to the identical initial state of this instance (incl. the opponent's opening move).
   * In-process tasks restart synchronously; a served task (`remote.ts`) asks its server.
   */
  restart(): void | Promise<void>;
  /** Parses the raw response, plays it (and the opponent's reply) and reports what happened. */
  step(response: string): Promise<StepResult>;
  readonly done: boolean;
  /** Full-style observation of the current state. */
  observation(): string;
  /** Compact-style observation of the current state. */
  compactObservation(): string;
  /** Step-group anchor of the current state: observation + opponent name. */
  anchor(): string;
  /** Step-group anchor of a reflection call: "reflection" + opponent name. */
  reflectionAnchor(): string;
  info(): TaskInfo;
  /** Prompt text for this instance (depends on the seat, fixed after construction). */
  promptText(): TaskPromptText;
  /**
   * What an attempt that ran out of turns unfinished costs, for games where stalling would
   * otherwise beat playing (Kuhn: the agent forfeits what it put in the pot). Omitted: no cost.
   */
  forfeit?(): { reward: number; score: number } | null;
  /**
   * The current state, hidden information included, as a string (equal strings = equal states);
   * `mage env-serve` hashes it into the protocol's restart fingerprint.
   */
  stateKey?(): string;
  /** The legal actions at the current state as the agent writes them (games that have a list). */
  legalActions?(): string[];
  /**
   * Whether a valid reflection's text is informative: it names something `attempt` (the attempt
   * that just ended) showed, by this task's rule (`tasks/remark-quality.ts`). Reported as a rate,
   * never penalised. Omitted: the task has no rule and `informative` is not reported.
   */
  remarkInformative?(text: string, attempt: AttemptSeen): boolean;
  /** Releases what the instance holds outside the process (a served task's session). */
  close?(): Promise<void>;
}

/** Options shared by every task constructor. */
export interface TaskOptions {
  /** Opponent spec for two-player games (each game has a default). */
  opponent?: string;
  /** Agent seat for two-player games (default "first"). */
  seat?: Seat;
  /** Stochastic opponents rewind their random stream at `restart` (same replies in every attempt). */
  replayOpponent?: boolean;
  /** Puzzle generator knobs, forwarded to the engine (Sokoban `SokobanKnobs`, MineSweeper `MinesweeperKnobs`). */
  knobs?: Record<string, unknown>;
  /** Sokoban: moves per turn (default 3). */
  movesPerTurn?: number;
  /** Sokoban: primitive moves per attempt (default 30). */
  maxSteps?: number;
  /**
   * A served environment: the wire seed of the instance to play, instead of one drawn from the
   * task stream (the evaluation's every-instance mode: trial i plays instance i).
   */
  instance?: number;
  /**
   * Two-player games: builds the opponent in place of the registry's `createOpponent` (`mage
   * env-serve` plays heavy opponents in worker threads this way). It must play as the registry's
   * opponent of the same spec would.
   */
  makeOpponent?: (spec: string, ctx: { rng: Rng; replay: boolean }) => Opponent<unknown, unknown>;
  /**
   * Two-player games: the game starts at this state (a game in progress) instead of one dealt
   * from the reset's generator. A model snapshot playing as an opponent (`src/league/`) sees its
   * position through a task standing there, in its own seat.
   */
  startState?: unknown;
}
