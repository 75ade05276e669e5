/**
 * An independent float64 implementation of the model, for tests only: a tiny reverse-mode
 * autograd over Float64Array matrices, with the model written from small primitives
 * (norms, softmax, RoPE, SwiGLU and the loss head are compositions, not hand-derived
 * backward passes). It shares no code with transformer.ts / ops.ts; it is slow and simple.
 */
import type { ModelConfig } from "./config.js";
import { paramSpecs } from "./config.js";
import type { LossFn, LossResult, TokenStats } from "./loss-types.js";

/** A [rows, cols] float64 matrix node on a tape. */
export class T64 {
  grad: Float64Array | null = null;
  back: (() => void) | null = null;
  constructor(
    readonly data: Float64Array,
    readonly rows: number,
    readonly cols: number,
    readonly needsGrad: boolean,
  ) {}
  g(): Float64Array {
    if (!this.grad) this.grad = new Float64Array(this.data.length);
    return this.grad;
  }
}

class Tape {
  readonly nodes: T64[] = [];

  leaf(data: Float64Array, rows: number, cols: number, needsGrad: boolean): T64 {
    return new T64(data, rows, cols, needsGrad);
  }

  private node(data: Float64Array, rows: number, cols: number, parents: T64[], back: (y: T64) => void): T64 {
    const y = new T64(
      data,
      rows,
      cols,
      parents.some((p) => p.needsGrad),
    );
    if (y.needsGrad) {
      y.back = () => back(y);
      this.nodes.push(y);
    }
    return y;
  }

  backward(): void {
    for (let i = this.nodes.length - 1; i >= 0; i--) {
      const n = this.nodes[i];
      if (n.grad && n.back) n.back();
    }
  }

  /** a [r,k] · b [k,c]. */
  matmul(a: T64, b: T64): T64 {
    if (a.cols !== b.rows) throw new Error("matmul shape");
    const r = a.rows;
    const k = a.cols;
    const c = b.cols;
    const out = new Float64Array(r * c);
    for (let i = 0; i < r; i++)
      for (let p = 0; p < k; p++) {
        const av = a.data[i * k + p];
        for (let j = 0; j < c; j++) out[i * c + j] += av * b.data[p * c + j];
      }
    return this.node(out, r, c, [a, b], (y) => {
      const dy = y.grad!;
      if (a.needsGrad) {
        const da = a.g();
        for (let i = 0; i < r; i++)
          for (let p = 0; p < k; p++) {
            let s = 0;
            for (let j = 0; j < c; j++) s += dy[i * c + j] * b.data[p * c + j];
            da[i * k + p] += s;
          }
      }
      if (b.needsGrad) {
        const db = b.g();
        for (let i = 0; i < r; i++)
          for (let p = 0; p < k; p++) {
            const av = a.data[i * k + p];
            for (let j = 0; j < c; j++) db[p * c + j] += av * dy[i * c + j];
          }
      }
    });
  }

  transpose(a: T64): T64 {
    const out = new Float64Array(a.data.length);
    for (let i = 0; i < a.rows; i++)
      for (let j = 0; j < a.cols; j++) out[j * a.rows + i] = a.data[i * a.cols + j];
    return this.node(out, a.cols, a.rows, [a], (y) => {
      const da = a.g();
      for (let i = 0; i < a.rows; i++)
        for (let j = 0; j < a.cols; j++) da[i * a.cols + j] += y.grad![j * a.rows + i];
    });
  }

  /** Elementwise map with derivative f'(x, f(x)). */
  private map(a: T64, f: (x: number) => number, df: (x: number, y: number) => number): T64 {
    const out = a.data.map(f);
    return this.node(out, a.rows, a.cols, [a], (y) => {
      const da = a.g();
      for (let i = 0; i < out.length; i++) da[i] += y.grad![i] * df(a.data[i], out[i]);
    });
  }

  exp(a: T64): T64 {
    return this.map(a, Math.exp, (_x, y) => y);
  }
  log(a: T64): T64 {
    return this.map(a, Math.log, (x) => 1 / x);
  }
  sigmoid(a: T64): T64 {
    return this.map(
      a,
      (x) => 1 / (1 + Math.exp(-x)),
      (_x, y) => y * (1 - y),
    );
  }
  pow(a: T64, e: number): T64 {
    return this.map(
      a,
      (x) => x ** e,
      (x) => e * x ** (e - 1),
    );
  }
  affine(a: T64, mul: number, add: number): T64 {
    return this.map(
      a,
      (x) => mul * x + add,
      () => mul,
    );
  }

