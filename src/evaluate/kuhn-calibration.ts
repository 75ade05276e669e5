import { CARD_LETTERS, KUHN_INFOSETS, type KuhnInfoSet } from "../games/kuhn.js";
import { bestResponseToMixture } from "../opponents/kuhn/best-response.js";
import { DEFAULT_CFR_ITERATIONS, kuhnPolicyFromSpec } from "../opponents/kuhn/index.js";
import { type KuhnPolicy, nashPolicy, policyToArray, uniformPolicy } from "../opponents/kuhn/policies.js";
import {
  CHILD,
  DEALS,
  gameValue0,
  infoIndex,
  NODE_PLAYER,
  ROOT,
  terminalPayoff0,
} from "../opponents/kuhn/tree.js";
import type { Seat } from "../tasks/types.js";

/**
 * Exact calibration of the Kuhn poker evaluation settings (no sampling: every number is an
 * enumeration over the 6 deals and the betting tree).
 *
 * Conventions. Seat "first" = the agent is player 0 (acts first), "second" = player 1. Every value
 * is the AGENT's expected chips per deal. A trial replays the SAME deal for up to `attempts`
 * attempts and stops at the first win (chips > 0). Metrics as in `evaluate/metrics.ts`:
 * success@k = won in any of the first k attempts; chips@k = chips of attempt k, a trial that
 * stopped earlier carrying its last played attempt forward; final = the last attempt played;
 * gain = final − chips@1. Against a stochastic opponent (cfr-mixed) attempts are independent
 * draws of the opponent (the default `replayOpponent: false`).
 *
 * Agents of the multi-attempt view:
 *  - `pool-br`: the best response to the training pool (ties → PASS), the same every attempt;
 *    what an agent that learned the pool but does not adapt scores.
 *  - `adapt-oracle` (perfect adaptation): attempt 1 is `pool-br` (before the first attempt the
 *    agent knows nothing about this opponent); from attempt 2 on it plays the best line of this
 *    very deal against this deterministic opponent (the maximum chips over its own plans in the
 *    deal, as if everything relevant had been learned from attempt 1). Since a trial stops at a win,
 *    adaptation can only change deals that attempt 1 lost. This is the upper bound for any agent
 *    whose first attempt is `pool-br`; it is the definition that reproduces "perfect adaptation
 *    reaches 0.0" against cfr with the agent second.
 *  - `adapt-explorer`: a realisable adapter with the same first attempt. It remembers the
 *    opponent's moves it saw at each betting history of this deal and the opponent's card once a
 *    showdown showed it; a plan's value is then bounded [pessimistic, optimistic] over what is
 *    still unknown (unseen opponent moves, the opponent's card). Before the last attempt it tries
 *    the not-yet-determined plan with the highest optimistic value if that beats the best
 *    pessimistic value; otherwise, and always on the last attempt, it plays the plan with the
 *    best pessimistic value (ties: higher optimistic, then lower plan index). Where it equals
 *    `adapt-oracle`, the oracle's bound is reachable from observations alone.
 *  - `knows-opponent`: the best response to the opponent's policy (ties → PASS), every attempt.
 *  - `clairvoyant`: the best line of each deal at every attempt (knows the opponent's policy and
 *    card; deterministic opponents only). Against cfr:1000 it equals `knows-opponent`.
 *  - `uniform`: PASS/BET with probability 1/2, fresh every attempt.
 *  - `wide-pool-br`: the best response to the wider pool, the same every attempt.
 */

export interface PoolMember {
  spec: string;
  weight: number;
}

/** The training pool of the results issue. */
export const KUHN_TRAINING_POOL: readonly PoolMember[] = Object.freeze([
  { spec: "conservative", weight: 0.3 },
  { spec: "aggressive", weight: 0.3 },
  { spec: "intermediate", weight: 0.4 },
]);

