import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { jsKernels } from "../../src/model/kernels/js.js";
import { nativeStatus, nativeThreadsFromEnv } from "../../src/model/kernels/native.js";
import { availableKernels, selectKernels } from "../../src/model/kernels/select.js";
import type { Kernels } from "../../src/model/kernels/types.js";
import { createWasmKernels, wasmKernels } from "../../src/model/kernels/wasm.js";
import { generateGemmModule, relaxedSimdSupported, wasmApi } from "../../src/model/kernels/wasm-gen.js";

/** A GEMM problem laid out inside larger arrays: offsets and leading dimensions with slack. */
interface Problem {
  transA: boolean;
  transB: boolean;
  m: number;
  n: number;
  k: number;
  alpha: number;
  beta: number;
  a: Float32Array;
  aOff: number;
  lda: number;
  b: Float32Array;
  bOff: number;
  ldb: number;
  c: Float32Array;
  cOff: number;
  ldc: number;
}

function makeProblem(
  rng: Rng,
  transA: boolean,
  transB: boolean,
  m: number,
  n: number,
  k: number,
  alpha: number,
  beta: number,
  slack: boolean,
): Problem {
  const pad = (): number => (slack ? 1 + rng.int(5) : 0);
  const aRows = transA ? k : m;
  const aCols = transA ? m : k;
  const bRows = transB ? n : k;
  const bCols = transB ? k : n;
  const lda = Math.max(1, aCols) + pad();
  const ldb = Math.max(1, bCols) + pad();
  const ldc = Math.max(1, n) + pad();
  const aOff = pad();
  const bOff = pad();
  const cOff = pad();
  const fill = (len: number): Float32Array => Float32Array.from({ length: len }, () => rng.float() * 2 - 1);
  const a = fill(aOff + aRows * lda + pad());
  const b = fill(bOff + bRows * ldb + pad());
  const c = fill(cOff + m * ldc + pad());
  // beta = 0 must not read C: plant NaN inside the view (the gaps stay numbers, and must stay unchanged).
  if (beta === 0) for (let i = 0; i < m; i++) c.fill(Number.NaN, cOff + i * ldc, cOff + i * ldc + n);
  return { transA, transB, m, n, k, alpha, beta, a, aOff, lda, b, bOff, ldb, c, cOff, ldc };
}

/** Float64 reference; also returns, per element, Σ|alpha·a·b| + |beta·c| to scale the tolerance. */
function reference(p: Problem): { c: Float64Array; scale: Float64Array } {
  const out = Float64Array.from(p.c);
  const scale = new Float64Array(p.c.length);
  for (let i = 0; i < p.m; i++) {
    for (let j = 0; j < p.n; j++) {
      let s = 0;
      let mag = 0;
      for (let q = 0; q < p.k; q++) {
        const av = p.transA ? p.a[p.aOff + q * p.lda + i] : p.a[p.aOff + i * p.lda + q];
        const bv = p.transB ? p.b[p.bOff + j * p.ldb + q] : p.b[p.bOff + q * p.ldb + j];
        s += av * bv;
        mag += Math.abs(av * bv);
      }
      const at = p.cOff + i * p.ldc + j;
      const old = p.c[at];
      const betaPart = p.beta === 0 ? 0 : p.beta * old;
      out[at] = (p.alpha === 0 ? 0 : p.alpha * s) + betaPart;
      scale[at] = Math.abs(p.alpha) * mag + Math.abs(betaPart);
    }
  }
  return { c: out, scale };
}

function run(kernels: Kernels, p: Problem): Float32Array {
  const c = p.c.slice();
  kernels.gemm(
    p.transA,
    p.transB,
    p.m,
    p.n,
    p.k,
    p.alpha,
    p.a,
    p.aOff,
    p.lda,
    p.b,
    p.bOff,
    p.ldb,
    p.beta,
    c,
    p.cOff,
    p.ldc,
  );
  return c;
}

