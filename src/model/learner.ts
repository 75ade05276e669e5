import { UsageError } from "../core/errors.js";
import type { Rng } from "../core/rng.js";
import { AdamW, type AdamWConfig } from "./adamw.js";
import type { ModelConfig } from "./config.js";
import { jsKernels } from "./kernels/js.js";
import type { Kernels } from "./kernels/types.js";
import type { LossFn, LossResult, TokenStats } from "./loss-types.js";
import { type InitOptions, initParams, type ModelParams, zerosLike } from "./params.js";
import { type LrSchedule, lrAt, validateSchedule } from "./schedule.js";
import { type Batch, backward, forwardTrain, scoreBatch } from "./transformer.js";

export interface LearnerOptions {
  /** GEMM implementation (default: pure TypeScript). */
  kernels?: Kernels;
  adamw?: Partial<AdamWConfig>;
  /** Default: constant 3e-4. */
  schedule?: LrSchedule;
  /** Global L2 gradient-norm clip; null, 0 or Infinity disables (default 1). */
  maxGradNorm?: number | null;
}

export interface UpdateOptions {
  /**
   * Split the batch (by whole sequences) into micro-batches of at most this many tokens to
   * bound memory. The loss function is still called ONCE over the whole batch: a first
   * no-grad pass scores every micro-batch, then each is run again with gradients and
   * backpropagated with its slice of dLogp/dEntropy (one extra forward per micro-batch).
   */
  microBatchTokens?: number;
}

export interface AccumulateResult {
  loss: number;
  metrics: Record<string, number>;
  /** Scored tokens and all tokens in the batch. */
  scored: number;
  tokens: number;
}

export interface StepMetrics {
  /** Optimizer steps taken so far (after this one). */
  step: number;
  lr: number;
  /** Global gradient L2 norm before clipping. */
  gradNorm: number;
  clipped: boolean;
  /** True when the gradient was not finite: parameters and moments were left untouched. */
  skipped: boolean;
}

export interface UpdateMetrics extends StepMetrics {
  loss: number;
  /** The loss function's own metrics. */
  metrics: Record<string, number>;
  scored: number;
  tokens: number;
  /** Wall time of the whole update. */
  ms: number;
}

/** JSON part of the optimizer state. */
export interface OptimizerMeta {
  format: "mage-adamw-v1";
  /** Optimizer steps taken (the schedule position). */
  step: number;
  /** AdamW bias-correction counter (equals `step` unless steps were skipped). */
  adamT: number;
  adamw: AdamWConfig;
  schedule: LrSchedule;
  maxGradNorm: number | null;
}

/**
 * Everything needed to continue training bit-identically: the AdamW moments as named
 * float32 tensors (`adam.m.<param name>`, `adam.v.<param name>`, one per parameter
 * tensor, same shape) and the JSON metadata. Gradients being accumulated are not included.
 */
export interface OptimizerState {
  tensors: Record<string, Float32Array>;
  meta: OptimizerMeta;
}

function checkLossResult(res: LossResult, n: number): void {
  if (res.dLogp.length !== n || res.dEntropy.length !== n)
    throw new Error(
      `loss function returned ${res.dLogp.length} dLogp / ${res.dEntropy.length} dEntropy entries for ${n} scored tokens`,
    );
}

function sumSquares(a: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * a[i];
  return s;
}

/** Groups of consecutive sequences with at most `budget` tokens each (a longer sequence stands alone). */
function splitBatch(batch: Batch, budget: number): Batch[] {
  const out: Batch[] = [];
  let cur: Batch = { sequences: [], lossMask: [] };
  let tokens = 0;
  batch.sequences.forEach((seq, i) => {
    if (cur.sequences.length > 0 && tokens + seq.length > budget) {
      out.push(cur);
      cur = { sequences: [], lossMask: [] };
      tokens = 0;
    }
    cur.sequences.push(seq);
    cur.lossMask.push(batch.lossMask[i]);
    tokens += seq.length;
  });
  if (cur.sequences.length > 0) out.push(cur);
  return out;
}

/**
 * The training side of the embedded model: parameters, gradients, AdamW, LR schedule.
 *
 *   const learner = Learner.create(config, rng, { schedule: { kind: "constant", lr: 1e-3 } });
 *   const m = learner.update(batch, lossFn);            // forward, loss, backward, clip, AdamW
 *   learner.accumulate(b1, lossFn); learner.accumulate(b2, lossFn); learner.step();  // manual accumulation
 */
