/**
 * TicTacToe as a text task (reference §7.1): 3×3 board, the agent is always shown as X and the
 * opponent as O (also when the agent moves second), moves are `(row, col)` 1-based, or with the
 * `cells: digits` knob a cell's two digits (`23`), as the compact board shows empty cells.
 * Rewards: +10 win, −10 loss, 0 draw (and 0 for every other step, invalid ones included).
 * Score: +1 / 0 / −1 at the end of the game.
 */

import { colOf, emptyCells, renderBoard, rowOf, type TicTacToeState, tictactoe } from "../games/tictactoe.js";
import { CELL_FORMATS, type CellFormat, cellFormatKnob, cellName } from "./cell-format.js";
import { type Parsed, parseTicTacToeMove } from "./parse.js";
import { tictactoeRemarkInformative } from "./remark-quality.js";
import { type EndText, TwoPlayerTask } from "./two-player.js";
import type { AttemptSeen, TaskOptions, TaskPromptText } from "./types.js";

export const TICTACTOE_DEFAULT_OPPONENT = "mcts:100";

/** TicTacToe's cell formats: those of every board task (`cell-format.ts`). */
export const TICTACTOE_CELL_FORMATS = CELL_FORMATS;
export type TicTacToeCellFormat = CellFormat;

/** The text of a cell index (0..8, row-major), 1-based: `(2, 3)` or `23`. */
export function cellText(cell: number, format: TicTacToeCellFormat = "pair"): string {
  return cellName(rowOf(cell) + 1, colOf(cell) + 1, format);
}

/** All nine cells' texts in index order. */
export function allCellTexts(format: TicTacToeCellFormat): string[] {
  return Array.from({ length: 9 }, (_, cell) => cellText(cell, format));
}

/** The reply clause of the compact rules, which also tells a reader of the prompt the cell format. */
export const TICTACTOE_COMPACT_REPLY: Record<TicTacToeCellFormat, string> = {
  pair: "Reply with one empty cell: <action>(row, col)</action>",
  digits: "Reply with one empty cell: <action>rowcol</action>, e.g. <action>23</action>",
};

/** The cell format a prompt asks for (its compact rules' reply clause); `pair` when it names none. */
export function cellFormatOfPrompt(text: string): TicTacToeCellFormat {
  return text.includes(TICTACTOE_COMPACT_REPLY.digits) ? "digits" : "pair";
}

/** The `cells` knob of TicTacToe's task options, checked. */
export function tictactoeCellFormat(knobs: Record<string, unknown> | undefined): TicTacToeCellFormat {
  const unknown = Object.keys(knobs ?? {}).filter((k) => k !== "cells");
  if (unknown.length > 0)
    throw new RangeError(`unknown tictactoe knob(s) ${unknown.join(", ")}; valid: cells`);
  return cellFormatKnob("tictactoe", knobs?.cells);
}

/**
 * The board of compact prompts: marks as in the full observation (the agent is X), but every
 * empty cell shown as its row and column digits ("23" = row 2, column 3) instead of ".". A legal
 * answer then repeats a coordinate that is visible on the board, which a small model can do by
 * matching tokens; reading a cell's row and column off its place in the text is far harder for it.
 */
export function compactBoardText(state: TicTacToeState, perspective: number): string {
  return renderBoard(state, perspective, (cell) => `${rowOf(cell) + 1}${colOf(cell) + 1}`);
}

export class TicTacToeTask extends TwoPlayerTask<TicTacToeState, number> {
  protected readonly rewardScale = 10;
  readonly cells: TicTacToeCellFormat;

  constructor(options: TaskOptions = {}) {
    super("tictactoe", tictactoe, TICTACTOE_DEFAULT_OPPONENT, options);
    this.cells = tictactoeCellFormat(options.knobs);
  }

  protected parseMove(response: string, state: TicTacToeState): Parsed<number> {
    return parseTicTacToeMove(response, emptyCells(state), this.cells);
  }

  /**
   * A game cut off unfinished (the turns spent on invalid answers) counts as a loss. The reference
   * scores it 0, like a draw, so a losing agent gains 10 by stalling at a cost of 0.5 per invalid
   * answer; a tuning run of MAGE learned exactly that (26% of its attempts cut off).
   */
  forfeit(): { reward: number; score: number } | null {
    if (tictactoe.isTerminal(this.state)) return null;
    return { reward: -this.rewardScale, score: -1 };
  }

  protected moveText(move: number): string {
    return cellText(move, this.cells);
  }

  protected renderObservation(state: TicTacToeState): string {
    return tictactoe.render(state, this.agent);
  }

  protected renderCompactObservation(state: TicTacToeState): string {
    return compactBoardText(state, this.agent);
  }

  protected replyFeedback(replies: readonly number[]): { feedback: string; compactFeedback: string } {
    const r = replies.map((m) => cellText(m, this.cells)).join(", ");
    return { feedback: `the opponent played ${r}`, compactFeedback: `Opp: ${r}.` };
  }

  protected endText(state: TicTacToeState, replies: readonly number[]): EndText {
    const score = this.agentReturn(state);
    const r = replies.map((m) => cellText(m, this.cells)).join(", ");
    if (score > 0) {
      return {
        feedback: "you completed a line",
        compactFeedback: "You made three in a row.",
        outcome: "You won.",
        compactOutcome: "Won.",
      };
    }
    if (score < 0) {
      return {
        feedback: `the opponent played ${r} and completed a line`,
        compactFeedback: `Opp: ${r}, three in a row.`,
        outcome: "You lost: the opponent got three in a row.",
        compactOutcome: "Lost.",
      };
    }
    return {
      feedback: replies.length > 0 ? `the opponent played ${r}; the board is full` : "the board is full",
      compactFeedback: replies.length > 0 ? `Opp: ${r}. Board full.` : "Board full.",
      outcome: "The game ended in a draw.",
      compactOutcome: "Draw.",
    };
  }

  /** Informative: the remark names a cell a move of the attempt took (`remark-quality.ts`). */
  remarkInformative(text: string, attempt: AttemptSeen): boolean {
    return tictactoeRemarkInformative(text, attempt);
  }

  promptText(): TaskPromptText {
    const second = this.seat === "second";
    return {
      rules: [
        "You are playing Tic-Tac-Toe against an opponent on a 3x3 board.",
        "Your mark is X and the opponent's mark is O; a dot (.) is an empty cell. Rows are numbered 1 to 3 from " +
          "top to bottom and columns 1 to 3 from left to right.",
        "The players take turns putting their mark in an empty cell. Whoever first gets three marks in one " +
          "row, column or diagonal wins; when the board fills up without that, the game is a draw.",
        second
          ? "The opponent moves first and has already made its opening move; you move second."
          : "You move first.",
        "Your goal is to win the game.",
      ].join("\n"),
      playInstruction:
        "Think step by step: see which cells the opponent holds, whether either side can complete a line " +
        "on its next move, and choose your move. Then give exactly one empty cell " +
        (this.cells === "digits"
          ? "as its row digit then its column digit inside <action> </action>, for example <action>23</action> " +
            "for row 2, column 3."
          : "as (row, col) inside <action> </action>, for example <action>(2, 3)</action>."),
      compactRules:
        "Tic-tac-toe 3x3. You are X, opponent O. An empty cell shows its row digit then its column digit. " +
        `Three in a row wins. You move ${second ? "second" : "first"}. ` +
        TICTACTOE_COMPACT_REPLY[this.cells],
      compactAsk: "Your move?",
      actionWord: "Move",
    };
  }
}
