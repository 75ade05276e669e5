/**
 * A Hugging Face causal LM trained by the PyTorch worker, as a `TrainLearner`. The worker owns the
 * model, its tokenizer and chat template, and the autograd of the PPO loss; this class turns the
 * trainer's batches into protocol arrays and back.
 *
 *   const learner = await TorchLearner.open({ torch: config.model.torch, optim, seed, reference: true });
 *   const [t] = await learner.render([messages]);
 *   const m = await learner.update(batch, { oldLogp, advantages }, DEFAULT_PPO_OPTIONS, { microBatchTokens: 4096 });
 *   await learner.close();
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { PpoLossOptions, PpoTokenInputs } from "../../algo/ppo-loss.js";
import { UsageError } from "../../core/errors.js";
import { TORCH_CHECKPOINT_FILES, writeDirAtomic } from "../../model/checkpoint.js";
import type { Batch } from "../../model/transformer.js";
import type { ChatMessage, PromptTokenCounts } from "../../policy/types.js";
import type { TorchModelConfig } from "../../train/config.js";
import type {
  LearnerUpdateResult,
  RenderedTranscript,
  RunStateInput,
  ScoredTokens,
  TrainLearner,
} from "../types.js";
import { TorchWorker, type TorchWorkerOptions } from "./worker.js";

export interface TorchOptimizerOptions {
  lr: number;
  weightDecay: number;
  gradClip: number;
  betas?: [number, number];
  eps?: number;
}

export interface TorchLearnerOptions {
  torch: TorchModelConfig;
  optimizer: TorchOptimizerOptions;
  seed: number;
  /** Keep the starting weights for reference log-probs (the KL term). */
  reference: boolean;
  /** Passed to the worker (tests: a fake command, extra environment). */
  worker?: Partial<TorchWorkerOptions>;
  /** Load this directory (a `save` of the worker) instead of `torch.path` (full-weight checkpoints for eval). */
  modelPath?: string;
  /** Saved adapters (league snapshots) the worker keeps in memory for `generate`; the worker's default 8. */
  maxAdapters?: number;
}

export interface TorchModelInfo {
  architecture: string;
  vocabSize: number;
  contextLength: number;
  parameters: number;
  trainableParameters: number;
  eosTokenIds: number[];
  /** What the worker computes in, e.g. "float32 weights, bfloat16 matrix products (auto: …)". */
  precision: string;
}

/** The reply of one `sft` step. */
export interface TorchSftResult {
  /** The weighted NLL (without the unlikelihood term). */
  loss: number;
  /** α · Σ −log(1 − q) / Σ w, 0 without unlikely tokens. */
  unlikelihood: number;
  /** The unlikely tokens of the step and their summed probability q before it. */
  unlikelyTokens: number;
  unlikelyMass: number;
  gradNorm: number;
  clipped: boolean;
  skipped: boolean;
  /** Scored tokens of the batch. */
  tokens: number;
  step: number;
  /** The worker's time for the step. */
  ms: number;
}

/** What a torch run checkpoint records about its learner (`torch.json`). */
export interface TorchCheckpointInfo {
  format: "mage-torch-checkpoint";
  /** What the worker's `save` wrote into `learner/`: full HF weights or a PEFT adapter. */
  saved: "hf" | "peft-adapter";
  /** The model the run started from (a PEFT adapter applies to it). */
  basePath: string;
  torch: TorchModelConfig;
  /**
   * `learner/` holds the adapter alone (`save_adapter`: a league snapshot), no optimizer or RNG
   * state: it is sampled as an adapter on the base model, never restored into a learner.
   */
  adapterOnly?: boolean;
}

/** Protocol arrays for a batch: ids and loss_mask concatenated, one length per sequence. */
export function batchArrays(batch: Batch): { ids: Int32Array; lengths: Int32Array; loss_mask: Uint8Array } {
  const total = batch.sequences.reduce((s, q) => s + q.length, 0);
  const ids = new Int32Array(total);
  const mask = new Uint8Array(total);
  const lengths = new Int32Array(batch.sequences.length);
  let o = 0;
  batch.sequences.forEach((seq, i) => {
    ids.set(seq, o);
    mask.set(batch.lossMask[i], o);
    lengths[i] = seq.length;
    o += seq.length;
  });
  return { ids, lengths, loss_mask: mask };
}