/**
 * The wider pool: the training pool scaled to 0.6 plus two bots that call bluffs and bet their strong
 * hands (0.2 each). `caller` is left out on purpose: as player 0 it is exactly the cfr:1000 argmax,
 * so training on it would no longer leave cfr unseen with the agent second.
 */
export const KUHN_WIDE_POOL: readonly PoolMember[] = Object.freeze([
  { spec: "conservative", weight: 0.18 },
  { spec: "aggressive", weight: 0.18 },
  { spec: "intermediate", weight: 0.24 },
  { spec: "trapper", weight: 0.2 },
  { spec: "solid", weight: 0.2 },
]);

/** The bots that call bluffs and bet their strong hands (candidates for the wider pool). */
export const KUHN_WIDE_BOTS: readonly string[] = Object.freeze(["caller", "trapper", "solid"]);

export const SEAT_LIST: readonly Seat[] = ["first", "second"];

export type MultiAttemptAgent =
  | "pool-br"
  | "adapt-oracle"
  | "adapt-explorer"
  | "knows-opponent"
  | "clairvoyant"
  | "uniform"
  | "wide-pool-br";

export const MULTI_ATTEMPT_AGENTS: readonly MultiAttemptAgent[] = [
  "pool-br",
  "adapt-oracle",
  "adapt-explorer",
  "knows-opponent",
  "clairvoyant",
  "uniform",
  "wide-pool-br",
];

export interface AttemptStats {
  /** chips@1..K (carried forward after a win). */
  chipsAt: number[];
  /** chips of the last attempt played (= chips@K). */
  final: number;
  /** final − chips@1. */
  gain: number;
  /** success@1..K. */
  successAt: number[];
}

const agentPlayer = (seat: Seat): 0 | 1 => (seat === "first" ? 0 : 1);

function checkSeat(seat: Seat): void {
  if (seat !== "first" && seat !== "second")
    throw new RangeError(`kuhn calibration: seat must be "first" or "second", got ${seat}`);
}

/** The agent's expected chips per deal when it plays `agent` in `seat` against `opponent`. */
export function agentValue(agent: KuhnPolicy, opponent: KuhnPolicy, seat: Seat): number {
  checkSeat(seat);
  const a = policyToArray(agent);
  const o = policyToArray(opponent);
  return seat === "first" ? gameValue0(a, o) : -gameValue0(o, a);
}

export interface SeatBestResponse {
  seat: Seat;
  /** The agent's table: the best response at its six information sets; the other six are 0 (unused). */
  policy: KuhnPolicy;
  /** The best move at each of the seat's six information sets, as "PASS"/"BET". */
  moves: Partial<Record<KuhnInfoSet, "PASS" | "BET">>;
  /** Information sets where both moves are worth the same against the mixture (resolved to PASS). */
  ties: KuhnInfoSet[];
  /** Its expected chips against the mixture. */
  value: number;
}

/** The exact best response of the agent in `seat` to a weighted mixture (one member drawn per deal); ties → PASS. */
export function seatBestResponse(
  mixture: readonly { policy: KuhnPolicy; weight: number }[],
  seat: Seat,
): SeatBestResponse {
  checkSeat(seat);
  const br = bestResponseToMixture(agentPlayer(seat), mixture);
  const table = {} as Record<KuhnInfoSet, number>;
  for (const s of KUHN_INFOSETS) table[s] = 0;
  const moves: Partial<Record<KuhnInfoSet, "PASS" | "BET">> = {};
  const ties: KuhnInfoSet[] = [];
  for (const [s, a] of Object.entries(br.actions) as [KuhnInfoSet, number][]) {
    table[s] = a;
    moves[s] = a === 1 ? "BET" : "PASS";
    const q = br.actionValues[s];
    if (q && Math.abs(q[0] - q[1]) < 1e-12) ties.push(s);
  }
  return { seat, policy: Object.freeze(table), moves, ties, value: br.value };
}

