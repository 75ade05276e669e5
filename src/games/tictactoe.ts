import type { Rng } from "../core/rng.js";
import type { Game } from "./types.js";

/**
 * TicTacToe on a 3×3 board. Player 0 ("X") moves first. A move is a cell index 0..8 in
 * row-major order: row = floor(m / 3), col = m % 3.
 *
 * A state is one small integer (no allocation per move, trivially immutable): bits 0..8
 * hold player 0's marks, bits 9..17 player 1's marks, bit i = cell i. The type is branded
 * so a state is not confused with a move; build states with `apply`, `stateFromMoves`
 * or `stateFromCells`, read them with the helpers below.
 */
export type TicTacToeState = number & { readonly __brand: "TicTacToeState" };

export const EMPTY_BOARD = 0 as TicTacToeState;
export const NUM_CELLS = 9;
const FULL = 0x1ff;

/** The eight lines (rows, columns, diagonals) as cell triples. */
export const WIN_LINES: readonly (readonly [number, number, number])[] = [
  [0, 1, 2],
  [3, 4, 5],
  [6, 7, 8],
  [0, 3, 6],
  [1, 4, 7],
  [2, 5, 8],
  [0, 4, 8],
  [2, 4, 6],
];

/** WINS[mask] = 1 when the 9-bit mark set `mask` contains a full line. */
const WINS = new Uint8Array(512);
/** POP[mask] = number of marks in a 9-bit set. */
const POP = new Uint8Array(512);
/** EMPTY_LISTS[occupied] = the empty cells, ascending; EMPTY_FLAT holds them 9 per mask. */
const EMPTY_FLAT = new Int8Array(512 * 9);
for (let mask = 0; mask < 512; mask++) {
  let pop = 0;
  for (let c = 0; c < 9; c++) if (mask & (1 << c)) pop++;
  POP[mask] = pop;
  for (const [a, b, c] of WIN_LINES) {
    const line = (1 << a) | (1 << b) | (1 << c);
    if ((mask & line) === line) WINS[mask] = 1;
  }
  let k = 0;
  for (let c = 0; c < 9; c++) if ((mask & (1 << c)) === 0) EMPTY_FLAT[mask * 9 + k++] = c;
}

export function cellIndex(row: number, col: number): number {
  return row * 3 + col;
}
export function rowOf(cell: number): number {
  return (cell / 3) | 0;
}
export function colOf(cell: number): number {
  return cell % 3;
}

/** The 9-bit set of cells marked by `player` (0 = X, 1 = O). */
export function marksOf(state: TicTacToeState, player: number): number {
  return player === 0 ? state & FULL : (state >>> 9) & FULL;
}

/** The 9-bit set of occupied cells. */
export function occupiedOf(state: TicTacToeState): number {
  return (state | (state >>> 9)) & FULL;
}

/** Who holds `cell`: 0, 1, or -1 when empty. */
export function cellAt(state: TicTacToeState, cell: number): -1 | 0 | 1 {
  if (state & (1 << cell)) return 0;
  if (state & (1 << (cell + 9))) return 1;
  return -1;
}

/** The cells as a 9-entry array of 0 / 1 / -1 (empty), row-major. */
export function cellsOf(state: TicTacToeState): (-1 | 0 | 1)[] {
  const out: (-1 | 0 | 1)[] = [];
  for (let c = 0; c < 9; c++) out.push(cellAt(state, c));
  return out;
}

/** Number of marks on the board. */
export function moveCount(state: TicTacToeState): number {
  return POP[state & FULL] + POP[(state >>> 9) & FULL];
}

/** The player who completed a line, or -1 when nobody has (yet). */
export function winnerOf(state: TicTacToeState): -1 | 0 | 1 {
  if (WINS[state & FULL]) return 0;
  if (WINS[(state >>> 9) & FULL]) return 1;
  return -1;
}

export function isTerminalState(state: TicTacToeState): boolean {
  const x = state & FULL;
  const o = (state >>> 9) & FULL;
  return WINS[x] === 1 || WINS[o] === 1 || (x | o) === FULL;
}

/** The player to move (0 or 1), or -1 at a terminal state. */
export function playerToMove(state: TicTacToeState): -1 | 0 | 1 {
  if (isTerminalState(state)) return -1;
  return POP[state & FULL] === POP[(state >>> 9) & FULL] ? 0 : 1;
}

export function isLegalMove(state: TicTacToeState, move: number): boolean {
  return (
    Number.isInteger(move) &&
    move >= 0 &&
    move < 9 &&
    !isTerminalState(state) &&
    (occupiedOf(state) & (1 << move)) === 0
  );
}

/** The empty cells of a non-terminal state, ascending (a fresh array). Empty at a terminal state. */
export function emptyCells(state: TicTacToeState): number[] {
  if (isTerminalState(state)) return [];
  const occ = occupiedOf(state);
  const n = 9 - POP[occ];
  const out = new Array<number>(n);
  const base = occ * 9;
  for (let i = 0; i < n; i++) out[i] = EMPTY_FLAT[base + i];
  return out;
}

