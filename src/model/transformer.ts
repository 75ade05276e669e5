/**
 * The llama-style decoder: training forward over a ragged batch, its backward pass, the
 * scoring head (log π(target) and entropy per scored token) and a plain full-logits forward.
 *
 * Layout: all tokens of all sequences are concatenated into one [T, d] activation matrix so
 * every linear layer is a single GEMM through `Kernels.gemm`; attention runs per sequence and
 * head on slices of that matrix (causal, scale 1/sqrt(headDim)). Matrices are [out, in]
 * row-major and y = x·Wᵀ. The output head is tied to token_embd: logits = h·Eᵀ.
 *
 * Per layer:  x ← x + Wo·attn(rope(Wq·n₁), rope(Wk·n₁), Wv·n₁),  n₁ = rmsnorm(x)·g₁
 *             x ← x + Wdown·(silu(Wgate·n₂) ⊙ Wup·n₂),          n₂ = rmsnorm(x)·g₂
 * then logits = (rmsnorm(x)·g_out)·Eᵀ. RoPE convention: see `ropeInPlace` in ops.ts.
 *
 * When the kernel set brings fused `ops` (the native one does), the row-wise work (norms, RoPE,
 * SwiGLU, attention, the head's softmax statistics and gradient) runs there instead of in the
 * TypeScript below; with them the head keeps logits rather than probabilities for the backward pass.
 */
import { UsageError } from "../core/errors.js";
import { jsKernels } from "./kernels/js.js";
import type { FusedOps, Kernels } from "./kernels/types.js";
import type { TokenStats } from "./loss-types.js";
import {
  type RopeTables,
  rmsNormBackward,
  rmsNormForward,
  ropeInPlace,
  ropeTables,
  swigluBackward,
  swigluForward,
} from "./ops.js";
import { type LayerWeights, type ModelParams, weightsOf } from "./params.js";

/**
 * A ragged batch. lossMask[s][t] = 1 marks token t of sequence s as a scored target,
 * predicted from tokens < t (so t ≥ 1; lossMask[s][0] must be 0).
 */
export interface Batch {
  sequences: Int32Array[];
  lossMask: Uint8Array[];
}

/** Above this many floats the [scored, vocab] probabilities are not kept: backward recomputes logits. */
const LOGITS_KEEP_LIMIT = 1 << 25;
/** Rows of the head processed at once when logits are not kept. */
const HEAD_CHUNK_FLOATS = 1 << 22;
/** Most bytes the buffer pool keeps between steps. */
const POOL_LIMIT_BYTES = 1 << 30;

/**
 * Recycles the large activation and gradient buffers between steps (saves GC time on the
 * hot path). Buffers come back with stale contents: every user overwrites them fully or
 * clears them first. Module-level because JS runs one step at a time.
 */
const pool = {
  free: new Map<number, Float32Array[]>(),
  bytes: 0,
  take(n: number): Float32Array {
    const b = this.free.get(n)?.pop();
    if (!b) return new Float32Array(n);
    this.bytes -= 4 * n;
    return b;
  },
  give(b: Float32Array): void {
    if (this.bytes + 4 * b.length > POOL_LIMIT_BYTES) return;
    let l = this.free.get(b.length);
    if (!l) this.free.set(b.length, (l = []));
    l.push(b);
    this.bytes += 4 * b.length;
  },
};

/** The buffers of one forward (+ backward) pass, handed back to the pool together. */
class Arena {
  private readonly held: Float32Array[] = [];
  take(n: number): Float32Array {
    const b = pool.take(n);
    this.held.push(b);
    return b;
  }
  zeros(n: number): Float32Array {
    return this.take(n).fill(0);
  }
  release(): void {
    for (const b of this.held) pool.give(b);
    this.held.length = 0;
  }
}

interface Layout {
  T: number;
  tokens: Int32Array;
  offsets: number[];
  lengths: number[];
  /** offsets and lengths as Int32Arrays (for the fused ops). */
  offs: Int32Array;
  lens: Int32Array;
  maxLen: number;
  /** Row (in [0, T)) whose hidden state predicts each scored token. */
  rows: Int32Array;
  targets: Int32Array;
  sequence: Int32Array;
  position: Int32Array;
}