function assertMatches(kernels: Kernels, p: Problem, what: string): void {
  const got = run(kernels, p);
  const ref = reference(p);
  for (let at = 0; at < got.length; at++) {
    const want = ref.c[at];
    if (Number.isNaN(want)) {
      assert.ok(Number.isNaN(got[at]), `${what}: element ${at} should be NaN`);
      continue;
    }
    const tol = 1e-5 * ref.scale[at] + 1e-30;
    if (!(Math.abs(got[at] - want) <= tol)) {
      assert.fail(
        `${what}: element ${at} is ${got[at]}, expected ${want} (tolerance ${tol.toExponential(2)})`,
      );
    }
  }
}

const TRANSPOSES: [boolean, boolean][] = [
  [false, false],
  [true, false],
  [false, true],
  [true, true],
];

// Odd sizes, sizes around the micro-tile (6×8) and block sizes, a GEMV-like row, a single column,
// and depths past one k block (256) so the beta-then-accumulate path runs.
const SHAPES: [number, number, number][] = [
  [1, 1, 1],
  [3, 5, 7],
  [17, 33, 129],
  [33, 17, 3],
  [1, 130, 17],
  [129, 1, 33],
  [6, 8, 4],
  [12, 16, 300],
  [130, 67, 9],
];

const SCALARS: [number, number][] = [
  [1, 0],
  [0.5, 1],
  [-1.25, 0.375],
];

function checkKernel(kernels: Kernels, seed: string): void {
  const rng = Rng.seeded(seed);
  for (const [ta, tb] of TRANSPOSES) {
    for (const [m, n, k] of SHAPES) {
      for (const [alpha, beta] of SCALARS) {
        for (const slack of [false, true]) {
          const p = makeProblem(rng, ta, tb, m, n, k, alpha, beta, slack);
          assertMatches(
            kernels,
            p,
            `${kernels.name} tA=${ta} tB=${tb} ${m}x${n}x${k} α=${alpha} β=${beta} slack=${slack}`,
          );
        }
      }
    }
  }
}

// One-row and one-column products (the sampler's decode steps): the native kernel sends these to
// cblas_sgemv and the wasm kernel to its unpacked small-m kernels (≤ 4 rows or columns). Sizes cross
// the wasm kernel's f32x4 width (k, n not multiples of 4), its register tiles and its B chunks
// (32768 floats: 1×1344×512 needs 21 of them either way round).
const ONE_ROW_SHAPES: [number, number, number][] = [
  [1, 1344, 512],
  [1, 7, 3],
  [1, 1, 300],
  [2, 45, 9],
  [3, 203, 301],
  [4, 18, 6],
  [301, 1, 203],
  [77, 2, 5],
  [33, 4, 67],
  [5, 3, 2],
];

function checkOneRow(kernels: Kernels, seed: string): void {
  const rng = Rng.seeded(seed);
  for (const [ta, tb] of TRANSPOSES) {
    for (const [m, n, k] of ONE_ROW_SHAPES) {
      for (const [alpha, beta] of SCALARS) {
        for (const slack of [false, true]) {
          const p = makeProblem(rng, ta, tb, m, n, k, alpha, beta, slack);
          assertMatches(
            kernels,
            p,
            `${kernels.name} one-row tA=${ta} tB=${tb} ${m}x${n}x${k} α=${alpha} β=${beta} slack=${slack}`,
          );
        }
      }
    }
  }
}

