/**
 * Emits the WebAssembly module behind the "wasm" GEMM kernel, as bytes, with no assembler dependency.
 *
 * The module imports its memory (`env.mem`) and exports three functions that together run one
 * BLIS-style block of C += op(A)·op(B) (the loops over blocks and all bookkeeping live in wasm.ts):
 *
 *   packA(src, rowStride, colStride, rows, kc, dst)  copies `rows` rows of op(A) (kc columns each)
 *       into panels of MR rows, k-major (panel[p·MR + r]); the last panel is zero-padded.
 *   packB(src, rowStride, colStride, cols, kc, dst)  the same for columns of op(B), panels of NR.
 *       Strides are in bytes, so one function covers both transposed and plain storage.
 *   macro(mc, nc, kc, pa, pb, c, ldc, alpha, beta, tmp)  for every NR-wide B panel and MR-tall A panel,
 *       an MR×NR register tile of f32x4 accumulators is summed over kc and written to C as
 *       C = alpha·acc + beta·C (beta = 0 never reads C, so NaN garbage there is ignored).
 *
 * For products with at most SMALL_M rows (the sampler's decode steps: one row per sequence) the module
 * also exports unpacked kernels, dot{R}x{J} (matrix stored [n, k]: each output a dot product of
 * contiguous rows) and axpy{R}x{V} (matrix stored [k, n]: rows of B scaled and summed into register
 * columns), which read B where it lies, once.
 *
 * The micro-kernel holds MR·NR/4 accumulators. The default 4×8 tile (8 accumulators, 2 B vectors,
 * 4 broadcast A values, 1 temporary) is the largest that V8's TurboFan (Node 20) keeps entirely in
 * the 15 allocatable xmm registers: it hoists all of a k step's loads to the top of the loop, so
 * 6×8 or an unrolled loop spill accumulators to the stack. Measured on the 2-core Xeon they are all
 * within noise of each other (~25–30 GFLOP/s), so the spill-free one is the default. When the engine
 * supports relaxed SIMD, `fma` uses f32x4.relaxed_madd (one fused op instead of mul + add, ~20% faster).
 */

export interface GemmModuleOptions {
  /** Rows of the register tile (A panel height). */
  mr: number;
  /** Columns of the register tile (B panel width); a multiple of 4. */
  nr: number;
  /** Use f32x4.relaxed_madd in the inner loop (needs relaxed-SIMD support in the engine). */
  fma: boolean;
  /** How many k steps the inner loop does per iteration (1, 2 or 4). */
  unroll: number;
  /**
   * Broadcast A values with one v128 load per 4 rows plus lane shuffles, instead of one
   * load32_splat per row (fewer loads for the engine to hoist, so fewer register spills).
   */
  shuffle?: boolean;
}

export const DEFAULT_GEMM_OPTIONS: GemmModuleOptions = {
  mr: 4,
  nr: 8,
  fma: false,
  unroll: 1,
  shuffle: false,
};

// Value types.
const I32 = 0x7f;
const F32 = 0x7d;
const V128 = 0x7b;

// Core opcodes.
const BLOCK = 0x02;
const LOOP = 0x03;
const IF = 0x04;
const ELSE = 0x05;
const END = 0x0b;
const BR_IF = 0x0d;
const LOCAL_GET = 0x20;
const LOCAL_SET = 0x21;
const LOCAL_TEE = 0x22;
const F32_LOAD = 0x2a;
const F32_STORE = 0x38;
const I32_CONST = 0x41;
const F32_CONST = 0x43;
const I32_EQ = 0x46;
const I32_LT_S = 0x48;
const I32_GT_S = 0x4a;
const I32_AND = 0x71;
const F32_EQ = 0x5b;
const I32_ADD = 0x6a;
const I32_SUB = 0x6b;
const I32_MUL = 0x6c;
const F32_ADD = 0x92;
const F32_MUL = 0x94;
const SELECT = 0x1b;
const VOID = 0x40;

// SIMD opcodes (after the 0xfd prefix).
const V128_LOAD = 0x00;
const V128_LOAD32_SPLAT = 0x09;
const V128_STORE = 0x0b;
const I8X16_SHUFFLE = 0x0d;
const F32X4_SPLAT = 0x13;
const F32X4_EXTRACT_LANE = 0x1f;
const F32X4_ADD = 0xe4;
const F32X4_MUL = 0xe6;
const F32X4_RELAXED_MADD = 0x105;