function layoutOf(params: ModelParams, batch: Batch): Layout {
  const { vocabSize, contextLength } = params.config;
  const { sequences, lossMask } = batch;
  if (sequences.length !== lossMask.length)
    throw new UsageError(
      `batch.lossMask has ${lossMask.length} entries but batch.sequences has ${sequences.length}`,
    );
  let T = 0;
  let N = 0;
  let maxLen = 0;
  const offsets: number[] = [];
  const lengths: number[] = [];
  for (let s = 0; s < sequences.length; s++) {
    const seq = sequences[s];
    const mask = lossMask[s];
    if (seq.length === 0) throw new UsageError(`batch.sequences[${s}] is empty`);
    if (seq.length > contextLength)
      throw new UsageError(
        `batch.sequences[${s}] has ${seq.length} tokens, more than model.contextLength (${contextLength})`,
      );
    if (mask.length !== seq.length)
      throw new UsageError(
        `batch.lossMask[${s}] has length ${mask.length}, sequence has ${seq.length} tokens`,
      );
    if (mask[0] !== 0)
      throw new UsageError(`batch.lossMask[${s}][0] must be 0 (the first token has no prefix to predict it)`);
    for (let t = 0; t < seq.length; t++) {
      const tok = seq[t];
      if (!(tok >= 0 && tok < vocabSize))
        throw new UsageError(
          `batch.sequences[${s}][${t}] = ${tok} is outside the vocabulary [0, ${vocabSize})`,
        );
      if (mask[t]) N++;
    }
    offsets.push(T);
    lengths.push(seq.length);
    T += seq.length;
    if (seq.length > maxLen) maxLen = seq.length;
  }
  const tokens = new Int32Array(T);
  const rows = new Int32Array(N);
  const targets = new Int32Array(N);
  const sequence = new Int32Array(N);
  const position = new Int32Array(N);
  let n = 0;
  for (let s = 0; s < sequences.length; s++) {
    const seq = sequences[s];
    const mask = lossMask[s];
    tokens.set(seq, offsets[s]);
    let k = 0;
    for (let t = 1; t < seq.length; t++) {
      if (!mask[t]) continue;
      rows[n] = offsets[s] + t - 1;
      targets[n] = seq[t];
      sequence[n] = s;
      position[n] = k++;
      n++;
    }
  }
  return {
    T,
    tokens,
    offsets,
    lengths,
    offs: Int32Array.from(offsets),
    lens: Int32Array.from(lengths),
    maxLen,
    rows,
    targets,
    sequence,
    position,
  };
}

/** Activations of one layer kept for the backward pass. */
interface LayerActs {
  xIn: Float32Array;
  rstd1: Float32Array;
  xn1: Float32Array;
  /** q and k after RoPE. */
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  /** Log-sum-exp of each attention row, [T, nHeads]. */
  lse: Float32Array;
  attn: Float32Array;
  xMid: Float32Array;
  rstd2: Float32Array;
  xn2: Float32Array;
  gate: Float32Array;
  /** σ(gate), kept so the backward pass needs no exp. */
  sig: Float32Array;
  up: Float32Array;
  hidden: Float32Array;
  xOut: Float32Array;
}

interface Dims {
  T: number;
  d: number;
  F: number;
  H: number;
  hd: number;
  V: number;
  eps: number;
  scale: number;
}

function dimsOf(params: ModelParams, T: number): Dims {
  const c = params.config;
  const hd = c.dModel / c.nHeads;
  return {
    T,
    d: c.dModel,
    F: c.dFf,
    H: c.nHeads,
    hd,
    V: c.vocabSize,
    eps: c.normEps,
    scale: 1 / Math.sqrt(hd),
  };
}