  /** Elementwise a ∘ b for equal shapes, where b may instead be [r,1] or [1,c] and is broadcast. */
  private binary(a: T64, b: T64, op: "add" | "mul" | "sub"): T64 {
    const { rows: r, cols: c } = a;
    const bi = (i: number, j: number): number =>
      b.rows === r && b.cols === c ? i * c + j : b.cols === 1 && b.rows === r ? i : j;
    if (!((b.rows === r || b.rows === 1) && (b.cols === c || b.cols === 1)))
      throw new Error("broadcast shape");
    const out = new Float64Array(r * c);
    for (let i = 0; i < r; i++)
      for (let j = 0; j < c; j++) {
        const x = a.data[i * c + j];
        const z = b.data[bi(i, j)];
        out[i * c + j] = op === "add" ? x + z : op === "sub" ? x - z : x * z;
      }
    return this.node(out, r, c, [a, b], (y) => {
      const dy = y.grad!;
      const da = a.needsGrad ? a.g() : null;
      const db = b.needsGrad ? b.g() : null;
      for (let i = 0; i < r; i++)
        for (let j = 0; j < c; j++) {
          const g = dy[i * c + j];
          const k = bi(i, j);
          if (op === "mul") {
            if (da) da[i * c + j] += g * b.data[k];
            if (db) db[k] += g * a.data[i * c + j];
          } else {
            if (da) da[i * c + j] += g;
            if (db) db[k] += op === "add" ? g : -g;
          }
        }
    });
  }
  add(a: T64, b: T64): T64 {
    return this.binary(a, b, "add");
  }
  sub(a: T64, b: T64): T64 {
    return this.binary(a, b, "sub");
  }
  mul(a: T64, b: T64): T64 {
    return this.binary(a, b, "mul");
  }

  /** Sum over columns: [r,c] → [r,1]. */
  sumCols(a: T64): T64 {
    const out = new Float64Array(a.rows);
    for (let i = 0; i < a.rows; i++) for (let j = 0; j < a.cols; j++) out[i] += a.data[i * a.cols + j];
    return this.node(out, a.rows, 1, [a], (y) => {
      const da = a.g();
      for (let i = 0; i < a.rows; i++) for (let j = 0; j < a.cols; j++) da[i * a.cols + j] += y.grad![i];
    });
  }

  /** Row maxima as a constant (softmax is invariant to it, so no gradient is needed). */
  rowMaxConst(a: T64): T64 {
    const out = new Float64Array(a.rows).fill(Number.NEGATIVE_INFINITY);
    for (let i = 0; i < a.rows; i++)
      for (let j = 0; j < a.cols; j++) out[i] = Math.max(out[i], a.data[i * a.cols + j]);
    return this.leaf(out, a.rows, 1, false);
  }

  sliceCols(a: T64, c0: number, c1: number): T64 {
    const w = c1 - c0;
    const out = new Float64Array(a.rows * w);
    for (let i = 0; i < a.rows; i++) for (let j = 0; j < w; j++) out[i * w + j] = a.data[i * a.cols + c0 + j];
    return this.node(out, a.rows, w, [a], (y) => {
      const da = a.g();
      for (let i = 0; i < a.rows; i++)
        for (let j = 0; j < w; j++) da[i * a.cols + c0 + j] += y.grad![i * w + j];
    });
  }

  concatCols(parts: T64[]): T64 {
    const r = parts[0].rows;
    const c = parts.reduce((s, p) => s + p.cols, 0);
    const out = new Float64Array(r * c);
    let c0 = 0;
    const starts: number[] = [];
    for (const p of parts) {
      starts.push(c0);
      for (let i = 0; i < r; i++)
        for (let j = 0; j < p.cols; j++) out[i * c + c0 + j] = p.data[i * p.cols + j];
      c0 += p.cols;
    }
    return this.node(out, r, c, parts, (y) => {
      parts.forEach((p, n) => {
        if (!p.needsGrad) return;
        const dp = p.g();
        for (let i = 0; i < r; i++)
          for (let j = 0; j < p.cols; j++) dp[i * p.cols + j] += y.grad![i * c + starts[n] + j];
      });
    });
  }

  concatRows(parts: T64[]): T64 {
    const c = parts[0].cols;
    const r = parts.reduce((s, p) => s + p.rows, 0);
    const out = new Float64Array(r * c);
    let o = 0;
    const starts: number[] = [];
    for (const p of parts) {
      starts.push(o);
      out.set(p.data, o);
      o += p.data.length;
    }
    return this.node(out, r, c, parts, (y) => {
      parts.forEach((p, n) => {
        if (!p.needsGrad) return;
        const dp = p.g();
        for (let i = 0; i < p.data.length; i++) dp[i] += y.grad![starts[n] + i];
      });
    });
  }

