/**
 * A language model's attempt-1 Kuhn poker strategy, estimated by sampling: at each of the 12
 * information sets, `samples` hands are played from the first prompt the task shows the agent
 * there (`kuhn-infoset-env.ts`) until the agent's move is made, and P(BET) is the share of hands
 * whose move was BET (bet or call).
 *
 * Invalid answers are handled as the task and the trial runner handle them in evaluation: the
 * turn is used up with nothing played, the agent is asked again in the same state (the prompt now
 * holds the invalid answer and the task's "Invalid: …" feedback), and when the attempt's turns
 * (`maxTurns`, Kuhn 6) run out the hand is forfeited: the agent loses what it put in. Facing a bet
 * that is exactly a fold, so a forfeit counts as PASS; where nobody has bet it costs the ante
 * where a check would go on, which the two-move game tree cannot express: it counts as PASS too
 * and is reported (`forfeit`), so a profile with forfeits flatters the model there.
 *
 * Player 0's decisions after its own check ("cpb") are conditional on that check: their hands
 * replay the answers of the model's own hands at "c" that ended in a valid PASS (hand i takes the
 * passing hand i mod k), so the prompt holds what the model itself wrote. Where the model never
 * checked in its `samples` hands the information set is (almost) never reached and does not move
 * the figures; it is still estimated, after the answer the task asks for (`prefix: "canonical"`).
 *
 * Every request's seed is keyed by (information set, hand, turn), so the estimate depends on the
 * seed alone, not on batching; all hands that wait for an answer are sampled together (`maxBatch`
 * per generate call).
 */
import type { Rng } from "../core/rng.js";
import { KUHN_INFOSETS, type KuhnInfoSet } from "../games/kuhn.js";
import { type KuhnPolicy, policyFromArray } from "../opponents/kuhn/policies.js";
import type { GenerateRequest, Generation, Policy, SamplingParams } from "../policy/types.js";
import type { TrialEnv } from "../tasks/env.js";
import type { PromptStyle } from "../tasks/types.js";
import { CANONICAL_PASS_ANSWER, kuhnInfosetEnv, type PrefixAnswer } from "./kuhn-infoset-env.js";

export interface KuhnModelPolicyOptions {
  /** Hands per information set. */
  samples: number;
  /** Root of the request seeds (`Rng.seeded(seed).derive("kuhn-model-policy")` in the CLI). */
  rng: Rng;
  promptStyle: PromptStyle;
  sampling: SamplingParams;
  /** Play turns per attempt (the task registry's Kuhn `maxTurns`). */
  maxTurns: number;
  /** Most requests in one generate call (default 64). */
  maxBatch?: number;
  /** Called after every generate call. */
  onProgress?: (progress: KuhnModelPolicyProgress) => void;
}

export interface KuhnModelPolicyProgress {
  /** Hands whose move is decided, of `total` (12 × samples). */
  decided: number;
  total: number;
  answers: number;
  invalidAnswers: number;
}

/** How the hands of an information set began. */
export type PrefixSource = "none" | "sampled" | "canonical";

export interface KuhnInfosetEstimate {
  infoset: KuhnInfoSet;
  /** Hands played from this information set. */
  samples: number;
  bet: number;
  pass: number;
  /** Hands whose turns ran out on invalid answers (counted as PASS in `pBet`). */
  forfeit: number;
  /** Answers sampled here (a hand's invalid answers and its final one). */
  answers: number;
  invalidAnswers: number;
  /** bet / samples. */
  pBet: number;
  /** invalidAnswers / answers. */
  invalidRate: number;
  prefix: PrefixSource;
}

export interface KuhnModelPolicyEstimate {
  profile: KuhnPolicy;
  infosets: KuhnInfosetEstimate[];
}

type Outcome = "PASS" | "BET" | "forfeit";

interface Hand {
  infoset: KuhnInfoSet;
  index: number;
  env: TrialEnv;
  answers: number;
  invalidAnswers: number;
  outcome?: Outcome;
}

/** The information sets where player 0 faces a bet after its own check, and where that check was made. */
const AFTER_OWN_PASS: ReadonlyMap<KuhnInfoSet, KuhnInfoSet> = new Map(
  KUHN_INFOSETS.filter((s) => s.endsWith("pb")).map((s) => [s, s[0] as KuhnInfoSet]),
);

export const DEFAULT_KUHN_MODEL_BATCH = 64;

export async function estimateKuhnModelPolicy(
  policy: Policy,
  o: KuhnModelPolicyOptions,
): Promise<KuhnModelPolicyEstimate> {
  if (!(Number.isInteger(o.samples) && o.samples >= 1))
    throw new RangeError(`kuhn model policy: samples must be a positive integer, got ${o.samples}`);
  const sampler = new HandSampler(policy, o);
  const opening = KUHN_INFOSETS.filter((s) => !AFTER_OWN_PASS.has(s));
  const openingHands = await sampler.play(
    await Promise.all(opening.flatMap((s) => handsAt(s, o.samples, o.promptStyle, () => []))),
  );
  const prefixes = new Map<KuhnInfoSet, PrefixSource>();
  const laterHands = await sampler.play(
    await Promise.all(
      [...AFTER_OWN_PASS].flatMap(([infoset, check]) => {
        const passed = openingHands.filter((h) => h.infoset === check && h.outcome === "PASS");
        prefixes.set(infoset, passed.length > 0 ? "sampled" : "canonical");
        return handsAt(infoset, o.samples, o.promptStyle, (i) =>
          passed.length > 0 ? ownAnswers(passed[i % passed.length]) : [{ response: CANONICAL_PASS_ANSWER }],
        );
      }),
    ),
  );
  const all = [...openingHands, ...laterHands];
  const infosets = KUHN_INFOSETS.map((s) =>
    summarize(
      s,
      all.filter((h) => h.infoset === s),
      prefixes.get(s) ?? "none",
    ),
  );
  return { profile: policyFromArray(infosets.map((e) => e.pBet)), infosets };
}

