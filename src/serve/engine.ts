/**
 * The embedded model behind `mage serve` (a `ServeBackend`): its batched KV-cache sampler runs the
 * jobs the batcher (batcher.ts) collected as ONE `Sampler.generate` call.
 *
 * A job's result depends only on the job (prompt ids, sampling, seed): it is sampled exactly as
 * `EmbeddedPolicy` samples a request — same sampler, same per-sequence seeded stream, `<|end|>`
 * as the stop id, stop strings checked on decoded text — so a served request with a seed gives
 * the in-process result. (With the pure-TS kernel this holds bit for bit whatever else shares
 * the batch; the wasm/native GEMMs may round differently for different batch shapes.)
 *
 * Alternatives for `top_logprobs` come from a second, teacher-forced pass over prompt + sample
 * (`Sampler.append`), under the same distribution the token was sampled from (temperature and
 * truncation applied; greedy is a point mass).
 */
import { renderChatIds } from "../model/chat-template.js";
import type { ModelConfig } from "../model/config.js";
import type { Kernels } from "../model/kernels/types.js";
import type { ModelParams } from "../model/params.js";
import {
  type GenerateOptions,
  type KvCache,
  type SampleOutput,
  type SampleRequest,
  Sampler,
} from "../model/sampler.js";
import { TokenSampler } from "../model/sampling.js";
import type { Tokenizer } from "../model/tokenizer.js";
import type { ChatMessage } from "../policy/types.js";
import type { ServeBackend } from "./backend.js";
import { ApiError, type GenJob, type GenResult } from "./protocol.js";

export { paramsFromMap } from "../model/params-io.js";

export interface EngineModel {
  params: ModelParams;
  tokenizer: Tokenizer;
  kernels: Kernels;
}

/** Most rows of one teacher-forced scoring block (bounds the logits buffer). */
const SCORE_BLOCK_ROWS = 2048;

export class ServeEngine implements ServeBackend {
  readonly config: ModelConfig;
  readonly tokenizer: Tokenizer;
  readonly kernels: Kernels;
  readonly params: ModelParams;
  private readonly sampler: Sampler;
  private readonly scorer: Sampler;
  private readonly tokenSampler: TokenSampler;
  private readonly dist: Float64Array;
  private readonly decode: (ids: readonly number[]) => string;
  /** Generation calls made and sequences sampled (for stats and tests). */
  calls = 0;
  sequences = 0;
  largestBatch = 0;

  constructor(model: EngineModel) {
    this.params = model.params;
    this.config = model.params.config;
    this.tokenizer = model.tokenizer;
    this.kernels = model.kernels;
    if (this.tokenizer.vocabSize !== this.config.vocabSize)
      throw new Error(
        `model.vocabSize (${this.config.vocabSize}) differs from the tokenizer's vocabulary (${this.tokenizer.vocabSize})`,
      );
    this.sampler = new Sampler(this.config, this.kernels);
    this.scorer = new Sampler(this.config, this.kernels);
    this.tokenSampler = new TokenSampler(this.config.vocabSize);
    this.dist = new Float64Array(this.config.vocabSize);
    const tok = this.tokenizer;
    this.decode = (ids) => tok.decode(ids);
  }

  get fingerprint(): string {
    return `mage-${this.kernels.name}`;
  }

  get contextLength(): number {
    return this.config.contextLength;
  }

  get vocabSize(): number {
    return this.config.vocabSize;
  }

  get chatStopIds(): readonly number[] {
    return [this.tokenizer.endId];
  }

  get completionStopIds(): readonly number[] {
    return [this.tokenizer.endId, this.tokenizer.eosId];
  }

  /** The messages in mage's chat template, ending with the assistant's generation prompt. */
  async chatPrompt(messages: readonly ChatMessage[]): Promise<number[]> {
    try {
      return renderChatIds(this.tokenizer, messages, { addGenerationPrompt: true });
    } catch (err) {
      throw new ApiError(
        400,
        err instanceof Error ? err.message : String(err),
        "invalid_request_error",
        "messages",
      );
    }
  }

  /** Nothing to release: the weights belong to the caller. */
  async close(): Promise<void> {}

  /** Samples all jobs in one sampler call; results in job order. */
  run(jobs: readonly GenJob[], maxConcurrent = 64): GenResult[] {
    if (jobs.length === 0) return [];
    const outs = this.sampler.generate(this.params, this.requests(jobs), this.options(jobs, maxConcurrent));
    return this.finish(jobs, outs);
  }

