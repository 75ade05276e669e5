/**
 * Action parsers of the text tasks: response text → move, or a reason why it is not one.
 * All of them go through `extractTag` (answer after the last `</think>`, first complete
 * `<action>…</action>`), trim, and match case-insensitively. They never throw.
 *
 * Accepted formats (the prompts ask for the first one of each):
 * - cells (TicTacToe, MineSweeper): `(row, col)`, 1-based; the brackets may be `()` or `[]` or
 *   left out (`2,3`); exactly one pair, nothing else in the tag. With the knob `cells: digits`
 *   both ask for the two digits (`23`) and take `(row, col)` as well.
 * - Kuhn: `PASS` or `BET` in any case.
 * - Sokoban: 1 to `maxMoves` of `up|down|left|right`, separated by commas and/or spaces.
 */
import { extractTag } from "../core/tags.js";
import { type CellFormat, cellName } from "./cell-format.js";

export type Parsed<T> = { ok: true; move: T } | { ok: false; reason: string };

const CELL_RE = /^[([]?\s*(\d{1,6})\s*,\s*(\d{1,6})\s*[)\]]?$/;

export interface Cell {
  /** 1-based row. */
  row: number;
  /** 1-based column. */
  col: number;
}

/** The content of the action tag, or a reason there is none. */
export function actionContent(response: string): Parsed<string> {
  const r = extractTag(response, "action");
  return r.ok ? { ok: true, move: r.content } : { ok: false, reason: r.message };
}

/** Parses one `(row, col)` cell (1-based) inside `<action>` and checks it is on a rows×cols board. */
export function parseCell(response: string, rows: number, cols: number): Parsed<Cell> {
  const c = actionContent(response);
  if (!c.ok) return c;
  const m = CELL_RE.exec(c.move);
  if (!m) return { ok: false, reason: `"${clip(c.move)}" is not a cell written as (row, col)` };
  const row = Number(m[1]);
  const col = Number(m[2]);
  if (row < 1 || row > rows || col < 1 || col > cols) {
    return { ok: false, reason: `(${row}, ${col}) is off the board (rows 1-${rows}, columns 1-${cols})` };
  }
  return { ok: true, move: { row, col } };
}

const DIGITS_CELL_RE = /^([1-9])([1-9])$/;

/**
 * A cell in the task's format on a rows×cols board: `(row, col)`, or with `digits` its two digits
 * (`23`, boards of at most 9×9), `(row, col)` accepted as well.
 */
export function parseCellAs(response: string, rows: number, cols: number, format: CellFormat): Parsed<Cell> {
  if (format === "pair") return parseCell(response, rows, cols);
  const c = actionContent(response);
  if (!c.ok) return c;
  const m = DIGITS_CELL_RE.exec(c.move);
  if (m) {
    const row = Number(m[1]);
    const col = Number(m[2]);
    if (row > rows || col > cols)
      return { ok: false, reason: `${row}${col} is off the board (rows 1-${rows}, columns 1-${cols})` };
    return { ok: true, move: { row, col } };
  }
  const pair = parseCell(response, rows, cols);
  if (pair.ok || !pair.reason.includes("is not a cell")) return pair;
  return { ok: false, reason: `"${clip(c.move)}" is not a cell written as two digits (row, column)` };
}

/**
 * A TicTacToe move: the cell index 0..8 (row-major) of a free cell.
 * `free` lists the empty cells (the game's legal moves); `format` is the task's cell format.
 */
export function parseTicTacToeMove(
  response: string,
  free: readonly number[],
  format: CellFormat = "pair",
): Parsed<number> {
  const c = parseCellAs(response, 3, 3, format);
  if (!c.ok) return c;
  const cell = (c.move.row - 1) * 3 + (c.move.col - 1);
  if (!free.includes(cell)) {
    return { ok: false, reason: `cell ${cellName(c.move.row, c.move.col, format)} is already taken` };
  }
  return { ok: true, move: cell };
}

export type KuhnAction = 0 | 1;
export const KUHN_ACTION_NAMES = ["PASS", "BET"] as const;

/** A Kuhn poker move: 0 = PASS (check/fold), 1 = BET (bet/call). */
export function parseKuhnMove(response: string): Parsed<KuhnAction> {
  const c = actionContent(response);
  if (!c.ok) return c;
  const word = c.move.toLowerCase();
  if (word === "pass") return { ok: true, move: 0 };
  if (word === "bet") return { ok: true, move: 1 };
  return { ok: false, reason: `"${clip(c.move)}" is not PASS or BET` };
}

export type Direction = "up" | "down" | "left" | "right";
export const DIRECTIONS: readonly Direction[] = ["up", "down", "left", "right"];

/** Sokoban moves: 1..maxMoves directions, comma- or space-separated. */
export function parseSokobanMoves(response: string, maxMoves = 3): Parsed<Direction[]> {
  const c = actionContent(response);
  if (!c.ok) return c;
  const words = c.move
    .toLowerCase()
    .split(/[\s,]+/)
    .filter((w) => w.length > 0);
  if (words.length === 0) return { ok: false, reason: "no moves in the action" };
  for (const w of words) {
    if (!(DIRECTIONS as readonly string[]).includes(w)) {
      return { ok: false, reason: `"${clip(w)}" is not one of up, down, left, right` };
    }
  }
  if (words.length > maxMoves) {
    return { ok: false, reason: `${words.length} moves given; at most ${maxMoves} per turn` };
  }
  return { ok: true, move: words as Direction[] };
}

/**
 * A MineSweeper reveal: one cell (1-based) on a rows×cols board that is still closed.
 * `isOpen(row, col)` (1-based) tells which cells are already revealed.
 */
export function parseMinesweeperMove(
  response: string,
  rows: number,
  cols: number,
  isOpen?: (row: number, col: number) => boolean,
  format: CellFormat = "pair",
): Parsed<Cell> {
  const c = parseCellAs(response, rows, cols, format);
  if (!c.ok) return c;
  if (isOpen?.(c.move.row, c.move.col)) {
    return { ok: false, reason: `cell ${cellName(c.move.row, c.move.col, format)} is already revealed` };
  }
  return c;
}

/** Shortens user text quoted in a reason. */
function clip(s: string, n = 40): string {
  const one = s.replace(/\s+/g, " ");
  return one.length <= n ? one : `${one.slice(0, n - 1)}…`;
}