function allocLayerActs(D: Dims, ar: Arena, xIn: Float32Array, xOut?: Float32Array): LayerActs {
  const { T, d, F, H } = D;
  return {
    xIn,
    rstd1: ar.take(T),
    xn1: ar.take(T * d),
    q: ar.take(T * d),
    k: ar.take(T * d),
    v: ar.take(T * d),
    lse: ar.take(T * H),
    attn: ar.take(T * d),
    xMid: ar.take(T * d),
    rstd2: ar.take(T),
    xn2: ar.take(T * d),
    gate: ar.take(T * F),
    sig: ar.take(T * F),
    up: ar.take(T * F),
    hidden: ar.take(T * F),
    xOut: xOut ?? ar.take(T * d),
  };
}

/** Causal softmax attention for every sequence and head; fills a.attn and a.lse. */
function attentionForward(k: Kernels, D: Dims, L: Layout, a: LayerActs, S: Float32Array): void {
  const { d, H, hd, scale } = D;
  if (k.ops) {
    k.ops.attentionForward(a.q, a.k, a.v, a.attn, a.lse, S, L.offs, L.lens, H, hd, scale);
    return;
  }
  for (let s = 0; s < L.offsets.length; s++) {
    const o = L.offsets[s];
    const n = L.lengths[s];
    for (let h = 0; h < H; h++) {
      const off = o * d + h * hd;
      k.gemm(false, true, n, n, hd, scale, a.q, off, d, a.k, off, d, 0, S, 0, n);
      for (let i = 0; i < n; i++) {
        const r = i * n;
        let mx = Number.NEGATIVE_INFINITY;
        for (let j = 0; j <= i; j++) if (S[r + j] > mx) mx = S[r + j];
        let sum = 0;
        for (let j = 0; j <= i; j++) {
          const e = Math.exp(S[r + j] - mx);
          S[r + j] = e;
          sum += e;
        }
        a.lse[(o + i) * H + h] = mx + Math.log(sum);
        const inv = 1 / sum;
        for (let j = 0; j <= i; j++) S[r + j] *= inv;
        S.fill(0, r + i + 1, r + n);
      }
      k.gemm(false, false, n, hd, n, 1, S, 0, n, a.v, off, d, 0, a.attn, off, d);
    }
  }
}

/** The TypeScript row-wise ops, used when the kernel set has no fused ones. */
const jsOps = { rmsNormForward, rmsNormBackward, swigluForward, swigluBackward };

/** RoPE (or its inverse) on every sequence of the batch. */
function ropeAll(
  ops: FusedOps | undefined,
  x: Float32Array,
  L: Layout,
  H: number,
  hd: number,
  rope: RopeTables,
  inverse: boolean,
): void {
  if (ops) {
    ops.rope(x, L.offs, L.lens, H, hd, rope.cos, rope.sin, inverse);
    return;
  }
  for (let s = 0; s < L.offsets.length; s++) ropeInPlace(x, L.offsets[s], L.lengths[s], H, hd, rope, inverse);
}

/** x·Wᵀ for x [T, inDim] and W [outDim, inDim] into y [T, outDim] (y = beta·y + x·Wᵀ). */
function linear(
  k: Kernels,
  T: number,
  outDim: number,
  inDim: number,
  x: Float32Array,
  W: Float32Array,
  y: Float32Array,
  beta: number,
): void {
  if (T === 0) return;
  k.gemm(false, true, T, outDim, inDim, 1, x, 0, inDim, W, 0, inDim, beta, y, 0, outDim);
}