  /** Rows idx of a: out[i] = a[idx[i]] (embedding lookup). */
  gatherRows(a: T64, idx: ArrayLike<number>): T64 {
    const c = a.cols;
    const out = new Float64Array(idx.length * c);
    for (let i = 0; i < idx.length; i++) for (let j = 0; j < c; j++) out[i * c + j] = a.data[idx[i] * c + j];
    return this.node(out, idx.length, c, [a], (y) => {
      const da = a.g();
      for (let i = 0; i < idx.length; i++)
        for (let j = 0; j < c; j++) da[idx[i] * c + j] += y.grad![i * c + j];
    });
  }

  /** out[i] = a[i, idx[i]] as [r,1]. */
  pick(a: T64, idx: ArrayLike<number>): T64 {
    const out = new Float64Array(a.rows);
    for (let i = 0; i < a.rows; i++) out[i] = a.data[i * a.cols + idx[i]];
    return this.node(out, a.rows, 1, [a], (y) => {
      const da = a.g();
      for (let i = 0; i < a.rows; i++) da[i * a.cols + idx[i]] += y.grad![i];
    });
  }

  /** The signed pair swap used by RoPE: out[2i] = −a[2i+1], out[2i+1] = a[2i] (per row). */
  pairSwap(a: T64): T64 {
    const out = new Float64Array(a.data.length);
    for (let i = 0; i < a.data.length; i += 2) {
      out[i] = -a.data[i + 1];
      out[i + 1] = a.data[i];
    }
    return this.node(out, a.rows, a.cols, [a], (y) => {
      const da = a.g();
      const dy = y.grad!;
      for (let i = 0; i < a.data.length; i += 2) {
        da[i + 1] += -dy[i];
        da[i] += dy[i + 1];
      }
    });
  }
}

/** The parameters as float64 leaves, in paramSpecs order. */
export interface Params64 {
  config: ModelConfig;
  tensors: Float64Array[];
}

export function toParams64(config: ModelConfig, tensors: readonly Float32Array[]): Params64 {
  return { config, tensors: tensors.map((t) => Float64Array.from(t)) };
}

interface Graph {
  tape: Tape;
  leaves: T64[];
  logp: T64;
  entropy: T64;
  logits: T64[];
}

function rmsnorm(tp: Tape, x: T64, g: T64, eps: number): T64 {
  const ms = tp.affine(tp.sumCols(tp.mul(x, x)), 1 / x.cols, eps);
  return tp.mul(tp.mul(x, tp.pow(ms, -0.5)), g);
}

function rope(tp: Tape, x: T64, nHeads: number, base: number): T64 {
  const hd = x.cols / nHeads;
  const cos = new Float64Array(x.data.length);
  const sin = new Float64Array(x.data.length);
  for (let p = 0; p < x.rows; p++)
    for (let h = 0; h < nHeads; h++)
      for (let i = 0; i < hd / 2; i++) {
        const angle = p / base ** ((2 * i) / hd);
        for (const e of [0, 1]) {
          cos[p * x.cols + h * hd + 2 * i + e] = Math.cos(angle);
          sin[p * x.cols + h * hd + 2 * i + e] = Math.sin(angle);
        }
      }
  const C = tp.leaf(cos, x.rows, x.cols, false);
  const S = tp.leaf(sin, x.rows, x.cols, false);
  return tp.add(tp.mul(x, C), tp.mul(tp.pairSwap(x), S));
}

function softmaxRows(tp: Tape, s: T64): T64 {
  const e = tp.exp(tp.sub(s, tp.rowMaxConst(s)));
  return tp.mul(e, tp.pow(tp.sumCols(e), -1));
}