function messagesJson(messages: readonly ChatMessage[]) {
  return messages.map((m) =>
    m.tokenIds !== undefined
      ? { role: m.role, content: m.content, tokenIds: [...m.tokenIds] }
      : { role: m.role, content: m.content },
  );
}

/** A JSON number of a reply (the worker sends NaN and infinities as null). */
function num(x: unknown): number {
  return typeof x === "number" ? x : Number.NaN;
}

function scoredCount(batch: Batch): number {
  let n = 0;
  for (const m of batch.lossMask) for (let i = 0; i < m.length; i++) n += m[i];
  return n;
}

export class TorchLearner implements TrainLearner {
  readonly backend = "torch" as const;
  step = 0;
  /** The worker's running prompt-token counts, as its last `generate` reply gave them. */
  private promptCounts: PromptTokenCounts = { reused: 0, prefilled: 0 };

  private constructor(
    readonly worker: TorchWorker,
    readonly info: TorchModelInfo,
    readonly options: TorchLearnerOptions,
  ) {}

  /** Starts the worker and loads the model. */
  static async open(opts: TorchLearnerOptions): Promise<TorchLearner> {
    const t = opts.torch;
    if (!t.path && !opts.modelPath)
      throw new UsageError(
        "model.torch.path is required with model.backend: torch (a local Hugging Face model directory)",
      );
    const worker = await TorchWorker.start({
      python: t.python,
      processes: t.processes,
      requestTimeoutMs: t.timeoutSeconds * 1000,
      ...opts.worker,
    });
    try {
      const model = resolve(opts.modelPath ?? t.path!);
      const reply = await worker.request("load", {
        model,
        dtype: t.dtype,
        device: t.device,
        lora: t.lora === null ? null : { ...t.lora, alpha: t.lora.alpha ?? 2 * t.lora.rank },
        gradientCheckpointing: t.gradientCheckpointing,
        prefixCacheMB: t.prefixCacheMB,
        decoder: t.decoder,
        cudaGraphs: t.cudaGraphs,
        optimizer: {
          lr: opts.optimizer.lr,
          weightDecay: opts.optimizer.weightDecay,
          betas: opts.optimizer.betas ?? [0.9, 0.999],
          eps: opts.optimizer.eps ?? 1e-8,
          gradClip: opts.optimizer.gradClip,
        },
        seed: opts.seed,
        reference: opts.reference,
        ...(opts.maxAdapters !== undefined ? { maxAdapters: opts.maxAdapters } : {}),
      });
      const h = reply.header;
      const info: TorchModelInfo = {
        architecture: String(h.architecture),
        vocabSize: Number(h.vocabSize),
        contextLength: Number(h.contextLength),
        parameters: Number(h.parameters),
        trainableParameters: Number(h.trainableParameters),
        eosTokenIds: Array.isArray(h.eosTokenIds) ? (h.eosTokenIds as number[]) : [],
        precision: typeof h.precision === "string" ? h.precision : String(t.dtype),
      };
      return new TorchLearner(worker, info, opts);
    } catch (err) {
      await worker.close();
      throw err;
    }
  }

  get contextLength(): number {
    return this.info.contextLength;
  }

  get hasReference(): boolean {
    return this.options.reference;
  }