/** Resolves pool members to policies (specs as `kuhnPolicyFromSpec` reads them). */
export function poolMixture(pool: readonly PoolMember[]): { policy: KuhnPolicy; weight: number }[] {
  return pool.map((m) => ({ policy: kuhnPolicyFromSpec(m.spec), weight: m.weight }));
}

export function isDeterministic(policy: KuhnPolicy): boolean {
  return KUHN_INFOSETS.every((s) => policy[s] === 0 || policy[s] === 1);
}

// ---------------------------------------------------------------------------------------------
// Per-deal enumeration

/** A deal from the agent's point of view. */
export interface AgentDeal {
  agentCard: number;
  opponentCard: number;
  /** [card of player 0, card of player 1]. */
  cards: readonly [number, number];
}

export function agentDeals(seat: Seat): AgentDeal[] {
  checkSeat(seat);
  return DEALS.map(([c0, c1]) => ({
    agentCard: seat === "first" ? c0 : c1,
    opponentCard: seat === "first" ? c1 : c0,
    cards: [c0, c1] as const,
  }));
}

export function dealLabel(d: AgentDeal): string {
  return `${CARD_LETTERS[d.agentCard]} vs ${CARD_LETTERS[d.opponentCard]}`;
}

interface DealSummary {
  /** P(agent chips > 0). */
  pWin: number;
  /** E[chips · 1(chips > 0)]. */
  winMass: number;
  /** E[chips]. */
  mean: number;
}

/** Distribution summary of the agent's chips in one deal (both policies may be mixed). */
function dealSummary(agent: Float64Array, opp: Float64Array, seat: Seat, d: AgentDeal): DealSummary {
  const me = agentPlayer(seat);
  const sign = me === 0 ? 1 : -1;
  const [c0, c1] = d.cards;
  const out: DealSummary = { pWin: 0, winMass: 0, mean: 0 };
  const walk = (node: number, prob: number): void => {
    if (prob === 0) return;
    const pl = NODE_PLAYER[node];
    if (pl < 0) {
      const chips = sign * terminalPayoff0(node, c0, c1);
      out.mean += prob * chips;
      if (chips > 0) {
        out.pWin += prob;
        out.winMass += prob * chips;
      }
      return;
    }
    const card = pl === 0 ? c0 : c1;
    const bet = (pl === me ? agent : opp)[infoIndex(node, card)];
    walk(CHILD[node][0], prob * (1 - bet));
    walk(CHILD[node][1], prob * bet);
  };
  walk(ROOT, 1);
  return out;
}

/**
 * Multi-attempt metrics when every attempt is an independent play of the same deal (a fixed agent
 * policy, a deterministic or freshly sampling opponent). With p = P(win), W = E[chips·win], E = E[chips]
 * in a deal: success@k = 1 − (1−p)^k; chips@k = Σ_{j<k} (1−p)^{j−1} W + (1−p)^{k−1} E.
 */
export function independentAttemptStats(
  agent: KuhnPolicy,
  opponent: KuhnPolicy,
  seat: Seat,
  attempts = 3,
): AttemptStats {
  checkAttempts(attempts);
  const a = policyToArray(agent);
  const o = policyToArray(opponent);
  const chipsAt = new Array<number>(attempts).fill(0);
  const successAt = new Array<number>(attempts).fill(0);
  for (const d of agentDeals(seat)) {
    const s = dealSummary(a, o, seat, d);
    const q = 1 - s.pWin;
    let carried = 0;
    for (let k = 1; k <= attempts; k++) {
      const lostBefore = q ** (k - 1);
      chipsAt[k - 1] += (carried + lostBefore * s.mean) / 6;
      successAt[k - 1] += (1 - q ** k) / 6;
      carried += lostBefore * s.winMass;
    }
  }
  return finish(chipsAt, successAt);
}

function finish(chipsAt: number[], successAt: number[]): AttemptStats {
  const final = chipsAt[chipsAt.length - 1];
  return { chipsAt, final, gain: final - chipsAt[0], successAt };
}

