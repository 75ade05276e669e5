/** Argument checks shared by the GEMM kernels (cblas_sgemm rules, row-major). */

/** Elements spanned by a rows×cols row-major view with leading dimension ld (0 when empty). */
export function span(rows: number, cols: number, ld: number): number {
  return rows === 0 || cols === 0 ? 0 : (rows - 1) * ld + cols;
}

function isCount(v: number): boolean {
  return Number.isInteger(v) && v >= 0;
}

/**
 * Throws a RangeError naming the first bad argument: negative or fractional sizes, a leading
 * dimension below the stored row length, or a view that runs past the end of its array.
 */
export function checkGemmArgs(
  kernel: string,
  transA: boolean,
  transB: boolean,
  m: number,
  n: number,
  k: number,
  a: Float32Array,
  aOff: number,
  lda: number,
  b: Float32Array,
  bOff: number,
  ldb: number,
  c: Float32Array,
  cOff: number,
  ldc: number,
): void {
  const fail = (what: string): never => {
    throw new RangeError(
      `${kernel} gemm: ${what} (transA=${transA} transB=${transB} m=${m} n=${n} k=${k} ` +
        `lda=${lda} ldb=${ldb} ldc=${ldc} aOff=${aOff} bOff=${bOff} cOff=${cOff})`,
    );
  };
  if (!isCount(m) || !isCount(n) || !isCount(k)) fail("m, n and k must be non-negative integers");
  if (!isCount(aOff) || !isCount(bOff) || !isCount(cOff)) fail("offsets must be non-negative integers");
  const aRows = transA ? k : m;
  const aCols = transA ? m : k;
  const bRows = transB ? n : k;
  const bCols = transB ? k : n;
  if (!Number.isInteger(lda) || lda < Math.max(1, aCols)) fail(`lda must be an integer ≥ max(1, ${aCols})`);
  if (!Number.isInteger(ldb) || ldb < Math.max(1, bCols)) fail(`ldb must be an integer ≥ max(1, ${bCols})`);
  if (!Number.isInteger(ldc) || ldc < Math.max(1, n)) fail(`ldc must be an integer ≥ max(1, ${n})`);
  if (aOff + span(aRows, aCols, lda) > a.length) fail(`A view runs past the end of a (length ${a.length})`);
  if (bOff + span(bRows, bCols, ldb) > b.length) fail(`B view runs past the end of b (length ${b.length})`);
  if (cOff + span(m, n, ldc) > c.length) fail(`C view runs past the end of c (length ${c.length})`);
}

/** C = beta·C over the m×n view (beta = 0 writes zeros, ignoring NaN in C): the k = 0 / alpha = 0 case. */
export function scaleC(m: number, n: number, beta: number, c: Float32Array, cOff: number, ldc: number): void {
  if (beta === 1) return;
  for (let i = 0; i < m; i++) {
    const ci = cOff + i * ldc;
    if (beta === 0) c.fill(0, ci, ci + n);
    else for (let j = 0; j < n; j++) c[ci + j] *= beta;
  }
}