  /** Renders transcripts with the model's chat template (append-only; sampled ids verbatim). */
  async renderMany(
    transcripts: readonly (readonly ChatMessage[])[],
    addGenerationPrompt: boolean,
  ): Promise<RenderedTranscript[]> {
    if (transcripts.length === 0) return [];
    const reply = await this.worker.request("render", {
      conversations: transcripts.map((m) => ({ messages: messagesJson(m), addGenerationPrompt })),
    });
    const ids = reply.arrays.ids as Int32Array;
    const lengths = reply.arrays.lengths as Int32Array;
    const spans = reply.header.assistantSpans as [number, number][][];
    if (!ids || !lengths || lengths.length !== transcripts.length || !Array.isArray(spans))
      throw new Error(
        `render: the worker answered ${lengths?.length ?? 0} transcripts for ${transcripts.length}`,
      );
    const out: RenderedTranscript[] = [];
    let o = 0;
    for (let i = 0; i < lengths.length; i++) {
      out.push({
        ids: Array.from(ids.subarray(o, o + lengths[i])),
        assistantSpans: (spans[i] ?? []).map(([start, end]) => ({ start, end })),
      });
      o += lengths[i];
    }
    return out;
  }

  render(transcripts: readonly (readonly ChatMessage[])[]): Promise<RenderedTranscript[]> {
    return this.renderMany(transcripts, false);
  }

  async logprobs(
    batch: Batch,
    model: "policy" | "reference" = "policy",
    opts?: { microBatchTokens?: number },
  ): Promise<ScoredTokens> {
    if (model === "reference" && !this.options.reference)
      throw new Error("this learner was loaded without a reference model");
    const n = scoredCount(batch);
    if (n === 0) return { logp: new Float64Array(0), entropy: new Float64Array(0) };
    const fields =
      opts?.microBatchTokens === undefined ? { model } : { model, microBatchTokens: opts.microBatchTokens };
    const reply = await this.worker.request("logprobs", fields, batchArrays(batch));
    const logp = reply.arrays.logp as Float64Array;
    const entropy = reply.arrays.entropy as Float64Array;
    if (!logp || logp.length !== n || !entropy || entropy.length !== n)
      throw new Error(`logprobs: the worker answered ${logp?.length ?? 0} values for ${n} scored tokens`);
    return { logp, entropy };
  }

  async update(
    batch: Batch,
    inputs: PpoTokenInputs,
    loss: PpoLossOptions,
    opts: { microBatchTokens: number },
  ): Promise<LearnerUpdateResult> {
    const n = scoredCount(batch);
    if (inputs.oldLogp.length !== n || inputs.advantages.length !== n)
      throw new Error(
        `update: ${n} scored tokens but ${inputs.oldLogp.length} old log-probs and ${inputs.advantages.length} advantages`,
      );
    if (loss.klCoef !== 0 && (!inputs.refLogp || inputs.refLogp.length !== n))
      throw new Error("update: klCoef is set but reference log-probs are missing or misaligned");
    const arrays = {
      ...batchArrays(batch),
      old_logp: Float64Array.from(inputs.oldLogp),
      advantages: Float64Array.from(inputs.advantages),
      ...(inputs.refLogp ? { ref_logp: Float64Array.from(inputs.refLogp) } : {}),
    };
    const reply = await this.worker.request(
      "update",
      {
        loss: {
          clipLow: loss.clipLow,
          clipHigh: loss.clipHigh,
          dualClip: loss.dualClip,
          entropyCoef: loss.entropyCoef,
          klCoef: loss.klCoef,
          klClamp: loss.klClamp,
        },
        microBatchTokens: opts.microBatchTokens,
        lr: this.options.optimizer.lr,
      },
      arrays,
    );
    const h = reply.header;
    this.step = num(h.step);
    const metrics: Record<string, number> = {};
    for (const [k, v] of Object.entries((h.metrics ?? {}) as Record<string, unknown>)) metrics[k] = num(v);
    if (typeof h.peakRssBytes === "number") metrics.worker_peak_rss_mb = h.peakRssBytes / 2 ** 20;
    return {
      loss: num(h.loss),
      metrics,
      gradNorm: num(h.gradNorm),
      lr: this.options.optimizer.lr,
      clipped: h.clipped === true,
      skipped: h.skipped === true,
      step: this.step,
    };
  }

  /** The worker's own `save` (weights or adapter, tokenizer, optimizer, RNG), atomic. */
  async saveWeights(path: string): Promise<"hf" | "peft-adapter"> {
    const reply = await this.worker.request("save", { path: resolve(path) });
    return reply.header.format === "peft-adapter" ? "peft-adapter" : "hf";
  }