function layerForward(
  k: Kernels,
  D: Dims,
  L: Layout,
  W: LayerWeights,
  a: LayerActs,
  rope: RopeTables,
  S: Float32Array,
): void {
  const { T, d, F, H, hd, eps } = D;
  const ops = k.ops;
  (ops ?? jsOps).rmsNormForward(a.xIn, W.attnNorm, a.xn1, a.rstd1, T, d, eps);
  linear(k, T, d, d, a.xn1, W.wq, a.q, 0);
  linear(k, T, d, d, a.xn1, W.wk, a.k, 0);
  linear(k, T, d, d, a.xn1, W.wv, a.v, 0);
  ropeAll(ops, a.q, L, H, hd, rope, false);
  ropeAll(ops, a.k, L, H, hd, rope, false);
  attentionForward(k, D, L, a, S);
  a.xMid.set(a.xIn);
  linear(k, T, d, d, a.attn, W.wo, a.xMid, 1);
  (ops ?? jsOps).rmsNormForward(a.xMid, W.ffnNorm, a.xn2, a.rstd2, T, d, eps);
  linear(k, T, F, d, a.xn2, W.wGate, a.gate, 0);
  linear(k, T, F, d, a.xn2, W.wUp, a.up, 0);
  (ops ?? jsOps).swigluForward(a.gate, a.up, a.sig, a.hidden, T * F);
  a.xOut.set(a.xMid);
  linear(k, T, d, F, a.hidden, W.wDown, a.xOut, 1);
}

interface Trunk {
  D: Dims;
  layout: Layout;
  /** Per-layer activations (only the last one's are meaningful when not retained). */
  acts: LayerActs[];
  /** Input of the final norm, its 1/rms and its output. */
  xLast: Float32Array;
  rstdF: Float32Array;
  xf: Float32Array;
}

/** Embedding, layers and final norm. With retain=false one set of buffers is reused for all layers. */
function runTrunk(params: ModelParams, layout: Layout, kernels: Kernels, retain: boolean, ar: Arena): Trunk {
  const D = dimsOf(params, layout.T);
  const { T, d, hd } = D;
  const W = weightsOf(params);
  const c = params.config;
  const rope = ropeTables(Math.max(layout.maxLen, 1), hd, c.ropeBase);
  const S = ar.take(layout.maxLen * layout.maxLen);
  let x: Float32Array = ar.take(T * d);
  for (let t = 0; t < T; t++)
    x.set(W.tokEmbd.subarray(layout.tokens[t] * d, (layout.tokens[t] + 1) * d), t * d);
  const acts: LayerActs[] = [];
  let spare: Float32Array | undefined;
  for (let l = 0; l < c.nLayers; l++) {
    let a: LayerActs;
    if (retain || acts.length === 0) {
      a = allocLayerActs(D, ar, x, retain ? undefined : spare);
      acts.push(a);
    } else {
      a = acts[0];
      spare = a.xIn;
      a.xIn = x;
      a.xOut = spare;
    }
    layerForward(kernels, D, layout, W.layers[l], a, rope, S);
    x = a.xOut;
  }
  const xf = ar.take(T * d);
  const rstdF = ar.take(T);
  (kernels.ops ?? jsOps).rmsNormForward(x, W.outputNorm, xf, rstdF, T, d, c.normEps);
  return { D, layout, acts, xLast: x, rstdF, xf };
}

/** Rows `rows` of xf gathered into a new [rows.length, d] matrix. */
function gatherRows(xf: Float32Array, rows: Int32Array, d: number, ar: Arena): Float32Array {
  const out = ar.take(rows.length * d);
  for (let i = 0; i < rows.length; i++) out.set(xf.subarray(rows[i] * d, rows[i] * d + d), i * d);
  return out;
}

/**
 * log-sum-exp and entropy of one logits row (float64). With `toProbs` the row is overwritten
 * by its softmax probabilities.
 */
function rowStats(z: Float32Array, o: number, V: number, toProbs: boolean): { lse: number; entropy: number } {
  let mx = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < V; j++) if (z[o + j] > mx) mx = z[o + j];
  let sum = 0;
  let sz = 0;
  for (let j = 0; j < V; j++) {
    const zj = z[o + j];
    const e = Math.exp(zj - mx);
    sum += e;
    sz += e * zj;
    if (toProbs) z[o + j] = e;
  }
  const lse = mx + Math.log(sum);
  if (toProbs) {
    const inv = 1 / sum;
    for (let j = 0; j < V; j++) z[o + j] *= inv;
  }
  return { lse, entropy: lse - sz / sum };
}

