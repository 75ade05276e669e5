import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { presetConfig } from "../../src/model/config.js";
import type { LossFn } from "../../src/model/loss-types.js";
import { initParams, type ModelParams, zerosLike } from "../../src/model/params.js";
import { reference64Grads, reference64Loss, toParams64 } from "../../src/model/reference64.js";
import {
  type Batch,
  backward,
  forwardTrain,
  type HeadOptions,
  scoreBatch,
} from "../../src/model/transformer.js";

const config = presetConfig("tiny", { contextLength: 64 });

/** Params with a larger init than usual (peaky attention) and non-unit norm gains. */
function testParams(seed: string): ModelParams {
  const p = initParams(config, Rng.seeded(seed), { std: 0.08 });
  const r = Rng.seeded(seed).derive("norms");
  p.specs.forEach((s, i) => {
    if (s.shape.length === 1)
      for (let j = 0; j < p.tensors[i].length; j++) p.tensors[i][j] = 1 + 0.3 * r.normal();
  });
  return p;
}

function raggedBatch(rng: Rng, lengths: number[]): Batch {
  const sequences = lengths.map((n) => Int32Array.from({ length: n }, () => rng.int(config.vocabSize)));
  const lossMask = lengths.map((n) => {
    const m = Uint8Array.from({ length: n }, (_, t) => (t >= 1 && rng.float() < 0.7 ? 1 : 0));
    m[n - 1] = 1;
    return m;
  });
  return { sequences, lossMask };
}

/** PPO clipped-ratio objective with advantages, minus an entropy bonus, averaged over tokens. */
function ppoLoss(oldLogp: Float64Array, adv: Float64Array, clipEps: number, entCoef: number): LossFn {
  return (st) => {
    const n = st.logp.length;
    const dLogp = new Float64Array(n);
    const dEntropy = new Float64Array(n);
    let loss = 0;
    let clippedCount = 0;
    for (let i = 0; i < n; i++) {
      const r = Math.exp(st.logp[i] - oldLogp[i]);
      const rc = Math.min(Math.max(r, 1 - clipEps), 1 + clipEps);
      const a = adv[i];
      const un = r * a;
      const cl = rc * a;
      if (un <= cl) {
        loss -= un / n;
        dLogp[i] = -un / n;
      } else {
        loss -= cl / n;
        clippedCount++;
      }
      loss -= (entCoef * st.entropy[i]) / n;
      dEntropy[i] = -entCoef / n;
    }
    return { loss, dLogp, dEntropy, metrics: { clipFrac: clippedCount / Math.max(n, 1) } };
  };
}

const entropyOnly: LossFn = (st) => {
  const n = st.logp.length;
  let loss = 0;
  for (let i = 0; i < n; i++) loss += st.entropy[i] / n;
  return { loss, dLogp: new Float64Array(n), dEntropy: new Float64Array(n).fill(1 / n), metrics: {} };
};

function setup(seed: string, lengths = [5, 23, 40]) {
  const params = testParams(seed);
  const rng = Rng.seeded(seed).derive("batch");
  const batch = raggedBatch(rng, lengths);
  const st = scoreBatch(params, batch);
  const n = st.logp.length;
  const oldLogp = Float64Array.from(st.logp, (x) => x + 0.15 * rng.normal());
  const adv = Float64Array.from({ length: n }, () => rng.normal());
  return { params, batch, lossFn: ppoLoss(oldLogp, adv, 0.2, 0.3) };
}

function analyticGrads(params: ModelParams, batch: Batch, lossFn: LossFn, head: HeadOptions = {}) {
  const fw = forwardTrain(params, batch, undefined, true, head);
  const res = lossFn(fw.stats);
  const grads = zerosLike(params);
  backward(fw, res.dLogp, res.dEntropy, grads);
  return { fw, res, grads };
}

function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num) / Math.sqrt(den);
}

