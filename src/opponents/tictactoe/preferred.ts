import type { Rng } from "../../core/rng.js";
import { cellIndex, emptyCells, occupiedOf, type TicTacToeState } from "../../games/tictactoe.js";
import { OpponentRng } from "../random.js";
import type { Opponent } from "../types.js";

/**
 * MAGE's six fixed-preference orders (mage-reference §6.2), 0-based [row, col]: the opponent
 * takes the first empty cell in its order (all orders list all 9 cells, so the random
 * fallback only matters for a shorter custom order).
 */
export const PREFERRED_ORDERS: readonly (readonly (readonly [number, number])[])[] = [
  [
    [1, 1],
    [0, 0],
    [0, 2],
    [2, 0],
    [2, 2],
    [0, 1],
    [1, 0],
    [1, 2],
    [2, 1],
  ],
  [
    [0, 0],
    [0, 2],
    [2, 0],
    [2, 2],
    [1, 1],
    [0, 1],
    [1, 0],
    [1, 2],
    [2, 1],
  ],
  [
    [0, 1],
    [1, 0],
    [1, 2],
    [2, 1],
    [1, 1],
    [0, 0],
    [0, 2],
    [2, 0],
    [2, 2],
  ],
  [
    [0, 0],
    [1, 1],
    [2, 2],
    [0, 2],
    [2, 0],
    [0, 1],
    [1, 0],
    [1, 2],
    [2, 1],
  ],
  [
    [0, 2],
    [1, 1],
    [2, 0],
    [0, 0],
    [2, 2],
    [0, 1],
    [1, 0],
    [1, 2],
    [2, 1],
  ],
  [
    [2, 2],
    [2, 0],
    [0, 2],
    [0, 0],
    [1, 1],
    [2, 1],
    [1, 2],
    [1, 0],
    [0, 1],
  ],
];

/** The orders as cell indices (3·row + col). */
export const PREFERRED_CELL_ORDERS: readonly (readonly number[])[] = PREFERRED_ORDERS.map((order) =>
  order.map(([r, c]) => cellIndex(r, c)),
);

export class PreferredOpponent implements Opponent<TicTacToeState, number> {
  private readonly stream: OpponentRng;

  constructor(
    readonly name: string,
    private readonly order: readonly number[],
    rng: Rng,
    replay = false,
  ) {
    this.stream = new OpponentRng(rng, replay);
  }

  act(state: TicTacToeState): number {
    const occ = occupiedOf(state);
    for (const cell of this.order) if ((occ & (1 << cell)) === 0) return cell;
    const empty = emptyCells(state);
    if (empty.length === 0) throw new RangeError(`${this.name}: no legal move (terminal state?)`);
    return empty[this.stream.rng.int(empty.length)];
  }

  restart(): void {
    this.stream.restart();
  }
}