/**
 * The result of a training forward: token statistics for the loss, plus what the backward
 * pass needs. Pass it to `backward` at most once.
 */
export class TrainForward {
  readonly stats: TokenStats;
  /** @internal */ readonly trunk: Trunk;
  /** @internal */ readonly params: ModelParams;
  /** @internal */ readonly kernels: Kernels;
  /** @internal */ readonly xs: Float32Array;
  /**
   * Softmax probabilities of the scored rows [scored, vocab] (their logits with fused ops), when
   * small enough to keep. @internal
   */
  probs: Float32Array | null;
  /** @internal */ readonly lse: Float64Array;
  /** @internal */ retained: boolean;
  /** @internal */ readonly arena: Arena;
  /** @internal */ readonly headChunk: number;

  constructor(
    params: ModelParams,
    kernels: Kernels,
    trunk: Trunk,
    stats: TokenStats,
    xs: Float32Array,
    probs: Float32Array | null,
    lse: Float64Array,
    retained: boolean,
    arena: Arena,
    headChunk: number,
  ) {
    this.arena = arena;
    this.headChunk = headChunk;
    this.params = params;
    this.kernels = kernels;
    this.trunk = trunk;
    this.stats = stats;
    this.xs = xs;
    this.probs = probs;
    this.lse = lse;
    this.retained = retained;
  }

  /** Number of scored tokens. */
  get scored(): number {
    return this.stats.logp.length;
  }

  /** Total number of tokens in the batch. */
  get tokens(): number {
    return this.trunk.layout.T;
  }
}

function chunkRows(N: number, V: number): number {
  return Math.max(1, Math.min(N, Math.floor(HEAD_CHUNK_FLOATS / V)));
}

/**
 * Forward pass over a ragged batch. With `retain` (default true) the activations needed by
 * `backward` are kept; otherwise buffers are reused and only `stats` is meaningful.
 */
export interface HeadOptions {
  /**
   * Keep the [scored, vocab] probabilities for the backward pass (default: when they take at
   * most 2^25 floats); otherwise the logits are recomputed there, chunk by chunk.
   */
  keepProbs?: boolean;
  /** Rows of the head per chunk when probabilities are not kept (default: 2^22 / vocab). */
  chunkRows?: number;
}

export function forwardTrain(
  params: ModelParams,
  batch: Batch,
  kernels: Kernels = jsKernels,
  retain = true,
  head: HeadOptions = {},
): TrainForward {
  const layout = layoutOf(params, batch);
  const ar = new Arena();
  const trunk = runTrunk(params, layout, kernels, retain, ar);
  const { d, V } = trunk.D;
  const N = layout.rows.length;
  const xs = gatherRows(trunk.xf, layout.rows, d, ar);
  const E = weightsOf(params).tokEmbd;
  const keep = retain && (head.keepProbs ?? N * V <= LOGITS_KEEP_LIMIT);
  const probs = keep ? ar.take(N * V) : null;
  const ch = head.chunkRows ?? chunkRows(N, V);
  const scratch = keep ? null : ar.take(ch * V);
  const logp = new Float64Array(N);
  const entropy = new Float64Array(N);
  const lse = new Float64Array(N);
  const ops = kernels.ops;
  for (let r0 = 0; r0 < N; r0 += ch) {
    const m = Math.min(ch, N - r0);
    const buf = probs ?? scratch!;
    const base = probs ? r0 * V : 0;
    kernels.gemm(false, true, m, V, d, 1, xs, r0 * d, d, E, 0, d, 0, buf, base, V);
    if (ops) {
      // The fused head leaves the logits in place (kept for the backward pass).
      ops.headForward(buf, base, m, V, layout.targets, r0, logp, entropy, lse, r0);
      continue;
    }
    for (let i = 0; i < m; i++) {
      const o = base + i * V;
      const zTarget = buf[o + layout.targets[r0 + i]];
      const st = rowStats(buf, o, V, probs !== null);
      lse[r0 + i] = st.lse;
      entropy[r0 + i] = st.entropy;
      logp[r0 + i] = zTarget - st.lse;
    }
  }
  const stats: TokenStats = {
    logp,
    entropy,
    sequence: layout.sequence,
    position: layout.position,
  };
  if (!retain) ar.release();
  return new TrainForward(params, kernels, trunk, stats, xs, probs, lse, retain, ar, ch);
}

