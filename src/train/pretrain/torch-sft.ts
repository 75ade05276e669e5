/**
 * Supervised fine-tuning of a Hugging Face model through the PyTorch worker, on the same corpus
 * as the embedded warm start: each trial is rendered with the model's own chat template by the
 * worker (`render`; its assistant spans give the loss mask), only the answers are scored (a
 * pretrained LLM needs no context loss), play answers weigh `actionWeight`, malformed ones 0.
 * Batches come from the embedded path's `BatchStream` (whole trials packed up to `batchTokens`,
 * a fresh shuffle per epoch from the run's Rng); the learning rate (linear warmup, cosine decay)
 * is computed here and sent with every `sft` step.
 */
import type { Rng } from "../../core/rng.js";
import type { TorchLearner, TorchSftResult } from "../../learner/torch/learner.js";
import { lrAt } from "../../model/schedule.js";
import type { Batch } from "../../model/transformer.js";
import type { CorpusTrial } from "./corpus.js";
import { BatchStream, type EncodeOptions, type SftExample, type SftResult, weightedExample } from "./sft.js";

/** Trials per `render` request. */
const RENDER_CHUNK = 64;

/** The corpus rendered by the worker with the model's chat template, answers weighted. */
export async function encodeWithTemplate(
  learner: TorchLearner,
  trials: readonly CorpusTrial[],
  opts: Omit<EncodeOptions, "contextLoss">,
): Promise<SftExample[]> {
  const out: SftExample[] = [];
  for (let i = 0; i < trials.length; i += RENDER_CHUNK) {
    const chunk = trials.slice(i, i + RENDER_CHUNK);
    const rendered = await learner.render(chunk.map((t) => t.messages));
    rendered.forEach((r, j) => {
      if (r.assistantSpans.length !== chunk[j].kinds.length)
        throw new Error(
          `render: trial ${i + j} has ${chunk[j].kinds.length} answers but the template rendered ${r.assistantSpans.length}`,
        );
      out.push(weightedExample(r.ids, r.assistantSpans, chunk[j].kinds, { ...opts, contextLoss: false }));
    });
  }
  return out;
}

/**
 * A batch whose masks hold weights as the worker takes it: 0/1 masks, and the weight of each
 * scored token (sequence order, then position order) as a separate array.
 */
export function splitWeights(batch: Batch): { batch: Batch; weights: Float32Array } {
  const weights: number[] = [];
  const lossMask = batch.lossMask.map((m) => {
    const binary = new Uint8Array(m.length);
    for (let t = 0; t < m.length; t++) {
      if (m[t] === 0) continue;
      binary[t] = 1;
      weights.push(m[t]);
    }
    return binary;
  });
  return { batch: { sequences: batch.sequences, lossMask }, weights: Float32Array.from(weights) };
}

export interface TorchSftOptions {
  steps: number;
  batchTokens: number;
  microBatchTokens: number;
  /** Peak learning rate: linear warmup over `warmupSteps`, cosine to `lr · minLrRatio` at the last step. */
  lr: number;
  warmupSteps: number;
  minLrRatio: number;
  rng: Rng;
  onStep?: (m: TorchSftResult & { lr: number; batchTokens: number }, step: number) => void;
}

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

/** Runs `steps` SFT steps of the worker's model on `examples`. */
export async function runTorchSft(
  learner: TorchLearner,
  examples: readonly SftExample[],
  opts: TorchSftOptions,
): Promise<SftResult> {
  const stream = new BatchStream(examples, opts.batchTokens, opts.rng.derive("batches"));
  const losses: number[] = [];
  let tokens = 0;
  let scored = 0;
  const t0 = performance.now();
  for (let s = 0; s < opts.steps; s++) {
    const { batch, weights } = splitWeights(stream.next());
    const lr = sftLearningRate(opts, s);
    const m = await learner.sft(batch, { lr, microBatchTokens: opts.microBatchTokens, weights });
    const batchTokens = batch.sequences.reduce((a, q) => a + q.length, 0);
    losses.push(m.loss);
    tokens += batchTokens;
    scored += m.tokens;
    opts.onStep?.({ ...m, lr, batchTokens }, s + 1);
  }
  return {
    steps: opts.steps,
    losses,
    epochs: stream.epochs,
    tokens,
    scoredTokens: scored,
    ms: performance.now() - t0,
  };
}
