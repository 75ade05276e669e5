/**
 * Supervised fine-tuning on whole trial transcripts: each corpus trial is one sequence (the
 * compact chat is append-only), and the loss −mean(log π) is taken over the assistant tokens
 * (each response's tokens and its `<|end|>`), or with `contextLoss` over every token. Either
 * way deliberately malformed answers stay unscored unless `trainOnMalformed`: the model reads
 * them and the task's "Invalid: …" feedback in context, but is not taught to write them.
 * Scoring the context as well teaches the model to predict each board from the previous one
 * and the moves, which is what builds the attention that reads the current board.
 *
 * Batches hold whole sequences up to `batchTokens` tokens, drawn from a per-epoch shuffle of the
 * corpus (keyed by the run's Rng). AdamW with linear warmup and cosine decay.
 */
import type { Rng } from "../../core/rng.js";
import { renderChat } from "../../model/chat-template.js";
import type { Learner, UpdateMetrics } from "../../model/learner.js";
import type { LossFn } from "../../model/loss-types.js";
import type { Tokenizer } from "../../model/tokenizer.js";
import type { Batch } from "../../model/transformer.js";
import type { CorpusTrial, ResponseKind } from "./corpus.js";

/**
 * One training sequence: token ids and the mask of scored positions. A mask value is the token's
 * integer weight in the loss (0: not scored); the model only tells zero from nonzero.
 */
export interface SftExample {
  ids: Int32Array;
  mask: Uint8Array;
  /** Scored tokens in `mask`. */
  scored: number;
  /** Token index → token ids that must not be written there (`unlikely.ts`; torch warm start only). */
  unlikely?: ReadonlyMap<number, readonly number[]>;
}

/** A batch of whole examples, with each sequence's unlikely tokens. */
export interface SftBatch extends Batch {
  unlikely: (ReadonlyMap<number, readonly number[]> | undefined)[];
}

export interface EncodeOptions {
  /** Score deliberately malformed answers too (default false). */
  trainOnMalformed?: boolean;
  /** Score the system and user tokens too, not only the answers (default false). */
  contextLoss?: boolean;
  /** Longer transcripts are cut to this many tokens (the model's context). */
  contextLength: number;
  /** Loss weight of the tokens of well-formed play answers, an integer 1–255 (default 1). */
  actionWeight?: number;
  /** Loss weight of the tokens of reflections (`<remark>` answers), an integer 1–255 (default 1). */
  remarkWeight?: number;
}

/** Renders a corpus trial with the chat template and marks its assistant tokens for the loss. */
export function encodeTrial(tok: Tokenizer, trial: CorpusTrial, opts: EncodeOptions): SftExample {
  const rendered = renderChat(tok, trial.messages);
  return weightedExample(rendered.ids, rendered.assistantSpans, trial.kinds, opts);
}

/**
 * A rendered trial (`spans`: its assistant messages' tokens, one per entry of `kinds`) as a
 * training sequence, cut to the context, its mask holding each scored token's weight.
 */
export function weightedExample(
  renderedIds: readonly number[],
  spans: readonly { start: number; end: number }[],
  kinds: readonly ResponseKind[],
  opts: EncodeOptions,
): SftExample {
  const n = Math.min(renderedIds.length, opts.contextLength);
  const ids = Int32Array.from(renderedIds.slice(0, n));
  const mask = new Uint8Array(n);
  if (opts.contextLoss) mask.fill(1);
  const actionWeight = opts.actionWeight ?? 1;
  const remarkWeight = opts.remarkWeight ?? 1;
  for (const [name, w] of [
    ["actionWeight", actionWeight],
    ["remarkWeight", remarkWeight],
  ] as const)
    if (!(Number.isInteger(w) && w >= 1 && w <= 255))
      throw new RangeError(`${name} must be an integer in [1, 255], got ${w}`);
  spans.forEach((span, i) => {
    const kind = kinds[i];
    const weight =
      kind === "detour"
        ? 0
        : kind === "malformed"
          ? opts.trainOnMalformed
            ? 1
            : 0
          : kind === "action"
            ? actionWeight
            : remarkWeight;
    mask.fill(weight, Math.min(span.start, n), Math.min(span.end, n));
  });
  mask[0] = 0;
  let scored = 0;
  for (let i = 0; i < n; i++) if (mask[i] > 0) scored++;
  return { ids, mask, scored };
}

/** Total loss weight of `batch`: the sum of its mask values. */
export function batchWeight(batch: Batch): number {
  let w = 0;
  for (const m of batch.lossMask) for (let i = 0; i < m.length; i++) w += m[i];
  return w;
}

/**
 * Weighted cross-entropy of `part` (the batch or a shard of it) when the whole batch weighs
 * `totalWeight`: Σ w·(−log π) / totalWeight, w being each scored token's mask value, so the
 * shards' losses and gradients add up to those of the whole batch.
 */
