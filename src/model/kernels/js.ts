import type { Kernels } from "./types.js";

/**
 * Pure TypeScript GEMM. Loops are ordered so the innermost loop walks contiguous memory
 * of both B and C (the i-k-j order); transposed operands are handled by choosing strides.
 */
export const jsKernels: Kernels = {
  name: "js",
  gemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc) {
    for (let i = 0; i < m; i++) {
      const ci = cOff + i * ldc;
      if (beta === 0) c.fill(0, ci, ci + n);
      else if (beta !== 1) for (let j = 0; j < n; j++) c[ci + j] *= beta;
    }
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