/** log π(target) and entropy for every scored token, without keeping activations. */
export function scoreBatch(params: ModelParams, batch: Batch, kernels: Kernels = jsKernels): TokenStats {
  return forwardTrain(params, batch, kernels, false).stats;
}

function attentionBackward(
  k: Kernels,
  D: Dims,
  L: Layout,
  a: LayerActs,
  dAttn: Float32Array,
  dq: Float32Array,
  dk: Float32Array,
  dv: Float32Array,
  P: Float32Array,
  dP: Float32Array,
): void {
  const { d, H, hd, scale } = D;
  if (k.ops) {
    k.ops.attentionBackward(a.q, a.k, a.v, a.lse, dAttn, dq, dk, dv, P, dP, L.offs, L.lens, H, hd, scale);
    return;
  }
  for (let s = 0; s < L.offsets.length; s++) {
    const o = L.offsets[s];
    const n = L.lengths[s];
    for (let h = 0; h < H; h++) {
      const off = o * d + h * hd;
      // Recompute the attention probabilities from q, k and the saved log-sum-exp.
      k.gemm(false, true, n, n, hd, scale, a.q, off, d, a.k, off, d, 0, P, 0, n);
      for (let i = 0; i < n; i++) {
        const r = i * n;
        const lse = a.lse[(o + i) * H + h];
        for (let j = 0; j <= i; j++) P[r + j] = Math.exp(P[r + j] - lse);
        P.fill(0, r + i + 1, r + n);
      }
      k.gemm(false, true, n, n, hd, 1, dAttn, off, d, a.v, off, d, 0, dP, 0, n);
      k.gemm(true, false, n, hd, n, 1, P, 0, n, dAttn, off, d, 0, dv, off, d);
      // dS = P ⊙ (dP − rowsum(P ⊙ dP)), written over dP.
      for (let i = 0; i < n; i++) {
        const r = i * n;
        let delta = 0;
        for (let j = 0; j <= i; j++) delta += P[r + j] * dP[r + j];
        for (let j = 0; j <= i; j++) dP[r + j] = P[r + j] * (dP[r + j] - delta);
        dP.fill(0, r + i + 1, r + n);
      }
      k.gemm(false, false, n, hd, n, scale, dP, 0, n, a.k, off, d, 0, dq, off, d);
      k.gemm(true, false, n, hd, n, scale, dP, 0, n, a.q, off, d, 0, dk, off, d);
    }
  }
}

/**
 * The head's gradient in TypeScript, in place over rows [r0, r0 + m) of the chunk in `buf`:
 * dz = dLogp·(onehot − p) − dEntropy·p·(log p + H), from the kept probabilities or from logits.
 */
function headBackwardRows(
  buf: Float32Array,
  base: number,
  m: number,
  V: number,
  r0: number,
  fw: TrainForward,
  dLogp: ArrayLike<number>,
  dEntropy: ArrayLike<number>,
  kept: boolean,
): void {
  const targets = fw.trunk.layout.targets;
  for (let i = 0; i < m; i++) {
    const o = base + i * V;
    const lse = fw.lse[r0 + i];
    const ent = fw.stats.entropy[r0 + i];
    const gl = dLogp[r0 + i];
    const ge = dEntropy[r0 + i];
    if (!kept) {
      for (let j = 0; j < V; j++) {
        const lp = buf[o + j] - lse;
        buf[o + j] = -Math.exp(lp) * (gl + ge * (lp + ent));
      }
    } else if (ge === 0) {
      for (let j = 0; j < V; j++) buf[o + j] *= -gl;
    } else {
      for (let j = 0; j < V; j++) {
        const p = buf[o + j];
        // p·log p → 0 as p → 0 (a probability that underflowed contributes nothing).
        buf[o + j] = p > 0 ? -p * (gl + ge * (Math.log(p) + ent)) : 0;
      }
    }
    buf[o + targets[r0 + i]] += gl;
  }
}

