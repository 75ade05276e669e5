import type { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import { OpponentRng } from "./random.js";
import type { Opponent } from "./types.js";

/**
 * Monte-Carlo tree search for two-player zero-sum games (returns[1] = -returns[0]),
 * following OpenSpiel's `MCTSBot` with `solve=True` and a one-playout random evaluator:
 * - a fresh tree per decision;
 * - selection by UCT `Q/N + c·sqrt(ln N_parent / N)`; an unvisited child scores +∞, a proven
 *   child scores its proven outcome for the player choosing it; ties go to the earlier child;
 * - a node is expanded on its second visit, its children in a random (shuffled) order;
 * - a leaf is evaluated by one uniformly random playout;
 * - backup adds the return of the player who moved into each node; MCTS-Solver backup marks a
 *   node proven when one child is a proven max-utility win for its mover or all children are
 *   proven (then the best of them); the search stops early once the root is proven;
 * - the move played is the root child maximising (proven outcome or 0, visits, total reward).
 *
 * The tree lives in reusable typed arrays (struct of arrays), so a search allocates only
 * what `game.legalMoves`/`game.apply` allocate. Deterministic given the generator.
 */
export interface MctsOptions<S> {
  /** Simulations per decision (OpenSpiel `max_simulations`). */
  simulations: number;
  /** UCT exploration constant; default 1.4. */
  uctC?: number;
  /** The largest return a player can get (a proven child with it settles its parent); default 1. */
  maxUtility?: number;
  /** MCTS-Solver backup; default true. */
  solve?: boolean;
  /**
   * Optional fast leaf evaluator: plays uniformly random moves from `state` to the end and
   * returns player 0's return. Must draw the same distribution as the generic playout; only
   * there to avoid per-step allocation in hot games.
   */
  playoutValue?: (state: S, rng: Rng) => number;
}

export interface MctsResult<M> {
  move: M;
  /** Simulations actually run (fewer than asked when the root was proven early). */
  simulations: number;
  /** The root's proven value for the player to move, or undefined when not proven. */
  provenValue: number | undefined;
  /** Per root child: move, visits, mean reward for the mover, proven outcome for the mover. */
  children: { move: M; visits: number; meanReward: number; proven: number | undefined }[];
}

export class MctsSearcher<S, M> {
  readonly simulations: number;
  readonly uctC: number;
  readonly maxUtility: number;
  readonly solve: boolean;
  private readonly playout: (state: S, rng: Rng) => number;

  // Node storage (index 0 = root). `player[n]` is who moved into n (the root: the player to move).
  private cap = 0;
  private size = 0;
  private player = new Int8Array(0);
  private visits = new Float64Array(0);
  private total = new Float64Array(0);
  /** Proven outcome for player 0; NaN when unproven. */
  private proven = new Float64Array(0);
  private firstChild = new Int32Array(0);
  private numChildren = new Int32Array(0);
  private moves: M[] = [];
  private path = new Int32Array(64);

  constructor(
    readonly game: Game<S, M>,
    options: MctsOptions<S>,
  ) {
    if (game.numPlayers !== 2)
      throw new RangeError(`mcts: ${game.name} has ${game.numPlayers} players, need 2`);
    if (!Number.isInteger(options.simulations) || options.simulations < 1) {
      throw new RangeError(`mcts: simulations must be a positive integer, got ${options.simulations}`);
    }
    this.simulations = options.simulations;
    this.uctC = options.uctC ?? 1.4;
    this.maxUtility = options.maxUtility ?? 1;
    this.solve = options.solve ?? true;
    this.playout = options.playoutValue ?? ((state, rng) => genericPlayout(game, state, rng));
    this.grow(256);
  }

  private grow(min: number): void {
    let cap = Math.max(this.cap, 16);
    while (cap < min) cap *= 2;
    if (cap === this.cap) return;
    const copy = <T extends Int8Array | Int32Array | Float64Array>(old: T, make: (n: number) => T): T => {
      const next = make(cap);
      next.set(old);
      return next;
    };
    this.player = copy(this.player, (n) => new Int8Array(n));
    this.visits = copy(this.visits, (n) => new Float64Array(n));
    this.total = copy(this.total, (n) => new Float64Array(n));
    this.proven = copy(this.proven, (n) => new Float64Array(n));
    this.firstChild = copy(this.firstChild, (n) => new Int32Array(n));
    this.numChildren = copy(this.numChildren, (n) => new Int32Array(n));
    this.cap = cap;
  }

  private newNode(player: number, move: M): number {
    const n = this.size++;
    this.player[n] = player;
    this.visits[n] = 0;
    this.total[n] = 0;
    this.proven[n] = Number.NaN;
    this.firstChild[n] = 0;
    this.numChildren[n] = 0;
    this.moves[n] = move;
    return n;
  }

  /** Runs one search from `state` (not terminal) and returns the chosen move with root statistics. */
  search(state: S, rng: Rng): MctsResult<M> {
    const game = this.game;
    const rootPlayer = game.currentPlayer(state);
    if (rootPlayer < 0) throw new RangeError("mcts: search from a terminal state");
    this.size = 0;
    this.moves.length = 0;
    this.newNode(rootPlayer, undefined as M);
    const c = this.uctC;
    const maxU = this.maxUtility;
    let sims = 0;
    while (sims < this.simulations) {
      sims++;
      // Selection / expansion.
      let node = 0;
      let depth = 0;
      this.path[0] = 0;
      let s = state;
      let terminal = game.isTerminal(s);
      while (!terminal && this.visits[node] > 0) {
        if (this.numChildren[node] === 0) this.expand(node, s, rng);
        node = this.selectChild(node, c);
        s = game.apply(s, this.moves[node]);
        if (++depth >= this.path.length) {
          const p = new Int32Array(this.path.length * 2);
          p.set(this.path);
          this.path = p;
        }
        this.path[depth] = node;
        terminal = game.isTerminal(s);
      }
      // Evaluation.
      let r0: number;
      let solved = false;
      if (terminal) {
        r0 = game.returns(s)[0];
        this.proven[node] = r0;
        solved = this.solve;
      } else {
        r0 = this.playout(s, rng);
      }
      // Backup.
      const player = this.player;
      const proven = this.proven;
      for (let d = depth; d >= 0; d--) {
        const n = this.path[d];
        this.total[n] += player[n] === 0 ? r0 : -r0;
        this.visits[n] += 1;
        const k = this.numChildren[n];
        if (solved && k > 0) {
          const first = this.firstChild[n];
          const mover = player[first];
          let best = -1;
          let bestValue = Number.NEGATIVE_INFINITY;
          let allSolved = true;
          for (let ch = first; ch < first + k; ch++) {
            const pv = proven[ch];
            if (Number.isNaN(pv)) {
              allSolved = false;
            } else {
              const v = mover === 0 ? pv : -pv;
              if (best < 0 || v > bestValue) {
                best = ch;
                bestValue = v;
              }
            }
          }
          if (best >= 0 && (allSolved || bestValue === maxU)) proven[n] = proven[best];
          else solved = false;
        }
      }
      if (!Number.isNaN(proven[0])) break;
    }
    // With a single simulation the root is evaluated but never expanded: expand it now, so the
    // move is the first of its shuffled children (a uniformly random move).
    if (this.numChildren[0] === 0) this.expand(0, state, rng);
    return this.result(rootPlayer, sims);
  }

  private expand(node: number, s: S, rng: Rng): void {
    const legal = this.game.legalMoves(s);
    rng.shuffle(legal);
    const mover = this.game.currentPlayer(s);
    const k = legal.length;
    if (this.size + k > this.cap) this.grow(this.size + k);
    this.firstChild[node] = this.size;
    for (let i = 0; i < k; i++) this.newNode(mover, legal[i]);
    this.numChildren[node] = k;
  }

  private selectChild(node: number, c: number): number {
    const first = this.firstChild[node];
    const end = first + this.numChildren[node];
    const logN = Math.log(this.visits[node]);
    const visits = this.visits;
    const proven = this.proven;
    let best = first;
    let bestScore = Number.NEGATIVE_INFINITY;
    for (let ch = first; ch < end; ch++) {
      const pv = proven[ch];
      let score: number;
      if (!Number.isNaN(pv)) {
        score = this.player[ch] === 0 ? pv : -pv;
      } else {
        const n = visits[ch];
        if (n === 0) return ch; // +∞; the first unvisited child wins ties
        score = this.total[ch] / n + c * Math.sqrt(logN / n);
      }
      if (score > bestScore) {
        bestScore = score;
        best = ch;
      }
    }
    return best;
  }

  private result(rootPlayer: number, sims: number): MctsResult<M> {
    const first = this.firstChild[0];
    const k = this.numChildren[0];
    let best = first;
    let bestKey0 = Number.NEGATIVE_INFINITY;
    let bestKey1 = Number.NEGATIVE_INFINITY;
    let bestKey2 = Number.NEGATIVE_INFINITY;
    const children: MctsResult<M>["children"] = [];
    for (let ch = first; ch < first + k; ch++) {
      const pv = this.proven[ch];
      const mover = this.player[ch];
      const outcome = !Number.isNaN(pv) ? (mover === 0 ? pv : -pv) : undefined;
      const k0 = outcome ?? 0;
      const k1 = this.visits[ch];
      const k2 = this.total[ch];
      if (k0 > bestKey0 || (k0 === bestKey0 && (k1 > bestKey1 || (k1 === bestKey1 && k2 > bestKey2)))) {
        best = ch;
        bestKey0 = k0;
        bestKey1 = k1;
        bestKey2 = k2;
      }
      children.push({ move: this.moves[ch], visits: k1, meanReward: k1 > 0 ? k2 / k1 : 0, proven: outcome });
    }
    const rootProven = this.proven[0];
    return {
      move: this.moves[best],
      simulations: sims,
      provenValue: !Number.isNaN(rootProven) ? (rootPlayer === 0 ? rootProven : -rootProven) : undefined,
      children,
    };
  }
}

/** Uniformly random moves to the end; player 0's return. */
export function genericPlayout<S, M>(game: Game<S, M>, state: S, rng: Rng): number {
  let s = state;
  while (!game.isTerminal(s)) {
    const legal = game.legalMoves(s);
    s = game.apply(s, legal[rng.int(legal.length)]);
  }
  return game.returns(s)[0];
}

/**
 * An MCTS opponent: one search per move from its own generator. `restart()` keeps the stream
 * going, or with `replay` rewinds it to where it was at creation.
 */
export class MctsOpponent<S, M> implements Opponent<S, M> {
  readonly searcher: MctsSearcher<S, M>;
  private readonly stream: OpponentRng;

  constructor(
    readonly name: string,
    game: Game<S, M>,
    options: MctsOptions<S>,
    rng: Rng,
    replay = false,
  ) {
    this.searcher = new MctsSearcher(game, options);
    this.stream = new OpponentRng(rng, replay);
  }

  act(state: S): M {
    return this.searcher.search(state, this.stream.rng).move;
  }

  restart(): void {
    this.stream.restart();
  }
}
