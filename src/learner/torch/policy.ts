/**
 * The PyTorch worker's model as a `Policy`: the worker renders the prompt with the model's chat
 * template (sampled assistant ids verbatim) and samples with a seed per request. The contract is
 * the embedded policy's: `tokenIds` are the sampled ids (the end-of-turn token last when it was
 * sampled), `logprobs[i]` the log-probability of `tokenIds[i]` under the distribution actually
 * sampled from, `text` without the end-of-turn token, finish "stop" or "length".
 */
import type { GenerateRequest, Generation, Policy, PromptTokenCounts } from "../../policy/types.js";
import type { TorchLearner } from "./learner.js";

export class TorchPolicy implements Policy {
  readonly name: string;
  /** Prompt ids rendered by `contextError`, reused by `generate` for the same request object. */
  private readonly prompts = new WeakMap<GenerateRequest, number[]>();

  /**
   * `adapter`: sample with the saved LoRA adapter in that directory (a league snapshot) on the
   * learner's base model, not with the learner's own weights.
   */
  constructor(
    readonly learner: TorchLearner,
    name?: string,
    readonly adapter?: string,
  ) {
    this.name = name ?? `torch:${learner.info.architecture}`;
  }

  /** Requests waiting for the next `render` round trip, flushed once the current task yields. */
  private queued: {
    request: GenerateRequest;
    resolve: (ids: number[]) => void;
    reject: (e: unknown) => void;
  }[] = [];

  private async promptIds(requests: readonly GenerateRequest[]): Promise<number[][]> {
    return Promise.all(requests.map((r) => this.promptOf(r)));
  }

  /** One request's prompt ids; concurrent callers share a single `render` round trip. */
  private promptOf(request: GenerateRequest): Promise<number[]> {
    const cached = this.prompts.get(request);
    if (cached) return Promise.resolve(cached);
    return new Promise((resolve, reject) => {
      if (this.queued.length === 0) queueMicrotask(() => void this.flush());
      this.queued.push({ request, resolve, reject });
    });
  }

  private async flush(): Promise<void> {
    const waiting = this.queued;
    this.queued = [];
    const distinct = [...new Set(waiting.map((w) => w.request))].filter((r) => !this.prompts.has(r));
    try {
      if (distinct.length > 0) {
        const rendered = await this.learner.renderMany(
          distinct.map((r) => r.messages),
          true,
        );
        distinct.forEach((r, i) => {
          this.prompts.set(r, rendered[i].ids);
        });
      }
      for (const w of waiting) w.resolve(this.prompts.get(w.request)!);
    } catch (err) {
      for (const w of waiting) w.reject(err);
    }
  }

  async contextError(request: GenerateRequest): Promise<string | null> {
    const [ids] = await this.promptIds([request]);
    const limit = this.learner.contextLength;
    // +1: a reply cut at maxTokens is closed by the template's end-of-turn token when the transcript is scored.
    return ids.length + request.sampling.maxTokens + 1 > limit
      ? `a prompt of ${ids.length} tokens plus maxTokens ${request.sampling.maxTokens} (+1 closing token) exceeds the context length ${limit}`
      : null;
  }

  promptTokens(): PromptTokenCounts {
    return this.learner.promptTokens();
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    if (requests.length === 0) return [];
    const prompts = await this.promptIds(requests);
    const outs = await this.learner.generate(
      prompts,
      requests.map((r) => ({
        maxNewTokens: r.sampling.maxTokens,
        temperature: r.sampling.temperature,
        topP: r.sampling.topP,
        topK: r.sampling.topK,
        seed: r.seed,
        stop: [...r.sampling.stop],
      })),
      this.adapter,
    );
    return outs.map((o, i) => ({
      text: o.text,
      tokenIds: o.tokens,
      logprobs: o.logprobs,
      finishReason: o.finish,
      promptTokens: prompts[i].length,
    }));
  }
}
