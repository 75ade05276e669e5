/**
 * What `mage serve`'s HTTP layer needs of a model, so the OpenAI endpoints are written once for
 * every kind of model: the embedded model in this process (`ServeEngine`, engine.ts) and a
 * Hugging Face model sampled by the PyTorch worker (`TorchServeBackend`, torch-backend.ts).
 */
import type { Tokenizer } from "../model/tokenizer.js";
import type { ChatMessage } from "../policy/types.js";
import type { GenJob, GenResult } from "./protocol.js";

export interface ServeBackend {
  /** `system_fingerprint` of every response (`mage-js`, `mage-torch-cpu`...). */
  readonly fingerprint: string;
  /** The model's context length in tokens (prompt plus max_tokens must fit). */
  readonly contextLength: number;
  /** Token ids in requests (assistant `token_ids`, token-id prompts) must be below this. */
  readonly vocabSize: number;
  /**
   * The model's tokenizer in this process, when there is one. Token-by-token streaming,
   * log-probs and text prompts on /v1/completions need it: without one those fields are refused
   * (400 naming the field), generations carry their decoded `text`, and a stream sends each reply
   * as one content chunk once it is sampled.
   */
  readonly tokenizer: Tokenizer | null;
  /** Ids that end a chat reply; sampled last, they stay in `token_ids` and are cut from the text. */
  readonly chatStopIds: readonly number[];
  /** Ids that end a completion (as `chatStopIds`). */
  readonly completionStopIds: readonly number[];
  /** Generation calls made so far, and the most sequences one of them sampled. */
  readonly calls: number;
  readonly largestBatch: number;
  /**
   * Chat messages as prompt ids: the model's chat template with the assistant's generation prompt.
   * A conversation the template refuses is an `ApiError` (400, param `messages`).
   */
  chatPrompt(messages: readonly ChatMessage[]): Promise<number[]>;
  /**
   * Samples the jobs as ONE generation call; results in job order. `maxBatch` bounds the sequences
   * sampled at once. When `stop` turns true (the server is shutting down) the call may end early,
   * with cut-short results or with `ShutdownError` (batcher.ts); the batcher answers its jobs with
   * `ShutdownError` either way.
   */
  runAsync(jobs: readonly GenJob[], maxBatch: number, stop?: () => boolean): Promise<GenResult[]>;
  /** Releases the model (stops the worker); the server calls it last when it closes. */
  close(): Promise<void>;
}
