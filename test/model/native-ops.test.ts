import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { AdamW } from "../../src/model/adamw.js";
import { presetConfig } from "../../src/model/config.js";
import { nativeStatus } from "../../src/model/kernels/native.js";
import type { FusedOps, Kernels } from "../../src/model/kernels/types.js";
import { Learner } from "../../src/model/learner.js";
import type { LossFn } from "../../src/model/loss-types.js";
import {
  rmsNormBackward,
  rmsNormForward,
  ropeInPlace,
  ropeTables,
  swigluBackward,
  swigluForward,
} from "../../src/model/ops.js";
import { initParams, type ModelParams, zerosLike } from "../../src/model/params.js";
import { reference64Grads, toParams64 } from "../../src/model/reference64.js";
import { randomWeights, Sampler } from "../../src/model/sampler.js";
import { type Batch, backward, forwardTrain } from "../../src/model/transformer.js";

const native = nativeStatus();
const ops: FusedOps | undefined = native.available ? native.kernels.ops : undefined;
const skip = ops
  ? false
  : `native ops unavailable (${native.available ? "addon built before mage_ops.c" : native.reason}); run \`npm run build:native\``;

function randn(rng: Rng, n: number, s = 1): Float32Array {
  return Float32Array.from({ length: n }, () => s * rng.normal());
}

/** max |a − b| / max(|b|, floor). */
function maxRel(a: ArrayLike<number>, b: ArrayLike<number>, floor = 1e-6): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  let scale = floor;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return diff / scale;
}

/** GEMM only: the same native kernels without their fused ops (the TypeScript row-wise paths). */
function gemmOnly(k: Kernels): Kernels {
  return { name: `${k.name}-gemm-only`, gemm: k.gemm.bind(k) };
}