export class Learner {
  readonly config: ModelConfig;
  readonly params: ModelParams;
  /** Accumulated gradients (same layout as params); zeroed after every step. */
  readonly grads: ModelParams;
  readonly kernels: Kernels;
  readonly schedule: LrSchedule;
  readonly maxGradNorm: number | null;
  private adam: AdamW;
  private steps = 0;
  private pending = 0;

  constructor(params: ModelParams, opts: LearnerOptions = {}) {
    this.params = params;
    this.config = params.config;
    this.grads = zerosLike(params);
    this.kernels = opts.kernels ?? jsKernels;
    this.schedule = validateSchedule(opts.schedule ?? { kind: "constant", lr: 3e-4 });
    const clip = opts.maxGradNorm === undefined ? 1 : opts.maxGradNorm;
    if (clip !== null && !(clip >= 0)) throw new UsageError(`maxGradNorm must be ≥ 0 or null, got ${clip}`);
    this.maxGradNorm = clip === null || clip === 0 || clip === Number.POSITIVE_INFINITY ? null : clip;
    this.adam = new AdamW(params, opts.adamw);
  }

  static create(config: ModelConfig, rng: Rng, opts: LearnerOptions & { init?: InitOptions } = {}): Learner {
    return new Learner(initParams(config, rng, opts.init), opts);
  }

  /** Optimizer steps taken so far. */
  get stepCount(): number {
    return this.steps;
  }

  /** Learning rate the next step will use. */
  get nextLr(): number {
    return lrAt(this.schedule, this.steps);
  }

  get adamwConfig(): AdamWConfig {
    return { ...this.adam.config };
  }

  /** Log-probabilities and entropies of the scored tokens (no gradient). */
  score(batch: Batch): TokenStats {
    return scoreBatch(this.params, batch, this.kernels);
  }

  /**
   * Forward, loss (called once over `batch`) and backward; ADDS `weight` × the gradient into
   * the accumulated gradients. Call `step()` to apply.
   */
  accumulate(batch: Batch, lossFn: LossFn, opts: { weight?: number } = {}): AccumulateResult {
    const fw = forwardTrain(this.params, batch, this.kernels, true);
    const res = lossFn(fw.stats);
    checkLossResult(res, fw.scored);
    const w = opts.weight ?? 1;
    const dl = w === 1 ? res.dLogp : res.dLogp.map((x) => x * w);
    const de = w === 1 ? res.dEntropy : res.dEntropy.map((x) => x * w);
    backward(fw, dl, de, this.grads);
    this.pending++;
    return { loss: res.loss, metrics: res.metrics, scored: fw.scored, tokens: fw.tokens };
  }

  /** Global L2 norm of the accumulated gradient. */
  gradNorm(): number {
    const ops = this.kernels.ops;
    return Math.sqrt(ops ? ops.sumSquares(this.grads.flat) : sumSquares(this.grads.flat));
  }

  zeroGrad(): void {
    this.grads.flat.fill(0);
    this.pending = 0;
  }

  /** Clip, apply AdamW with the scheduled learning rate, zero the gradients. */
  step(): StepMetrics {
    const gradNorm = this.gradNorm();
    const lr = lrAt(this.schedule, this.steps);
    if (!Number.isFinite(gradNorm)) {
      this.zeroGrad();
      return { step: this.steps, lr, gradNorm, clipped: false, skipped: true };
    }
    let scale = 1;
    const clipped = this.maxGradNorm !== null && gradNorm > this.maxGradNorm;
    if (clipped) scale = this.maxGradNorm! / (gradNorm + 1e-6);
    this.adam.update(this.params.flat, this.grads.flat, lr, scale, this.kernels.ops);
    this.steps++;
    this.zeroGrad();
    return { step: this.steps, lr, gradNorm, clipped, skipped: false };
  }