  /**
   * The LoRA adapter alone (no optimizer, no RNG) into `path`, atomically: what a league snapshot
   * keeps, sampled later with `generate`'s `adapter`. Refused for full fine-tuning.
   */
  async saveAdapter(path: string): Promise<{ path: string; bytes: number; ms: number }> {
    const reply = await this.worker.request("save_adapter", { path: resolve(path) });
    const h = reply.header;
    return { path: String(h.path), bytes: num(h.bytes), ms: num(h.ms) };
  }

  /**
   * The policy's weights as one safetensors file in `path` (replaced atomically) for a vLLM server
   * to reload: with LoRA the adapter merged in, in `dtype` (float32, bfloat16, float16, or auto:
   * the model config's). The worker's own model is unchanged. One worker process only.
   */
  async pushWeights(
    path: string,
    dtype: string,
  ): Promise<{ path: string; merged: boolean; bytes: number; ms: number }> {
    const reply = await this.worker.request("push_weights", { path: resolve(path), dtype });
    const h = reply.header;
    return { path: String(h.path), merged: h.merged === true, bytes: num(h.bytes), ms: num(h.ms) };
  }

  async save(dir: string, run: RunStateInput): Promise<void> {
    await writeDirAtomic(dir, async (tmp) => {
      const saved = await this.saveWeights(join(tmp, TORCH_CHECKPOINT_FILES.learner));
      const info = this.checkpointInfo(saved);
      return {
        [TORCH_CHECKPOINT_FILES.torch]: `${JSON.stringify(info, null, 2)}\n`,
        [TORCH_CHECKPOINT_FILES.trainingJson]: `${JSON.stringify({ ...(run.json as object), learnerStep: this.step }, null, 2)}\n`,
        [TORCH_CHECKPOINT_FILES.meta]: run.meta,
      };
    });
  }

  /** What `torch.json` says about weights this learner saved in the `saved` format. */
  checkpointInfo(saved: TorchCheckpointInfo["saved"]): TorchCheckpointInfo {
    return {
      format: "mage-torch-checkpoint",
      saved,
      basePath: resolve(this.options.torch.path ?? this.options.modelPath ?? ""),
      torch: this.options.torch,
    };
  }

  /** Loads what the worker's `save` wrote (weights or adapter, optimizer, RNG). */
  async restoreWeights(path: string): Promise<void> {
    const reply = await this.worker.request("restore", { path: resolve(path) });
    this.step = Number(reply.header.step);
  }

  async restore(dir: string): Promise<unknown> {
    const learnerDir = join(dir, TORCH_CHECKPOINT_FILES.learner);
    if (!existsSync(learnerDir))
      throw new UsageError(
        `checkpoint ${dir} is not a torch checkpoint (no ${TORCH_CHECKPOINT_FILES.learner}/)`,
      );
    await this.restoreWeights(learnerDir);
    return JSON.parse(await readFile(join(dir, TORCH_CHECKPOINT_FILES.trainingJson), "utf8"));
  }

  /**
   * One supervised step (the worker's `sft`): Σ w·(−log p) / Σ w over the batch's scored tokens
   * (`weights`: one per scored token, default 1), micro-batched, clipped, one AdamW step at `lr`.
   */
  async sft(
    batch: Batch,
    opts: {
      lr: number;
      microBatchTokens: number;
      weights?: Float32Array;
      /** α and the (scored-token index, token id) pairs of the unlikelihood term. */
      unlikelihood?: number;
      unlikely?: { index: Int32Array; token: Int32Array };
    },
  ): Promise<TorchSftResult> {
    const n = scoredCount(batch);
    if (opts.weights && opts.weights.length !== n)
      throw new Error(`sft: ${n} scored tokens but ${opts.weights.length} weights`);
    const arrays = {
      ...batchArrays(batch),
      ...(opts.weights ? { weights: opts.weights } : {}),
      ...(opts.unlikely ? { unlikely_index: opts.unlikely.index, unlikely_token: opts.unlikely.token } : {}),
    };
    const reply = await this.worker.request(
      "sft",
      {
        lr: opts.lr,
        microBatchTokens: opts.microBatchTokens,
        ...(opts.unlikelihood !== undefined ? { unlikelihood: opts.unlikelihood } : {}),
      },
      arrays,
    );
    const h = reply.header;
    this.step = num(h.step);
    return {
      loss: num(h.loss),
      unlikelihood: num(h.unlikelihood),
      unlikelyTokens: num(h.unlikelyTokens),
      unlikelyMass: num(h.unlikelyMass),
      gradNorm: num(h.gradNorm),
      clipped: h.clipped === true,
      skipped: h.skipped === true,
      tokens: num(h.tokens),
      step: this.step,
      ms: num(h.ms),
    };
  }