function checkAttempts(attempts: number): void {
  if (!Number.isInteger(attempts) || attempts < 1 || attempts > 20)
    throw new RangeError(`kuhn calibration: attempts must be an integer in 1..20, got ${attempts}`);
}

/** Metrics from the attempts each deal actually played (each list stops at its first win). */
export function sequenceStats(perDeal: readonly (readonly number[])[], attempts: number): AttemptStats {
  checkAttempts(attempts);
  const chipsAt = new Array<number>(attempts).fill(0);
  const successAt = new Array<number>(attempts).fill(0);
  const w = 1 / perDeal.length;
  for (const seq of perDeal) {
    if (seq.length === 0 || seq.length > attempts)
      throw new RangeError(`kuhn calibration: a trial plays 1..${attempts} attempts, got ${seq.length}`);
    let won = false;
    for (let k = 1; k <= attempts; k++) {
      const c = seq[Math.min(k, seq.length) - 1];
      if (k <= seq.length && c > 0) won = true;
      chipsAt[k - 1] += w * c;
      successAt[k - 1] += won ? w : 0;
    }
  }
  return finish(chipsAt, successAt);
}

// ---------------------------------------------------------------------------------------------
// Plans against a deterministic opponent

/**
 * The agent's own two information sets in a deal (seat first: the opening and "facing a bet after
 * my check"; seat second: "after a check" and "facing a bet"). Plan index bit 0 = the move at the
 * first of them, bit 1 = at the second (0 PASS, 1 BET).
 */
function planInfosets(seat: Seat, card: number): [number, number] {
  return seat === "first"
    ? [infoIndex(0, card), infoIndex(4, card)]
    : [infoIndex(1, card), infoIndex(2, card)];
}

interface PlayOut {
  chips: number;
  terminal: number;
  /** Opponent moves seen on the way: [node, move]. */
  seen: [number, number][];
}

function playPlan(plan: number, seat: Seat, d: AgentDeal, opp: Float64Array): PlayOut {
  const me = agentPlayer(seat);
  const [i0, i1] = planInfosets(seat, d.agentCard);
  const [c0, c1] = d.cards;
  const seen: [number, number][] = [];
  let node = ROOT;
  while (NODE_PLAYER[node] >= 0) {
    const pl = NODE_PLAYER[node];
    let move: number;
    if (pl === me) {
      const info = infoIndex(node, d.agentCard);
      move = info === i0 ? plan & 1 : info === i1 ? (plan >> 1) & 1 : 0;
    } else {
      move = opp[infoIndex(node, d.opponentCard)];
      seen.push([node, move]);
    }
    node = CHILD[node][move];
  }
  return { chips: (me === 0 ? 1 : -1) * terminalPayoff0(node, c0, c1), terminal: node, seen };
}

/** The plan index a (deterministic) agent policy plays in the deal. */
function planOf(agent: Float64Array, seat: Seat, d: AgentDeal): number {
  const [i0, i1] = planInfosets(seat, d.agentCard);
  return (agent[i0] >= 0.5 ? 1 : 0) | (agent[i1] >= 0.5 ? 2 : 0);
}

const SHOWDOWN_NODES = new Set([3, 6, 8]);

interface Knowledge {
  oppMoves: Map<number, number>;
  oppCard: number | null;
}

