import { UsageError } from "../../core/errors.js";
import type { Rng } from "../../core/rng.js";
import {
  BET,
  infoStateString,
  type KuhnInfoSet,
  type KuhnMove,
  type KuhnState,
  kuhn,
  PASS,
} from "../../games/kuhn.js";
import { OpponentRng } from "../random.js";
import type { Opponent, OpponentKind } from "../types.js";
import { cfrArgmaxPolicy, cfrAveragePolicy, MAX_CFR_ITERATIONS } from "./cfr.js";
import {
  aggressivePolicy,
  alwaysBetPolicy,
  alwaysPassPolicy,
  callerPolicy,
  conservativePolicy,
  intermediatePolicy,
  type KuhnPolicy,
  NAMED_KUHN_POLICIES,
  solidPolicy,
  trapperPolicy,
  uniformPolicy,
} from "./policies.js";

/** Default iteration count of the CFR opponents (MAGE's `cfr_iterations`). */
export const DEFAULT_CFR_ITERATIONS = 1000;

/**
 * An opponent that plays a tabular policy on the information state of the player to move.
 * Where the policy says P(BET) is 0 or 1 it answers without drawing; otherwise it draws one
 * float from its own generator per decision. `restart()` continues the stream, or with
 * `replay` rewinds it to where it was when the opponent was created.
 */
export class KuhnPolicyOpponent implements Opponent<KuhnState, KuhnMove> {
  readonly name: string;
  readonly policy: KuhnPolicy;
  private readonly stream: OpponentRng;

  constructor(name: string, policy: KuhnPolicy, rng: Rng, replay = false) {
    this.name = name;
    this.policy = policy;
    this.stream = new OpponentRng(rng, replay);
  }

  act(state: KuhnState): KuhnMove {
    const player = kuhn.currentPlayer(state);
    if (player < 0) throw new Error(`kuhn opponent ${this.name}: the game is over`);
    const pBet = this.policy[infoStateString(state, player) as KuhnInfoSet];
    if (pBet <= 0) return PASS;
    if (pBet >= 1) return BET;
    return this.stream.rng.float() < pBet ? BET : PASS;
  }

  restart(): void {
    this.stream.restart();
  }
}

/**
 * Parses the iteration count of a CFR spec (default when left out). Kept here rather than using the
 * registry's helper: a value import from `../registry.js` would be circular (the registry imports this list).
 */
function iterationsArg(spec: string, arg: string | undefined): number {
  if (arg === undefined || arg === "") return DEFAULT_CFR_ITERATIONS;
  if (!/^\d+$/.test(arg) || Number(arg) < 1 || Number(arg) > MAX_CFR_ITERATIONS) {
    throw new UsageError(
      `spec "${spec}": iterations must be an integer in 1..${MAX_CFR_ITERATIONS} (default ${DEFAULT_CFR_ITERATIONS}), got "${arg}"`,
    );
  }
  return Number(arg);
}

function fixed(name: string, description: string, policy: KuhnPolicy): OpponentKind<KuhnState, KuhnMove> {
  return {
    name,
    description,
    create: (_arg, ctx) => new KuhnPolicyOpponent(ctx.spec, policy, ctx.rng, ctx.replay),
  };
}

function solved(
  name: string,
  description: string,
  policyFor: (iterations: number) => KuhnPolicy,
): OpponentKind<KuhnState, KuhnMove> {
  return {
    name,
    arg: "<iterations>",
    argOptional: true,
    // 100× the default; the policy is computed once per (variant, N) and process, about 0.6 s.
    work: { unit: "iterations", serveLimit: 100_000, max: MAX_CFR_ITERATIONS },
    description: `${description} (default ${DEFAULT_CFR_ITERATIONS} iterations)`,
    create: (arg, ctx) =>
      new KuhnPolicyOpponent(ctx.spec, policyFor(iterationsArg(ctx.spec, arg)), ctx.rng, ctx.replay),
  };
}

