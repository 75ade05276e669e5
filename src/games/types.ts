import type { Rng } from "../core/rng.js";

/**
 * A turn-based game as a pure state machine. States are immutable values: `apply`
 * returns a new state and never mutates its input, so copy/restore is just keeping a
 * reference. Chance (a card deal) happens in `initialState`, from the generator given.
 */
export interface Game<S, M> {
  readonly name: string;
  readonly numPlayers: number;
  initialState(rng: Rng): S;
  /** The player to move, or -1 when the state is terminal. */
  currentPlayer(state: S): number;
  legalMoves(state: S): M[];
  apply(state: S, move: M): S;
  isTerminal(state: S): boolean;
  /** Per-player returns at a terminal state (zeros before). */
  returns(state: S): number[];
  /** A stable short text of a move, for logs and tables. */
  moveToString(move: M): string;
  /** A human-readable rendering of the state (for `mage play` and logs). */
  render(state: S, perspective?: number): string;
}
