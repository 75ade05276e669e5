/**
 * The one numeric primitive the model needs to be fast: single-precision GEMM, row-major,
 * with the cblas_sgemm contract. Everything else (norms, softmax, RoPE) is plain TypeScript.
 *
 *   C[m, n] = alpha · Σ_k op(A)[m, k] · op(B)[k, n] + beta · C[m, n]
 *
 * op(A) is A (M×K, leading dimension lda) or Aᵀ when transA (A stored K×M). Same for B.
 * Offsets index into the arrays, so callers can address slices without copying.
 *
 * A kernel set may also bring `ops`, native versions of the learner's row-wise hot paths; the
 * model uses them when present and its own TypeScript versions (src/model/ops.ts,
 * transformer.ts, adamw.ts) otherwise.
 */
export interface Kernels {
  /** "js" (pure TypeScript), "wasm" (SIMD WebAssembly) or "native" (OpenBLAS via N-API). */
  readonly name: string;
  /** Fused training ops (the native kernels have them). */
  readonly ops?: FusedOps;
  gemm(
    transA: boolean,
    transB: boolean,
    m: number,
    n: number,
    k: number,
    alpha: number,
    a: Float32Array,
    aOff: number,
    lda: number,
    b: Float32Array,
    bOff: number,
    ldb: number,
    beta: number,
    c: Float32Array,
    cOff: number,
    ldc: number,
  ): void;
}

/**
 * The model's non-GEMM hot paths (training, plus the sampler's decode attention), each the counterpart of a TypeScript function with the same
 * arguments and results up to float32 rounding (native/mage_ops.c). Matrices are row-major;
 * `offsets`/`lengths` give each sequence's first row and length in a ragged [T, ·] batch.
 * Calls outside the arrays throw a RangeError.
 */
export interface FusedOps {
  /** `rmsNormForward` in ops.ts. */
  rmsNormForward(
    x: Float32Array,
    g: Float32Array,
    y: Float32Array,
    rstd: Float32Array,
    rows: number,
    d: number,
    eps: number,
  ): void;
  /** `rmsNormBackward` in ops.ts (dx and dg accumulated). */
  rmsNormBackward(
    dy: Float32Array,
    x: Float32Array,
    g: Float32Array,
    rstd: Float32Array,
    dx: Float32Array,
    dg: Float32Array,
    rows: number,
    d: number,
  ): void;
  swigluForward(gate: Float32Array, up: Float32Array, sig: Float32Array, out: Float32Array, n: number): void;
  swigluBackward(
    dOut: Float32Array,
    gate: Float32Array,
    sig: Float32Array,
    up: Float32Array,
    dGate: Float32Array,
    dUp: Float32Array,
    n: number,
  ): void;
  /** `ropeInPlace` in ops.ts for every sequence (cos/sin: the RopeTables arrays). */
  rope(
    x: Float32Array,
    offsets: Int32Array,
    lengths: Int32Array,
    nHeads: number,
    headDim: number,
    cos: Float32Array,
    sin: Float32Array,
    inverse: boolean,
  ): void;
  /**
   * Causal softmax attention over every sequence and head: attn = softmax(scale·q·kᵀ)·v per head,
   * the log-sum-exp of every score row into lse [T, nHeads]; S is scratch of ≥ maxLen² floats.
   */
  attentionForward(
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    attn: Float32Array,
    lse: Float32Array,
    S: Float32Array,
    offsets: Int32Array,
    lengths: Int32Array,
    nHeads: number,
    headDim: number,
    scale: number,
  ): void;
  /** Backward of attentionForward: overwrites dq, dk, dv; P and dP are scratch of ≥ maxLen² floats. */
  attentionBackward(
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    lse: Float32Array,
    dAttn: Float32Array,
    dq: Float32Array,
    dk: Float32Array,
    dv: Float32Array,
    P: Float32Array,
    dP: Float32Array,
    offsets: Int32Array,
    lengths: Int32Array,
    nHeads: number,
    headDim: number,
    scale: number,
  ): void;
  /**
   * For `rows` logits rows z[zOff + r·V, +V) (left unchanged): log-sum-exp, entropy and
   * log p(targets[tOff + r]) into lse/entropy/logp[sOff + r].
   */
  headForward(
    z: Float32Array,
    zOff: number,
    rows: number,
    V: number,
    targets: Int32Array,
    tOff: number,
    logp: Float64Array,
    entropy: Float64Array,
    lse: Float64Array,
    sOff: number,
  ): void;
  /**
   * Overwrites the logits rows with dLoss/dz = −p·(dLogp + dEntropy·(log p + H)) plus dLogp at
   * the target, p = exp(z − lse).
   */
  headBackward(
    z: Float32Array,
    zOff: number,
    rows: number,
    V: number,
    targets: Int32Array,
    tOff: number,
    lse: Float64Array,
    entropy: Float64Array,
    dLogp: Float64Array,
    dEntropy: Float64Array,
    sOff: number,
  ): void;
  /**
   * `AdamW.update` on elements [off, off + n): p *= decay, then the moment and parameter update
   * (bit-identical to the TypeScript).
   */
  adamw(
    p: Float32Array,
    g: Float32Array,
    m: Float32Array,
    v: Float32Array,
    off: number,
    n: number,
    beta1: number,
    beta2: number,
    stepSize: number,
    sqrtBc2: number,
    eps: number,
    gradScale: number,
    decay: number,
  ): void;
  /** Σ a[i]², accumulated in float64. */
  sumSquares(a: Float32Array): number;
  /**
   * Attention of one query row (nHeads × headDim at q[qOff]) against positions [0, len) of a
   * head-major KV cache: head h's keys are the len × headDim matrix at K[kvOff + h·headStride]
   * (values in V likewise); the result goes to out[outOff, + nHeads·headDim). scratch: ≥ len floats.
   */
  attendDecode(
    q: Float32Array,
    qOff: number,
    K: Float32Array,
    V: Float32Array,
    kvOff: number,
    headStride: number,
    len: number,
    nHeads: number,
    headDim: number,
    scale: number,
    out: Float32Array,
    outOff: number,
    scratch: Float32Array,
  ): void;
  /**
   * In place on `rows` × `len` scores: row i keeps its first `first + i` entries, softmaxed, and
   * the rest become 0 (causal attention of a block of rows whose first sees `first` positions).
   * Optional: addons built before it existed lack it.
   */
  causalSoftmax?(s: Float32Array, rows: number, len: number, first: number): void;
}
