import { argmaxPolicy, type KuhnPolicy, policyFromArray } from "./policies.js";
import {
  CHILD,
  DEAL_PROB,
  DEALS,
  infoIndex,
  NODE_PLAYER,
  NUM_INFOSETS,
  ROOT,
  terminalPayoff0,
} from "./tree.js";

/**
 * Exact counterfactual regret minimisation for Kuhn poker (every iteration walks all 6 deals;
 * no sampling). Both variants follow OpenSpiel's `CFRSolver` / `CFRPlusSolver`:
 *
 * - `cfr` (vanilla): alternating updates (player 0's pass, then player 1's, each followed by
 *   regret matching of the current policy), cumulative regrets weighted by the counterfactual
 *   reach (chance × opponent), average strategy with uniform weights (own reach × π).
 * - `cfr+`: the same alternating passes with regret-matching+ (cumulative regrets clipped at 0
 *   after each pass) and linear averaging (iteration t's contribution to the average strategy
 *   is weighted by t).
 *
 * The initial current policy is uniform; an information set with no positive regret plays
 * uniformly; an information set never reached keeps a uniform average.
 */

export type CfrVariant = "cfr" | "cfr+";

export class KuhnCfrSolver {
  readonly variant: CfrVariant;
  private t = 0;
  /** Cumulative regrets [PASS, BET] per information set. */
  private readonly regret = new Float64Array(2 * NUM_INFOSETS);
  /** Cumulative (reach-weighted) policy [PASS, BET] per information set. */
  private readonly cumulative = new Float64Array(2 * NUM_INFOSETS);
  /** The current policy, P(BET) per information set. */
  private readonly current = new Float64Array(NUM_INFOSETS).fill(0.5);

  constructor(variant: CfrVariant = "cfr") {
    if (variant !== "cfr" && variant !== "cfr+")
      throw new RangeError(`kuhn CFR: unknown variant "${variant}"`);
    this.variant = variant;
  }

  get iterations(): number {
    return this.t;
  }

  /** Runs `n` more iterations. */
  iterate(n = 1): this {
    const plus = this.variant === "cfr+";
    for (let k = 0; k < n; k++) {
      this.t++;
      const weight = plus ? this.t : 1;
      for (let player = 0; player < 2; player++) {
        for (const [c0, c1] of DEALS) this.walk(ROOT, c0, c1, player, 1, 1, weight);
        if (plus) {
          for (let i = 0; i < this.regret.length; i++) if (this.regret[i] < 0) this.regret[i] = 0;
        }
        this.regretMatch();
      }
    }
    return this;
  }

  /** Returns player 0's value below `node` under the current policy, updating `player`'s tables. */
  private walk(
    node: number,
    c0: number,
    c1: number,
    player: number,
    r0: number,
    r1: number,
    w: number,
  ): number {
    const pl = NODE_PLAYER[node];
    if (pl < 0) return terminalPayoff0(node, c0, c1);
    if (r0 === 0 && r1 === 0) return 0; // unreachable for both players: contributes nothing
    const info = infoIndex(node, pl === 0 ? c0 : c1);
    const s = this.current[info];
    const ch = CHILD[node];
    let vPass: number;
    let vBet: number;
    if (pl === 0) {
      vPass = this.walk(ch[0], c0, c1, player, r0 * (1 - s), r1, w);
      vBet = this.walk(ch[1], c0, c1, player, r0 * s, r1, w);
    } else {
      vPass = this.walk(ch[0], c0, c1, player, r0, r1 * (1 - s), w);
      vBet = this.walk(ch[1], c0, c1, player, r0, r1 * s, w);
    }
    const v = (1 - s) * vPass + s * vBet;
    if (pl === player) {
      const sign = player === 0 ? 1 : -1;
      const cf = DEAL_PROB * (player === 0 ? r1 : r0);
      const own = player === 0 ? r0 : r1;
      this.regret[2 * info] += cf * sign * (vPass - v);
      this.regret[2 * info + 1] += cf * sign * (vBet - v);
      this.cumulative[2 * info] += w * own * (1 - s);
      this.cumulative[2 * info + 1] += w * own * s;
    }
    return v;
  }

  private regretMatch(): void {
    for (let i = 0; i < NUM_INFOSETS; i++) {
      const a = Math.max(this.regret[2 * i], 0);
      const b = Math.max(this.regret[2 * i + 1], 0);
      this.current[i] = a + b > 0 ? b / (a + b) : 0.5;
    }
  }

  /** The average strategy as P(BET) per information set (KUHN_INFOSETS order). */
  averageArray(): Float64Array {
    const out = new Float64Array(NUM_INFOSETS);
    for (let i = 0; i < NUM_INFOSETS; i++) {
      const a = this.cumulative[2 * i];
      const b = this.cumulative[2 * i + 1];
      out[i] = a + b > 0 ? b / (a + b) : 0.5;
    }
    return out;
  }

  averagePolicy(): KuhnPolicy {
    return policyFromArray(this.averageArray());
  }

  currentPolicy(): KuhnPolicy {
    return policyFromArray(this.current);
  }
}

/** Largest iteration count accepted from a spec (keeps a typo from hanging a run). */
export const MAX_CFR_ITERATIONS = 10_000_000;

/** Computed policies kept per process; the least recently used goes first past this many. */
const AVERAGE_CACHE_SIZE = 64;
const averageCache = new Map<string, KuhnPolicy>();

/**
 * The average strategy after `iterations` iterations of the variant; computed once per (variant, N)
 * per process while it stays among the last 64 asked for (a server asked for many N keeps 64).
 */
export function cfrAveragePolicy(variant: CfrVariant, iterations: number): KuhnPolicy {
  if (!Number.isInteger(iterations) || iterations < 1 || iterations > MAX_CFR_ITERATIONS) {
    throw new RangeError(
      `kuhn CFR: iterations must be an integer in 1..${MAX_CFR_ITERATIONS}, got ${iterations}`,
    );
  }
  const key = `${variant}:${iterations}`;
  let p = averageCache.get(key);
  if (p) averageCache.delete(key);
  else p = new KuhnCfrSolver(variant).iterate(iterations).averagePolicy();
  averageCache.set(key, p);
  if (averageCache.size > AVERAGE_CACHE_SIZE) averageCache.delete(averageCache.keys().next().value as string);
  return p;
}

/** The deterministic policy of the `cfr:N` opponent: argmax of the vanilla CFR average strategy, ties → PASS. */
export function cfrArgmaxPolicy(iterations: number): KuhnPolicy {
  return argmaxPolicy(cfrAveragePolicy("cfr", iterations));
}
