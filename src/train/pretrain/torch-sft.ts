/**
 * Supervised fine-tuning of a Hugging Face model through the PyTorch worker, on the same corpus
 * as the embedded warm start: each trial is rendered with the model's own chat template by the
 * worker (`render`; its assistant spans give the loss mask), only the answers are scored (a
 * pretrained LLM needs no context loss), play answers weigh `actionWeight`, reflections
 * `remarkWeight`, malformed ones 0.
 * Batches come from the embedded path's `BatchStream` (whole trials packed up to `batchTokens`,
 * a fresh shuffle per epoch from the run's Rng); the learning rate (linear warmup, cosine decay)
 * is computed here and sent with every `sft` step.
 */
import type { Rng } from "../../core/rng.js";
import type { TorchLearner, TorchSftResult } from "../../learner/torch/learner.js";
import { lrAt } from "../../model/schedule.js";
import type { Batch } from "../../model/transformer.js";
import type { CorpusTrial, PretrainGame } from "./corpus.js";
import {
  BatchStream,
  type EncodeOptions,
  type SftBatch,
  type SftExample,
  type SftResult,
  weightedExample,
} from "./sft.js";
import { type AnswerTokenizer, trialUnlikelyTokens } from "./unlikely.js";

/** Trials per `render` request. */
const RENDER_CHUNK = 64;

/**
 * The corpus rendered by the worker with the model's chat template, answers weighted; with
 * `unlikely`, each example also carries the tokens its illegal answers would start with; with
 * `remarkTokens`, the token count of every reflection's span (end of turn included) is pushed there.
 */
export async function encodeWithTemplate(
  learner: TorchLearner,
  trials: readonly CorpusTrial[],
  opts: Omit<EncodeOptions, "contextLoss"> & {
    unlikely?: { game: PretrainGame | "remote"; tokenize: AnswerTokenizer };
    remarkTokens?: number[];
  },
): Promise<SftExample[]> {
  const out: SftExample[] = [];
  for (let i = 0; i < trials.length; i += RENDER_CHUNK) {
    const chunk = trials.slice(i, i + RENDER_CHUNK);
    const rendered = await learner.render(chunk.map((t) => t.messages));
    for (const [j, r] of rendered.entries()) {
      if (r.assistantSpans.length !== chunk[j].kinds.length)
        throw new Error(
          `render: trial ${i + j} has ${chunk[j].kinds.length} answers but the template rendered ${r.assistantSpans.length}`,
        );
      const example = weightedExample(r.ids, r.assistantSpans, chunk[j].kinds, {
        ...opts,
        contextLoss: false,
      });
      r.assistantSpans.forEach((span, k) => {
        if (chunk[j].kinds[k] === "reflection") opts.remarkTokens?.push(span.end - span.start);
      });
      if (opts.unlikely) {
        const { game, tokenize } = opts.unlikely;
        const at = await trialUnlikelyTokens(game, chunk[j], r.ids, r.assistantSpans, tokenize);
        const scored = new Map([...at].filter(([t]) => t < example.mask.length && example.mask[t] > 0));
        if (scored.size > 0) example.unlikely = scored;
      }
      out.push(example);
    }
  }
  return out;
}

/** Answer texts as the template writes an assistant message's body (its span, end of turn included). */
export function templateTokenizer(learner: TorchLearner): (texts: string[]) => Promise<number[][]> {
  return async (texts) => {
    // After a user turn, so that the span is the body alone (a first message's span would take
    // in the template's assistant header).
    const rendered = await learner.render(
      texts.map((content) => [
        { role: "user" as const, content: "?" },
        { role: "assistant" as const, content },
      ]),
    );
    return rendered.map((r) => {
      const span = r.assistantSpans[0];
      if (!span) throw new Error("render: an assistant message rendered without its span");
      return r.ids.slice(span.start, span.end);
    });
  };
}

/**
 * A batch whose masks hold weights as the worker takes it: 0/1 masks, the weight of each scored
 * token (sequence order, then position order) as a separate array, and the unlikely tokens as
 * (index of the scored token, token id) pairs.
 */