describe("native fused ops match the TypeScript ops", { skip }, () => {
  const o = ops as FusedOps;

  it("RMSNorm forward and backward", () => {
    const rng = Rng.seeded("nops-rms");
    const rows = 37;
    const d = 72;
    const x = randn(rng, rows * d, 3);
    const g = randn(rng, d);
    const dy = randn(rng, rows * d);
    const y1 = new Float32Array(rows * d);
    const y2 = new Float32Array(rows * d);
    const r1 = new Float32Array(rows);
    const r2 = new Float32Array(rows);
    rmsNormForward(x, g, y1, r1, rows, d, 1e-5);
    o.rmsNormForward(x, g, y2, r2, rows, d, 1e-5);
    assert.ok(maxRel(y2, y1) < 1e-6, `y ${maxRel(y2, y1)}`);
    assert.ok(maxRel(r2, r1) < 1e-6);
    // Both accumulate into dx and dg: start from the same non-zero values.
    const dx0 = randn(rng, rows * d);
    const dg0 = randn(rng, d);
    const dx1 = dx0.slice();
    const dx2 = dx0.slice();
    const dg1 = dg0.slice();
    const dg2 = dg0.slice();
    rmsNormBackward(dy, x, g, r1, dx1, dg1, rows, d);
    o.rmsNormBackward(dy, x, g, r1, dx2, dg2, rows, d);
    assert.ok(maxRel(dx2, dx1) < 1e-5, `dx ${maxRel(dx2, dx1)}`);
    assert.ok(maxRel(dg2, dg1) < 1e-5, `dg ${maxRel(dg2, dg1)}`);
    assert.ok(maxRel(dx2, dx0) > 1e-3, "dx changed");
  });

  it("SwiGLU forward and backward, including saturated gates", () => {
    const rng = Rng.seeded("nops-swiglu");
    const n = 1000;
    const gate = randn(rng, n, 4);
    gate[0] = 120;
    gate[1] = -120;
    gate[2] = 0;
    const up = randn(rng, n);
    const dOut = randn(rng, n);
    const [s1, s2, h1, h2] = [0, 1, 2, 3].map(() => new Float32Array(n));
    swigluForward(gate, up, s1, h1, n);
    o.swigluForward(gate, up, s2, h2, n);
    assert.ok(maxRel(s2, s1) < 1e-6, `sig ${maxRel(s2, s1)}`);
    assert.ok(maxRel(h2, h1) < 1e-6, `out ${maxRel(h2, h1)}`);
    const [g1, g2, u1, u2] = [0, 1, 2, 3].map(() => new Float32Array(n));
    swigluBackward(dOut, gate, s1, up, g1, u1, n);
    o.swigluBackward(dOut, gate, s1, up, g2, u2, n);
    assert.ok(maxRel(g2, g1) < 1e-6);
    assert.ok(maxRel(u2, u1) < 1e-6);
  });

  it("RoPE over a ragged batch, forward and inverse", () => {
    const rng = Rng.seeded("nops-rope");
    const H = 3;
    const hd = 8;
    const lengths = [5, 1, 9];
    const offsets = [0, 5, 6];
    const T = 15;
    const tables = ropeTables(9, hd, 10000);
    const x = randn(rng, T * H * hd);
    const a = x.slice();
    const b = x.slice();
    for (let s = 0; s < 3; s++) ropeInPlace(a, offsets[s], lengths[s], H, hd, tables, false);
    const offs = Int32Array.from(offsets);
    const lens = Int32Array.from(lengths);
    o.rope(b, offs, lens, H, hd, tables.cos, tables.sin, false);
    assert.ok(maxRel(b, a) < 1e-6);
    assert.ok(maxRel(b, x) > 1e-2, "rotated");
    o.rope(b, offs, lens, H, hd, tables.cos, tables.sin, true);
    assert.ok(maxRel(b, x) < 1e-5, "inverse undoes the rotation");
  });

  it("throws a RangeError instead of reading past an array", () => {
    const x = new Float32Array(10);
    assert.throws(() => o.rmsNormForward(x, new Float32Array(5), x, new Float32Array(2), 2, 5.5, 1e-5));
    assert.throws(
      () => o.rmsNormForward(x, new Float32Array(5), new Float32Array(9), new Float32Array(2), 2, 5, 1e-5),
      RangeError,
    );
    assert.throws(() => o.swigluForward(x, x, x, new Float32Array(3), 4), RangeError);
    const logits = new Float32Array(8);
    const f64 = () => new Float64Array(2);
    assert.throws(
      () => o.headForward(logits, 0, 2, 4, Int32Array.of(1, 4), 0, f64(), f64(), f64(), 0),
      RangeError,
      "target outside the vocabulary",
    );
    assert.throws(
      () =>
        o.rope(
          new Float32Array(16),
          Int32Array.of(1),
          Int32Array.of(4),
          1,
          4,
          new Float32Array(8),
          new Float32Array(8),
          false,
        ),
      RangeError,
      "sequence outside the rows",
    );
  });

  it("decode attention over a head-major cache matches a direct computation", () => {
    const rng = Rng.seeded("nops-decode");
    const H = 3;
    const hd = 8;
    const cap = 11;
    const len = 7;
    const layerOff = 2 * H * cap * hd; // layer 2 of a 3-layer cache
    const K = randn(rng, 3 * H * cap * hd);
    const V = randn(rng, 3 * H * cap * hd);
    const q = randn(rng, 2 * H * hd);
    const out = new Float32Array(2 * H * hd);
    o.attendDecode(q, H * hd, K, V, layerOff, cap * hd, len, H, hd, 0.35, out, H * hd, new Float32Array(len));
    const want = new Float64Array(H * hd);
    for (let h = 0; h < H; h++) {
      const base = layerOff + h * cap * hd;
      const sc = Array.from({ length: len }, (_, j) => {
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += q[H * hd + h * hd + i] * K[base + j * hd + i];
        return 0.35 * dot;
      });
      const mx = Math.max(...sc);
      const e = sc.map((x) => Math.exp(x - mx));
      const sum = e.reduce((a, b) => a + b, 0);
      for (let j = 0; j < len; j++)
        for (let i = 0; i < hd; i++) want[h * hd + i] += (e[j] / sum) * V[base + j * hd + i];
    }
    assert.ok(
      maxRel(out.subarray(H * hd), want) < 1e-5,
      `decode attention ${maxRel(out.subarray(H * hd), want)}`,
    );
    assert.ok(
      out.subarray(0, H * hd).every((x) => x === 0),
      "row 0 untouched",
    );
  });

  it("causal block softmax matches a direct computation and rejects a block past its row", (t) => {
    if (!ops?.causalSoftmax) {
      t.skip("addon built before causalSoftmax; run `npm run build:native`");
      return;
    }
    const rng = Rng.seeded(21);
    const rows = 5;
    const len = 11;
    const first = 7; // row i sees first + i positions: 7..11
    const s = randn(rng, rows * len, 3);
    const want = new Float64Array(rows * len);
    for (let i = 0; i < rows; i++) {
      const visible = first + i;
      const row = Array.from(s.subarray(i * len, i * len + visible));
      const mx = Math.max(...row);
      const sum = row.reduce((a, x) => a + Math.exp(x - mx), 0);
      for (let j = 0; j < visible; j++) want[i * len + j] = Math.exp(row[j] - mx) / sum;
    }
    ops.causalSoftmax(s, rows, len, first);
    assert.ok(maxRel(s, want, 1) < 1e-6, "probabilities");
    for (let i = 0; i < rows; i++)
      for (let j = first + i; j < len; j++) assert.equal(s[i * len + j], 0, "masked entries are 0");
    assert.throws(() => ops.causalSoftmax!(s, rows, len, len), RangeError);
    assert.throws(() => ops.causalSoftmax!(new Float32Array(10), rows, len, first), RangeError);
  });

  it("the sampler decodes the same tokens with and without the fused decode attention", () => {
    const k = (native as { kernels: Kernels }).kernels;
    const config = presetConfig("tiny", { vocabSize: 300, contextLength: 64 });
    const weights = randomWeights(config, 7);
    const reqs = [5, 9, 2].map((n, i) => ({
      promptIds: Array.from({ length: n }, (_, j) => (j * 37 + i * 11) % 300),
      sampling: { temperature: 1, topK: 0, topP: 1, maxTokens: 12 },
      seed: i,
    }));
    const a = new Sampler(config, k).generate(weights, reqs);
    const b = new Sampler(config, gemmOnly(k)).generate(weights, reqs);
    for (let i = 0; i < reqs.length; i++) {
      assert.deepEqual(a[i].tokenIds, b[i].tokenIds);
      assert.ok(maxRel(a[i].logprobs, b[i].logprobs, 1) < 1e-4, "log-probs agree");
    }
  });

  it("AdamW with the fused update is bit-identical to the TypeScript one", () => {
    const config = presetConfig("tiny", { vocabSize: 50, contextLength: 16 });
    const p1 = initParams(config, Rng.seeded("nops-adam"));
    const p2 = initParams(config, Rng.seeded("nops-adam"));
    const a1 = new AdamW(p1, { weightDecay: 0.1 });
    const a2 = new AdamW(p2, { weightDecay: 0.1 });
    const rng = Rng.seeded("nops-adam-g");
    for (let step = 0; step < 3; step++) {
      const g = randn(rng, p1.flat.length, 0.01);
      a1.update(p1.flat, g, 1e-3, 0.7);
      a2.update(p2.flat, g, 1e-3, 0.7, o);
    }
    assert.deepEqual(p2.flat, p1.flat);
    assert.deepEqual(a2.m, a1.m);
    assert.deepEqual(a2.v, a1.v);
    const s = Float32Array.of(1, -2, 3);
    assert.equal(o.sumSquares(s), 14);
  });
});