/** Kuhn poker opponent families. */
export const kuhnOpponentKinds: OpponentKind<any, any>[] = [
  fixed("random", "PASS or BET with equal probability", uniformPolicy),
  fixed("conservative", "MAGE rule bot: bets and calls only with the King", conservativePolicy),
  fixed(
    "aggressive",
    "MAGE rule bot: always bets; facing a bet folds the Jack, calls otherwise",
    aggressivePolicy,
  ),
  fixed(
    "intermediate",
    "MAGE rule bot: bets Queen/King, passes Jack; facing a bet calls only with the King",
    intermediatePolicy,
  ),
  fixed(
    "caller",
    "wider-pool bot: bets only the King; facing a bet calls with Queen or King, folds the Jack",
    callerPolicy,
  ),
  fixed(
    "trapper",
    "wider-pool bot: never opens as first player; bets the King after a check; calls with Queen or King",
    trapperPolicy,
  ),
  fixed("solid", "wider-pool bot: bets and calls with Queen or King, checks and folds the Jack", solidPolicy),
  fixed("always-pass", "always PASS (check / fold)", alwaysPassPolicy),
  fixed("always-bet", "always BET (bet / call)", alwaysBetPolicy),
  solved("cfr", "argmax of the vanilla CFR average strategy, ties → PASS (deterministic)", cfrArgmaxPolicy),
  solved("cfr-mixed", "samples from the vanilla CFR average strategy", (n) => cfrAveragePolicy("cfr", n)),
  solved("cfr-plus", "samples from the CFR+ average strategy", (n) => cfrAveragePolicy("cfr+", n)),
];

const SOLVED_POLICY_SPECS: Record<string, (n: number) => KuhnPolicy> = {
  cfr: cfrArgmaxPolicy,
  "cfr-mixed": (n) => cfrAveragePolicy("cfr", n),
  "cfr-plus": (n) => cfrAveragePolicy("cfr+", n),
};

/** The policy names `kuhnPolicyFromSpec` accepts, as help text. */
export const KUHN_POLICY_SPECS: readonly string[] = [
  ...Object.keys(SOLVED_POLICY_SPECS).map((k) => `${k}:<iterations>`),
  ...Object.keys(NAMED_KUHN_POLICIES),
];

/**
 * A policy table by name: `cfr:N` (argmax of the N-iteration CFR average), `cfr-mixed:N`
 * (that average itself), `cfr-plus:N` (the CFR+ average), or a fixed name (uniform, always-pass,
 * always-bet, conservative, aggressive, intermediate). N defaults to 1000 when left out.
 * Anything else is a UsageError listing the valid names.
 */
export function kuhnPolicyFromSpec(spec: string): KuhnPolicy {
  const colon = spec.indexOf(":");
  const name = colon < 0 ? spec : spec.slice(0, colon);
  const arg = colon < 0 ? undefined : spec.slice(colon + 1);
  const solver = SOLVED_POLICY_SPECS[name];
  if (solver) {
    if (arg !== undefined && (!/^\d+$/.test(arg) || Number(arg) < 1 || Number(arg) > MAX_CFR_ITERATIONS)) {
      throw new UsageError(
        `Kuhn policy "${spec}": iterations must be an integer in 1..${MAX_CFR_ITERATIONS}; valid choices: ${KUHN_POLICY_SPECS.join(", ")}`,
      );
    }
    return solver(arg === undefined ? DEFAULT_CFR_ITERATIONS : Number(arg));
  }
  const fixedPolicy = NAMED_KUHN_POLICIES[name];
  if (fixedPolicy && arg === undefined) return fixedPolicy;
  if (fixedPolicy) throw new UsageError(`Kuhn policy "${name}" takes no argument (got "${spec}")`);
  throw new UsageError(`unknown Kuhn policy "${spec}"; valid choices: ${KUHN_POLICY_SPECS.join(", ")}`);
}
