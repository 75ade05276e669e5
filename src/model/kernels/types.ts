/**
 * The one numeric primitive the model needs to be fast: single-precision GEMM, row-major,
 * with the cblas_sgemm contract. Everything else (norms, softmax, RoPE) is plain TypeScript.
 *
 *   C[m, n] = alpha · Σ_k op(A)[m, k] · op(B)[k, n] + beta · C[m, n]
 *
 * op(A) is A (M×K, leading dimension lda) or Aᵀ when transA (A stored K×M). Same for B.
 * Offsets index into the arrays, so callers can address slices without copying.
 */
export interface Kernels {
  /** "js" (pure TypeScript), "wasm" (SIMD WebAssembly) or "native" (OpenBLAS via N-API). */
  readonly name: string;
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