function build(
  p: Params64,
  sequences: Int32Array[],
  lossMask: Uint8Array[] | null,
  needGrad: boolean,
): Graph {
  const c = p.config;
  const tp = new Tape();
  const specs = paramSpecs(c);
  const leaves = p.tensors.map((t, i) => {
    const sh = specs[i].shape;
    return tp.leaf(t, sh.length === 1 ? 1 : sh[0], sh.length === 1 ? sh[0] : sh[1], needGrad);
  });
  const E = leaves[0];
  const hd = c.dModel / c.nHeads;
  const logps: T64[] = [];
  const ents: T64[] = [];
  const logits: T64[] = [];
  for (let s = 0; s < sequences.length; s++) {
    const seq = sequences[s];
    const n = seq.length;
    let x = tp.gatherRows(E, seq);
    const maskData = new Float64Array(n * n);
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) maskData[i * n + j] = -1e300;
    const causal = tp.leaf(maskData, n, n, false);
    for (let l = 0; l < c.nLayers; l++) {
      const [an, wq, wk, wv, wo, fn, wg, wu, wd] = leaves.slice(1 + 9 * l, 10 + 9 * l);
      const h1 = rmsnorm(tp, x, an, c.normEps);
      const q = rope(tp, tp.matmul(h1, tp.transpose(wq)), c.nHeads, c.ropeBase);
      const k = rope(tp, tp.matmul(h1, tp.transpose(wk)), c.nHeads, c.ropeBase);
      const v = tp.matmul(h1, tp.transpose(wv));
      const heads: T64[] = [];
      for (let h = 0; h < c.nHeads; h++) {
        const qh = tp.sliceCols(q, h * hd, (h + 1) * hd);
        const kh = tp.sliceCols(k, h * hd, (h + 1) * hd);
        const vh = tp.sliceCols(v, h * hd, (h + 1) * hd);
        const scores = tp.add(tp.affine(tp.matmul(qh, tp.transpose(kh)), 1 / Math.sqrt(hd), 0), causal);
        heads.push(tp.matmul(softmaxRows(tp, scores), vh));
      }
      x = tp.add(x, tp.matmul(tp.concatCols(heads), tp.transpose(wo)));
      const h2 = rmsnorm(tp, x, fn, c.normEps);
      const gate = tp.matmul(h2, tp.transpose(wg));
      const up = tp.matmul(h2, tp.transpose(wu));
      const act = tp.mul(tp.mul(gate, tp.sigmoid(gate)), up);
      x = tp.add(x, tp.matmul(act, tp.transpose(wd)));
    }
    const hf = rmsnorm(tp, x, leaves[leaves.length - 1], c.normEps);
    if (!lossMask) {
      logits.push(tp.matmul(hf, tp.transpose(E)));
      continue;
    }
    const rows: number[] = [];
    const targets: number[] = [];
    for (let t = 1; t < n; t++)
      if (lossMask[s][t]) {
        rows.push(t - 1);
        targets.push(seq[t]);
      }
    if (rows.length === 0) continue;
    const z = tp.matmul(tp.gatherRows(hf, rows), tp.transpose(E));
    const m = tp.rowMaxConst(z);
    const lse = tp.add(tp.log(tp.sumCols(tp.exp(tp.sub(z, m)))), m);
    const logprobs = tp.sub(z, lse);
    logps.push(tp.pick(logprobs, targets));
    ents.push(tp.affine(tp.sumCols(tp.mul(tp.exp(logprobs), logprobs)), -1, 0));
  }
  const empty = tp.leaf(new Float64Array(0), 0, 1, false);
  return {
    tape: tp,
    leaves,
    logp: logps.length ? tp.concatRows(logps) : empty,
    entropy: ents.length ? tp.concatRows(ents) : empty,
    logits,
  };
}

function statsOf(g: Graph, lossMask: Uint8Array[]): TokenStats {
  const seqIdx: number[] = [];
  const pos: number[] = [];
  lossMask.forEach((m, s) => {
    let k = 0;
    for (let t = 1; t < m.length; t++) {
      if (!m[t]) continue;
      seqIdx.push(s);
      pos.push(k++);
    }
  });
  return {
    logp: Float64Array.from(g.logp.data),
    entropy: Float64Array.from(g.entropy.data),
    sequence: Int32Array.from(seqIdx),
    position: Int32Array.from(pos),
  };
}

/** Token statistics and the loss in float64 (no gradient): the function finite differences probe. */
export function reference64Loss(
  p: Params64,
  batch: { sequences: Int32Array[]; lossMask: Uint8Array[] },
  lossFn: LossFn,
): { stats: TokenStats; result: LossResult } {
  const g = build(p, batch.sequences, batch.lossMask, false);
  const stats = statsOf(g, batch.lossMask);
  return { stats, result: lossFn(stats) };
}

/** Loss and float64 gradients of every parameter tensor (paramSpecs order). */
export function reference64Grads(
  p: Params64,
  batch: { sequences: Int32Array[]; lossMask: Uint8Array[] },
  lossFn: LossFn,
): { stats: TokenStats; result: LossResult; grads: Float64Array[] } {
  const g = build(p, batch.sequences, batch.lossMask, true);
  const stats = statsOf(g, batch.lossMask);
  const result = lossFn(stats);
  if (g.logp.needsGrad) g.logp.g().set(result.dLogp);
  if (g.entropy.needsGrad) g.entropy.g().set(result.dEntropy);
  g.tape.backward();
  return { stats, result, grads: g.leaves.map((l) => l.grad ?? new Float64Array(l.data.length)) };
}

/** Full logits [n, vocab] of one sequence in float64. */
export function reference64Logits(p: Params64, tokens: Int32Array): Float64Array {
  return build(p, [tokens], null, false).logits[0].data;
}
