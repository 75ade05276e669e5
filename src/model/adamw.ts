import { UsageError } from "../core/errors.js";
import type { ParamSpec } from "./config.js";
import type { FusedOps } from "./kernels/types.js";
import type { ModelParams } from "./params.js";

/** AdamW hyper-parameters (the learning rate comes from the schedule). */
export interface AdamWConfig {
  beta1: number;
  beta2: number;
  eps: number;
  /** Decoupled weight decay (Loshchilov & Hutter), applied only to tensors where `decays`. */
  weightDecay: number;
}

export const DEFAULT_ADAMW: AdamWConfig = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 };

export function validateAdamW(c: AdamWConfig): AdamWConfig {
  for (const k of ["beta1", "beta2"] as const)
    if (!(c[k] >= 0 && c[k] < 1)) throw new UsageError(`adamw.${k} must be in [0, 1), got ${c[k]}`);
  if (!(c.eps > 0)) throw new UsageError(`adamw.eps must be > 0, got ${c.eps}`);
  if (!(c.weightDecay >= 0)) throw new UsageError(`adamw.weightDecay must be ≥ 0, got ${c.weightDecay}`);
  return c;
}

/**
 * Which tensors get weight decay: the projection matrices (attn q/k/v/output, ffn
 * gate/up/down). Norm gains and token_embd (embedding and tied output head) get none.
 */
export function decays(spec: ParamSpec): boolean {
  return spec.shape.length === 2 && spec.name !== "token_embd.weight";
}

/**
 * AdamW over the flat parameter vector, PyTorch's formulation:
 *   p ← p·(1 − lr·wd);  m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²;
 *   p ← p − (lr / (1−β₁ᵗ)) · m / (sqrt(v)/sqrt(1−β₂ᵗ) + eps)
 * Moments are float32 (one per parameter); arithmetic is float64 per element.
 */
export class AdamW {
  readonly m: Float32Array;
  readonly v: Float32Array;
  /** Number of updates applied so far (t of the bias corrections). */
  t = 0;
  readonly config: AdamWConfig;
  /** [start, end) ranges of the flat vector that decay. */
  private readonly decayRanges: [number, number][] = [];
  private readonly size: number;

  constructor(params: ModelParams, config: Partial<AdamWConfig> = {}) {
    this.config = validateAdamW({ ...DEFAULT_ADAMW, ...config });
    this.size = params.flat.length;
    this.m = new Float32Array(this.size);
    this.v = new Float32Array(this.size);
    params.specs.forEach((s, i) => {
      if (decays(s)) this.decayRanges.push([params.offsets[i], params.offsets[i] + params.tensors[i].length]);
    });
  }

  /**
   * One update of `p` with gradient `g · gradScale` at learning rate `lr`. With fused `ops` (the
   * native kernels') the same arithmetic runs there, with bit-identical results.
   */
  update(p: Float32Array, g: Float32Array, lr: number, gradScale = 1, ops?: FusedOps): void {
    if (p.length !== this.size || g.length !== this.size) throw new Error("AdamW: size mismatch");
    const { beta1: b1, beta2: b2, eps, weightDecay: wd } = this.config;
    this.t += 1;
    const bc1 = 1 - b1 ** this.t;
    const sqrtBc2 = Math.sqrt(1 - b2 ** this.t);
    const stepSize = lr / bc1;
    const f = wd > 0 && lr > 0 ? 1 - lr * wd : 1;
    if (ops) {
      // One pass per run of decaying / non-decaying tensors, decay fused into the update.
      let at = 0;
      for (const [a, b] of this.decayRanges) {
        if (a > at) ops.adamw(p, g, this.m, this.v, at, a - at, b1, b2, stepSize, sqrtBc2, eps, gradScale, 1);
        ops.adamw(p, g, this.m, this.v, a, b - a, b1, b2, stepSize, sqrtBc2, eps, gradScale, f);
        at = b;
      }
      if (at < this.size)
        ops.adamw(p, g, this.m, this.v, at, this.size - at, b1, b2, stepSize, sqrtBc2, eps, gradScale, 1);
      return;
    }
    if (f !== 1) for (const [a, b] of this.decayRanges) for (let i = a; i < b; i++) p[i] *= f;
    const m = this.m;
    const v = this.v;
    const c1 = 1 - b1;
    const c2 = 1 - b2;
    for (let i = 0; i < this.size; i++) {
      const gi = g[i] * gradScale;
      const mi = b1 * m[i] + c1 * gi;
      const vi = b2 * v[i] + c2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] -= (stepSize * mi) / (Math.sqrt(vi) / sqrtBc2 + eps);
    }
  }
}