function checkEdgeCases(kernels: Kernels): void {
  const rng = Rng.seeded("edge");
  // k = 0: C = beta·C; alpha = 0: A and B are not read (NaN there must not leak), C = beta·C.
  for (const [alpha, beta, k] of [
    [1, 0.5, 0],
    [1, 0, 0],
    [0, 2, 5],
    [0, 0, 5],
  ]) {
    const p = makeProblem(rng, false, true, 7, 9, k, alpha, beta, true);
    if (alpha === 0) {
      p.a.fill(Number.NaN);
      p.b.fill(Number.NaN);
    }
    const got = run(kernels, p);
    for (let i = 0; i < p.m; i++) {
      for (let j = 0; j < p.n; j++) {
        const at = p.cOff + i * p.ldc + j;
        const want = beta === 0 ? 0 : Math.fround(beta * p.c[at]);
        assert.ok(
          Math.abs(got[at] - want) <= 1e-6 * Math.abs(want),
          `${kernels.name} α=${alpha} β=${beta} k=${k}`,
        );
      }
    }
  }
  // m = 0 or n = 0 leaves everything alone.
  const c = Float32Array.from([1, 2, 3]);
  kernels.gemm(false, false, 0, 3, 2, 1, new Float32Array(0), 0, 2, new Float32Array(6), 0, 3, 0, c, 0, 3);
  assert.deepEqual([...c], [1, 2, 3]);
  // Views past the end of an array or a too-small leading dimension throw, naming the problem.
  const a = new Float32Array(12);
  const b = new Float32Array(12);
  assert.throws(
    () => kernels.gemm(false, false, 3, 4, 4, 1, a, 1, 4, b, 0, 4, 0, new Float32Array(12), 0, 4),
    /A view/,
  );
  assert.throws(
    () => kernels.gemm(false, false, 3, 4, 3, 1, a, 0, 3, b, 0, 3, 0, new Float32Array(12), 0, 4),
    /ldb/,
  );
  assert.throws(
    () => kernels.gemm(false, false, 3, 4, 3, 1, a, 0, 3, b, 0, 4, 0, new Float32Array(11), 0, 4),
    /C view/,
  );
}

describe("GEMM kernels match a float64 reference", () => {
  it("js", () => {
    checkKernel(jsKernels, "js");
    checkOneRow(jsKernels, "js-one-row");
    checkEdgeCases(jsKernels);
  });

  it("wasm", () => {
    checkKernel(wasmKernels(), "wasm");
    checkOneRow(wasmKernels(), "wasm-one-row");
    checkOneRow(createWasmKernels({ smallM: true }), "wasm-small-m");
    checkEdgeCases(wasmKernels());
  });

  it("wasm with tiny blocks (every block loop and edge tile runs many times)", () => {
    const small = createWasmKernels({ mc: 7, kc: 5, nc: 9 });
    checkKernel(small, "wasm-small");
    // Other register tiles the generator can emit.
    for (const [mr, nr, unroll, shuffle] of [
      [6, 8, 2, false],
      [3, 12, 4, false],
      [1, 4, 2, false],
      [8, 8, 1, true],
      [6, 4, 2, true],
    ] as const) {
      const w = createWasmKernels({ mr, nr, unroll, shuffle, mc: 10, kc: 11, nc: 13 });
      checkKernel(w, `wasm-${mr}x${nr}`);
    }
  });

  it("wasm with relaxed-SIMD fused multiply-add", {
    skip: relaxedSimdSupported()
      ? false
      : "engine lacks relaxed SIMD (Node ≥ 22, or --experimental-wasm-relaxed-simd)",
  }, () => {
    checkKernel(createWasmKernels({ fma: true, mc: 10, kc: 11, nc: 13 }), "wasm-fma");
    checkOneRow(createWasmKernels({ fma: true, smallM: true }), "wasm-fma-small-m");
  });

  const native = nativeStatus();
  it("native", {
    skip: native.available
      ? false
      : `native addon not built (${native.reason}); run \`npm run build:native\``,
  }, () => {
    if (!native.available) return;
    checkKernel(native.kernels, "native");
    checkOneRow(native.kernels, "native-one-row");
    checkEdgeCases(native.kernels);
  });
});

