/**
 * The policy interface every language model in mage implements: the embedded
 * transformer, an OpenAI-compatible server, scripted policies in tests.
 */
export type ChatRole = "system" | "user" | "assistant";

export interface ChatMessage {
  role: ChatRole;
  content: string;
  /**
   * For assistant messages that the policy itself sampled: the exact token ids it produced.
   * Templates of the embedded model use them verbatim instead of re-tokenizing `content`,
   * so a transcript scores exactly the tokens that were sampled.
   */
  tokenIds?: readonly number[];
}

export interface SamplingParams {
  /** 0 means greedy. */
  temperature: number;
  /** 1 means no nucleus truncation. */
  topP: number;
  /** 0 (or less) means no top-k truncation. */
  topK: number;
  maxTokens: number;
  /** Generation stops after any of these strings appears; the stop string is kept in `text`. */
  stop: readonly string[];
}

export interface GenerateRequest {
  messages: readonly ChatMessage[];
  sampling: SamplingParams;
  /** Per-request seed (uint32) so a sequence's sample does not depend on its batch. */
  seed: number;
  /**
   * Which call of which trial this is (set by the trial runner). Models ignore it; a scripted
   * player that keeps state per trial (the served environments' expert player) reads it.
   */
  trial?: { trialId: number; attempt: number; phase: "play" | "reflect"; turn: number };
}

export interface Generation {
  text: string;
  tokenIds: number[];
  /** Log-probability of each generated token under the sampling distribution actually used. */
  logprobs: number[];
  finishReason: "stop" | "length";
  promptTokens: number;
}

export interface Policy {
  readonly name: string;
  generate(requests: readonly GenerateRequest[]): Promise<Generation[]>;
  /**
   * Why a request cannot be served (its prompt plus `maxTokens` exceeds the model's context),
   * or null when it fits. Policies that cannot tell in advance leave it out. A policy whose
   * tokenizer lives in another process (the PyTorch worker) answers asynchronously.
   */
  contextError?(request: GenerateRequest): string | null | Promise<string | null>;
  /**
   * Prompt tokens this policy's backend has so far taken from keys and values it kept from
   * earlier samples (`reused`) and computed afresh (`prefilled`): running totals, so a caller tells
   * its own share by difference. Policies that keep no such store leave it out.
   */
  promptTokens?(): PromptTokenCounts;
}

export interface PromptTokenCounts {
  reused: number;
  prefilled: number;
}

/** The share of prompt tokens reused between two readings of `promptTokens`; NaN when none were fed. */
export function reuseShare(before: PromptTokenCounts, after: PromptTokenCounts): number {
  const reused = after.reused - before.reused;
  const fed = reused + after.prefilled - before.prefilled;
  return fed > 0 ? reused / fed : Number.NaN;
}

/** The share `reuseShare` gives from a reading taken earlier to the policy's count now; NaN when it does not count. */
export function reuseSince(
  policy: Pick<Policy, "promptTokens">,
  start: PromptTokenCounts | null | undefined,
): number {
  const now = policy.promptTokens?.();
  return now && start ? reuseShare(start, now) : Number.NaN;
}

/** Training samples at temperature 1 with no truncation, so behaviour log-probs are exact. */
export const TRAIN_SAMPLING: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 64, stop: [] };
/** The reference's validation sampling (T 0.7, top-p 0.8, top-k 20). */
export const EVAL_SAMPLING: SamplingParams = {
  temperature: 0.7,
  topP: 0.8,
  topK: 20,
  maxTokens: 64,
  stop: [],
};