/** Places the mover's mark on `move` (no checks; see `isLegalMove`). */
function place(state: TicTacToeState, move: number): TicTacToeState {
  const x = state & FULL;
  const o = (state >>> 9) & FULL;
  const bit = POP[x] === POP[o] ? 1 << move : 1 << (move + 9);
  return (state | bit) as TicTacToeState;
}

/** The state after playing `moves` from the empty board; throws RangeError on an illegal move. */
export function stateFromMoves(moves: readonly number[]): TicTacToeState {
  let s = EMPTY_BOARD;
  for (let i = 0; i < moves.length; i++) {
    if (!isLegalMove(s, moves[i])) {
      throw new RangeError(`tictactoe: move ${i} (${moves[i]}) is illegal after [${moves.slice(0, i)}]`);
    }
    s = place(s, moves[i]);
  }
  return s;
}

/**
 * A state from 9 cells (row-major) of 0 / 1 / -1 (empty). The counts must be consistent
 * with player 0 moving first (X count = O count or O count + 1); throws RangeError otherwise.
 */
export function stateFromCells(cells: readonly number[]): TicTacToeState {
  if (cells.length !== 9) throw new RangeError(`tictactoe: expected 9 cells, got ${cells.length}`);
  let x = 0;
  let o = 0;
  for (let c = 0; c < 9; c++) {
    if (cells[c] === 0) x |= 1 << c;
    else if (cells[c] === 1) o |= 1 << c;
    else if (cells[c] !== -1)
      throw new RangeError(`tictactoe: cell ${c} is ${cells[c]}, expected 0, 1 or -1`);
  }
  const d = POP[x] - POP[o];
  if (d !== 0 && d !== 1) throw new RangeError(`tictactoe: ${POP[x]} X marks and ${POP[o]} O marks`);
  return (x | (o << 9)) as TicTacToeState;
}

/**
 * Plays uniformly random moves from `state` to the end and returns player 0's return
 * (+1 / -1 / 0). Allocation-free; the hot path of MCTS leaf evaluation.
 */
export function randomPlayoutValue(state: TicTacToeState, rng: Rng): number {
  let x = state & FULL;
  let o = (state >>> 9) & FULL;
  for (;;) {
    if (WINS[x]) return 1;
    if (WINS[o]) return -1;
    const occ = x | o;
    if (occ === FULL) return 0;
    const cell = EMPTY_FLAT[occ * 9 + rng.int(9 - POP[occ])];
    if (POP[x] === POP[o]) x |= 1 << cell;
    else o |= 1 << cell;
  }
}

/**
 * Three lines of cells joined by spaces: player 0's marks are `X`, player 1's `O` (swapped when
 * `perspective` is 1, so that player sees itself as X), and an empty cell is `emptyText(cell)`.
 */
export function renderBoard(
  state: TicTacToeState,
  perspective: number | undefined,
  emptyText: (cell: number) => string,
): string {
  const swap = perspective === 1;
  const lines: string[] = [];
  for (let r = 0; r < 3; r++) {
    const row: string[] = [];
    for (let c = 0; c < 3; c++) {
      const owner = cellAt(state, r * 3 + c);
      row.push(owner === -1 ? emptyText(r * 3 + c) : (swap ? 1 - owner : owner) === 0 ? "X" : "O");
    }
    lines.push(row.join(" "));
  }
  return lines.join("\n");
}

export const tictactoe: Game<TicTacToeState, number> = {
  name: "tictactoe",
  numPlayers: 2,
  initialState(_rng: Rng): TicTacToeState {
    return EMPTY_BOARD;
  },
  currentPlayer: playerToMove,
  legalMoves: emptyCells,
  apply(state: TicTacToeState, move: number): TicTacToeState {
    if (!isLegalMove(state, move)) {
      throw new RangeError(`tictactoe: illegal move ${move} on\n${tictactoe.render(state)}`);
    }
    return place(state, move);
  },
  isTerminal: isTerminalState,
  returns(state: TicTacToeState): number[] {
    const w = winnerOf(state);
    if (w === 0) return [1, -1];
    if (w === 1) return [-1, 1];
    return [0, 0];
  },
  /** 1-based "(row,col)", the form MAGE's agent writes its actions in. */
  moveToString(move: number): string {
    return `(${rowOf(move) + 1},${colOf(move) + 1})`;
  },
  /**
   * Three lines of `.`/`X`/`O` joined by spaces. Player 0 is `X`; with a `perspective`
   * player given, that player's marks are drawn as `X` (MAGE shows the agent as X even
   * when it moves second).
   */
  render(state: TicTacToeState, perspective?: number): string {
    return renderBoard(state, perspective, () => ".");
  },
};
