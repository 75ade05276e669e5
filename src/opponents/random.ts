import { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import type { Opponent } from "./types.js";

/**
 * A stochastic opponent's generator with the restart semantics of `Opponent.restart()`:
 * the stream continues across attempts, or with `replay` rewinds to its state at creation.
 */
export class OpponentRng {
  private current: Rng;
  private readonly start: ReturnType<Rng["getState"]>;

  constructor(
    rng: Rng,
    private readonly replay: boolean,
  ) {
    this.current = rng;
    this.start = rng.getState();
  }

  get rng(): Rng {
    return this.current;
  }

  restart(): void {
    if (this.replay) this.current = Rng.fromState(this.start);
  }
}

/** Uniformly random over the legal moves of any game. */
export class RandomOpponent<S, M> implements Opponent<S, M> {
  private readonly stream: OpponentRng;

  constructor(
    readonly name: string,
    private readonly game: Game<S, M>,
    rng: Rng,
    replay = false,
  ) {
    this.stream = new OpponentRng(rng, replay);
  }

  act(state: S): M {
    const legal = this.game.legalMoves(state);
    if (legal.length === 0) throw new RangeError(`${this.name}: no legal move (terminal state?)`);
    return legal[this.stream.rng.int(legal.length)];
  }

  restart(): void {
    this.stream.restart();
  }
}