function compareToReference(params: ModelParams, batch: Batch, lossFn: LossFn): void {
  const { fw, res, grads } = analyticGrads(params, batch, lossFn);
  const ref = reference64Grads(toParams64(config, params.tensors), batch, lossFn);
  assert.equal(fw.stats.logp.length, ref.stats.logp.length);
  for (let i = 0; i < ref.stats.logp.length; i++) {
    assert.ok(Math.abs(fw.stats.logp[i] - ref.stats.logp[i]) < 1e-4, `logp[${i}]`);
    assert.ok(Math.abs(fw.stats.entropy[i] - ref.stats.entropy[i]) < 1e-4, `entropy[${i}]`);
    assert.equal(fw.stats.sequence[i], ref.stats.sequence[i]);
    assert.equal(fw.stats.position[i], ref.stats.position[i]);
  }
  assert.ok(Math.abs(res.loss - ref.result.loss) < 1e-4);
  const flatRef = new Float64Array(grads.flat.length);
  ref.grads.forEach((g, i) => {
    flatRef.set(g, params.offsets[i]);
  });
  const global = relErr(grads.flat, flatRef);
  assert.ok(global <= 1e-3, `global relative gradient error ${global}`);
  params.specs.forEach((s, i) => {
    const e = relErr(grads.tensors[i], ref.grads[i]);
    assert.ok(e <= 1e-3, `${s.name}: relative gradient error ${e}`);
    assert.ok(
      ref.grads[i].some((x) => x !== 0),
      `${s.name}: reference gradient is all zero`,
    );
  });
}

describe("gradient check (tiny preset, ragged batches)", () => {
  it("float32 backward matches the float64 reference for a PPO + entropy loss", () => {
    const { params, batch, lossFn } = setup("gc-ppo");
    compareToReference(params, batch, lossFn);
  });

  it("float32 backward matches the float64 reference for an entropy-only loss", () => {
    const { params, batch } = setup("gc-ent");
    compareToReference(params, batch, entropyOnly);
  });

  it("recomputing the head in chunks (probabilities not kept) gives the same gradients", () => {
    const { params, batch, lossFn } = setup("gc-chunks");
    const kept = analyticGrads(params, batch, lossFn, { keepProbs: true });
    const chunked = analyticGrads(params, batch, lossFn, { keepProbs: false, chunkRows: 7 });
    assert.ok(kept.fw.scored > 14, "several chunks");
    assert.deepEqual(chunked.fw.stats.logp, kept.fw.stats.logp);
    const e = relErr(chunked.grads.flat, kept.grads.flat);
    assert.ok(e < 1e-5, `chunked vs kept relative difference ${e}`);
  });

  it("the float64 reference matches central finite differences", () => {
    // A shorter batch keeps the 2 float64 forwards per probed entry cheap.
    const { params, batch, lossFn } = setup("gc-fd", [4, 9, 13]);
    const p64 = toParams64(config, params.tensors);
    const ref = reference64Grads(p64, batch, lossFn);
    const rng = Rng.seeded("gc-fd-sample");
    const h = 1e-5;
    let checked = 0;
    p64.tensors.forEach((t, ti) => {
      const g = ref.grads[ti];
      let arg = 0;
      for (let j = 1; j < g.length; j++) if (Math.abs(g[j]) > Math.abs(g[arg])) arg = j;
      let rms = 0;
      for (let j = 0; j < g.length; j++) rms += g[j] * g[j];
      rms = Math.sqrt(rms / g.length);
      for (const j of [arg, rng.int(t.length)]) {
        const orig = t[j];
        t[j] = orig + h;
        const up = reference64Loss(p64, batch, lossFn).result.loss;
        t[j] = orig - h;
        const down = reference64Loss(p64, batch, lossFn).result.loss;
        t[j] = orig;
        const fd = (up - down) / (2 * h);
        const tol = 1e-4 * Math.max(Math.abs(g[j]), rms) + 1e-10;
        assert.ok(
          Math.abs(fd - g[j]) <= tol,
          `${params.specs[ti].name}[${j}]: finite difference ${fd} vs reference ${g[j]}`,
        );
        checked++;
      }
    });
    assert.equal(checked, 2 * p64.tensors.length);
  });
});
