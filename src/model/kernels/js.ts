import { checkGemmArgs, scaleC } from "./gemm-args.js";
import type { Kernels } from "./types.js";

/**
 * Pure TypeScript GEMM. Loops are ordered so the innermost loop walks contiguous memory
 * of both B and C (the i-k-j order); transposed operands are handled by choosing strides.
 */
export const jsKernels: Kernels = {
  name: "js",
  gemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc) {
    checkGemmArgs("js", transA, transB, m, n, k, a, aOff, lda, b, bOff, ldb, c, cOff, ldc);
    // C = beta·C first (beta = 0 writes zeros, so NaN garbage in C is ignored).
    scaleC(m, n, beta, c, cOff, ldc);
    // As in BLAS, alpha = 0 does not read A or B.
    if (alpha === 0 || k === 0) return;
    if (!transB) {
      // B is k×n row-major: row p of B is contiguous.
      for (let i = 0; i < m; i++) {
        const ci = cOff + i * ldc;
        for (let p = 0; p < k; p++) {
          const av = alpha * (transA ? a[aOff + p * lda + i] : a[aOff + i * lda + p]);
          if (av === 0) continue;
          const bp = bOff + p * ldb;
          for (let j = 0; j < n; j++) c[ci + j] += av * b[bp + j];
        }
      }
    } else {
      // B stored n×k: C[i, j] = Σ_p A[i, p] · B[j, p], a dot product of two contiguous rows when A is not transposed.
      for (let i = 0; i < m; i++) {
        const ci = cOff + i * ldc;
        for (let j = 0; j < n; j++) {
          const bj = bOff + j * ldb;
          let s = 0;
          if (!transA) {
            const ai = aOff + i * lda;
            for (let p = 0; p < k; p++) s += a[ai + p] * b[bj + p];
          } else {
            for (let p = 0; p < k; p++) s += a[aOff + p * lda + i] * b[bj + p];
          }
          c[ci + j] += alpha * s;
        }
      }
    }
  },
};