export function sftLossFor(part: Batch, totalWeight: number = batchWeight(part)): LossFn {
  const weights: number[] = [];
  for (const m of part.lossMask) for (let t = 1; t < m.length; t++) if (m[t] > 0) weights.push(m[t]);
  return (stats) => {
    const n = stats.logp.length;
    if (n !== weights.length)
      throw new Error(`SFT loss: ${n} scored tokens, but the masks weigh ${weights.length}`);
    let sum = 0;
    const dLogp = new Float64Array(n);
    if (totalWeight > 0)
      for (let i = 0; i < n; i++) {
        sum += weights[i] * stats.logp[i];
        dLogp[i] = -weights[i] / totalWeight;
      }
    return {
      loss: totalWeight > 0 ? -sum / totalWeight : 0,
      dLogp,
      dEntropy: new Float64Array(n),
      metrics: { scored: n },
    };
  };
}

/**
 * An endless stream of batches: sequences in a fresh shuffle every epoch, packed greedily up to
 * `batchTokens` tokens (a batch always holds at least one sequence).
 */
export class BatchStream {
  private order: number[] = [];
  private pos = 0;
  private epoch = 0;

  constructor(
    private readonly examples: readonly SftExample[],
    private readonly batchTokens: number,
    private readonly rng: Rng,
  ) {
    const usable = examples.filter((e) => e.scored > 0).length;
    if (usable === 0) throw new Error("SFT corpus has no scored tokens");
    if (!(Number.isInteger(batchTokens) && batchTokens > 0))
      throw new RangeError(`batchTokens must be a positive integer, got ${batchTokens}`);
  }

  /** Epochs started so far. */
  get epochs(): number {
    return this.epoch;
  }

  private nextIndex(): number {
    if (this.pos >= this.order.length) {
      this.order = this.rng
        .derive("epoch", this.epoch)
        .shuffle(this.examples.map((_, i) => i).filter((i) => this.examples[i].scored > 0));
      this.pos = 0;
      this.epoch++;
    }
    return this.order[this.pos++];
  }

  next(): SftBatch {
    const sequences: Int32Array[] = [];
    const lossMask: Uint8Array[] = [];
    const unlikely: SftBatch["unlikely"] = [];
    let tokens = 0;
    while (sequences.length === 0 || tokens < this.batchTokens) {
      const i = this.nextIndex();
      const e = this.examples[i];
      if (sequences.length > 0 && tokens + e.ids.length > this.batchTokens) {
        this.pos--; // keep it for the next batch
        break;
      }
      sequences.push(e.ids);
      lossMask.push(e.mask);
      unlikely.push(e.unlikely);
      tokens += e.ids.length;
    }
    return { sequences, lossMask, unlikely };
  }
}

export interface SftOptions {
  steps: number;
  batchTokens: number;
  rng: Rng;
  /** Called after every optimizer step. */
  onStep?: (m: UpdateMetrics, step: number) => void;
}

export interface SftResult {
  steps: number;
  /** Loss of every step, in order. */
  losses: number[];
  epochs: number;
  tokens: number;
  scoredTokens: number;
  ms: number;
}

/** What `runSft` needs of `SftShardPool` (sft-shards.ts): a batch's update computed in shards. */
export interface ShardedUpdater {
  update(learner: Learner, batch: Batch): Promise<UpdateMetrics>;
}

/**
 * Runs `steps` SFT updates of `learner` on `examples`; with `pool`, each batch's gradient is
 * computed in shards on its worker threads.
 */
export async function runSft(
  learner: Learner,
  examples: readonly SftExample[],
  opts: SftOptions & { pool?: ShardedUpdater },
): Promise<SftResult> {
  const stream = new BatchStream(examples, opts.batchTokens, opts.rng.derive("batches"));
  const losses: number[] = [];
  let tokens = 0;
  let scored = 0;
  const t0 = performance.now();
  for (let s = 0; s < opts.steps; s++) {
    const batch = stream.next();
    const m = opts.pool ? await opts.pool.update(learner, batch) : learner.update(batch, sftLossFor(batch));
    losses.push(m.loss);
    tokens += m.tokens;
    scored += m.scored;
    opts.onStep?.(m, s + 1);
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

/** What a report keeps of an SFT run's losses. */
export interface SftSummary {
  steps: number;
  epochs: number;
  tokens: number;
  firstLoss: number;
  lastLoss: number;
  /** Mean loss of the first and the last tenth of the steps. */
  earlyMeanLoss: number;
  lateMeanLoss: number;
  /** Loss every few steps (at most 200 points): [step, loss]. */
  curve: [number, number][];
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

export function summarizeSft(sft: SftResult): SftSummary {
  const losses = sft.losses;
  const tenth = Math.max(1, Math.floor(losses.length / 10));
  const every = Math.max(1, Math.ceil(losses.length / 200));
  const curve: [number, number][] = [];
  losses.forEach((l, i) => {
    if (i % every === 0 || i === losses.length - 1) curve.push([i + 1, l]);
  });
  return {
    steps: sft.steps,
    epochs: sft.epochs,
    tokens: sft.tokens,
    firstLoss: losses[0] ?? Number.NaN,
    lastLoss: losses[losses.length - 1] ?? Number.NaN,
    earlyMeanLoss: mean(losses.slice(0, tenth)),
    lateMeanLoss: mean(losses.slice(-tenth)),
    curve,
  };
}
