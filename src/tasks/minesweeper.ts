/**
 * MineSweeper as a text task (lamer-reference §5.2): a 6×6 board with 3 mines and an opened
 * start region; each turn reveals ONE cell written `(row, col)`, 1-based, or with the knob
 * `cells: digits` its two digits (`34`), as the compact board then shows closed cells. No flags.
 *
 * Rewards come from the engine (LaMer's table): +0.5 one cell opened, +2 a cascade, +10 the
 * reveal that wins, −0.1 a mine (lost, done). An unreadable, off-board or already-open cell
 * costs −1, changes nothing and is flagged invalid. Score: 1 when won, else 0.
 */

import type { Rng } from "../core/rng.js";
import {
  MINESWEEPER_REWARDS,
  type MinesweeperBoard,
  type MinesweeperKnobs,
  newMinesweeper,
  renderMinesweeper,
  revealCell,
} from "../games/minesweeper.js";
import { type CellFormat, cellFormatKnob, cellName } from "./cell-format.js";
import { invalidStep } from "./invalid.js";
import { parseMinesweeperMove } from "./parse.js";
import { minesweeperRemarkInformative } from "./remark-quality.js";
import type { AttemptSeen, StepResult, TaskInfo, TaskPromptText, TextTask } from "./types.js";

export interface MinesweeperTaskOptions {
  /** Board knobs (default 6×6 with 3 mines) and the cell format (`cells`, default `pair`). */
  knobs?: Partial<MinesweeperKnobs> & { cells?: CellFormat };
}

/** The reply clause of the compact rules, which also tells a reader of the prompt the cell format. */
export const MINESWEEPER_COMPACT_REPLY: Record<CellFormat, string> = {
  pair: "Reply one closed cell: <action>(row, col)</action>",
  digits: "Reply one closed cell: <action>rowcol</action>, e.g. <action>34</action>",
};

/** The cell format a MineSweeper prompt asks for (its compact rules); `pair` when it names none. */
export function minesweeperCellFormatOfPrompt(text: string): CellFormat {
  return text.includes(MINESWEEPER_COMPACT_REPLY.digits) ? "digits" : "pair";
}

/** A board's cell format, checked: two digits name cells of boards up to 9×9 only. */
function minesweeperCellFormat(knobs: MinesweeperTaskOptions["knobs"]): CellFormat {
  const cells = cellFormatKnob("minesweeper", knobs?.cells);
  const rows = knobs?.rows ?? 6;
  const cols = knobs?.cols ?? 6;
  if (cells === "digits" && (rows > 9 || cols > 9))
    throw new RangeError(
      `minesweeper knob cells: digits names cells of boards up to 9x9, not ${rows}x${cols}`,
    );
  return cells;
}

export class MinesweeperTask implements TextTask {
  readonly name = "minesweeper";
  readonly opponent = null;
  readonly seat = null;
  private readonly knobs: Partial<MinesweeperKnobs>;
  readonly cells: CellFormat;
  private initial: MinesweeperBoard | undefined;
  private board!: MinesweeperBoard;

  constructor(options: MinesweeperTaskOptions = {}) {
    const { cells: _cells, ...board } = options.knobs ?? {};
    this.knobs = board;
    this.cells = minesweeperCellFormat(options.knobs);
  }

  async reset(rng: Rng): Promise<void> {
    this.initial = newMinesweeper(rng.derive("board"), this.knobs);
    this.restart();
  }

  restart(): void {
    if (!this.initial) throw new Error("minesweeper: restart() before reset()");
    this.board = this.initial;
  }

  get done(): boolean {
    return this.board.status !== "playing";
  }

  stateKey(): string {
    return JSON.stringify(this.board);
  }

  get currentBoard(): MinesweeperBoard {
    return this.board;
  }

