import { checkGemmArgs, scaleC, span } from "./gemm-args.js";
import type { Kernels } from "./types.js";
import {
  DEFAULT_GEMM_OPTIONS,
  type GemmModuleOptions,
  generateGemmModule,
  relaxedSimdSupported,
  SMALL_M,
  smallTile,
  type WasmMemory,
  wasmApi,
} from "./wasm-gen.js";

/**
 * The "wasm" kernel: a packed, blocked SGEMM whose inner loops are WebAssembly SIMD (f32x4),
 * generated as bytes by wasm-gen.ts, so it needs no toolchain and no npm dependency.
 *
 * Each call copies the addressed spans of A, B and C into one wasm memory (grown when a call
 * needs more, never shrunk, reused between calls), runs the BLIS loop nest
 *
 *   for jc (NC columns):  for pc (KC depth):  pack B block;  for ic (MC rows):  pack A block; macro
 *
 * and copies the C span back. Products with at most SMALL_M (4) rows or columns, the sampler's
 * decode steps, skip packing instead: B goes over in cache-sized chunks of whole rows to a kernel
 * that reads it in place once (see `small_`). Packing makes every transpose combination, offset and leading
 * dimension look the same to the micro-kernel.
 */

export interface WasmGemmOptions extends GemmModuleOptions {
  /** Rows of op(A) packed per block (rounded up to a multiple of mr). */
  mc: number;
  /** Depth of one block (k range summed before C is touched). */
  kc: number;
  /** Columns of op(B) packed per block (rounded up to a multiple of nr). */
  nc: number;
  /**
   * Send products with ≤ SMALL_M rows or columns to the unpacked kernels (`small_`). Off by default:
   * they sum in a different order than the packed path, so a row's result would depend on how many
   * rows share its call, and the sampler promises batch-independent samples bit for bit.
   */
  smallM?: boolean;
}

export const DEFAULT_WASM_OPTIONS: WasmGemmOptions = { ...DEFAULT_GEMM_OPTIONS, mc: 120, kc: 256, nc: 2048 };

/** A small-m kernel: dot{R}x{J} or axpy{R}x{V} (see wasm-gen.ts); all arguments in bytes but counts. */
type SmallFn = (
  x: number,
  xs: number,
  b: number,
  ldb: number,
  count: number,
  k: number,
  out: number,
  outS: number,
) => void;

/** Floats of B copied into wasm memory per small-m kernel call: small enough to stay in L2 until read. */
const CHUNK = 32768;

interface GemmExports {
  packA(src: number, rs: number, cs: number, rows: number, kc: number, dst: number): void;
  packB(src: number, rs: number, cs: number, cols: number, kc: number, dst: number): void;
  macro(
    mc: number,
    nc: number,
    kc: number,
    pa: number,
    pb: number,
    c: number,
    ldc: number,
    alpha: number,
    beta: number,
    tmp: number,
  ): void;
}

const PAGE = 65536;
const align16 = (bytes: number): number => (bytes + 15) & ~15;
const roundUp = (v: number, to: number): number => Math.ceil(v / to) * to;

/** Whether this engine runs WebAssembly with 128-bit SIMD (Node ≥ 16.4). */
export function wasmSimdSupported(): boolean {
  try {
    return wasmApi()?.validate(generateGemmModule()) ?? false;
  } catch {
    return false;
  }
}

class WasmKernels implements Kernels {
  readonly name = "wasm";
  /** Whether the inner loop uses relaxed-SIMD fused multiply-add. */
  readonly fma: boolean;
  private readonly fns: GemmExports;
  private readonly memory: WasmMemory;
  private heap: Float32Array;
  private readonly o: WasmGemmOptions;
  private readonly tmpAt: number;
  private readonly paAt: number;
  private readonly pbAt: number;
  private readonly dataAt: number;

  /** Small-m kernels by name (dot1x4, axpy2x4, …). */
  private readonly small: Record<string, SmallFn>;

  constructor(options: WasmGemmOptions) {
    const mc = roundUp(options.mc, options.mr);
    const nc = roundUp(options.nc, options.nr);
    this.o = { ...options, mc, nc };
    this.fma = options.fma;
    // Layout (bytes): [tmp tile][packed A block][packed B block][A | B | C spans of the current call].
    this.tmpAt = 0;
    this.paAt = align16(options.mr * options.nr * 4);
    this.pbAt = this.paAt + align16(mc * options.kc * 4);
    this.dataAt = this.pbAt + align16(nc * options.kc * 4);
    const api = wasmApi();
    if (!api) throw new Error("wasm kernels: this JavaScript engine has no WebAssembly");
    this.memory = new api.Memory({ initial: Math.ceil((this.dataAt + (1 << 20)) / PAGE) });
    const module = new api.Module(generateGemmModule(options));
    const instance = new api.Instance(module, { env: { mem: this.memory } });
    this.fns = instance.exports as unknown as GemmExports;
    this.small = instance.exports as unknown as Record<string, SmallFn>;
    this.heap = new Float32Array(this.memory.buffer);
  }