/** dW += dyᵀ·x for dy [T, outDim], x [T, inDim]. */
function weightGrad(
  k: Kernels,
  T: number,
  outDim: number,
  inDim: number,
  dy: Float32Array,
  x: Float32Array,
  dW: Float32Array,
): void {
  if (T === 0) return;
  k.gemm(true, false, outDim, inDim, T, 1, dy, 0, outDim, x, 0, inDim, 1, dW, 0, inDim);
}

/** dx (=|+=) dy·W for dy [T, outDim], W [outDim, inDim]. */
function inputGrad(
  k: Kernels,
  T: number,
  outDim: number,
  inDim: number,
  dy: Float32Array,
  W: Float32Array,
  dx: Float32Array,
  beta: number,
): void {
  if (T === 0) return;
  k.gemm(false, false, T, inDim, outDim, 1, dy, 0, outDim, W, 0, inDim, beta, dx, 0, inDim);
}

/**
 * Backpropagates dLoss/dLogp and dLoss/dEntropy (one entry per scored token, as in
 * `fw.stats`) through the model and ADDS the parameter gradients into `grads`.
 */
export function backward(
  fw: TrainForward,
  dLogp: ArrayLike<number>,
  dEntropy: ArrayLike<number>,
  grads: ModelParams,
): void {
  if (!fw.retained)
    throw new Error("backward needs a forwardTrain run with retain = true, and runs once per forward");
  if (grads.flat.length !== fw.params.flat.length) throw new Error("grads layout does not match params");
  const { params, kernels: k, trunk } = fw;
  const layout = trunk.layout;
  const D = trunk.D;
  const { T, d, F, V } = D;
  const N = layout.rows.length;
  if (dLogp.length !== N || dEntropy.length !== N)
    throw new Error(`loss gradients have ${dLogp.length}/${dEntropy.length} entries, expected ${N}`);
  const W = weightsOf(params);
  const G = weightsOf(grads);

  // Head: dz = dLogp·(onehot − p) − dEntropy·p·(log p + H), in place over the kept
  // probabilities (or over recomputed logits when they were not kept).
  const ch = fw.headChunk;
  const ar = fw.arena;
  const probs = fw.probs;
  const scratch = probs ? null : ar.take(ch * V);
  const dxs = ar.take(N * d);
  const ops = k.ops;
  const dl64 = dLogp instanceof Float64Array ? dLogp : Float64Array.from(dLogp);
  const de64 = dEntropy instanceof Float64Array ? dEntropy : Float64Array.from(dEntropy);
  for (let r0 = 0; r0 < N; r0 += ch) {
    const m = Math.min(ch, N - r0);
    const buf = probs ?? scratch!;
    const base = probs ? r0 * V : 0;
    if (!probs) k.gemm(false, true, m, V, d, 1, fw.xs, r0 * d, d, W.tokEmbd, 0, d, 0, buf, base, V);
    if (ops) {
      // Kept or recomputed, buf holds logits here.
      ops.headBackward(buf, base, m, V, layout.targets, r0, fw.lse, fw.stats.entropy, dl64, de64, r0);
    } else {
      headBackwardRows(buf, base, m, V, r0, fw, dLogp, dEntropy, probs !== null);
    }
    k.gemm(false, false, m, d, V, 1, buf, base, V, W.tokEmbd, 0, d, 0, dxs, r0 * d, d);
    k.gemm(true, false, V, d, m, 1, buf, base, V, fw.xs, r0 * d, d, 1, G.tokEmbd, 0, d);
  }
  fw.probs = null;
  const dxf = ar.zeros(T * d);
  for (let i = 0; i < N; i++) {
    const o = layout.rows[i] * d;
    for (let j = 0; j < d; j++) dxf[o + j] += dxs[i * d + j];
  }
  const dx = ar.zeros(T * d);
  const nb = (ops ?? jsOps).rmsNormBackward;
  nb(dxf, trunk.xLast, W.outputNorm, trunk.rstdF, dx, G.outputNorm, T, d);

  const dxn = dxf; // reused as scratch from here on
  const dHidden = ar.take(T * F);
  const dGate = ar.take(T * F);
  const dUp = ar.take(T * F);
  const dAttn = ar.take(T * d);
  const dq = ar.take(T * d);
  const dk = ar.take(T * d);
  const dv = ar.take(T * d);
  const P = ar.take(layout.maxLen * layout.maxLen);
  const dP = ar.take(layout.maxLen * layout.maxLen);
  const { H, hd } = D;
  const rope = ropeTables(Math.max(layout.maxLen, 1), hd, params.config.ropeBase);
  for (let l = params.config.nLayers - 1; l >= 0; l--) {
    const a = trunk.acts[l];
    const w = W.layers[l];
    const g = G.layers[l];
    // MLP: xOut = xMid + hidden·Wdownᵀ.
    inputGrad(k, T, d, F, dx, w.wDown, dHidden, 0);
    weightGrad(k, T, d, F, dx, a.hidden, g.wDown);
    (ops ?? jsOps).swigluBackward(dHidden, a.gate, a.sig, a.up, dGate, dUp, T * F);
    weightGrad(k, T, F, d, dGate, a.xn2, g.wGate);
    weightGrad(k, T, F, d, dUp, a.xn2, g.wUp);
    inputGrad(k, T, F, d, dGate, w.wGate, dxn, 0);
    inputGrad(k, T, F, d, dUp, w.wUp, dxn, 1);
    nb(dxn, a.xMid, w.ffnNorm, a.rstd2, dx, g.ffnNorm, T, d);
    // Attention: xMid = xIn + attn·Woᵀ.
    inputGrad(k, T, d, d, dx, w.wo, dAttn, 0);
    weightGrad(k, T, d, d, dx, a.attn, g.wo);
    attentionBackward(k, D, layout, a, dAttn, dq, dk, dv, P, dP);
    ropeAll(ops, dq, layout, H, hd, rope, true);
    ropeAll(ops, dk, layout, H, hd, rope, true);
    weightGrad(k, T, d, d, dq, a.xn1, g.wq);
    weightGrad(k, T, d, d, dk, a.xn1, g.wk);
    weightGrad(k, T, d, d, dv, a.xn1, g.wv);
    inputGrad(k, T, d, d, dq, w.wq, dxn, 0);
    inputGrad(k, T, d, d, dk, w.wk, dxn, 1);
    inputGrad(k, T, d, d, dv, w.wv, dxn, 1);
    nb(dxn, a.xIn, w.attnNorm, a.rstd1, dx, g.attnNorm, T, d);
  }
  // Embedding rows.
  for (let t = 0; t < T; t++) {
    const e = layout.tokens[t] * d;
    const o = t * d;
    for (let j = 0; j < d; j++) G.tokEmbd[e + j] += dx[o + j];
  }
  fw.retained = false;
  ar.release();
}

/**
 * Full-sequence logits [tokens.length, vocab] (row t predicts token t+1) for one sequence,
 * no gradient. The reference the KV-cache sampler is checked against.
 */
export function forwardLogits(
  params: ModelParams,
  tokens: Int32Array | readonly number[],
  kernels: Kernels = jsKernels,
): Float32Array {
  const seq = tokens instanceof Int32Array ? tokens : Int32Array.from(tokens);
  const layout = layoutOf(params, { sequences: [seq], lossMask: [new Uint8Array(seq.length)] });
  const ar = new Arena();
  const trunk = runTrunk(params, layout, kernels, false, ar);
  const { T, d, V } = trunk.D;
  const out = new Float32Array(T * V);
  kernels.gemm(false, true, T, V, d, 1, trunk.xf, 0, d, weightsOf(params).tokEmbd, 0, d, 0, out, 0, V);
  ar.release();
  return out;
}
