/**
 * The learner as the trainer sees it: whichever model it trains (the embedded TypeScript
 * transformer, or a Hugging Face model in the PyTorch worker), the trainer renders transcripts,
 * scores tokens, updates with the PPO loss and saves/restores through this interface alone.
 *
 * Token ids belong to the learner: `render` turns a transcript into the learner's ids with the
 * learner's chat template, and an assistant message carrying `tokenIds` (what the policy
 * sampled) contributes exactly those ids. Rendering is append-only, so a trial's last transcript
 * holds every earlier response verbatim.
 */
import type { PpoLossOptions, PpoTokenInputs } from "../algo/ppo-loss.js";
import type { Batch } from "../model/transformer.js";
import type { ChatMessage } from "../policy/types.js";

/** One rendered transcript: its ids and where each assistant message lies, `[start, end)`, end-of-turn included. */
export interface RenderedTranscript {
  ids: number[];
  assistantSpans: { start: number; end: number }[];
}

export interface ScoredTokens {
  /** Per scored token (loss_mask order: sequence, then position). */
  logp: Float64Array;
  entropy: Float64Array;
}

export interface LearnerUpdateResult {
  loss: number;
  /** The PPO loss's metrics: pg_loss, clipfrac, kl, entropy, ppo_kl, ratio_dev (the torch learner adds worker_peak_rss_mb). */
  metrics: Record<string, number>;
  gradNorm: number;
  lr: number;
  clipped: boolean;
  skipped: boolean;
  /** Optimizer steps taken (after this one). */
  step: number;
}

/** What the run saves next to the learner's own state (training-state.json and meta.json). */
export interface RunStateInput {
  json: unknown;
  meta: Record<string, unknown>;
}

export interface TrainLearner {
  readonly backend: "embedded" | "torch";
  /** The model's context length in tokens. */
  readonly contextLength: number;
  /** Whether `logprobs(…, "reference")` is available (the frozen starting weights, for the KL term). */
  readonly hasReference: boolean;
  render(transcripts: readonly (readonly ChatMessage[])[]): Promise<RenderedTranscript[]>;
  /**
   * Teacher-forced log-probs and entropies of the batch's scored tokens, without gradient;
   * `microBatchTokens` caps the tokens of one forward pass where the learner batches by tokens.
   */
  logprobs(
    batch: Batch,
    model?: "policy" | "reference",
    opts?: { microBatchTokens?: number },
  ): Promise<ScoredTokens>;
  /** One optimizer step with the PPO loss (`src/algo/ppo-loss.ts`) over the whole batch. */
  update(
    batch: Batch,
    inputs: PpoTokenInputs,
    loss: PpoLossOptions,
    opts: { microBatchTokens: number },
  ): Promise<LearnerUpdateResult>;
  /** Writes a run checkpoint directory atomically: the weights, optimizer state and the run's state. */
  save(dir: string, run: RunStateInput): Promise<void>;
  /** Loads weights and optimizer state from a run checkpoint `save` wrote; returns the run's JSON state. */
  restore(dir: string): Promise<unknown>;
  close(): Promise<void>;
  /**
   * Drops what the sampler keeps from earlier calls (the worker's prefix store), so a rollout or an
   * evaluation samples the same whatever ran before it, e.g. after `--resume`.
   */
  forgetCaches?(): Promise<void>;
  /** Where the learner's time went since the last call (ms per part), then cleared; absent when untracked. */
  takeTimings?(): Record<string, number>;
}