  /** Bytes of wasm memory currently reserved (grows with the largest call so far). */
  get memoryBytes(): number {
    return this.memory.buffer.byteLength;
  }

  private ensure(bytes: number): void {
    const have = this.memory.buffer.byteLength;
    if (bytes <= have) return;
    // Grow geometrically so a slowly increasing sequence of shapes does not grow on every call.
    const want = Math.max(bytes, Math.min(have * 2, have + (256 << 20)));
    this.memory.grow(Math.ceil((want - have) / PAGE));
    this.heap = new Float32Array(this.memory.buffer);
  }

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
  ): void {
    checkGemmArgs("wasm", transA, transB, m, n, k, a, aOff, lda, b, bOff, ldb, c, cOff, ldc);
    if (m === 0 || n === 0) return;
    if (k === 0 || alpha === 0) {
      scaleC(m, n, beta, c, cOff, ldc);
      return;
    }
    if (this.o.smallM && m <= SMALL_M && m <= n) {
      // One-row-ish product: R = m vectors (rows of op(A)) against B; C[r, j] at cOff + r·ldc + j.
      const x = (r: number, p: number): number => (transA ? a[aOff + p * lda + r] : a[aOff + r * lda + p]);
      this.small_(m, n, k, alpha, x, b, bOff, ldb, transB, beta, c, cOff, ldc, 1);
      return;
    }
    if (this.o.smallM && n <= SMALL_M) {
      // The transposed problem, Cᵀ = op(B)ᵀ·op(A)ᵀ: R = n vectors (columns of op(B)) against A.
      const x = (r: number, p: number): number => (transB ? b[bOff + r * ldb + p] : b[bOff + p * ldb + r]);
      this.small_(n, m, k, alpha, x, a, aOff, lda, !transA, beta, c, cOff, 1, ldc);
      return;
    }
    const aSpan = transA ? span(k, m, lda) : span(m, k, lda);
    const bSpan = transB ? span(n, k, ldb) : span(k, n, ldb);
    const cSpan = span(m, n, ldc);
    const aAt = this.dataAt;
    const bAt = aAt + align16(aSpan * 4);
    const cAt = bAt + align16(bSpan * 4);
    this.ensure(cAt + cSpan * 4 + 64);
    const heap = this.heap;
    heap.set(a.subarray(aOff, aOff + aSpan), aAt >> 2);
    heap.set(b.subarray(bOff, bOff + bSpan), bAt >> 2);
    // With beta = 0 and dense rows, C is write-only; otherwise bring its span (gaps included) in.
    if (beta !== 0 || ldc !== n) heap.set(c.subarray(cOff, cOff + cSpan), cAt >> 2);

    const { mc: MC, kc: KC, nc: NC } = this.o;
    const f = this.fns;
    // Byte strides of op(A)[i, p] and op(B)[p, j] in wasm memory.
    const aRow = transA ? 4 : lda * 4;
    const aCol = transA ? lda * 4 : 4;
    const bRow = transB ? 4 : ldb * 4;
    const bCol = transB ? ldb * 4 : 4;
    for (let jc = 0; jc < n; jc += NC) {
      const nc = Math.min(NC, n - jc);
      for (let pc = 0; pc < k; pc += KC) {
        const kc = Math.min(KC, k - pc);
        // packB walks columns j of op(B): "row" stride is the j stride, "column" stride the p stride.
        f.packB(bAt + pc * bRow + jc * bCol, bCol, bRow, nc, kc, this.pbAt);
        const betaNow = pc === 0 ? beta : 1;
        for (let ic = 0; ic < m; ic += MC) {
          const mc = Math.min(MC, m - ic);
          f.packA(aAt + ic * aRow + pc * aCol, aRow, aCol, mc, kc, this.paAt);
          f.macro(
            mc,
            nc,
            kc,
            this.paAt,
            this.pbAt,
            cAt + (ic * ldc + jc) * 4,
            ldc,
            alpha,
            betaNow,
            this.tmpAt,
          );
        }
      }
    }
    c.set(heap.subarray(cAt >> 2, (cAt >> 2) + cSpan), cOff);
  }

  /**
   * C[r·cr + j·cc] = alpha·Σ_p x(r, p)·M[j, p] + beta·C[…] for r < R ≤ SMALL_M, j < n, where the
   * matrix M is stored [n, k] (`rowsAreOutputs`, dot kernels) or [k, n] (axpy kernels) at
   * mat[mOff] with leading dimension ldm. x is gathered into wasm memory; M is copied over in
   * chunks of whole rows, each consumed by a kernel while it is still in cache, and never packed.
   * Sums land in an R×n scratch; the k tail (dot) or column tail (axpy) that is not a whole f32x4 is
   * added here, as is alpha/beta (beta = 0 never reads C).
   */
  private small_(
    R: number,
    n: number,
    k: number,
    alpha: number,
    x: (r: number, p: number) => number,
    mat: Float32Array,
    mOff: number,
    ldm: number,
    rowsAreOutputs: boolean,
    beta: number,
    c: Float32Array,
    cOff: number,
    cr: number,
    cc: number,
  ): void {
    const { J, V } = smallTile(R);
    const xAt = this.dataAt;
    const outAt = xAt + align16(R * k * 4);
    const bufAt = outAt + align16(R * n * 4);
    const unit = rowsAreOutputs ? J : 1; // rows of M a kernel call needs at least
    const rowsPer = Math.max(unit, Math.floor(CHUNK / ldm / unit) * unit);
    this.ensure(bufAt + rowsPer * ldm * 4 + 64);
    const heap = this.heap;
    const x0 = xAt >> 2;
    for (let r = 0; r < R; r++) for (let p = 0; p < k; p++) heap[x0 + r * k + p] = x(r, p);
    const o0 = outAt >> 2;
    heap.fill(0, o0, o0 + R * n);
    const f = this.small;
    if (rowsAreOutputs) {
      const k4 = k & ~3;
      const main = f[`dot${R}x${J}`];
      const one = f[`dot${R}x1`];
      for (let j0 = 0; j0 < n; j0 += rowsPer) {
        const rows = Math.min(rowsPer, n - j0);
        heap.set(mat.subarray(mOff + j0 * ldm, mOff + (j0 + rows - 1) * ldm + k), bufAt >> 2);
        const full = rows - (rows % J);
        const out = outAt + j0 * 4;
        main(xAt, k * 4, bufAt, ldm * 4, full, k4, out, n * 4);
        if (full < rows)
          one(xAt, k * 4, bufAt + full * ldm * 4, ldm * 4, rows - full, k4, out + full * 4, n * 4);
      }
      for (let p = k4; p < k; p++) {
        for (let r = 0; r < R; r++) {
          const xv = heap[x0 + r * k + p];
          const o = o0 + r * n;
          for (let j = 0; j < n; j++) heap[o + j] += xv * mat[mOff + j * ldm + p];
        }
      }
    } else {
      const n4 = n & ~3;
      const wide = n4 - (n4 % (4 * V));
      const main = f[`axpy${R}x${V}`];
      const one = f[`axpy${R}x1`];
      for (let p0 = 0; p0 < k; p0 += rowsPer) {
        const rows = Math.min(rowsPer, k - p0);
        heap.set(mat.subarray(mOff + p0 * ldm, mOff + (p0 + rows - 1) * ldm + n), bufAt >> 2);
        const xp = xAt + p0 * 4;
        main(xp, k * 4, bufAt, ldm * 4, wide, rows, outAt, n * 4);
        if (wide < n4) one(xp, k * 4, bufAt + wide * 4, ldm * 4, n4 - wide, rows, outAt + wide * 4, n * 4);
      }
      for (let j = n4; j < n; j++) {
        for (let r = 0; r < R; r++) {
          let s = 0;
          for (let p = 0; p < k; p++) s += heap[x0 + r * k + p] * mat[mOff + p * ldm + j];
          heap[o0 + r * n + j] = s;
        }
      }
    }
    for (let r = 0; r < R; r++) {
      const o = o0 + r * n;
      const cRow = cOff + r * cr;
      if (beta === 0) for (let j = 0; j < n; j++) c[cRow + j * cc] = alpha * heap[o + j];
      else for (let j = 0; j < n; j++) c[cRow + j * cc] = alpha * heap[o + j] + beta * c[cRow + j * cc];
    }
  }
}

/**
 * A new wasm kernel instance with its own memory. Options are for tuning and tests; by default the
 * inner loop uses fused multiply-add when the engine supports relaxed SIMD (Node ≥ 22), plain
 * mul + add otherwise (Node 20).
 */
export function createWasmKernels(
  options: Partial<WasmGemmOptions> = {},
): Kernels & { readonly fma: boolean } {
  const fma = options.fma ?? relaxedSimdSupported();
  return new WasmKernels({ ...DEFAULT_WASM_OPTIONS, ...options, fma });
}

let shared: (Kernels & { readonly fma: boolean }) | undefined;

/** The process-wide wasm kernel (created on first use). */
export function wasmKernels(): Kernels & { readonly fma: boolean } {
  shared ??= createWasmKernels();
  return shared;
}
