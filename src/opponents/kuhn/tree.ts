/**
 * The Kuhn poker game tree as small integer tables, shared by the exact solvers
 * (CFR, best response). Policies here are `Float64Array`s of P(BET) in `KUHN_INFOSETS`
 * order (indices 0..5 belong to player 0, 6..11 to player 1).
 *
 * Nodes (betting histories):  0 ""  1 "p"  2 "b"  3 "pp"  4 "pb"  5 "bp"  6 "bb"  7 "pbp"  8 "pbb"
 */

export const NUM_INFOSETS = 12;
export const ROOT = 0;
/** CHILD[node][move] (move 0 = PASS, 1 = BET); -1 at terminal nodes. */
export const CHILD: readonly (readonly [number, number])[] = [
  [1, 2],
  [3, 4],
  [5, 6],
  [-1, -1],
  [7, 8],
  [-1, -1],
  [-1, -1],
  [-1, -1],
  [-1, -1],
];
/** Player to act at each node; -1 at terminal nodes. */
export const NODE_PLAYER: readonly number[] = [0, 1, 1, -1, 0, -1, -1, -1, -1];
/** For each node, the (ancestor node, move taken there) pairs on the path from the root. */
export const PATH: readonly (readonly (readonly [number, number])[])[] = [
  [],
  [[0, 0]],
  [[0, 1]],
  [
    [0, 0],
    [1, 0],
  ],
  [
    [0, 0],
    [1, 1],
  ],
  [
    [0, 1],
    [2, 0],
  ],
  [
    [0, 1],
    [2, 1],
  ],
  [
    [0, 0],
    [1, 1],
    [4, 0],
  ],
  [
    [0, 0],
    [1, 1],
    [4, 1],
  ],
];
/** Decision nodes of each player, deepest first (the order a best response is decided in). */
export const DECISION_NODES: readonly (readonly number[])[] = [
  [4, 0],
  [1, 2],
];
/** The 6 ordered deals, each with probability 1/6. */
export const DEALS: readonly (readonly [number, number])[] = [
  [0, 1],
  [0, 2],
  [1, 0],
  [1, 2],
  [2, 0],
  [2, 1],
];
export const DEAL_PROB = 1 / 6;

/** Index in KUHN_INFOSETS of the information set at decision node `node` for a player holding `card`. */
export function infoIndex(node: number, card: number): number {
  switch (node) {
    case 0:
      return card;
    case 4:
      return 3 + card;
    case 1:
      return 6 + 2 * card;
    case 2:
      return 7 + 2 * card;
    default:
      throw new RangeError(`kuhn tree: node ${node} is not a decision node`);
  }
}

/** Player 0's chips at terminal node `node` for the deal (c0, c1). */
export function terminalPayoff0(node: number, c0: number, c1: number): number {
  const high = c0 > c1 ? 1 : -1;
  switch (node) {
    case 3:
      return high;
    case 5:
      return 1;
    case 7:
      return -1;
    case 6:
    case 8:
      return 2 * high;
    default:
      throw new RangeError(`kuhn tree: node ${node} is not terminal`);
  }
}

/** Player 0's expected chips below `node` for a fixed deal when player 0 plays `pol0` and player 1 `pol1`. */
export function nodeValue0(
  node: number,
  c0: number,
  c1: number,
  pol0: ArrayLike<number>,
  pol1: ArrayLike<number>,
): number {
  const pl = NODE_PLAYER[node];
  if (pl < 0) return terminalPayoff0(node, c0, c1);
  const bet = pl === 0 ? pol0[infoIndex(node, c0)] : pol1[infoIndex(node, c1)];
  const ch = CHILD[node];
  let v = 0;
  if (bet < 1) v += (1 - bet) * nodeValue0(ch[0], c0, c1, pol0, pol1);
  if (bet > 0) v += bet * nodeValue0(ch[1], c0, c1, pol0, pol1);
  return v;
}