export function splitWeights(batch: Batch | SftBatch): {
  batch: Batch;
  weights: Float32Array;
  unlikely: { index: Int32Array; token: Int32Array };
} {
  const weights: number[] = [];
  const index: number[] = [];
  const token: number[] = [];
  const lossMask = batch.lossMask.map((m, s) => {
    const binary = new Uint8Array(m.length);
    const unlikely = "unlikely" in batch ? batch.unlikely[s] : undefined;
    for (let t = 0; t < m.length; t++) {
      if (m[t] === 0) continue;
      binary[t] = 1;
      for (const id of unlikely?.get(t) ?? []) {
        index.push(weights.length);
        token.push(id);
      }
      weights.push(m[t]);
    }
    return binary;
  });
  return {
    batch: { sequences: batch.sequences, lossMask },
    weights: Float32Array.from(weights),
    unlikely: { index: Int32Array.from(index), token: Int32Array.from(token) },
  };
}

export interface TorchSftOptions {
  steps: number;
  batchTokens: number;
  microBatchTokens: number;
  /** Peak learning rate: linear warmup over `warmupSteps`, cosine to `lr · minLrRatio` at the last step. */
  lr: number;
  warmupSteps: number;
  minLrRatio: number;
  /** Weight α of the unlikelihood term on the examples' unlikely tokens (0: plain SFT). */
  unlikelihood?: number;
  rng: Rng;
  onStep?: (m: TorchSftResult & { lr: number; batchTokens: number }, step: number) => void;
  /** Steps already done by an interrupted run (their batches are drawn again, not trained on). */
  done?: SftSoFar;
  /** Called after a step once `everyMs` have passed since the last call (or the start), not after the last step. */
  checkpoint?: { everyMs: number; save: (soFar: SftSoFar) => Promise<void> };
}

/** The record of the first `steps` steps of a run. */
export type SftSoFar = Omit<SftResult, "epochs">;

/** The learning rate of the 0-based optimizer step `step`. */
export function sftLearningRate(
  o: Pick<TorchSftOptions, "steps" | "lr" | "warmupSteps" | "minLrRatio">,
  step: number,
): number {
  if (o.steps <= o.warmupSteps) return lrAt({ kind: "constant", lr: o.lr, warmupSteps: o.warmupSteps }, step);
  return lrAt(
    { kind: "cosine", lr: o.lr, warmupSteps: o.warmupSteps, totalSteps: o.steps, minLr: o.lr * o.minLrRatio },
    step,
  );
}

/** Runs `steps` SFT steps of the worker's model on `examples` (the steps after `done`'s). */
export async function runTorchSft(
  learner: TorchLearner,
  examples: readonly SftExample[],
  opts: TorchSftOptions,
): Promise<SftResult> {
  const stream = new BatchStream(examples, opts.batchTokens, opts.rng.derive("batches"));
  const start = opts.done?.steps ?? 0;
  if (start > opts.steps)
    throw new Error(`SFT checkpoint after step ${start}, but the run has ${opts.steps} steps`);
  for (let s = 0; s < start; s++) stream.next();
  const soFar: SftSoFar = {
    steps: start,
    losses: [...(opts.done?.losses ?? [])],
    tokens: opts.done?.tokens ?? 0,
    scoredTokens: opts.done?.scoredTokens ?? 0,
    ms: opts.done?.ms ?? 0,
  };
  const t0 = performance.now() - soFar.ms;
  let lastSave = performance.now();
  for (let s = start; s < opts.steps; s++) {
    const { batch, weights, unlikely } = splitWeights(stream.next());
    const lr = sftLearningRate(opts, s);
    const alpha = opts.unlikelihood ?? 0;
    const m = await learner.sft(batch, {
      lr,
      microBatchTokens: opts.microBatchTokens,
      weights,
      ...(alpha > 0 && unlikely.index.length > 0 ? { unlikelihood: alpha, unlikely } : {}),
    });
    const batchTokens = batch.sequences.reduce((a, q) => a + q.length, 0);
    soFar.losses.push(m.loss);
    soFar.tokens += batchTokens;
    soFar.scoredTokens += m.tokens;
    soFar.steps = s + 1;
    soFar.ms = performance.now() - t0;
    opts.onStep?.({ ...m, lr, batchTokens }, s + 1);
    if (opts.checkpoint && s + 1 < opts.steps && performance.now() - lastSave >= opts.checkpoint.everyMs) {
      await opts.checkpoint.save({ ...soFar, losses: [...soFar.losses] });
      lastSave = performance.now();
    }
  }
  return { ...soFar, steps: opts.steps, epochs: stream.epochs };
}
