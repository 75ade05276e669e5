/**
 * The embedded transformer as a `Policy`: chat template → token ids → batched KV-cache
 * sampler → generations.
 *
 * Contract with the trainer:
 * - `tokenIds` are exactly the ids that were sampled, INCLUDING the closing `<|end|>` when
 *   the model sampled it (the model must learn to stop), and `logprobs[i]` is the
 *   log-probability of `tokenIds[i]` under the distribution actually sampled from (at
 *   temperature 1 without truncation: the model's own log-softmax, which the learner
 *   recomputes). Passing these ids back as the assistant message's `tokenIds` makes the chat
 *   template use them verbatim (and not add a second `<|end|>`), so the learner scores the
 *   same tokens.
 * - `text` is the decoded reply WITHOUT the closing `<|end|>`. When a stop string ended the
 *   reply, the text runs to the end of the token that completed it (the string is kept).
 * - finishReason is "stop" for `<|end|>` or a stop string, "length" when `maxTokens` ran out.
 * - A prompt plus `maxTokens` longer than the model's context is a `ContextLengthError`
 *   naming the limit; nothing is truncated silently.
 *
 * Weights are held by reference: a learner that updates the `ModelParams` in place is seen
 * by the next call; `updateParams` swaps in another container.
 */
import { UsageError } from "../core/errors.js";
import { renderChatIds, stopTokenId } from "../model/chat-template.js";
import type { ModelConfig } from "../model/config.js";
import { jsKernels } from "../model/kernels/js.js";
import type { Kernels } from "../model/kernels/types.js";
import type { ModelParams } from "../model/params.js";
import { type GenerateOptions, type SampleRequest, Sampler } from "../model/sampler.js";
import type { Tokenizer } from "../model/tokenizer.js";
import type { GenerateRequest, Generation, Policy } from "./types.js";

export interface EmbeddedPolicyOptions {
  params: ModelParams;
  tokenizer: Tokenizer;
  /** GEMM kernels (default: the pure-TS ones). */
  kernels?: Kernels;
  /** Shown in metrics and data (default "embedded"). */
  name?: string;
  /** Batching limits of the sampler (waves, KV-cache memory, prefill block, prompt sharing). */
  sampler?: Omit<GenerateOptions, "decode">;
}

export class EmbeddedPolicy implements Policy {
  readonly name: string;
  readonly tokenizer: Tokenizer;
  readonly kernels: Kernels;
  private current: ModelParams;
  private readonly sampler: Sampler;
  private readonly options: GenerateOptions;
  private readonly endId: number;

  constructor(opts: EmbeddedPolicyOptions) {
    this.name = opts.name ?? "embedded";
    this.tokenizer = opts.tokenizer;
    this.kernels = opts.kernels ?? jsKernels;
    checkVocab(opts.params.config, opts.tokenizer);
    this.current = opts.params;
    this.sampler = new Sampler(opts.params.config, this.kernels);
    this.endId = stopTokenId(opts.tokenizer);
    const tok = opts.tokenizer;
    this.options = { ...opts.sampler, decode: (ids) => tok.decode(ids) };
  }

  get config(): ModelConfig {
    return this.current.config;
  }

  /** The weights the next call samples from. */
  get params(): ModelParams {
    return this.current;
  }

  /** Samples from `params` from the next call on (same architecture required). */
  updateParams(params: ModelParams): void {
    const a = this.current.config;
    const b = params.config;
    for (const k of Object.keys(a) as (keyof ModelConfig)[]) {
      if (a[k] !== b[k])
        throw new UsageError(`updateParams: model.${k} is ${b[k]} but this policy was built for ${a[k]}`);
    }
    this.current = params;
  }

  /** The prompt ids of a request: its messages rendered with the `<|assistant|>` generation prompt. */
  promptIds(req: GenerateRequest): number[] {
    return renderChatIds(this.tokenizer, req.messages, { addGenerationPrompt: true });
  }

  /** Why `request` does not fit the model's context (prompt + maxTokens), or null when it fits. */
  contextError(request: GenerateRequest): string | null {
    const limit = this.current.config.contextLength;
    // +1: a reply cut at maxTokens is closed by the template's <|end|> when the transcript is scored.
    const prompt = this.promptIds(request).length;
    return prompt + request.sampling.maxTokens + 1 > limit
      ? `a prompt of ${prompt} tokens plus maxTokens ${request.sampling.maxTokens} (+1 closing token) exceeds the context length ${limit}`
      : null;
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return this.generateSync(requests);
  }

  /** The same as `generate`, synchronously (the work is all on this thread anyway). */
  generateSync(requests: readonly GenerateRequest[]): Generation[] {
    const sampleRequests: SampleRequest[] = requests.map((req) => ({
      promptIds: this.promptIds(req),
      sampling: req.sampling,
      seed: req.seed,
      stopIds: [this.endId],
    }));
    const outs = this.sampler.generate(this.current, sampleRequests, this.options);
    return outs.map((o) => {
      const ids = o.tokenIds;
      const endSampled = ids.length > 0 && ids[ids.length - 1] === this.endId;
      return {
        text: this.tokenizer.decode(endSampled ? ids.slice(0, -1) : ids),
        tokenIds: ids,
        logprobs: o.logprobs,
        finishReason: o.finishReason,
        promptTokens: o.promptTokens,
      };
    });
  }
}

function checkVocab(config: ModelConfig, tok: Tokenizer): void {
  if (tok.vocabSize !== config.vocabSize)
    throw new UsageError(
      `model.vocabSize (${config.vocabSize}) must equal the tokenizer's vocabulary size (${tok.vocabSize}); ` +
        "build the model config with vocabSize set from the tokenizer",
    );
}
