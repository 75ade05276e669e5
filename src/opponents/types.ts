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

/**
 * One family of opponents for a game, addressed by a spec "NAME" or "NAME:ARG"
 * (e.g. "random", "mcts:100", "preferred:3", "cfr:1000").
 */
export interface OpponentKind<S = unknown, M = unknown> {
  name: string;
  /** How the argument reads in help text, e.g. "<simulations>"; omit when the kind takes none. */
  arg?: string;
  /** Whether the argument may be left out (a default is used). */
  argOptional?: boolean;
  description: string;
  /**
   * For kinds whose work grows with their argument (MCTS simulations, CFR iterations): what the
   * argument counts, the largest value `mage env-serve` allows unless told otherwise, and the
   * largest the kind accepts at all. Such an opponent is played off the server's event loop.
   */
  work?: { unit: string; serveLimit: number; max?: number };
  /**
   * Builds the opponent. It draws from `ctx.rng` itself, never from a copy, so the generator's
   * state after a move is the opponent's stream state (`mage env-serve` plays such moves in a
   * worker thread and carries that state back).
   */
  create(arg: string | undefined, ctx: { rng: Rng; replay: boolean; spec: string }): Opponent<S, M>;
}