describe("wasm kernel", () => {
  it("emits a module the engine validates", () => {
    const api = wasmApi();
    assert.ok(api, "WebAssembly is present");
    assert.ok(api.validate(generateGemmModule()));
    assert.throws(() => generateGemmModule({ mr: 6, nr: 6, fma: false, unroll: 1 }), /nr must be/);
  });

  it("reuses its memory across calls and grows it only for larger problems", () => {
    const w = createWasmKernels() as ReturnType<typeof createWasmKernels> & { memoryBytes: number };
    const rng = Rng.seeded("mem");
    const small = makeProblem(rng, false, false, 64, 64, 64, 1, 0, false);
    run(w, small);
    const after = w.memoryBytes;
    for (let i = 0; i < 3; i++) run(w, small);
    assert.equal(w.memoryBytes, after);
    const big = makeProblem(rng, true, false, 200, 300, 500, 1, 0, false);
    assertMatches(w, big, "big after small");
    assert.ok(w.memoryBytes >= 4 * (200 * 500 + 500 * 300 + 200 * 300));
  });
});

describe("selectKernels", () => {
  const noNative = { MAGE_NATIVE_ADDON: "/nonexistent/mage_blas.node" };

  it("returns the explicitly requested kernels", async () => {
    assert.equal((await selectKernels("js", {})).name, "js");
    assert.equal((await selectKernels("wasm", {})).name, "wasm");
  });

  it("auto picks native when it loads, else wasm", async () => {
    assert.equal((await selectKernels("auto", noNative)).name, "wasm");
    const expected = nativeStatus({}).available ? "native" : "wasm";
    assert.equal((await selectKernels("auto", {})).name, expected);
    assert.equal((await selectKernels(undefined, {})).name, expected);
  });

  it("lets MAGE_KERNELS override the preference", async () => {
    assert.equal((await selectKernels("native", { MAGE_KERNELS: "js" })).name, "js");
    assert.equal((await selectKernels("js", { ...noNative, MAGE_KERNELS: "auto" })).name, "wasm");
    await assert.rejects(selectKernels("js", { MAGE_KERNELS: "cuda" }), (e: unknown) => {
      assert.ok(e instanceof UsageError);
      assert.match(e.message, /MAGE_KERNELS "cuda".*auto, js, wasm, native/);
      return true;
    });
  });

  it("explains an unavailable or unknown choice", async () => {
    await assert.rejects(selectKernels("native", noNative), (e: unknown) => {
      assert.ok(e instanceof UsageError);
      assert.match(e.message, /"native" is unavailable.*not found.*npm run build:native.*libopenblas-dev/);
      return true;
    });
    await assert.rejects(selectKernels("blas", {}), (e: unknown) => {
      assert.ok(e instanceof UsageError);
      assert.match(e.message, /unknown kernels "blas"; valid choices: auto, js, wasm, native/);
      return true;
    });
  });

  it("lists what is available, js first", async () => {
    const names = (await availableKernels(noNative)).map((k) => k.name);
    assert.deepEqual(names, ["js", "wasm"]);
    const all = (await availableKernels({})).map((k) => k.name);
    assert.deepEqual(all, nativeStatus({}).available ? ["js", "wasm", "native"] : ["js", "wasm"]);
  });

  it("reads the OpenBLAS thread count from the environment (default 1)", () => {
    assert.equal(nativeThreadsFromEnv({}), 1);
    assert.equal(nativeThreadsFromEnv({ OPENBLAS_NUM_THREADS: "3" }), 3);
    assert.equal(nativeThreadsFromEnv({ MAGE_BLAS_THREADS: "2", OPENBLAS_NUM_THREADS: "3" }), 2);
    assert.throws(() => nativeThreadsFromEnv({ MAGE_BLAS_THREADS: "two" }), UsageError);
    const native = nativeStatus({});
    if (native.available) {
      native.kernels.setThreads(2);
      assert.equal(native.kernels.threads(), 2);
      native.kernels.setThreads(1);
      assert.equal(native.kernels.threads(), 1);
    }
  });
});