  /**
   * `run`, letting the event loop turn after every decode step, so jobs with `onToken` hear of
   * each token while the batch is still sampling. Same results as `run`.
   */
  async runAsync(jobs: readonly GenJob[], maxConcurrent = 64, stop?: () => boolean): Promise<GenResult[]> {
    if (jobs.length === 0) return [];
    const outs = await this.sampler.generateAsync(this.params, this.requests(jobs), {
      ...this.options(jobs, maxConcurrent),
      ...(stop ? { stop } : {}),
    });
    return this.finish(jobs, outs);
  }

  private requests(jobs: readonly GenJob[]): SampleRequest[] {
    return jobs.map((j) => ({
      promptIds: j.promptIds,
      sampling: j.sampling,
      seed: j.seed,
      stopIds: j.stopIds,
    }));
  }

  private options(jobs: readonly GenJob[], maxConcurrent: number): GenerateOptions {
    const listening = jobs.some((j) => j.onToken);
    return {
      decode: this.decode,
      maxConcurrent,
      ...(listening ? { onToken: (i: number, id: number, lp: number) => jobs[i].onToken?.(id, lp) } : {}),
    };
  }

  private finish(jobs: readonly GenJob[], outs: SampleOutput[]): GenResult[] {
    this.calls++;
    this.sequences += jobs.length;
    this.largestBatch = Math.max(this.largestBatch, jobs.length);
    const results: GenResult[] = outs.map((o) => ({
      tokenIds: o.tokenIds,
      logprobs: o.logprobs,
      finishReason: o.finishReason,
      stopString: o.stoppedBy && "text" in o.stoppedBy ? o.stoppedBy.text : null,
      promptTokens: o.promptTokens,
      top: null,
    }));
    const wantTop = jobs
      .map((j, i) => (j.topLogprobs > 0 && results[i].tokenIds.length > 0 ? i : -1))
      .filter((i) => i >= 0);
    if (wantTop.length > 0) this.fillTop(jobs, results, wantTop);
    return results;
  }

  /** Teacher-forced pass over prompt + sample for the jobs that asked for alternatives. */
  private fillTop(jobs: readonly GenJob[], results: GenResult[], which: number[]): void {
    const V = this.config.vocabSize;
    let k = 0;
    while (k < which.length) {
      const group: { i: number; ids: number[]; cache: KvCache }[] = [];
      let rows = 0;
      while (k < which.length) {
        const i = which[k];
        const ids = [...jobs[i].promptIds, ...results[i].tokenIds.slice(0, -1)];
        if (group.length > 0 && rows + ids.length > SCORE_BLOCK_ROWS) break;
        group.push({ i, ids, cache: this.scorer.newCache(ids.length) });
        rows += ids.length;
        k++;
      }
      try {
        const logits = this.scorer.append(
          this.params,
          group.map((g) => ({ cache: g.cache, tokens: g.ids })),
        );
        let row0 = 0;
        for (const g of group) {
          const job = jobs[g.i];
          const res = results[g.i];
          const first = job.promptIds.length - 1;
          const top: { id: number; logprob: number }[][] = [];
          for (let t = 0; t < res.tokenIds.length; t++) {
            const off = (row0 + first + t) * V;
            top.push(this.topOf(logits, off, job, res.tokenIds[t]));
          }
          res.top = top;
          row0 += g.ids.length;
        }
      } finally {
        for (const g of group) this.scorer.releaseCache(g.cache);
      }
    }
  }

  private topOf(
    logits: Float32Array,
    off: number,
    job: GenJob,
    chosen: number,
  ): { id: number; logprob: number }[] {
    const d = this.dist;
    this.tokenSampler.distribution(logits, off, job.sampling, d);
    const k = job.topLogprobs;
    // Partial selection of the k most probable ids (ties: lower id first).
    const best: number[] = [];
    for (let id = 0; id < d.length; id++) {
      const p = d[id];
      if (!(p > 0)) continue;
      let j: number;
      if (best.length < k) {
        best.push(id);
        j = best.length - 1;
      } else if (p > d[best[k - 1]]) j = k - 1;
      else continue;
      while (j > 0 && p > d[best[j - 1]]) {
        best[j] = best[j - 1];
        j--;
      }
      best[j] = id;
    }
    if (best.length === 0) best.push(chosen);
    return best.map((id) => ({ id, logprob: Math.log(d[id]) }));
  }
}