  /** One optimizer step on `batch`: forward, lossFn once over the batch, backward, clip, AdamW. */
  update(batch: Batch, lossFn: LossFn, opts: UpdateOptions = {}): UpdateMetrics {
    const t0 = performance.now();
    if (this.pending > 0)
      throw new Error("update() called with accumulated gradients pending; call step() first");
    const budget = opts.microBatchTokens;
    if (budget !== undefined && !(Number.isInteger(budget) && budget > 0))
      throw new UsageError(`microBatchTokens must be a positive integer, got ${budget}`);
    const total = batch.sequences.reduce((s, q) => s + q.length, 0);
    let acc: AccumulateResult;
    if (budget === undefined || total <= budget) {
      acc = this.accumulate(batch, lossFn);
    } else {
      acc = this.accumulateSplit(splitBatch(batch, budget), lossFn, total);
    }
    const st = this.step();
    return {
      ...st,
      loss: acc.loss,
      metrics: acc.metrics,
      scored: acc.scored,
      tokens: acc.tokens,
      ms: performance.now() - t0,
    };
  }

  private accumulateSplit(parts: Batch[], lossFn: LossFn, tokens: number): AccumulateResult {
    const partStats = parts.map((b) => scoreBatch(this.params, b, this.kernels));
    const N = partStats.reduce((s, p) => s + p.logp.length, 0);
    const all: TokenStats = {
      logp: new Float64Array(N),
      entropy: new Float64Array(N),
      sequence: new Int32Array(N),
      position: new Int32Array(N),
    };
    let n = 0;
    let seq0 = 0;
    partStats.forEach((p, i) => {
      all.logp.set(p.logp, n);
      all.entropy.set(p.entropy, n);
      all.position.set(p.position, n);
      for (let j = 0; j < p.sequence.length; j++) all.sequence[n + j] = p.sequence[j] + seq0;
      n += p.logp.length;
      seq0 += parts[i].sequences.length;
    });
    const res = lossFn(all);
    checkLossResult(res, N);
    n = 0;
    for (const b of parts) {
      const fw = forwardTrain(this.params, b, this.kernels, true);
      const m = fw.scored;
      backward(fw, res.dLogp.subarray(n, n + m), res.dEntropy.subarray(n, n + m), this.grads);
      n += m;
    }
    this.pending++;
    return { loss: res.loss, metrics: res.metrics, scored: N, tokens };
  }

  /** The optimizer state for a checkpoint (copies). */
  exportState(): OptimizerState {
    const tensors: Record<string, Float32Array> = {};
    this.params.specs.forEach((s, i) => {
      const a = this.params.offsets[i];
      const b = a + this.params.tensors[i].length;
      tensors[`adam.m.${s.name}`] = this.adam.m.slice(a, b);
      tensors[`adam.v.${s.name}`] = this.adam.v.slice(a, b);
    });
    return {
      tensors,
      meta: {
        format: "mage-adamw-v1",
        step: this.steps,
        adamT: this.adam.t,
        adamw: { ...this.adam.config },
        schedule: structuredClone(this.schedule),
        maxGradNorm: this.maxGradNorm,
      },
    };
  }

  /**
   * Restores moments and counters saved by `exportState` (hyper-parameters, schedule and
   * clip come from the state too). Parameters are restored separately (they are the model).
   */
  restoreState(state: OptimizerState): void {
    const { meta } = state;
    if (meta.format !== "mage-adamw-v1")
      throw new UsageError(`unknown optimizer state format "${meta.format}"; valid choices: mage-adamw-v1`);
    const adam = new AdamW(this.params, meta.adamw);
    this.params.specs.forEach((s, i) => {
      const a = this.params.offsets[i];
      const n = this.params.tensors[i].length;
      for (const [key, dst] of [
        [`adam.m.${s.name}`, adam.m],
        [`adam.v.${s.name}`, adam.v],
      ] as const) {
        const src = state.tensors[key];
        if (!src) throw new UsageError(`optimizer state is missing tensor "${key}"`);
        if (src.length !== n)
          throw new UsageError(`optimizer state tensor "${key}" has ${src.length} values, expected ${n}`);
        dst.set(src, a);
      }
    });
    adam.t = meta.adamT;
    this.adam = adam;
    (this as { schedule: LrSchedule }).schedule = validateSchedule(structuredClone(meta.schedule));
    (this as { maxGradNorm: number | null }).maxGradNorm = meta.maxGradNorm;
    this.steps = meta.step;
    this.zeroGrad();
  }
}
