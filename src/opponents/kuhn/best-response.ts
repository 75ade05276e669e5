import { KUHN_INFOSETS, type KuhnInfoSet, type KuhnMove } from "../../games/kuhn.js";
import { type KuhnPolicy, policyToArray } from "./policies.js";
import { bestResponseTree, gameValue0, nashConvTree } from "./tree.js";

/**
 * Exact evaluation of Kuhn poker strategy profiles by enumerating the 6 deals and the betting
 * tree: expected value, best response (against one policy or a weighted mixture of policies),
 * NashConv and exploitability with OpenSpiel's definitions:
 *   NashConv(π) = Σ_p [BR_p(π_−p) − u_p(π)],  exploitability(π) = NashConv(π) / 2 (2-player zero-sum).
 * A profile is a policy for player 0 and one for player 1; passing one policy means both seats play it
 * (each seat reads only its own six information sets).
 */

export interface KuhnBestResponse {
  player: 0 | 1;
  /** The best responder's expected chips per game. */
  value: number;
  /** The best move at each of the player's six information sets (ties → PASS). */
  actions: Readonly<Partial<Record<KuhnInfoSet, KuhnMove>>>;
  /** Counterfactual values [PASS, BET] at each of the player's information sets (chance × opponent reach weighted). */
  actionValues: Readonly<Partial<Record<KuhnInfoSet, readonly [number, number]>>>;
}

export interface KuhnProfileReport {
  /** Player 0's expected chips (player 1's is the negative). */
  value0: number;
  value1: number;
  /** Best-response values [BR_0(π_1), BR_1(π_0)]. */
  bestResponseValues: [number, number];
  nashConv: number;
  exploitability: number;
}

/** Player 0's expected chips when player 0 plays `p0` and player 1 plays `p1`. */
export function expectedValue(p0: KuhnPolicy, p1: KuhnPolicy = p0): number {
  return gameValue0(policyToArray(p0), policyToArray(p1));
}

/** The exact best response of `player` to a weighted mixture of opponent policies (one drawn per game). */
export function bestResponseToMixture(
  player: 0 | 1,
  mixture: readonly { policy: KuhnPolicy; weight: number }[],
): KuhnBestResponse {
  if (player !== 0 && player !== 1)
    throw new RangeError(`kuhn best response: player must be 0 or 1, got ${player}`);
  if (mixture.length === 0) throw new RangeError("kuhn best response: the mixture is empty");
  for (const m of mixture) {
    if (!(m.weight > 0) || !Number.isFinite(m.weight)) {
      throw new RangeError(`kuhn best response: mixture weights must be positive, got ${m.weight}`);
    }
  }
  const br = bestResponseTree(
    player,
    mixture.map((m) => policyToArray(m.policy)),
    mixture.map((m) => m.weight),
  );
  const actions: Partial<Record<KuhnInfoSet, KuhnMove>> = {};
  const actionValues: Partial<Record<KuhnInfoSet, readonly [number, number]>> = {};
  KUHN_INFOSETS.forEach((s, i) => {
    if (br.actions[i] < 0) return;
    actions[s] = br.actions[i] as KuhnMove;
    actionValues[s] = [br.actionValues[i][0], br.actionValues[i][1]];
  });
  return { player, value: br.value, actions, actionValues };
}

/** The exact best response of `player` to the opponent playing `opponent`. */
export function bestResponse(player: 0 | 1, opponent: KuhnPolicy): KuhnBestResponse {
  return bestResponseToMixture(player, [{ policy: opponent, weight: 1 }]);
}

/** A full table: the best responder's moves at its information sets, `rest` elsewhere. */
export function bestResponsePolicy(br: KuhnBestResponse, rest: KuhnPolicy): KuhnPolicy {
  const out = { ...rest } as Record<KuhnInfoSet, number>;
  for (const [s, a] of Object.entries(br.actions)) out[s as KuhnInfoSet] = a as number;
  return Object.freeze(out);
}

/** Value, best-response values, NashConv and exploitability of the profile (p0, p1). */
export function evaluateProfile(p0: KuhnPolicy, p1: KuhnPolicy = p0): KuhnProfileReport {
  const r = nashConvTree(policyToArray(p0), policyToArray(p1));
  return {
    value0: r.value0,
    value1: -r.value0,
    bestResponseValues: [r.br0, r.br1],
    nashConv: r.nashConv,
    exploitability: r.nashConv / 2,
  };
}

export function nashConv(p0: KuhnPolicy, p1: KuhnPolicy = p0): number {
  return evaluateProfile(p0, p1).nashConv;
}

export function exploitability(p0: KuhnPolicy, p1: KuhnPolicy = p0): number {
  return evaluateProfile(p0, p1).exploitability;
}