function uleb(v: number): number[] {
  const out: number[] = [];
  do {
    let byte = v & 0x7f;
    v >>>= 7;
    if (v !== 0) byte |= 0x80;
    out.push(byte);
  } while (v !== 0);
  return out;
}

function sleb(v: number): number[] {
  const out: number[] = [];
  for (;;) {
    const byte = v & 0x7f;
    v >>= 7;
    if ((v === 0 && (byte & 0x40) === 0) || (v === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return out;
    }
    out.push(byte | 0x80);
  }
}

function str(s: string): number[] {
  const bytes = [...new TextEncoder().encode(s)];
  return [...uleb(bytes.length), ...bytes];
}

function vec(items: number[][]): number[] {
  return [...uleb(items.length), ...items.flat()];
}

function section(id: number, body: number[]): number[] {
  return [id, ...uleb(body.length), ...body];
}

type Code = number | Code[];

/** One function body under construction: locals plus a flat byte list. */
class Fn {
  private readonly localTypes: number[] = [];
  private readonly bytes: number[] = [];

  constructor(
    readonly name: string,
    readonly params: number[],
    readonly results: number[] = [],
  ) {}

  local(type: number): number {
    this.localTypes.push(type);
    return this.params.length + this.localTypes.length - 1;
  }

  emit(...code: Code[]): void {
    const walk = (c: Code): void => {
      if (typeof c === "number") this.bytes.push(c);
      else for (const x of c) walk(x);
    };
    for (const c of code) walk(c);
  }

  encode(): number[] {
    const groups: number[][] = [];
    for (const t of this.localTypes) groups.push([...uleb(1), t]);
    const body = [...vec(groups), ...this.bytes, END];
    return [...uleb(body.length), ...body];
  }
}

// Instruction helpers; each returns the bytes for one instruction.
const get = (i: number): Code => [LOCAL_GET, ...uleb(i)];
const set = (i: number): Code => [LOCAL_SET, ...uleb(i)];
const tee = (i: number): Code => [LOCAL_TEE, ...uleb(i)];
const i32 = (v: number): Code => [I32_CONST, ...sleb(v)];
const f32 = (v: number): Code => [F32_CONST, ...new Uint8Array(new Float32Array([v]).buffer)];
const simd = (op: number): Code => [0xfd, ...uleb(op)];
const memarg = (align: number, offset: number): Code => [...uleb(align), ...uleb(offset)];
const f32Load = (offset: number): Code => [F32_LOAD, memarg(2, offset)];
const f32Store = (offset: number): Code => [F32_STORE, memarg(2, offset)];
const vLoad = (offset: number): Code => [simd(V128_LOAD), memarg(4, offset)];
const vSplatLoad = (offset: number): Code => [simd(V128_LOAD32_SPLAT), memarg(2, offset)];
const vStore = (offset: number): Code => [simd(V128_STORE), memarg(4, offset)];
const brIf = (depth: number): Code => [BR_IF, ...uleb(depth)];
/** local += delta (i32, delta an instruction sequence or a constant). */
const addTo = (l: number, delta: Code | number): Code => [
  get(l),
  typeof delta === "number" ? i32(delta) : delta,
  I32_ADD,
  set(l),
];
/** min(a, b) for i32 values given as instruction sequences that have no side effects. */
const minI32 = (a: Code, b: Code): Code => [a, b, a, b, I32_LT_S, SELECT];

/**
 * pack(src, rs, cs, rows, kc, dst): dst[panel q][p·R + r] = mem[src + (q·R + r)·rs + p·cs], zero
 * where q·R + r ≥ rows. R is the panel height (MR for A, NR for B).
 */
function packFn(name: string, R: number): Fn {
  const f = new Fn(name, [I32, I32, I32, I32, I32, I32]);
  const [src, rs, cs, rows, kc, dst] = [0, 1, 2, 3, 4, 5];
  const i = f.local(I32);
  const h = f.local(I32); // rows in this panel
  const s = f.local(I32); // panel start in src
  const p = f.local(I32);
  const r = f.local(I32);
  const q = f.local(I32); // running source pointer
  const ptr: number[] = [];
  for (let k = 0; k < R; k++) ptr.push(f.local(I32));

  f.emit(i32(0), set(i));
  f.emit(LOOP, VOID); // over panels
  f.emit(minI32(i32(R), [get(rows), get(i), I32_SUB]), set(h));
  f.emit(get(src), get(i), get(rs), I32_MUL, I32_ADD, set(s));
  f.emit(get(h), i32(R), I32_EQ, get(rs), i32(4), I32_EQ, I32_AND, IF, VOID);
  {
    // Full panel, R contiguous floats per k step: vector copies.
    f.emit(get(s), set(q), get(kc), set(p));
    f.emit(LOOP, VOID);
    let o = 0;
    for (; o + 4 <= R; o += 4) f.emit(get(dst), get(q), vLoad(o * 4), vStore(o * 4));
    for (; o < R; o++) f.emit(get(dst), get(q), f32Load(o * 4), f32Store(o * 4));
    f.emit(addTo(q, get(cs)), addTo(dst, R * 4));
    f.emit(get(p), i32(1), I32_SUB, tee(p), brIf(0), END);
  }
  f.emit(ELSE);
  f.emit(get(h), i32(R), I32_EQ, IF, VOID);
  // Full panel, strided rows: R running pointers.
  for (let k = 0; k < R; k++) f.emit(get(s), i32(k), get(rs), I32_MUL, I32_ADD, set(ptr[k]));
  f.emit(get(kc), set(p));
  f.emit(LOOP, VOID);
  for (let k = 0; k < R; k++) f.emit(get(dst), get(ptr[k]), f32Load(0), f32Store(k * 4));
  for (let k = 0; k < R; k++) f.emit(addTo(ptr[k], get(cs)));
  f.emit(addTo(dst, R * 4));
  f.emit(get(p), i32(1), I32_SUB, tee(p), brIf(0), END);
  f.emit(ELSE);
  // Last, partial panel: copy h rows and zero the rest.
  f.emit(i32(0), set(p));
  f.emit(LOOP, VOID);
  f.emit(get(s), get(p), get(cs), I32_MUL, I32_ADD, set(q));
  f.emit(i32(0), set(r));
  f.emit(LOOP, VOID);
  f.emit(get(dst), get(r), i32(4), I32_MUL, I32_ADD);
  f.emit(get(r), get(h), I32_LT_S, IF, F32, get(q), f32Load(0), ELSE, f32(0), END);
  f.emit(f32Store(0));
  f.emit(addTo(q, get(rs)));
  f.emit(get(r), i32(1), I32_ADD, tee(r), i32(R), I32_LT_S, brIf(0));
  f.emit(END);
  f.emit(addTo(dst, R * 4));
  f.emit(get(p), i32(1), I32_ADD, tee(p), get(kc), I32_LT_S, brIf(0));
  f.emit(END);
  f.emit(END, END);
  f.emit(get(i), i32(R), I32_ADD, tee(i), get(rows), I32_LT_S, brIf(0));
  f.emit(END);
  return f;
}

/** macro(mc, nc, kc, pa, pb, c, ldc, alpha, beta, tmp): see the file comment. */
function macroFn(o: GemmModuleOptions): Fn {
  const { mr: MR, nr: NR } = o;
  const NV = NR / 4;
  const f = new Fn("macro", [I32, I32, I32, I32, I32, I32, I32, F32, F32, I32]);
  const [mc, nc, kc, pa, pb, c, ldc, alpha, beta, tmp] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
  const ldcB = f.local(I32);
  const j = f.local(I32);
  const i = f.local(I32);
  const w = f.local(I32); // tile width (≤ NR)
  const h = f.local(I32); // tile height (≤ MR)
  const paPanel = f.local(I32);
  const pbPanel = f.local(I32);
  const pap = f.local(I32);
  const pbp = f.local(I32);
  const p = f.local(I32);
  const cp = f.local(I32);
  const r = f.local(I32);
  const x = f.local(I32);
  const betaZero = f.local(I32);
  const alphaV = f.local(V128);
  const betaV = f.local(V128);
  const av = f.local(V128);
  const aq: number[] = [];
  for (let qd = 0; qd < MR / 4; qd++) aq.push(f.local(V128));
  const bv: number[] = [];
  for (let v = 0; v < NV; v++) bv.push(f.local(V128));
  const acc: number[][] = [];
  for (let rr = 0; rr < MR; rr++) {
    const row: number[] = [];
    for (let v = 0; v < NV; v++) row.push(f.local(V128));
    acc.push(row);
  }

  /** One k step of the micro-kernel; pointers advance by the caller (offsets are baked in). */
  const kStep = (u: number): void => {
    for (let v = 0; v < NV; v++) f.emit(get(pbp), vLoad((u * NR + v * 4) * 4), set(bv[v]));
    const quads = o.shuffle ? Math.floor(MR / 4) : 0;
    for (let qd = 0; qd < quads; qd++) f.emit(get(pap), vLoad((u * MR + qd * 4) * 4), set(aq[qd]));
    for (let rr = 0; rr < MR; rr++) {
      if (rr < quads * 4) {
        const lane = rr % 4;
        const lanes = [0, 1, 2, 3].flatMap(() => [lane * 4, lane * 4 + 1, lane * 4 + 2, lane * 4 + 3]);
        f.emit(get(aq[rr >> 2]), get(aq[rr >> 2]), simd(I8X16_SHUFFLE), lanes, set(av));
      } else {
        f.emit(get(pap), vSplatLoad((u * MR + rr) * 4), set(av));
      }
      for (let v = 0; v < NV; v++) {
        if (o.fma) f.emit(get(av), get(bv[v]), get(acc[rr][v]), simd(F32X4_RELAXED_MADD), set(acc[rr][v]));
        else f.emit(get(acc[rr][v]), get(av), get(bv[v]), simd(F32X4_MUL), simd(F32X4_ADD), set(acc[rr][v]));
      }
    }
  };

  f.emit(get(ldc), i32(4), I32_MUL, set(ldcB));
  f.emit(get(alpha), simd(F32X4_SPLAT), set(alphaV));
  f.emit(get(beta), simd(F32X4_SPLAT), set(betaV));
  f.emit(get(beta), f32(0), F32_EQ, set(betaZero));
  f.emit(i32(0), set(j), get(pb), set(pbPanel));
  f.emit(LOOP, VOID); // over B panels (columns j)
  f.emit(minI32(i32(NR), [get(nc), get(j), I32_SUB]), set(w));
  f.emit(i32(0), set(i), get(pa), set(paPanel));
  f.emit(LOOP, VOID); // over A panels (rows i)
  {
    f.emit(minI32(i32(MR), [get(mc), get(i), I32_SUB]), set(h));
    // Micro-kernel: acc = Σ_p a[p, :] ⊗ b[p, :].
    for (let rr = 0; rr < MR; rr++)
      for (let v = 0; v < NV; v++) f.emit(f32(0), simd(F32X4_SPLAT), set(acc[rr][v]));
    f.emit(get(paPanel), set(pap), get(pbPanel), set(pbp), get(kc), set(p));
    const U = o.unroll;
    if (U > 1) {
      // Unrolled main loop while p ≥ U, then single steps.
      f.emit(BLOCK, VOID, get(p), i32(U), I32_LT_S, brIf(0), LOOP, VOID);
      for (let u = 0; u < U; u++) kStep(u);
      f.emit(addTo(pap, U * MR * 4), addTo(pbp, U * NR * 4));
      f.emit(get(p), i32(U), I32_SUB, tee(p), i32(U - 1), I32_GT_S, brIf(0), END, END);
      f.emit(BLOCK, VOID, get(p), i32(0), I32_EQ, brIf(0), LOOP, VOID);
      kStep(0);
      f.emit(addTo(pap, MR * 4), addTo(pbp, NR * 4));
      f.emit(get(p), i32(1), I32_SUB, tee(p), brIf(0), END, END);
    } else {
      f.emit(LOOP, VOID);
      kStep(0);
      f.emit(addTo(pap, MR * 4), addTo(pbp, NR * 4));
      f.emit(get(p), i32(1), I32_SUB, tee(p), brIf(0), END);
    }
    // Write the tile: C = alpha·acc + beta·C.
    f.emit(get(c), get(i), get(ldcB), I32_MUL, I32_ADD, get(j), i32(4), I32_MUL, I32_ADD, set(cp));
    f.emit(get(h), i32(MR), I32_EQ, get(w), i32(NR), I32_EQ, I32_AND, IF, VOID);
    f.emit(get(betaZero), IF, VOID);
    for (let rr = 0; rr < MR; rr++) {
      for (let v = 0; v < NV; v++) {
        f.emit(get(cp), get(acc[rr][v]), get(alphaV), simd(F32X4_MUL), vStore(v * 16));
      }
      if (rr < MR - 1) f.emit(addTo(cp, get(ldcB)));
    }
    f.emit(ELSE);
    for (let rr = 0; rr < MR; rr++) {
      for (let v = 0; v < NV; v++) {
        f.emit(get(cp), get(acc[rr][v]), get(alphaV), simd(F32X4_MUL));
        f.emit(get(cp), vLoad(v * 16), get(betaV), simd(F32X4_MUL), simd(F32X4_ADD), vStore(v * 16));
      }
      if (rr < MR - 1) f.emit(addTo(cp, get(ldcB)));
    }
    f.emit(END);
    f.emit(ELSE);
    // Edge tile: spill alpha·acc to tmp, then update the h×w valid part with scalars.
    for (let rr = 0; rr < MR; rr++) {
      for (let v = 0; v < NV; v++) {
        f.emit(get(tmp), get(acc[rr][v]), get(alphaV), simd(F32X4_MUL), vStore((rr * NR + v * 4) * 4));
      }
    }
    f.emit(i32(0), set(r));
    f.emit(LOOP, VOID);
    f.emit(i32(0), set(x));
    f.emit(LOOP, VOID);
    // address of C[r, x] and of tmp[r, x]
    f.emit(get(cp), get(x), i32(4), I32_MUL, I32_ADD);
    f.emit(get(tmp), get(r), i32(NR * 4), I32_MUL, I32_ADD, get(x), i32(4), I32_MUL, I32_ADD, f32Load(0));
    f.emit(get(betaZero), i32(0), I32_EQ, IF, F32);
    f.emit(get(cp), get(x), i32(4), I32_MUL, I32_ADD, f32Load(0), get(beta), F32_MUL, ELSE, f32(0), END);
    f.emit(F32_ADD, f32Store(0));
    f.emit(get(x), i32(1), I32_ADD, tee(x), get(w), I32_LT_S, brIf(0));
    f.emit(END);
    f.emit(addTo(cp, get(ldcB)));
    f.emit(get(r), i32(1), I32_ADD, tee(r), get(h), I32_LT_S, brIf(0));
    f.emit(END);
    f.emit(END);
    f.emit(addTo(paPanel, [get(kc), i32(MR * 4), I32_MUL]));
    f.emit(get(i), i32(MR), I32_ADD, tee(i), get(mc), I32_LT_S, brIf(0));
  }
  f.emit(END);
  f.emit(addTo(pbPanel, [get(kc), i32(NR * 4), I32_MUL]));
  f.emit(get(j), i32(NR), I32_ADD, tee(j), get(nc), I32_LT_S, brIf(0));
  f.emit(END);
  return f;
}

/** acc += a·b on f32x4 locals (fused when `fma`). */
function madd(fma: boolean, acc: number, a: number, b: number): Code {
  return fma
    ? [get(a), get(b), get(acc), simd(F32X4_RELAXED_MADD), set(acc)]
    : [get(acc), get(a), get(b), simd(F32X4_MUL), simd(F32X4_ADD), set(acc)];
}

/** Register widths of the small-m kernels for R vector rows: J matrix rows per dot step, V column vectors per axpy step. */
export const smallTile = (R: number): { J: number; V: number } => (R <= 2 ? { J: 4, V: 4 } : { J: 2, V: 2 });
/** The largest number of vector rows the small-m kernels handle. */
export const SMALL_M = 4;

/**
 * dot{R}x{J}(x, xs, b, ldb, rows, k4, out, outS): for every matrix row j < rows (a multiple of J,
 * J rows per step), out[r·outS + 4j] += Σ_{p < k4} x[r·xs + 4p]·b[j·ldb + 4p] for r < R (bytes;
 * k4 a multiple of 4). The R vectors and J rows share each loaded f32x4.
 */
function dotFn(R: number, J: number, fma: boolean): Fn {
  const f = new Fn(`dot${R}x${J}`, [I32, I32, I32, I32, I32, I32, I32, I32]);
  const [x, xs, b, ldb, rows, k4, out, outS] = [0, 1, 2, 3, 4, 5, 6, 7];
  const j = f.local(I32);
  const q = f.local(I32);
  const kB = f.local(I32);
  const bRow = f.local(I32);
  const at = f.local(I32);
  const bp = Array.from({ length: J }, () => f.local(I32));
  const xp = Array.from({ length: R }, () => f.local(I32));
  const outRow = Array.from({ length: R }, () => f.local(I32));
  const bv = Array.from({ length: J }, () => f.local(V128));
  const xv = f.local(V128);
  const acc = Array.from({ length: R }, () => Array.from({ length: J }, () => f.local(V128)));
  f.emit(get(k4), i32(4), I32_MUL, set(kB));
  for (let r = 0; r < R; r++) {
    f.emit(get(out), get(outS), i32(r), I32_MUL, I32_ADD, set(outRow[r]));
    f.emit(get(x), get(xs), i32(r), I32_MUL, I32_ADD, set(xp[r]));
  }
  f.emit(i32(0), set(j), get(b), set(bRow));
  f.emit(BLOCK, VOID, get(rows), i32(0), I32_EQ, brIf(0), LOOP, VOID);
  for (let r = 0; r < R; r++) for (let c = 0; c < J; c++) f.emit(f32(0), simd(F32X4_SPLAT), set(acc[r][c]));
  for (let c = 0; c < J; c++) f.emit(get(bRow), get(ldb), i32(c), I32_MUL, I32_ADD, set(bp[c]));
  f.emit(i32(0), set(q));
  f.emit(BLOCK, VOID, get(kB), i32(0), I32_EQ, brIf(0), LOOP, VOID);
  for (let c = 0; c < J; c++) f.emit(get(bp[c]), get(q), I32_ADD, vLoad(0), set(bv[c]));
  for (let r = 0; r < R; r++) {
    f.emit(get(xp[r]), get(q), I32_ADD, vLoad(0), set(xv));
    for (let c = 0; c < J; c++) f.emit(madd(fma, acc[r][c], xv, bv[c]));
  }
  f.emit(get(q), i32(16), I32_ADD, tee(q), get(kB), I32_LT_S, brIf(0), END, END);
  for (let r = 0; r < R; r++) {
    f.emit(get(outRow[r]), get(j), i32(4), I32_MUL, I32_ADD, set(at));
    for (let c = 0; c < J; c++) {
      f.emit(get(at), get(at), f32Load(c * 4));
      for (let lane = 0; lane < 4; lane++) {
        f.emit(get(acc[r][c]), simd(F32X4_EXTRACT_LANE), lane);
        if (lane > 0) f.emit(F32_ADD);
      }
      f.emit(F32_ADD, f32Store(c * 4));
    }
  }
  f.emit(addTo(bRow, [get(ldb), i32(J), I32_MUL]));
  f.emit(get(j), i32(J), I32_ADD, tee(j), get(rows), I32_LT_S, brIf(0), END, END);
  return f;
}

/**
 * axpy{R}x{V}(x, xs, b, ldb, cols, k, out, outS): out[r·outS + 4j] += Σ_{p < k} x[r·xs + 4p]·b[p·ldb + 4j]
 * for j < cols (a multiple of 4V; 4V columns per step, held in registers over all k) and r < R
 * (bytes; k ≥ 1). B is read in place, row by row: no packing.
 */
function axpyFn(R: number, V: number, fma: boolean): Fn {
  const f = new Fn(`axpy${R}x${V}`, [I32, I32, I32, I32, I32, I32, I32, I32]);
  const [x, xs, b, ldb, cols, k, out, outS] = [0, 1, 2, 3, 4, 5, 6, 7];
  const jB = f.local(I32);
  const colsB = f.local(I32);
  const p = f.local(I32);
  const bp = f.local(I32);
  const xp = Array.from({ length: R }, () => f.local(I32));
  const outRow = Array.from({ length: R }, () => f.local(I32));
  const bv = Array.from({ length: V }, () => f.local(V128));
  const av = f.local(V128);
  const acc = Array.from({ length: R }, () => Array.from({ length: V }, () => f.local(V128)));
  f.emit(get(cols), i32(4), I32_MUL, set(colsB));
  for (let r = 0; r < R; r++) f.emit(get(out), get(outS), i32(r), I32_MUL, I32_ADD, set(outRow[r]));
  f.emit(i32(0), set(jB));
  f.emit(BLOCK, VOID, get(cols), i32(0), I32_EQ, brIf(0), LOOP, VOID);
  for (let r = 0; r < R; r++) {
    for (let v = 0; v < V; v++) f.emit(get(outRow[r]), get(jB), I32_ADD, vLoad(v * 16), set(acc[r][v]));
    f.emit(get(x), get(xs), i32(r), I32_MUL, I32_ADD, set(xp[r]));
  }
  f.emit(get(b), get(jB), I32_ADD, set(bp), get(k), set(p));
  f.emit(LOOP, VOID);
  for (let v = 0; v < V; v++) f.emit(get(bp), vLoad(v * 16), set(bv[v]));
  for (let r = 0; r < R; r++) {
    f.emit(get(xp[r]), vSplatLoad(0), set(av));
    for (let v = 0; v < V; v++) f.emit(madd(fma, acc[r][v], av, bv[v]));
    f.emit(addTo(xp[r], 4));
  }
  f.emit(addTo(bp, get(ldb)));
  f.emit(get(p), i32(1), I32_SUB, tee(p), brIf(0), END);
  for (let r = 0; r < R; r++) {
    for (let v = 0; v < V; v++) f.emit(get(outRow[r]), get(jB), I32_ADD, get(acc[r][v]), vStore(v * 16));
  }
  f.emit(get(jB), i32(16 * V), I32_ADD, tee(jB), get(colsB), I32_LT_S, brIf(0), END, END);
  return f;
}

/** The small-m kernels: for R = 1..SMALL_M, dot and axpy at the full tile width and at width 1. */
function smallFns(fma: boolean): Fn[] {
  const fns: Fn[] = [];
  for (let R = 1; R <= SMALL_M; R++) {
    const { J, V } = smallTile(R);
    fns.push(dotFn(R, J, fma), dotFn(R, 1, fma), axpyFn(R, V, fma));
    if (V !== 1) fns.push(axpyFn(R, 1, fma));
  }
  return fns;
}

/** The complete module as bytes. */
export function generateGemmModule(options: GemmModuleOptions = DEFAULT_GEMM_OPTIONS): Uint8Array {
  const { mr, nr, unroll } = options;
  if (!Number.isInteger(mr) || mr < 1 || mr > 8) throw new RangeError(`mr must be 1..8, got ${mr}`);
  if (!Number.isInteger(nr) || nr < 4 || nr > 16 || nr % 4 !== 0) {
    throw new RangeError(`nr must be 4, 8, 12 or 16, got ${nr}`);
  }
  if (![1, 2, 4].includes(unroll)) throw new RangeError(`unroll must be 1, 2 or 4, got ${unroll}`);
  const fns = [packFn("packA", mr), packFn("packB", nr), macroFn(options), ...smallFns(options.fma)];
  const types = fns.map((f) => [0x60, ...vec(f.params.map((t) => [t])), ...vec(f.results.map((t) => [t]))]);
  const bytes = [
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, vec(types)),
    ...section(2, vec([[...str("env"), ...str("mem"), 0x02, 0x00, ...uleb(1)]])),
    ...section(3, vec(fns.map((_, idx) => uleb(idx)))),
    ...section(7, vec(fns.map((f, idx) => [...str(f.name), 0x00, ...uleb(idx)]))),
    ...section(10, vec(fns.map((f) => f.encode()))),
  ];
  return new Uint8Array(bytes);
}

/**
 * The parts of the global WebAssembly API used here, typed locally: the project compiles without the
 * DOM lib and @types/node 20 does not declare WebAssembly.
 */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
export interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: Record<string, Record<string, unknown>>) => { exports: unknown };
  Memory: new (descriptor: { initial: number; maximum?: number }) => WasmMemory;
  validate(bytes: Uint8Array): boolean;
}

/** The engine's WebAssembly API, or undefined where there is none. */
export function wasmApi(): WasmApi | undefined {
  return (globalThis as unknown as { WebAssembly?: WasmApi }).WebAssembly;
}

/** Whether this engine accepts relaxed-SIMD instructions (f32x4.relaxed_madd). */
export function relaxedSimdSupported(): boolean {
  try {
    return wasmApi()?.validate(generateGemmModule({ ...DEFAULT_GEMM_OPTIONS, fma: true })) ?? false;
  } catch {
    return false;
  }
}