  async step(response: string): Promise<StepResult> {
    if (!this.initial) throw new Error("minesweeper: step() before reset()");
    if (this.done) throw new Error("minesweeper: step() after the attempt is over");
    const b = this.board;
    const parsed = parseMinesweeperMove(
      String(response),
      b.rows,
      b.cols,
      (r, c) => b.revealed[(r - 1) * b.cols + (c - 1)],
      this.cells,
    );
    if (!parsed.ok) {
      return invalidStep(
        response,
        parsed.reason,
        MINESWEEPER_REWARDS.invalid,
        this.observation(),
        this.compactObservation(),
      );
    }
    const { row, col } = parsed.move;
    const cell = cellName(row, col, this.cells);
    const r = revealCell(b, row - 1, col - 1);
    this.board = r.board;
    const cellWord = r.opened === 1 ? "cell" : "cells";
    const result: StepResult = {
      reward: r.reward,
      done: r.done,
      won: r.won,
      draw: false,
      score: r.won ? 1 : 0,
      valid: true,
      action: cell,
      feedback: r.lost ? "it was a mine" : `${r.opened} ${cellWord} opened`,
      compactFeedback: r.lost ? "Mine!" : `Opened ${r.opened}.`,
      observation: this.observation(),
      compactObservation: this.compactObservation(),
    };
    if (r.done) {
      result.outcome = r.won ? "You cleared the board." : `You lost: ${cell} was a mine.`;
      result.compactOutcome = r.won ? "Cleared." : "Lost.";
    }
    return result;
  }

  observation(): string {
    return renderMinesweeper(this.board);
  }

  /**
   * `pair`: rows as `r:` + one symbol per cell, no spaces. `digits`: the cells separated by
   * spaces, each closed one shown as its row and column digits (`34`) instead of `?`, so a legal
   * answer repeats text on the board (as TicTacToe's compact board, `compactBoardText`).
   */
  compactObservation(): string {
    if (this.cells === "digits") return this.digitsBoard();
    return renderMinesweeper(this.board)
      .split("\n")
      .map((line) => line.replace(/^Row (\d+): /, "$1:").replace(/ /g, ""))
      .join("\n");
  }

  private digitsBoard(): string {
    return renderMinesweeper(this.board)
      .split("\n")
      .map((line, r) =>
        line
          .replace(/^Row \d+: /, "")
          .split(" ")
          .map((symbol, c) => (symbol === "?" ? cellName(r + 1, c + 1, "digits") : symbol))
          .join(" "),
      )
      .join("\n");
  }

  anchor(): string {
    return this.observation();
  }

  reflectionAnchor(): string {
    return "reflection";
  }

  info(): TaskInfo {
    const won = this.board.status === "won";
    return {
      task: this.name,
      won,
      draw: false,
      score: won ? 1 : 0,
      done: this.done,
      opponent: null,
      seat: null,
    };
  }

  /** Informative: the remark names a cell the attempt opened (`remark-quality.ts`). */
  remarkInformative(text: string, attempt: AttemptSeen): boolean {
    return minesweeperRemarkInformative(text, attempt);
  }

  promptText(): TaskPromptText {
    const b = this.board ?? this.initial;
    const rows = b?.rows ?? this.knobs.rows ?? 6;
    const cols = b?.cols ?? this.knobs.cols ?? 6;
    const mines = b?.numMines ?? this.knobs.mines ?? 3;
    const digits = this.cells === "digits";
    return {
      rules: [
        `You are playing MineSweeper on a ${rows}x${cols} board with ${mines} hidden mines. Some cells are already open.`,
        "Symbols: ? unopened cell, . opened cell with no mine next to it, 1-8 the number of mines among the 8 " +
          "neighbouring cells, * a mine (shown once the game is lost).",
        `Rows are numbered 1 to ${rows} from top to bottom and columns 1 to ${cols} from left to right.`,
        "Each turn you open one unopened cell. Opening a cell with no mine next to it also opens its neighbours. " +
          "Opening a mine loses the game; opening every cell without a mine wins it.",
      ].join("\n"),
      playInstruction:
        "Think step by step: use the numbers to work out which unopened cells must be mines and which are " +
        (digits
          ? "safe. Then open one safe unopened cell, given as its row and column digits inside <action> </action>, " +
            "for example <action>34</action> for row 3, column 4."
          : "safe. Then open one safe unopened cell, given as (row, col) inside <action> </action>, for example " +
            "<action>(3, 4)</action>."),
      compactRules: digits
        ? `MineSweeper ${rows}x${cols}, ${mines} mines. A closed cell shows its row and column (34: row 3, col 4), ` +
          `. no mine near, 1-8 mines among neighbours. Open every safe cell; a mine loses. ${MINESWEEPER_COMPACT_REPLY.digits}`
        : `MineSweeper ${rows}x${cols}, ${mines} mines. ? closed, . no mine near, 1-8 mines among neighbours. Open every ` +
          `safe cell; a mine loses. Rows/cols from 1. ${MINESWEEPER_COMPACT_REPLY.pair}`,
      compactAsk: "Your cell?",
      actionWord: "Cell",
    };
  }
}