describe("training with the native fused ops", { skip }, () => {
  const config = presetConfig("tiny", { contextLength: 64 });

  function setup(seed: string): { params: ModelParams; batch: Batch; lossFn: LossFn } {
    const params = initParams(config, Rng.seeded(seed), { std: 0.08 });
    const rng = Rng.seeded(seed).derive("batch");
    const lengths = [5, 23, 40];
    const sequences = lengths.map((n) => Int32Array.from({ length: n }, () => rng.int(config.vocabSize)));
    const lossMask = lengths.map((n) => {
      const m = Uint8Array.from({ length: n }, (_, t) => (t >= 1 && rng.float() < 0.7 ? 1 : 0));
      m[n - 1] = 1;
      return m;
    });
    const adv = Float64Array.from({ length: 200 }, () => rng.normal());
    // Advantage-weighted log-likelihood plus an entropy term, so both head gradients matter.
    const lossFn: LossFn = (st) => {
      const n = st.logp.length;
      let loss = 0;
      const dLogp = new Float64Array(n);
      const dEntropy = new Float64Array(n).fill(-0.3 / n);
      for (let i = 0; i < n; i++) {
        loss -= (adv[i] * st.logp[i] + 0.3 * st.entropy[i]) / n;
        dLogp[i] = -adv[i] / n;
      }
      return { loss, dLogp, dEntropy, metrics: {} };
    };
    return { params, batch: { sequences, lossMask }, lossFn };
  }

  function grads(params: ModelParams, batch: Batch, lossFn: LossFn, k: Kernels, keepProbs?: boolean) {
    const fw = forwardTrain(
      params,
      batch,
      k,
      true,
      keepProbs === undefined ? {} : { keepProbs, chunkRows: 7 },
    );
    const res = lossFn(fw.stats);
    const g = zerosLike(params);
    backward(fw, res.dLogp, res.dEntropy, g);
    return { stats: fw.stats, loss: res.loss, grads: g };
  }

  it("gradients match the float64 reference (kept and recomputed logits)", () => {
    const k = (native as { kernels: Kernels }).kernels;
    const { params, batch, lossFn } = setup("nops-gc");
    const ref = reference64Grads(toParams64(config, params.tensors), batch, lossFn);
    for (const keep of [true, false]) {
      const got = grads(params, batch, lossFn, k, keep);
      assert.ok(Math.abs(got.loss - ref.result.loss) < 1e-5, `loss ${got.loss} vs ${ref.result.loss}`);
      for (let i = 0; i < ref.stats.logp.length; i++) {
        assert.ok(Math.abs(got.stats.logp[i] - ref.stats.logp[i]) < 1e-4, `logp[${i}]`);
        assert.ok(Math.abs(got.stats.entropy[i] - ref.stats.entropy[i]) < 1e-4, `entropy[${i}]`);
      }
      params.specs.forEach((s, i) => {
        let num = 0;
        let den = 0;
        const a = got.grads.tensors[i];
        const b = ref.grads[i];
        for (let j = 0; j < b.length; j++) {
          num += (a[j] - b[j]) ** 2;
          den += b[j] ** 2;
        }
        const e = Math.sqrt(num / den);
        assert.ok(den > 0 && e <= 1e-3, `${s.name} (keep=${keep}): relative gradient error ${e}`);
      });
    }
  });

  it("a learner on native ops tracks one on the TypeScript paths over several steps", () => {
    const k = (native as { kernels: Kernels }).kernels;
    const { params, batch, lossFn } = setup("nops-steps");
    const mk = (kk: Kernels) =>
      new Learner(structuredClone(params), { kernels: kk, schedule: { kind: "constant", lr: 3e-3 } });
    const fused = mk(k);
    const plain = mk(gemmOnly(k));
    for (let s = 0; s < 4; s++) {
      const a = fused.update(batch, lossFn);
      const b = plain.update(batch, lossFn);
      assert.ok(Math.abs(a.loss - b.loss) < 1e-5, `step ${s}: loss ${a.loss} vs ${b.loss}`);
      assert.ok(Math.abs(a.gradNorm - b.gradNorm) / b.gradNorm < 1e-4, `step ${s}: grad norm`);
    }
    const e = maxRel(fused.params.flat, plain.params.flat);
    assert.ok(e < 1e-3, `parameters drifted apart: ${e}`);
    assert.ok(maxRel(fused.params.flat, params.flat) > 1e-3, "the parameters moved");
  });
});
