/**
 * Row-wise building blocks of the transformer, forward and backward, over row-major
 * Float32Array matrices. Matrix products are not here: they all go through `Kernels.gemm`.
 * Reductions accumulate in float64 (plain JS numbers) and store float32.
 */

/** y[t] = x[t] / rms(x[t]) · g, rms = sqrt(mean(x²) + eps). Writes 1/rms into rstd[t]. */
export function rmsNormForward(
  x: Float32Array,
  g: Float32Array,
  y: Float32Array,
  rstd: Float32Array,
  rows: number,
  d: number,
  eps: number,
): void {
  for (let t = 0; t < rows; t++) {
    const o = t * d;
    let ss = 0;
    for (let j = 0; j < d; j++) {
      const v = x[o + j];
      ss += v * v;
    }
    const r = 1 / Math.sqrt(ss / d + eps);
    rstd[t] = r;
    for (let j = 0; j < d; j++) y[o + j] = x[o + j] * r * g[j];
  }
}

/**
 * Backward of rmsNormForward. With r = rstd[t] and u = g ⊙ dy:
 *   dx += r·u − r³/d · x · (u·x),  dg += dy ⊙ x · r.
 * Both dx and dg are accumulated into.
 */
export function rmsNormBackward(
  dy: Float32Array,
  x: Float32Array,
  g: Float32Array,
  rstd: Float32Array,
  dx: Float32Array,
  dg: Float32Array,
  rows: number,
  d: number,
): void {
  for (let t = 0; t < rows; t++) {
    const o = t * d;
    const r = rstd[t];
    let dot = 0;
    for (let j = 0; j < d; j++) {
      const xv = x[o + j];
      const dv = dy[o + j];
      dot += g[j] * dv * xv;
      dg[j] += dv * xv * r;
    }
    const c = (r * r * r * dot) / d;
    for (let j = 0; j < d; j++) dx[o + j] += r * g[j] * dy[o + j] - c * x[o + j];
  }
}

export interface RopeTables {
  /** cos/sin of θ(pos, i) at [pos · half + i], half = headDim / 2. */
  cos: Float32Array;
  sin: Float32Array;
  half: number;
  maxLen: number;
}

const ropeCache = new Map<string, RopeTables>();

/** θ(pos, i) = pos · base^(−2i/headDim), computed in float64, stored float32. Cached. */
export function ropeTables(maxLen: number, headDim: number, base: number): RopeTables {
  const key = `${maxLen}/${headDim}/${base}`;
  const hit = ropeCache.get(key);
  if (hit) return hit;
  const half = headDim / 2;
  const cos = new Float32Array(maxLen * half);
  const sin = new Float32Array(maxLen * half);
  for (let i = 0; i < half; i++) {
    const freq = base ** ((-2 * i) / headDim);
    for (let pos = 0; pos < maxLen; pos++) {
      const a = pos * freq;
      cos[pos * half + i] = Math.cos(a);
      sin[pos * half + i] = Math.sin(a);
    }
  }
  const t = { cos, sin, half, maxLen };
  if (ropeCache.size > 16) ropeCache.clear();
  ropeCache.set(key, t);
  return t;
}

/**
 * Rotary position embedding in place on rows [row0, row0 + len) of a [rows, nHeads·headDim]
 * matrix; the row at row0 + p has position p.
 *
 * Convention: the ORIGINAL llama / GGUF one that llama.cpp's LLAMA architecture expects
 * (rope type "norm"): in every head, ADJACENT dims (2i, 2i+1) form a pair rotated by
 * θ_i = pos · base^(−2i/headDim):
 *   x'[2i]   = x[2i]·cos θ − x[2i+1]·sin θ
 *   x'[2i+1] = x[2i]·sin θ + x[2i+1]·cos θ
 * (NOT the rotate-half / NeoX pairing (i, i + headDim/2) of Hugging Face llama; HF→GGUF
 * conversion permutes Q/K rows to turn one into the other.)
 *
 * `inverse` applies the transposed rotation (angle −θ): the backward pass of the forward.
 */
export function ropeInPlace(
  x: Float32Array,
  row0: number,
  len: number,
  nHeads: number,
  headDim: number,
  tables: RopeTables,
  inverse: boolean,
): void {
  const d = nHeads * headDim;
  const half = tables.half;
  const { cos, sin } = tables;
  const sgn = inverse ? -1 : 1;
  for (let p = 0; p < len; p++) {
    const o = (row0 + p) * d;
    const tb = p * half;
    for (let h = 0; h < nHeads; h++) {
      const ho = o + h * headDim;
      for (let i = 0; i < half; i++) {
        const c = cos[tb + i];
        const s = sgn * sin[tb + i];
        const a = x[ho + 2 * i];
        const b = x[ho + 2 * i + 1];
        x[ho + 2 * i] = a * c - b * s;
        x[ho + 2 * i + 1] = a * s + b * c;
      }
    }
  }
}

/** out = silu(gate) ⊙ up, silu(z) = z·σ(z); σ(gate) is written into sig for the backward pass. */
export function swigluForward(
  gate: Float32Array,
  up: Float32Array,
  sig: Float32Array,
  out: Float32Array,
  n: number,
): void {
  for (let i = 0; i < n; i++) {
    const z = gate[i];
    const s = 1 / (1 + Math.exp(-z));
    sig[i] = s;
    out[i] = z * s * up[i];
  }
}

/**
 * Backward of swigluForward: dGate = dOut ⊙ up ⊙ silu'(gate), dUp = dOut ⊙ silu(gate),
 * silu'(z) = σ(z)·(1 + z·(1 − σ(z))). Overwrites dGate and dUp.
 */
export function swigluBackward(
  dOut: Float32Array,
  gate: Float32Array,
  sig: Float32Array,
  up: Float32Array,
  dGate: Float32Array,
  dUp: Float32Array,
  n: number,
): void {
  for (let i = 0; i < n; i++) {
    const z = gate[i];
    const s = sig[i];
    const dv = dOut[i];
    dUp[i] = dv * z * s;
    dGate[i] = dv * up[i] * s * (1 + z * (1 - s));
  }
}

/** a += b (elementwise, first n entries). */
export function addInto(a: Float32Array, b: Float32Array, n: number): void {
  for (let i = 0; i < n; i++) a[i] += b[i];
}
