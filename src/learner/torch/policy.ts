/**
 * The PyTorch worker's model as a `Policy`: the worker renders the prompt with the model's chat
 * template (sampled assistant ids verbatim) and samples with a seed per request. The contract is
 * the embedded policy's: `tokenIds` are the sampled ids (the end-of-turn token last when it was
 * sampled), `logprobs[i]` the log-probability of `tokenIds[i]` under the distribution actually
 * sampled from, `text` without the end-of-turn token, finish "stop" or "length".
 */
import type { GenerateRequest, Generation, Policy } from "../../policy/types.js";
import type { TorchLearner } from "./learner.js";

export class TorchPolicy implements Policy {
  readonly name: string;
  /** Prompt ids rendered by `contextError`, reused by `generate` for the same request object. */
  private readonly prompts = new WeakMap<GenerateRequest, number[]>();

  constructor(
    readonly learner: TorchLearner,
    name?: string,
  ) {
    this.name = name ?? `torch:${learner.info.architecture}`;
  }

  private async promptIds(requests: readonly GenerateRequest[]): Promise<number[][]> {
    const missing = requests.filter((r) => !this.prompts.has(r));
    if (missing.length > 0) {
      const rendered = await this.learner.renderMany(
        missing.map((r) => r.messages),
        true,
      );
      missing.forEach((r, i) => {
        this.prompts.set(r, rendered[i].ids);
      });
    }
    return requests.map((r) => this.prompts.get(r)!);
  }

  async contextError(request: GenerateRequest): Promise<string | null> {
    const [ids] = await this.promptIds([request]);
    const limit = this.learner.contextLength;
    // +1: a reply cut at maxTokens is closed by the template's end-of-turn token when the transcript is scored.
    return ids.length + request.sampling.maxTokens + 1 > limit
      ? `a prompt of ${ids.length} tokens plus maxTokens ${request.sampling.maxTokens} (+1 closing token) exceeds the context length ${limit}`
      : null;
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
