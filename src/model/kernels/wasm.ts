import { checkGemmArgs, scaleC, span } from "./gemm-args.js";
import type { Kernels } from "./types.js";
import {
  DEFAULT_GEMM_OPTIONS,
  type GemmModuleOptions,
  generateGemmModule,
  relaxedSimdSupported,
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
 * and copies the C span back. Packing makes every transpose combination, offset and leading
 * dimension look the same to the micro-kernel.
 */

export interface WasmGemmOptions extends GemmModuleOptions {
  /** Rows of op(A) packed per block (rounded up to a multiple of mr). */
  mc: number;
  /** Depth of one block (k range summed before C is touched). */
  kc: number;
  /** Columns of op(B) packed per block (rounded up to a multiple of nr). */
  nc: number;
}

export const DEFAULT_WASM_OPTIONS: WasmGemmOptions = { ...DEFAULT_GEMM_OPTIONS, mc: 120, kc: 256, nc: 2048 };

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