function handsAt(
  infoset: KuhnInfoSet,
  samples: number,
  style: PromptStyle,
  prefixOf: (index: number) => PrefixAnswer[],
): Promise<Hand>[] {
  return Array.from({ length: samples }, async (_, index) => {
    const env = await kuhnInfosetEnv(infoset, style, prefixOf(index));
    return { infoset, index, env, answers: 0, invalidAnswers: 0 };
  });
}

/** The answers a hand gave in its attempt so far, as the model wrote them. */
function ownAnswers(hand: Hand): PrefixAnswer[] {
  return hand.env.currentAttempt.turns.map((t) => ({
    response: t.response,
    ...(t.tokenIds ? { tokenIds: t.tokenIds } : {}),
  }));
}

function summarize(infoset: KuhnInfoSet, hands: readonly Hand[], prefix: PrefixSource): KuhnInfosetEstimate {
  const count = (o: Outcome) => hands.filter((h) => h.outcome === o).length;
  const answers = hands.reduce((a, h) => a + h.answers, 0);
  const invalidAnswers = hands.reduce((a, h) => a + h.invalidAnswers, 0);
  const bet = count("BET");
  return {
    infoset,
    samples: hands.length,
    bet,
    pass: count("PASS"),
    forfeit: count("forfeit"),
    answers,
    invalidAnswers,
    pBet: bet / hands.length,
    invalidRate: answers > 0 ? invalidAnswers / answers : 0,
    prefix,
  };
}

/** Plays hands until each one's move at its information set is decided, in batched generate calls. */
class HandSampler {
  private readonly total: number;
  private decided = 0;
  private answers = 0;
  private invalidAnswers = 0;

  constructor(
    private readonly policy: Policy,
    private readonly o: KuhnModelPolicyOptions,
  ) {
    this.total = KUHN_INFOSETS.length * o.samples;
  }

  async play(hands: Hand[]): Promise<Hand[]> {
    const batchSize = Math.max(1, this.o.maxBatch ?? DEFAULT_KUHN_MODEL_BATCH);
    // A prefix that used up the attempt's turns leaves no decision: the runner forfeits the hand.
    for (const h of hands) if (h.env.turnIndex >= this.o.maxTurns) this.decide(h, "forfeit");
    for (;;) {
      const waiting = hands.filter((h) => h.outcome === undefined);
      if (waiting.length === 0) return hands;
      for (let i = 0; i < waiting.length; i += batchSize) {
        await this.answerBatch(waiting.slice(i, i + batchSize));
      }
    }
  }

  private async answerBatch(batch: readonly Hand[]): Promise<void> {
    const requests = batch.map((h) => this.requestOf(h));
    await this.checkContext(batch, requests);
    const generations = await this.policy.generate(requests);
    if (generations.length !== requests.length) {
      throw new Error(
        `policy ${this.policy.name} returned ${generations.length} generations for ${requests.length} requests`,
      );
    }
    for (const [k, hand] of batch.entries()) await this.answer(hand, generations[k]);
    this.o.onProgress?.({
      decided: this.decided,
      total: this.total,
      answers: this.answers,
      invalidAnswers: this.invalidAnswers,
    });
  }

  private requestOf(h: Hand): GenerateRequest {
    return {
      messages: h.env.messages("play"),
      sampling: this.o.sampling,
      seed: this.o.rng.derive("sample", h.infoset, h.index, h.env.turnIndex).nextU32(),
    };
  }

  private async checkContext(batch: readonly Hand[], requests: readonly GenerateRequest[]): Promise<void> {
    const errors = await Promise.all(requests.map((r) => this.policy.contextError?.(r) ?? null));
    const k = errors.findIndex((e) => e !== null);
    if (k >= 0) throw new Error(`kuhn information set "${batch[k].infoset}": ${errors[k]}`);
  }

  /** Plays one answer through the task: a valid one decides the hand; turns running out forfeit it. */
  private async answer(hand: Hand, generation: Generation): Promise<void> {
    const result = await hand.env.play(generation.text, generation.tokenIds);
    hand.answers += 1;
    this.answers += 1;
    if (result.valid) {
      if (result.action !== "PASS" && result.action !== "BET")
        throw new Error(`kuhn task: a valid move reads "${result.action}", not PASS or BET`);
      this.decide(hand, result.action);
      return;
    }
    hand.invalidAnswers += 1;
    this.invalidAnswers += 1;
    if (hand.env.turnIndex >= this.o.maxTurns) this.decide(hand, "forfeit");
  }

  private decide(hand: Hand, outcome: Outcome): void {
    hand.outcome = outcome;
    this.decided += 1;
  }
}