/** [pessimistic, optimistic] chips of a plan given what the agent knows. */
function planBounds(plan: number, seat: Seat, d: AgentDeal, know: Knowledge): [number, number] {
  const me = agentPlayer(seat);
  const [i0, i1] = planInfosets(seat, d.agentCard);
  const cards = know.oppCard === null ? [0, 1, 2].filter((c) => c !== d.agentCard) : [know.oppCard];
  const walk = (node: number): [number, number] => {
    const pl = NODE_PLAYER[node];
    if (pl < 0) {
      let lo = Number.POSITIVE_INFINITY;
      let hi = Number.NEGATIVE_INFINITY;
      for (const oc of cards) {
        const c0 = me === 0 ? d.agentCard : oc;
        const c1 = me === 0 ? oc : d.agentCard;
        const v = (me === 0 ? 1 : -1) * terminalPayoff0(node, c0, c1);
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      return [lo, hi];
    }
    if (pl === me) {
      const info = infoIndex(node, d.agentCard);
      const move = info === i0 ? plan & 1 : info === i1 ? (plan >> 1) & 1 : 0;
      return walk(CHILD[node][move]);
    }
    const known = know.oppMoves.get(node);
    if (known !== undefined) return walk(CHILD[node][known]);
    const a = walk(CHILD[node][0]);
    const b = walk(CHILD[node][1]);
    return [Math.min(a[0], b[0]), Math.max(a[1], b[1])];
  };
  return walk(ROOT);
}

function learn(know: Knowledge, out: PlayOut, d: AgentDeal): void {
  for (const [node, move] of out.seen) know.oppMoves.set(node, move);
  if (SHOWDOWN_NODES.has(out.terminal)) know.oppCard = d.opponentCard;
}

function explorerChoice(seat: Seat, d: AgentDeal, know: Knowledge, last: boolean): number {
  const bounds = [0, 1, 2, 3].map((p) => planBounds(p, seat, d, know));
  let bestPess = 0;
  for (let p = 1; p < 4; p++) {
    const [lo, hi] = bounds[p];
    const [blo, bhi] = bounds[bestPess];
    if (lo > blo || (lo === blo && hi > bhi)) bestPess = p;
  }
  if (!last) {
    let explore = -1;
    for (let p = 0; p < 4; p++) {
      const [lo, hi] = bounds[p];
      if (lo === hi) continue;
      if (explore < 0 || hi > bounds[explore][1]) explore = p;
    }
    if (explore >= 0 && bounds[explore][1] > bounds[bestPess][0]) return explore;
  }
  return bestPess;
}

export interface DealPlay {
  deal: string;
  /** Chips of each of the agent's 4 plans (index: bit 0 first own information set, bit 1 second). */
  planChips: number[];
  /** Chips of each attempt played, per agent. */
  attempts: Partial<Record<MultiAttemptAgent, number[]>>;
}

function requireDeterministic(opponent: KuhnPolicy, what: string): Float64Array {
  if (!isDeterministic(opponent))
    throw new RangeError(
      `kuhn calibration: ${what} needs a deterministic opponent (P(BET) 0 or 1 everywhere)`,
    );
  return policyToArray(opponent);
}

/** The attempts a deterministic agent plays in each deal (stopping at the first win). */
function fixedSequence(chips: number, attempts: number): number[] {
  return chips > 0 ? [chips] : new Array<number>(attempts).fill(chips);
}

/**
 * The attempts played in each deal by the adaptive agents against a deterministic opponent.
 * `first` is the policy of attempt 1 (the pool best response), deterministic.
 */
export function adaptivePlays(
  first: KuhnPolicy,
  opponent: KuhnPolicy,
  seat: Seat,
  attempts = 3,
): { oracle: number[][]; explorer: number[][]; clairvoyant: number[][]; planChips: number[][] } {
  checkSeat(seat);
  checkAttempts(attempts);
  const opp = requireDeterministic(opponent, "adaptation");
  const f = requireDeterministic(first, "the first attempt's policy");
  const oracle: number[][] = [];
  const explorer: number[][] = [];
  const clairvoyant: number[][] = [];
  const planChips: number[][] = [];
  for (const d of agentDeals(seat)) {
    const plans = [0, 1, 2, 3].map((p) => playPlan(p, seat, d, opp));
    const chips = plans.map((p) => p.chips);
    planChips.push(chips);
    const best = Math.max(...chips);
    clairvoyant.push(fixedSequence(best, attempts));
    const p1 = plans[planOf(f, seat, d)];
    // Oracle: attempt 1 from the pool; afterwards the best line of the deal.
    const o = [p1.chips];
    while (o.length < attempts && !(o[o.length - 1] > 0)) o.push(best);
    oracle.push(o);
    // Explorer: learns what it sees.
    const know: Knowledge = { oppMoves: new Map(), oppCard: null };
    learn(know, p1, d);
    const e = [p1.chips];
    while (e.length < attempts && !(e[e.length - 1] > 0)) {
      const plan = explorerChoice(seat, d, know, e.length + 1 === attempts);
      const out = plans[plan];
      learn(know, out, d);
      e.push(out.chips);
    }
    explorer.push(e);
  }
  return { oracle, explorer, clairvoyant, planChips };
}

/** Deals the agent can win with some line / wins with every line (deterministic opponent). */
export function winnableDeals(opponent: KuhnPolicy, seat: Seat): { winnable: number; forced: number } {
  checkSeat(seat);
  const opp = requireDeterministic(opponent, "winnable deals");
  let winnable = 0;
  let forced = 0;
  for (const d of agentDeals(seat)) {
    const chips = [0, 1, 2, 3].map((p) => playPlan(p, seat, d, opp).chips);
    if (chips.some((c) => c > 0)) winnable++;
    if (chips.every((c) => c > 0)) forced++;
  }
  return { winnable, forced };
}

// ---------------------------------------------------------------------------------------------
// The full calibration

export interface KuhnCalibrationOptions {
  cfrIterations?: number;
  attempts?: number;
  pool?: readonly PoolMember[];
  widePool?: readonly PoolMember[];
}

export interface OpponentInfo {
  spec: string;
  deterministic: boolean;
  /** P(BET) at the 12 information sets. */
  table: Record<KuhnInfoSet, number>;
}

export interface FixedRow {
  opponent: string;
  seat: Seat;
  /** Best response to the training pool. */
  poolBr: number;
  /** Best response to the wider pool. */
  widePoolBr: number;
  /** The opponent's best possible score for the agent: the best response to this opponent. */
  best: number;
  uniform: number;
  /** nashPolicy(1/6) (any member of the family scores the game value against an equilibrium). */
  nash: number;
}

export interface MultiRow {
  opponent: string;
  seat: Seat;
  agent: MultiAttemptAgent;
  stats: AttemptStats;
}

export interface WinnableRow {
  opponent: string;
  seat: Seat;
  winnable: number;
  forced: number;
}

export interface WideSweepRow {
  /** New bots added (total weight `newWeight`, split equally; the training pool scaled by 1 − newWeight). */
  bots: string[];
  newWeight: number;
  /** BR moves at the agent's six information sets (seat second). */
  movesSecond: Partial<Record<KuhnInfoSet, "PASS" | "BET">>;
  /** Attempt-1 chips (= every attempt's) against cfr with the agent second, and first. */
  vsCfrSecond: number;
  vsCfrFirst: number;
  /** Final chips against cfr, agent second, with perfect adaptation after this BR's first attempt. */
  oracleFinalSecond: number;
}

export interface KuhnCalibration {
  cfrIterations: number;
  attempts: number;
  pool: PoolMember[];
  widePool: PoolMember[];
  /** The game value for the agent per seat (−1/18 first, +1/18 second). */
  equilibriumValue: Record<Seat, number>;
  opponents: OpponentInfo[];
  poolBr: Record<Seat, SeatBestResponse>;
  widePoolBr: Record<Seat, SeatBestResponse>;
  fixed: FixedRow[];
  winnable: WinnableRow[];
  multi: MultiRow[];
  /** Value against cfr of the training-pool best response with its ties resolved to BET instead of PASS. */
  poolBrTiesBet: Record<Seat, number>;
  /** Per-deal play against cfr (deterministic), per seat. */
  cfrDeals: Record<Seat, DealPlay[]>;
  wideSweep: WideSweepRow[];
}

export function evaluationOpponents(cfrIterations: number): string[] {
  return [
    `cfr:${cfrIterations}`,
    `cfr-mixed:${cfrIterations}`,
    "conservative",
    "aggressive",
    "intermediate",
    ...KUHN_WIDE_BOTS,
  ];
}

/** The rows of the calibration's tables that are computed per opponent and seat. */
interface OpponentRows {
  fixed: FixedRow[];
  winnable: WinnableRow[];
  multi: MultiRow[];
  cfrDeals: { first: DealPlay[]; second: DealPlay[] };
}

/** One opponent in one seat, with the pool best responses and the attempts of a trial. */
interface OpponentSeat {
  spec: string;
  opp: KuhnPolicy;
  seat: Seat;
  poolBr: KuhnPolicy;
  widePoolBr: KuhnPolicy;
  nash: KuhnPolicy;
  attempts: number;
  /** The unseen deterministic CFR player, whose deals are shown one by one. */
  isCfr: boolean;
}

/** Adds an opponent-and-seat's fixed-strategy values, multi-attempt agents, winnable deals and (cfr) deals. */
function opponentSeatRows(rows: OpponentRows, c: OpponentSeat): void {
  const { spec, opp, seat, attempts } = c;
  const know = seatBestResponse([{ policy: opp, weight: 1 }], seat);
  rows.fixed.push({
    opponent: spec,
    seat,
    poolBr: agentValue(c.poolBr, opp, seat),
    widePoolBr: agentValue(c.widePoolBr, opp, seat),
    best: know.value,
    uniform: agentValue(uniformPolicy, opp, seat),
    nash: agentValue(c.nash, opp, seat),
  });
  const row = (agent: MultiAttemptAgent, stats: AttemptStats) =>
    rows.multi.push({ opponent: spec, seat, agent, stats });
  row("pool-br", independentAttemptStats(c.poolBr, opp, seat, attempts));
  if (isDeterministic(opp)) {
    const ad = adaptivePlays(c.poolBr, opp, seat, attempts);
    row("adapt-oracle", sequenceStats(ad.oracle, attempts));
    row("adapt-explorer", sequenceStats(ad.explorer, attempts));
    row("knows-opponent", independentAttemptStats(know.policy, opp, seat, attempts));
    row("clairvoyant", sequenceStats(ad.clairvoyant, attempts));
    rows.winnable.push({ opponent: spec, seat, ...winnableDeals(opp, seat) });
    if (c.isCfr) rows.cfrDeals[seat].push(...cfrDealPlays(c, know.policy, ad));
  } else {
    row("knows-opponent", independentAttemptStats(know.policy, opp, seat, attempts));
  }
  row("uniform", independentAttemptStats(uniformPolicy, opp, seat, attempts));
  row("wide-pool-br", independentAttemptStats(c.widePoolBr, opp, seat, attempts));
}

/** Each deal against cfr: every plan's chips and the attempts each agent plays. */
function cfrDealPlays(c: OpponentSeat, knows: KuhnPolicy, ad: ReturnType<typeof adaptivePlays>): DealPlay[] {
  const { seat, attempts } = c;
  const a = policyToArray(c.poolBr);
  const k = policyToArray(knows);
  const o = policyToArray(c.opp);
  return agentDeals(seat).map((d, i) => {
    const pb = playPlan(planOf(a, seat, d), seat, d, o).chips;
    const kb = playPlan(planOf(k, seat, d), seat, d, o).chips;
    return {
      deal: dealLabel(d),
      planChips: ad.planChips[i],
      attempts: {
        "pool-br": fixedSequence(pb, attempts),
        "adapt-oracle": ad.oracle[i],
        "adapt-explorer": ad.explorer[i],
        "knows-opponent": fixedSequence(kb, attempts),
      },
    };
  });
}

/** The training pool widened by every subset of the extra bots at weights 0.2 and 0.4, played against cfr. */
function widePoolSweep(pool: PoolMember[], cfr: KuhnPolicy, attempts: number): WideSweepRow[] {
  const wideSweep: WideSweepRow[] = [];
  for (let mask = 1; mask < 1 << KUHN_WIDE_BOTS.length; mask++) {
    const bots = KUHN_WIDE_BOTS.filter((_, i) => mask & (1 << i));
    for (const newWeight of [0.2, 0.4]) {
      const members: PoolMember[] = [
        ...pool.map((m) => ({ spec: m.spec, weight: m.weight * (1 - newWeight) })),
        ...bots.map((spec) => ({ spec, weight: newWeight / bots.length })),
      ];
      const mix = poolMixture(members);
      const second = seatBestResponse(mix, "second");
      const first = seatBestResponse(mix, "first");
      const ad = adaptivePlays(second.policy, cfr, "second", attempts);
      wideSweep.push({
        bots,
        newWeight,
        movesSecond: second.moves,
        vsCfrSecond: agentValue(second.policy, cfr, "second"),
        vsCfrFirst: agentValue(first.policy, cfr, "first"),
        oracleFinalSecond: sequenceStats(ad.oracle, attempts).final,
      });
    }
  }
  return wideSweep;
}

/** A best response with its ties resolved to BET instead of PASS. */
function tiesToBet(br: SeatBestResponse): KuhnPolicy {
  const t = { ...br.policy } as Record<KuhnInfoSet, number>;
  for (const s of br.ties) t[s] = 1;
  return t;
}

/** Computes every table of the calibration (exact; about a few milliseconds after CFR is solved). */
export function kuhnCalibration(options: KuhnCalibrationOptions = {}): KuhnCalibration {
  const cfrIterations = options.cfrIterations ?? DEFAULT_CFR_ITERATIONS;
  const attempts = options.attempts ?? 3;
  checkAttempts(attempts);
  const pool = [...(options.pool ?? KUHN_TRAINING_POOL)];
  const widePool = [...(options.widePool ?? KUHN_WIDE_POOL)];
  const specs = evaluationOpponents(cfrIterations);
  const policies = new Map(specs.map((s) => [s, kuhnPolicyFromSpec(s)]));
  const cfrSpec = specs[0];
  const nash = nashPolicy(1 / 6);

  const poolMix = poolMixture(pool);
  const wideMix = poolMixture(widePool);
  const poolBr = {
    first: seatBestResponse(poolMix, "first"),
    second: seatBestResponse(poolMix, "second"),
  };
  const widePoolBr = {
    first: seatBestResponse(wideMix, "first"),
    second: seatBestResponse(wideMix, "second"),
  };

  const opponents: OpponentInfo[] = specs.map((spec) => {
    const p = policies.get(spec)!;
    return { spec, deterministic: isDeterministic(p), table: { ...p } };
  });

  const rows: OpponentRows = { fixed: [], winnable: [], multi: [], cfrDeals: { first: [], second: [] } };
  for (const spec of specs) {
    for (const seat of SEAT_LIST) {
      opponentSeatRows(rows, {
        spec,
        opp: policies.get(spec)!,
        seat,
        poolBr: poolBr[seat].policy,
        widePoolBr: widePoolBr[seat].policy,
        nash,
        attempts,
        isCfr: spec === cfrSpec,
      });
    }
  }
  const { fixed, winnable, multi, cfrDeals } = rows;
  const cfr = policies.get(cfrSpec)!;
  const wideSweep = widePoolSweep(pool, cfr, attempts);
  const poolBrTiesBet = {
    first: agentValue(tiesToBet(poolBr.first), cfr, "first"),
    second: agentValue(tiesToBet(poolBr.second), cfr, "second"),
  };

  return {
    cfrIterations,
    attempts,
    poolBrTiesBet,
    pool,
    widePool,
    equilibriumValue: { first: -1 / 18, second: 1 / 18 },
    opponents,
    poolBr,
    widePoolBr,
    fixed,
    winnable,
    multi,
    cfrDeals,
    wideSweep,
  };
}
