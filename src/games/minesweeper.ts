import { UsageError } from "../core/errors.js";
import type { Rng } from "../core/rng.js";

/**
 * MineSweeper as a single-player puzzle (LaMer's env): reveal-only (no flags), an opened
 * start region, and the LaMer reward table. Boards are frozen values; `revealCell` returns
 * a new board. Coordinates are 0-based here; the text API (`parseMinesweeperAction`,
 * `stepMinesweeperText`, `renderMinesweeper`) is 1-based.
 *
 * Every random choice at reset (first cell, mine cells, redraws) comes from the one Rng
 * given, so every member of a group seeded alike sees the identical board (this fixes the
 * reference's unseeded first click, lamer-reference §5.2).
 */

export interface MinesweeperKnobs {
  rows: number;
  cols: number;
  mines: number;
  /** Redraws allowed when the first reveal already wins (default 100). */
  maxRedraws: number;
}

export const DEFAULT_MINESWEEPER_KNOBS: Readonly<MinesweeperKnobs> = Object.freeze({
  rows: 6,
  cols: 6,
  mines: 3,
  maxRedraws: 100,
});

export const MINESWEEPER_REWARDS = {
  /** Unparsable, out of range, already open, or the game is over. */
  invalid: -1,
  /** A reveal that opened exactly one cell. */
  single: 0.5,
  /** A reveal that opened more than one cell. */
  cascade: 2,
  /** The reveal that opened the last safe cell; replaces the single/cascade reward. */
  win: 10,
  mine: -0.1,
} as const;

export type MinesweeperStatus = "playing" | "won" | "lost";

export interface MinesweeperBoard {
  readonly rows: number;
  readonly cols: number;
  readonly numMines: number;
  /** Per cell, row-major: a mine is there. */
  readonly mines: readonly boolean[];
  /** Per cell: number of mines among the 8 neighbours. */
  readonly counts: readonly number[];
  /** Per cell: opened. */
  readonly revealed: readonly boolean[];
  /** Safe cells opened so far. */
  readonly openedSafe: number;
  readonly status: MinesweeperStatus;
  /** The mine cell that ended the game, or -1. */
  readonly hit: number;
}

export interface MinesweeperStepResult {
  board: MinesweeperBoard;
  reward: number;
  done: boolean;
  won: boolean;
  lost: boolean;
  /** The action was well-formed and opened at least one cell. */
  valid: boolean;
  /** Cells opened by this action. */
  opened: number;
}

function checkKnobs(k: MinesweeperKnobs): void {
  const int = (name: string, v: number, min: number) => {
    if (!Number.isInteger(v) || v < min)
      throw new UsageError(`minesweeper ${name} must be an integer ≥ ${min}, got ${v}`);
  };
  int("rows", k.rows, 1);
  int("cols", k.cols, 1);
  int("mines", k.mines, 1);
  int("maxRedraws", k.maxRedraws, 0);
  if (k.mines > k.rows * k.cols - 2)
    throw new UsageError(
      `minesweeper mines=${k.mines} leaves fewer than 2 safe cells on a ${k.rows}×${k.cols} board (max ${k.rows * k.cols - 2})`,
    );
}

function neighbours(rows: number, cols: number, cell: number): number[] {
  const r = Math.floor(cell / cols);
  const c = cell % cols;
  const out: number[] = [];
  for (let dr = -1; dr <= 1; dr++)
    for (let dc = -1; dc <= 1; dc++) {
      if (dr === 0 && dc === 0) continue;
      const nr = r + dr;
      const nc = c + dc;
      if (nr >= 0 && nr < rows && nc >= 0 && nc < cols) out.push(nr * cols + nc);
    }
  return out;
}

function freezeBoard(b: MinesweeperBoard): MinesweeperBoard {
  Object.freeze(b.revealed);
  return Object.freeze(b);
}

/** A board with the given mine cells ([row, col], 0-based) and nothing opened. */
function boardFromMineCells(rows: number, cols: number, mineCells: readonly number[]): MinesweeperBoard {
  const n = rows * cols;
  const mines = new Array<boolean>(n).fill(false);
  for (const m of mineCells) {
    if (!Number.isInteger(m) || m < 0 || m >= n)
      throw new UsageError(`minesweeper mine cell ${m} is outside the board`);
    if (mines[m]) throw new UsageError(`minesweeper mine cell ${m} given twice`);
    mines[m] = true;
  }
  const counts = new Array<number>(n).fill(0);
  for (let i = 0; i < n; i++) if (mines[i]) for (const j of neighbours(rows, cols, i)) counts[j]++;
  return freezeBoard({
    rows,
    cols,
    numMines: mineCells.length,
    mines: Object.freeze(mines),
    counts: Object.freeze(counts),
    revealed: new Array<boolean>(n).fill(false),
    openedSafe: 0,
    status: "playing",
    hit: -1,
  });
}

/**
 * The exported constructor for hand-made boards: explicit mines as 0-based [row, col]
 * pairs, optionally opening `firstReveal` (0-based) with its cascade, unscored.
 */
export function minesweeperFromMines(
  rows: number,
  cols: number,
  mines: readonly (readonly [number, number])[],
  firstReveal?: readonly [number, number],
): MinesweeperBoard {
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 1 || cols < 1)
    throw new UsageError(`minesweeper board must be at least 1×1 (rows=${rows}, cols=${cols})`);
  const cells = mines.map(([r, c]) => {
    if (!Number.isInteger(r) || !Number.isInteger(c) || r < 0 || r >= rows || c < 0 || c >= cols)
      throw new UsageError(`minesweeper mine (${r}, ${c}) is outside the ${rows}×${cols} board`);
    return r * cols + c;
  });
  let board = boardFromMineCells(rows, cols, cells);
  if (firstReveal) {
    const res = revealCell(board, firstReveal[0], firstReveal[1]);
    if (!res.valid || res.lost)
      throw new UsageError(`minesweeper firstReveal (${firstReveal.join(", ")}) is off the board or a mine`);
    board = res.board;
  }
  return board;
}

