/**
 * Kuhn poker's 12 information sets as first-attempt text-task situations: a `TrialEnv` standing
 * at the agent's decision in an information set, so the prompt it builds is exactly the one a
 * real rollout shows the agent there (the task renders it; nothing is re-rendered here).
 *
 * An information set fixes the agent's seat, its card and the betting so far; the opponent's card
 * is never shown before the agent's decision, so any other card does. The way there:
 *   "c"   (player 0 to open)           seat first,  the agent opens;
 *   "cp", "cb" (player 1 to answer)    seat second, an opponent that always passes / always bets opens;
 *   "cpb" (player 0 facing a bet)      seat first,  the agent's own answers that ended in PASS, then an
 *                                      opponent that always bets.
 * The agent's answers on the way (`prefix`) are replayed through the task as the model gave them
 * (text and sampled token ids), invalid ones included, so they use up turns as in a real hand.
 */
import { Rng } from "../core/rng.js";
import { KUHN_INFOSETS, type KuhnCard, type KuhnInfoSet } from "../games/kuhn.js";
import { TrialEnv } from "../tasks/env.js";
import { KuhnTask } from "../tasks/kuhn.js";
import type { PromptStyle, Seat } from "../tasks/types.js";

/** How the agent reaches an information set in a hand. */
export interface KuhnInfosetRoute {
  infoset: KuhnInfoSet;
  seat: Seat;
  /** [player 0's card, player 1's card]. */
  deal: readonly [KuhnCard, KuhnCard];
  /** The opponent spec whose moves lead there (and answer the agent's move afterwards). */
  opponent: "always-pass" | "always-bet";
  /** The agent must have checked first (player 0 facing a bet, "cpb"). */
  afterOwnPass: boolean;
}

/** An answer the agent gave on the way to an information set. */
export interface PrefixAnswer {
  response: string;
  tokenIds?: readonly number[];
}

/** The answer the task asks for when it wants a check: a stand-in prefix for "cpb" when the model never checked. */
export const CANONICAL_PASS_ANSWER = "<action>PASS</action>";

const CARDS: readonly KuhnCard[] = [0, 1, 2];

export function kuhnInfosetRoute(infoset: KuhnInfoSet): KuhnInfosetRoute {
  if (!(KUHN_INFOSETS as readonly string[]).includes(infoset)) {
    throw new RangeError(`kuhn: "${infoset}" is not one of the information sets ${KUHN_INFOSETS.join(", ")}`);
  }
  const card = Number(infoset[0]) as KuhnCard;
  const history = infoset.slice(1);
  const other = CARDS.find((c) => c !== card) as KuhnCard;
  const first = history.length % 2 === 0;
  return {
    infoset,
    seat: first ? "first" : "second",
    deal: first ? [card, other] : [other, card],
    opponent: history === "p" ? "always-pass" : "always-bet",
    afterOwnPass: history === "pb",
  };
}

/**
 * A fresh first-attempt trial in the prompt style `style`, played up to the agent's decision at
 * `infoset` with the agent's `prefix` answers. Throws when the answers do not lead there (only
 * "cpb" takes a prefix: answers ending in a valid PASS).
 */
export async function kuhnInfosetEnv(
  infoset: KuhnInfoSet,
  style: PromptStyle,
  prefix: readonly PrefixAnswer[] = [],
): Promise<TrialEnv> {
  const route = kuhnInfosetRoute(infoset);
  const task = new KuhnTask({ opponent: route.opponent, seat: route.seat }, route.deal);
  const env = new TrialEnv(task, { style, reflectionType: "reflection_only" });
  // The route's opponents never draw, so the generator only names the trial.
  await env.reset(Rng.seeded("kuhn-infoset").derive(infoset));
  for (const answer of prefix) {
    if (env.done) break;
    await env.play(answer.response, answer.tokenIds);
  }
  const reached = task.infoState();
  if (env.done || reached !== infoset) {
    const answers = prefix.map((a) => JSON.stringify(a.response)).join(", ") || "none";
    throw new Error(
      `kuhn information set "${infoset}": the agent's answers (${answers}) lead to "${reached}"${env.done ? " (hand over)" : ""}`,
    );
  }
  return env;
}
