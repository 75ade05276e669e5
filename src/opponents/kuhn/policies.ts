import { UsageError } from "../../core/errors.js";
import { KUHN_INFOSETS, type KuhnCard, type KuhnInfoSet } from "../../games/kuhn.js";

/**
 * A behaviour policy for Kuhn poker as a table: information state → P(BET). It covers all
 * 12 information states, so one table is also a strategy profile (both seats play it).
 */
export type KuhnPolicy = Readonly<Record<KuhnInfoSet, number>>;

/** Builds a table from a function of (player, card, history) → P(BET). */
export function tabularPolicy(fn: (player: 0 | 1, card: KuhnCard, history: string) => number): KuhnPolicy {
  const out = {} as Record<KuhnInfoSet, number>;
  for (const s of KUHN_INFOSETS) {
    const card = Number(s[0]) as KuhnCard;
    const history = s.slice(1);
    const player = (history.length % 2) as 0 | 1;
    const p = fn(player, card, history);
    if (!(p >= 0 && p <= 1))
      throw new RangeError(`kuhn policy: P(BET) at "${s}" must be in [0, 1], got ${p}`);
    out[s] = p;
  }
  return Object.freeze(out);
}

/** The 12 probabilities in `KUHN_INFOSETS` order. */
export function policyToArray(policy: KuhnPolicy): Float64Array {
  const out = new Float64Array(KUHN_INFOSETS.length);
  KUHN_INFOSETS.forEach((s, i) => {
    const p = policy[s];
    if (!(p >= 0 && p <= 1))
      throw new RangeError(`kuhn policy: P(BET) at "${s}" must be in [0, 1], got ${p}`);
    out[i] = p;
  });
  return out;
}

export function policyFromArray(probs: ArrayLike<number>): KuhnPolicy {
  if (probs.length !== KUHN_INFOSETS.length) {
    throw new RangeError(`kuhn policy: expected ${KUHN_INFOSETS.length} probabilities, got ${probs.length}`);
  }
  return tabularPolicy(
    (_player, card, history) => probs[KUHN_INFOSETS.indexOf(`${card}${history}` as never)],
  );
}

/** The deterministic policy playing the more likely move of `policy`; ties go to PASS. */
export function argmaxPolicy(policy: KuhnPolicy): KuhnPolicy {
  return tabularPolicy((_p, card, history) => (policy[`${card}${history}` as KuhnInfoSet] > 0.5 ? 1 : 0));
}

const facingBet = (history: string) => history.includes("b");

export const uniformPolicy: KuhnPolicy = tabularPolicy(() => 0.5);
export const alwaysPassPolicy: KuhnPolicy = tabularPolicy(() => 0);
export const alwaysBetPolicy: KuhnPolicy = tabularPolicy(() => 1);

/** MAGE rule bot: bet / call only with the King. */
export const conservativePolicy: KuhnPolicy = tabularPolicy((_p, card) => (card === 2 ? 1 : 0));

/** MAGE rule bot: always bet when nobody has bet; facing a bet, fold the Jack, call with Queen or King. */
export const aggressivePolicy: KuhnPolicy = tabularPolicy((_p, card, history) =>
  facingBet(history) ? (card === 0 ? 0 : 1) : 1,
);

/** MAGE rule bot: bet with Queen or King when nobody has bet (Jack passes); facing a bet, call only with the King. */
export const intermediatePolicy: KuhnPolicy = tabularPolicy((_p, card, history) =>
  facingBet(history) ? (card === 2 ? 1 : 0) : card === 0 ? 0 : 1,
);

/**
 * Wider-pool bot "caller": bets only the King when nobody has bet; facing a bet calls with the
 * Queen or the King (catches bluffs), folds the Jack. As player 0 this is exactly the argmax of the
 * cfr:1000 average strategy (the `cfr` validation opponent); as player 1 it differs from it at "1b"
 * (caller calls the Queen, cfr:1000 folds it).
 */
export const callerPolicy: KuhnPolicy = tabularPolicy((_p, card, history) =>
  facingBet(history) ? (card === 0 ? 0 : 1) : card === 2 ? 1 : 0,
);

/**
 * Wider-pool bot "trapper": as player 0 never opens the betting (checks even the King, to trap);
 * as player 1 bets the King after a check; facing a bet calls with the Queen or the King, folds the Jack.
 */
export const trapperPolicy: KuhnPolicy = tabularPolicy((player, card, history) =>
  facingBet(history) ? (card === 0 ? 0 : 1) : player === 0 ? 0 : card === 2 ? 1 : 0,
);

/**
 * Wider-pool bot "solid": bets and calls with the Queen or the King, checks and folds the Jack
 * (never bluffs, but calls bluffs with the Queen).
 */
export const solidPolicy: KuhnPolicy = tabularPolicy((_p, card) => (card === 0 ? 0 : 1));

/**
 * OpenSpiel's one-parameter Nash equilibrium family (`GetOptimalPolicy(alpha)`), α ∈ [0, 1/3]:
 * player 0 bets J with α, Q never, K with 3α, calls Q with 1/3 + α; player 1 bluffs J after a
 * pass with 1/3, calls Q with 1/3, always bets/calls K.
 */
export function nashPolicy(alpha: number): KuhnPolicy {
  if (!(alpha >= 0 && alpha <= 1 / 3))
    throw new RangeError(`kuhn Nash policy: alpha must be in [0, 1/3], got ${alpha}`);
  const table: Record<string, number> = {
    "0": alpha,
    "1": 0,
    "2": 3 * alpha,
    "0pb": 0,
    "1pb": 1 / 3 + alpha,
    "2pb": 1,
    "0p": 1 / 3,
    "0b": 0,
    "1p": 0,
    "1b": 1 / 3,
    "2p": 1,
    "2b": 1,
  };
  return tabularPolicy((_p, card, history) => table[`${card}${history}`]);
}

/** The fixed named policies (no argument), by name. */
export const NAMED_KUHN_POLICIES: Readonly<Record<string, KuhnPolicy>> = Object.freeze({
  uniform: uniformPolicy,
  "always-pass": alwaysPassPolicy,
  "always-bet": alwaysBetPolicy,
  conservative: conservativePolicy,
  aggressive: aggressivePolicy,
  intermediate: intermediatePolicy,
  caller: callerPolicy,
  trapper: trapperPolicy,
  solid: solidPolicy,
});

/** Throws a UsageError unless `name` is one of the fixed named policies. */
export function namedKuhnPolicy(name: string): KuhnPolicy {
  const p = NAMED_KUHN_POLICIES[name];
  if (!p) {
    throw new UsageError(
      `unknown Kuhn policy "${name}"; valid choices: ${Object.keys(NAMED_KUHN_POLICIES).join(", ")}`,
    );
  }
  return p;
}