/**
 * Reset: a uniformly random first cell, the mines uniformly among the other cells, and the
 * first cell opened with its cascade; redrawn (first cell and mines) while that already wins.
 */
export function newMinesweeper(rng: Rng, partial: Partial<MinesweeperKnobs> = {}): MinesweeperBoard {
  const k: MinesweeperKnobs = { ...DEFAULT_MINESWEEPER_KNOBS, ...partial };
  checkKnobs(k);
  const n = k.rows * k.cols;
  for (let draw = 0; draw <= k.maxRedraws; draw++) {
    const first = rng.int(n);
    const others: number[] = [];
    for (let i = 0; i < n; i++) if (i !== first) others.push(i);
    // partial Fisher–Yates: the first `mines` entries become a uniform subset
    for (let i = 0; i < k.mines; i++) {
      const j = i + rng.int(others.length - i);
      const t = others[i];
      others[i] = others[j];
      others[j] = t;
    }
    const board = boardFromMineCells(k.rows, k.cols, others.slice(0, k.mines));
    const res = revealCell(board, Math.floor(first / k.cols), first % k.cols);
    if (res.board.status === "playing") return res.board;
  }
  throw new UsageError(
    `minesweeper: the first reveal won on every one of ${k.maxRedraws + 1} draws with rows=${k.rows}, cols=${k.cols}, ` +
      `mines=${k.mines}; use more mines or a larger board (or raise maxRedraws)`,
  );
}

function unchanged(board: MinesweeperBoard, reward: number): MinesweeperStepResult {
  const done = board.status !== "playing";
  return {
    board,
    reward,
    done,
    won: board.status === "won",
    lost: board.status === "lost",
    valid: false,
    opened: 0,
  };
}

/**
 * Reveals (row, col), 0-based. Out of range or already open: −1, nothing changes, not done.
 * On a finished board nothing changes: reward 0, done, valid false.
 */
export function revealCell(board: MinesweeperBoard, row: number, col: number): MinesweeperStepResult {
  if (board.status !== "playing") return unchanged(board, 0);
  const { rows, cols } = board;
  if (!Number.isInteger(row) || !Number.isInteger(col) || row < 0 || row >= rows || col < 0 || col >= cols)
    return unchanged(board, MINESWEEPER_REWARDS.invalid);
  const cell = row * cols + col;
  if (board.revealed[cell]) return unchanged(board, MINESWEEPER_REWARDS.invalid);
  const revealed = board.revealed.slice();
  if (board.mines[cell]) {
    revealed[cell] = true;
    const next = freezeBoard({ ...board, revealed, status: "lost", hit: cell });
    return {
      board: next,
      reward: MINESWEEPER_REWARDS.mine,
      done: true,
      won: false,
      lost: true,
      valid: true,
      opened: 1,
    };
  }
  let opened = 0;
  const stack = [cell];
  revealed[cell] = true;
  while (stack.length > 0) {
    const c = stack.pop()!;
    opened++;
    if (board.counts[c] !== 0) continue;
    for (const nb of neighbours(rows, cols, c)) {
      if (revealed[nb] || board.mines[nb]) continue;
      revealed[nb] = true;
      stack.push(nb);
    }
  }
  const openedSafe = board.openedSafe + opened;
  const won = openedSafe === rows * cols - board.numMines;
  const next = freezeBoard({ ...board, revealed, openedSafe, status: won ? "won" : "playing" });
  const reward = won
    ? MINESWEEPER_REWARDS.win
    : opened > 1
      ? MINESWEEPER_REWARDS.cascade
      : MINESWEEPER_REWARDS.single;
  return { board: next, reward, done: won, won, lost: false, valid: true, opened };
}

/** The first `(row, col)` pair in the text, as written (1-based), or null. */
export function parseMinesweeperAction(text: string): { row: number; col: number } | null {
  const m = /\(\s*(\d+)\s*,\s*(\d+)\s*\)/.exec(text);
  if (!m) return null;
  return { row: Number(m[1]), col: Number(m[2]) };
}

/** Text action (1-based `(row, col)`); unparsable text scores −1 and changes nothing. */
export function stepMinesweeperText(board: MinesweeperBoard, text: string): MinesweeperStepResult {
  const a = parseMinesweeperAction(text);
  if (!a) return unchanged(board, board.status === "playing" ? MINESWEEPER_REWARDS.invalid : 0);
  return revealCell(board, a.row - 1, a.col - 1);
}

/**
 * `Row i: c1 c2 …` (1-based rows): `?` unopened, `.` opened blank, `1`–`8` counts, and `*`
 * for every mine once the game is lost.
 */
export function renderMinesweeper(board: MinesweeperBoard): string {
  const lines: string[] = [];
  const lost = board.status === "lost";
  for (let r = 0; r < board.rows; r++) {
    const cells: string[] = [];
    for (let c = 0; c < board.cols; c++) {
      const i = r * board.cols + c;
      if (lost && board.mines[i]) cells.push("*");
      else if (!board.revealed[i]) cells.push("?");
      else cells.push(board.counts[i] === 0 ? "." : String(board.counts[i]));
    }
    lines.push(`Row ${r + 1}: ${cells.join(" ")}`);
  }
  return lines.join("\n");
}

/** Mine cells as 0-based [row, col] pairs (for logs and tests). */
export function minePositions(board: MinesweeperBoard): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < board.mines.length; i++)
    if (board.mines[i]) out.push([Math.floor(i / board.cols), i % board.cols]);
  return out;
}
