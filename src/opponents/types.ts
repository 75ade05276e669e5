import type { Rng } from "../core/rng.js";

/**
 * Anything that picks a move for a game state. May be async so a frozen language
 * policy can act as an opponent through an adapter.
 */
export interface Opponent<S, M> {
  /** The spec it was built from, e.g. "mcts:100" or "preferred:3"; shown in data and metrics. */
  readonly name: string;
  act(state: S): M | Promise<M>;
  /**
   * Called when a trial restarts the identical task for a new attempt. A stochastic
   * opponent continues its random stream by default; with `replay` it rewinds it so it
   * answers the same moves the same way in every attempt.
   */
  restart(): void;
}

/** Builds an opponent for one task instance from a spec string and a keyed generator. */
export type OpponentFactory<S, M> = (args: { spec: string; rng: Rng; replay: boolean }) => Opponent<S, M>;
