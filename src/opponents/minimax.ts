import type { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import { OpponentRng } from "./random.js";
import type { Opponent } from "./types.js";

/**
 * Exact game-theoretic values of a deterministic, perfect-information, two-player zero-sum
 * game (returns[1] = -returns[0]) by memoized minimax over every reachable state.
 * `key` maps a state to a Map key that identifies it (for TicTacToe the state integer itself).
 */
export class MinimaxSolver<S, M> {
  private readonly memo = new Map<string | number, number>();

  constructor(
    readonly game: Game<S, M>,
    private readonly key: (state: S) => string | number,
  ) {
    if (game.numPlayers !== 2)
      throw new RangeError(`minimax: ${game.name} has ${game.numPlayers} players, need 2`);
  }

  /** Player 0's return under perfect play by both players from `state`. */
  value(state: S): number {
    const k = this.key(state);
    const hit = this.memo.get(k);
    if (hit !== undefined) return hit;
    const game = this.game;
    let v: number;
    if (game.isTerminal(state)) {
      v = game.returns(state)[0];
    } else {
      const maximize = game.currentPlayer(state) === 0;
      v = maximize ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
      for (const m of game.legalMoves(state)) {
        const c = this.value(game.apply(state, m));
        v = maximize ? Math.max(v, c) : Math.min(v, c);
      }
    }
    this.memo.set(k, v);
    return v;
  }

  /** The value of `state` for the player to move (or for player 0 at a terminal state). */
  valueForMover(state: S): number {
    const v = this.value(state);
    return this.game.currentPlayer(state) === 1 ? -v : v;
  }

  /** The legal moves that keep the mover's game-theoretic value, in `legalMoves` order. */
  bestMoves(state: S): M[] {
    const game = this.game;
    const sign = game.currentPlayer(state) === 1 ? -1 : 1;
    let best = Number.NEGATIVE_INFINITY;
    let out: M[] = [];
    for (const m of game.legalMoves(state)) {
      const v = sign * this.value(game.apply(state, m));
      if (v > best) {
        best = v;
        out = [m];
      } else if (v === best) {
        out.push(m);
      }
    }
    return out;
  }

  /** Number of distinct states evaluated so far. */
  get size(): number {
    return this.memo.size;
  }
}

/**
 * Perfect play: a uniformly random best move (`tieBreak: "random"`) or the first best move in
 * `legalMoves` order (`tieBreak: "first"`, deterministic, never draws from its generator).
 */
export class MinimaxOpponent<S, M> implements Opponent<S, M> {
  private readonly stream: OpponentRng;

  constructor(
    readonly name: string,
    private readonly solver: MinimaxSolver<S, M>,
    private readonly tieBreak: "random" | "first",
    rng: Rng,
    replay = false,
  ) {
    this.stream = new OpponentRng(rng, replay);
  }

  act(state: S): M {
    const best = this.solver.bestMoves(state);
    if (best.length === 0) throw new RangeError(`${this.name}: no legal move (terminal state?)`);
    return this.tieBreak === "first" ? best[0] : best[this.stream.rng.int(best.length)];
  }

  restart(): void {
    this.stream.restart();
  }
}