/** Player 0's expected chips over the 6 deals. */
export function gameValue0(pol0: ArrayLike<number>, pol1: ArrayLike<number>): number {
  let v = 0;
  for (const [c0, c1] of DEALS) v += DEAL_PROB * nodeValue0(ROOT, c0, c1, pol0, pol1);
  return v;
}

/** Probability that `player`'s opponent, playing `opp`, takes the moves on the path to `node`. */
function opponentReach(node: number, player: number, c0: number, c1: number, opp: ArrayLike<number>): number {
  let r = 1;
  for (const [anc, move] of PATH[node]) {
    const pl = NODE_PLAYER[anc];
    if (pl === player) continue;
    const bet = opp[infoIndex(anc, pl === 0 ? c0 : c1)];
    r *= move === 1 ? bet : 1 - bet;
  }
  return r;
}

export interface TreeBestResponse {
  /** The best responder's expected chips against the (mixture of) opponent policies. */
  value: number;
  /** Best move (0 PASS / 1 BET) at each of the player's information sets (-1 elsewhere); ties → PASS. */
  actions: Int8Array;
  /** Counterfactual values [PASS, BET] (chance × opponent reach weighted) at the player's information sets. */
  actionValues: Float64Array[];
}

/**
 * Exact best response of `player` against a weighted mixture of opponent policies (an opponent
 * drawn once per game with the given weights; weights must be positive and are normalised).
 * Decisions are taken deepest first, so later own choices are already optimal when an earlier
 * one is evaluated (Kuhn poker has perfect recall).
 */
export function bestResponseTree(
  player: 0 | 1,
  opponents: readonly ArrayLike<number>[],
  weights: readonly number[],
): TreeBestResponse {
  let total = 0;
  for (const w of weights) total += w;
  const ws = weights.map((w) => w / total);
  const actions = new Int8Array(NUM_INFOSETS).fill(-1);
  const actionValues: Float64Array[] = Array.from({ length: NUM_INFOSETS }, () => new Float64Array(2));
  const own = new Float64Array(NUM_INFOSETS);
  // Per opponent, a full profile array: the best responder's entries come from `own`.
  const profiles = opponents.map((o) => Float64Array.from(o as ArrayLike<number>));
  const sign = player === 0 ? 1 : -1;
  const setOwn = (i: number, p: number) => {
    own[i] = p;
    for (const prof of profiles) prof[i] = p;
  };
  for (const node of DECISION_NODES[player]) {
    for (let card = 0; card < 3; card++) {
      const info = infoIndex(node, card);
      const q = actionValues[info];
      for (const [c0, c1] of DEALS) {
        if ((player === 0 ? c0 : c1) !== card) continue;
        for (let k = 0; k < profiles.length; k++) {
          const reach = DEAL_PROB * ws[k] * opponentReach(node, player, c0, c1, profiles[k]);
          if (reach === 0) continue;
          for (let a = 0; a < 2; a++) {
            q[a] += reach * sign * nodeValue0(CHILD[node][a], c0, c1, profiles[k], profiles[k]);
          }
        }
      }
      const best = q[1] > q[0] ? 1 : 0;
      actions[info] = best;
      setOwn(info, best);
    }
  }
  let value = 0;
  for (let k = 0; k < profiles.length; k++) value += ws[k] * sign * gameValue0(profiles[k], profiles[k]);
  return { value, actions, actionValues };
}

/** NashConv of the profile (pol0 for player 0, pol1 for player 1) and its parts. */
export function nashConvTree(
  pol0: ArrayLike<number>,
  pol1: ArrayLike<number>,
): { value0: number; br0: number; br1: number; nashConv: number } {
  const value0 = gameValue0(pol0, pol1);
  const br0 = bestResponseTree(0, [pol1], [1]).value;
  const br1 = bestResponseTree(1, [pol0], [1]).value;
  return { value0, br0, br1, nashConv: br0 - value0 + (br1 + value0) };
}