  /**
   * Writes the current model as a plain Hugging Face directory (`model.torch.path` loads it):
   * with LoRA the adapter merged into a float32 copy of the base; atomic. The worker's own model
   * is unchanged.
   */
  async exportHf(path: string): Promise<{ path: string; merged: boolean }> {
    const reply = await this.worker.request("export", { path: resolve(path) });
    return { path: String(reply.header.path), merged: reply.header.merged === true };
  }

  /** Prompt tokens the worker's `generate` reused from its prefix store and prefilled, so far. */
  promptTokens(): PromptTokenCounts {
    return { ...this.promptCounts };
  }

  private notePromptTokens(prefix: unknown): void {
    if (typeof prefix !== "object" || prefix === null) return;
    const p = prefix as { reusedTokens?: unknown; prefilledTokens?: unknown };
    if (typeof p.reusedTokens === "number" && typeof p.prefilledTokens === "number")
      this.promptCounts = { reused: p.reusedTokens, prefilled: p.prefilledTokens };
  }

  /**
   * Samples continuations of prompt ids (see TorchPolicy); with `adapter` (a directory holding a
   * saved LoRA adapter of this model), with that adapter's weights in place of the policy's.
   */
  async generate(
    prompts: readonly (readonly number[])[],
    requests: readonly {
      maxNewTokens: number;
      temperature: number;
      topP: number;
      topK: number;
      seed: number;
      stop: readonly string[];
    }[],
    adapter?: string,
  ): Promise<{ tokens: number[]; logprobs: number[]; text: string; finish: "stop" | "length" }[]> {
    if (prompts.length === 0) return [];
    const lengths = Int32Array.from(prompts.map((p) => p.length));
    const ids = new Int32Array(lengths.reduce((s, x) => s + x, 0));
    let o = 0;
    for (const p of prompts) {
      ids.set(p, o);
      o += p.length;
    }
    const fields = adapter === undefined ? { requests } : { requests, adapter: resolve(adapter) };
    const reply = await this.worker.request("generate", fields, { ids, lengths });
    this.notePromptTokens(reply.header.prefix);
    const tokens = reply.arrays.tokens as Int32Array;
    const tl = reply.arrays.token_lengths as Int32Array;
    const lp = reply.arrays.logprobs as Float64Array;
    const texts = reply.header.texts as string[];
    const finish = reply.header.finish as string[];
    if (!tl || tl.length !== prompts.length || !Array.isArray(texts) || !Array.isArray(finish))
      throw new Error(
        `generate: the worker answered ${tl?.length ?? 0} generations for ${prompts.length} prompts`,
      );
    const out = [];
    let t = 0;
    for (let i = 0; i < prompts.length; i++) {
      out.push({
        tokens: Array.from(tokens.subarray(t, t + tl[i])),
        logprobs: Array.from(lp.subarray(t, t + tl[i])),
        text: texts[i],
        finish: finish[i] === "length" ? ("length" as const) : ("stop" as const),
      });
      t += tl[i];
    }
    return out;
  }

  /** Empties the worker's prefix store (see `TrainLearner.forgetCaches`). */
  async forgetCaches(): Promise<void> {
    await this.worker.request("forget");
  }

  takeTimings(): Record<string, number> {
    return this.worker.takeTimings();
  }

  async close(): Promise<void> {
    await this.worker.close();
  }
}
