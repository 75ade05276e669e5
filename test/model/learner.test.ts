import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { AdamW, decays } from "../../src/model/adamw.js";
import { type ModelConfig, presetConfig, validateModelConfig } from "../../src/model/config.js";
import { Learner, type LearnerOptions, type OptimizerState } from "../../src/model/learner.js";
import type { LossFn } from "../../src/model/loss-types.js";
import { allocParams, cloneParams, getTensor, initParams } from "../../src/model/params.js";
import { lrAt, validateSchedule } from "../../src/model/schedule.js";
import type { Batch } from "../../src/model/transformer.js";

const tiny = presetConfig("tiny", { contextLength: 64 });
const micro: ModelConfig = validateModelConfig({
  vocabSize: 8,
  dModel: 4,
  nLayers: 1,
  nHeads: 2,
  dFf: 4,
  contextLength: 8,
  ropeBase: 10000,
  normEps: 1e-5,
});

function makeBatch(seed: string, lengths: number[], vocab = tiny.vocabSize): Batch {
  const rng = Rng.seeded(seed);
  const sequences = lengths.map((n) => Int32Array.from({ length: n }, () => rng.int(vocab)));
  const lossMask = lengths.map((n) => Uint8Array.from({ length: n }, (_, t) => (t > 0 ? 1 : 0)));
  return { sequences, lossMask };
}

/** Mean negative log-likelihood (not additive over micro-batches). */
const meanNll: LossFn = (st) => {
  const n = st.logp.length;
  let loss = 0;
  for (let i = 0; i < n; i++) loss -= st.logp[i] / n;
  return { loss, dLogp: new Float64Array(n).fill(-1 / n), dEntropy: new Float64Array(n), metrics: { n } };
};

/** Summed NLL plus an entropy term (additive over sequences). */
const sumNllEnt: LossFn = (st) => {
  const n = st.logp.length;
  let loss = 0;
  for (let i = 0; i < n; i++) loss += -st.logp[i] - 0.1 * st.entropy[i];
  return { loss, dLogp: new Float64Array(n).fill(-1), dEntropy: new Float64Array(n).fill(-0.1), metrics: {} };
};

function maxRelDiff(a: Float32Array, b: Float32Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return num / den;
}

describe("AdamW", () => {
  it("matches a hand computation over three steps, with decoupled decay only on projection matrices", () => {
    const p = initParams(micro, Rng.seeded("adam"), { std: 0.5 });
    const cfg = { beta1: 0.8, beta2: 0.9, eps: 1e-3, weightDecay: 0.1 };
    const opt = new AdamW(p, cfg);
    const start = Float64Array.from(p.flat);
    const m = new Float64Array(p.flat.length);
    const v = new Float64Array(p.flat.length);
    const expect = Float64Array.from(start);
    const decayed = new Uint8Array(p.flat.length);
    p.specs.forEach((s, i) => {
      decayed.fill(decays(s) ? 1 : 0, p.offsets[i], p.offsets[i] + p.tensors[i].length);
    });
    const lrs = [0.1, 0.05, 0.2];
    const rng = Rng.seeded("adam-grads");
    for (let t = 1; t <= 3; t++) {
      const g = Float32Array.from({ length: p.flat.length }, () => rng.normal());
      opt.update(p.flat, g, lrs[t - 1]);
      for (let i = 0; i < g.length; i++) {
        const lr = lrs[t - 1];
        if (decayed[i]) expect[i] -= lr * cfg.weightDecay * expect[i];
        m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * g[i];
        v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * g[i] * g[i];
        const mh = m[i] / (1 - cfg.beta1 ** t);
        const vh = v[i] / (1 - cfg.beta2 ** t);
        expect[i] -= (lr * mh) / (Math.sqrt(vh) + cfg.eps);
      }
    }
    for (let i = 0; i < expect.length; i++)
      assert.ok(Math.abs(p.flat[i] - expect[i]) < 1e-5 * Math.max(1, Math.abs(expect[i])), `param ${i}`);
    // Sanity of the decay mask: embeddings and norms never decay, projections do.
    assert.equal(decays({ name: "token_embd.weight", shape: [8, 4] }), false);
    assert.equal(decays({ name: "blk.0.ffn_norm.weight", shape: [4] }), false);
    assert.equal(decays({ name: "blk.0.attn_q.weight", shape: [4, 4] }), true);
  });

  it("with a zero gradient only decays the projection matrices", () => {
    const learner = Learner.create(micro, Rng.seeded("decay"), {
      schedule: { kind: "constant", lr: 0.5 },
      adamw: { weightDecay: 0.2 },
    });
    const before = cloneParams(learner.params);
    learner.step();
    learner.params.specs.forEach((s, i) => {
      const f = decays(s) ? 1 - 0.5 * 0.2 : 1;
      const a = learner.params.tensors[i];
      const b = before.tensors[i];
      for (let j = 0; j < a.length; j++) assert.ok(Math.abs(a[j] - b[j] * f) < 1e-7, s.name);
    });
  });
});

describe("learning-rate schedule", () => {
  it("warms up linearly and decays with a cosine to minLr", () => {
    const s = validateSchedule({ kind: "cosine", lr: 1, warmupSteps: 4, totalSteps: 14, minLr: 0.1 });
    assert.equal(lrAt(s, 0), 0.25);
    assert.equal(lrAt(s, 3), 1);
    assert.equal(lrAt(s, 4), 1);
    assert.ok(Math.abs(lrAt(s, 9) - 0.55) < 1e-12);
    assert.ok(Math.abs(lrAt(s, 14) - 0.1) < 1e-12);
    assert.ok(Math.abs(lrAt(s, 100) - 0.1) < 1e-12);
    assert.equal(lrAt({ kind: "constant", lr: 0.3 }, 1000), 0.3);
    assert.ok(Math.abs(lrAt({ kind: "constant", lr: 0.3, warmupSteps: 3 }, 0) - 0.1) < 1e-12);
    assert.throws(
      () => validateSchedule({ kind: "cosine", lr: 1, warmupSteps: 5, totalSteps: 5 }),
      UsageError,
    );
    assert.throws(() => validateSchedule({ kind: "linear" as "constant", lr: 1 }), UsageError);
  });
});

describe("Learner", () => {
  it("accumulating two micro-batches gives the gradient of the whole batch", () => {
    const opts: LearnerOptions = { schedule: { kind: "constant", lr: 1e-3 } };
    const whole = makeBatch("acc", [9, 17, 5]);
    const part1: Batch = { sequences: whole.sequences.slice(0, 2), lossMask: whole.lossMask.slice(0, 2) };
    const part2: Batch = { sequences: whole.sequences.slice(2), lossMask: whole.lossMask.slice(2) };
    const a = Learner.create(tiny, Rng.seeded("acc-model"), opts);
    const b = new Learner(cloneParams(a.params), opts);
    a.accumulate(whole, sumNllEnt);
    b.accumulate(part1, sumNllEnt);
    b.accumulate(part2, sumNllEnt);
    assert.ok(maxRelDiff(b.grads.flat, a.grads.flat) < 1e-5);
    // The weight option scales the contribution.
    const c = new Learner(cloneParams(a.params), opts);
    c.accumulate(whole, sumNllEnt, { weight: 0.5 });
    for (let i = 0; i < 50; i++) assert.ok(Math.abs(c.grads.flat[i] - 0.5 * a.grads.flat[i]) < 1e-6);
  });

  it("microBatchTokens calls the loss once over the whole batch and matches an unsplit update", () => {
    const opts: LearnerOptions = { schedule: { kind: "constant", lr: 1e-3 } };
    const batch = makeBatch("micro", [9, 17, 5, 30]);
    const a = Learner.create(tiny, Rng.seeded("micro-model"), opts);
    const b = new Learner(cloneParams(a.params), opts);
    let calls = 0;
    const counted: LossFn = (st) => {
      calls++;
      return meanNll(st);
    };
    const ma = a.update(batch, meanNll);
    const mb = b.update(batch, counted, { microBatchTokens: 32 });
    assert.equal(calls, 1);
    assert.equal(mb.metrics.n, 57);
    assert.ok(Math.abs(ma.loss - mb.loss) < 1e-9);
    assert.ok(Math.abs(ma.gradNorm - mb.gradNorm) < 1e-5 * ma.gradNorm);
    assert.ok(maxRelDiff(b.params.flat, a.params.flat) < 1e-5);
  });

  it("clips the global gradient norm and skips non-finite gradients", () => {
    const learner = Learner.create(micro, Rng.seeded("clip"), {
      schedule: { kind: "constant", lr: 0.01 },
      maxGradNorm: 0.5,
      adamw: { weightDecay: 0 },
    });
    const batch = makeBatch("clip-batch", [6, 8], micro.vocabSize);
    const big: LossFn = (st) => {
      const r = sumNllEnt(st);
      return { ...r, dLogp: r.dLogp.map((x) => x * 100) };
    };
    const m = learner.update(batch, big);
    assert.ok(m.gradNorm > 0.5 && m.clipped && !m.skipped);
    assert.equal(learner.stepCount, 1);
    const before = learner.params.flat.slice();
    const nan: LossFn = (st) => ({
      ...sumNllEnt(st),
      dLogp: new Float64Array(st.logp.length).fill(Number.NaN),
    });
    const s = learner.update(batch, nan);
    assert.ok(s.skipped);
    assert.equal(learner.stepCount, 1);
    assert.deepEqual(learner.params.flat, before);
  });

  it("restoring the optimizer state gives a bit-identical next step", () => {
    const opts: LearnerOptions = {
      schedule: { kind: "cosine", lr: 3e-3, warmupSteps: 2, totalSteps: 10 },
      adamw: { weightDecay: 0.05 },
    };
    const batch = makeBatch("state", [12, 20]);
    const a = Learner.create(tiny, Rng.seeded("state-model"), opts);
    a.update(batch, sumNllEnt);
    a.update(batch, meanNll);
    const saved = a.exportState();
    // Round trip the state through JSON and fresh typed arrays, as a checkpoint would.
    const restored: OptimizerState = {
      meta: JSON.parse(JSON.stringify(saved.meta)),
      tensors: Object.fromEntries(Object.entries(saved.tensors).map(([k, t]) => [k, Float32Array.from(t)])),
    };
    assert.equal(Object.keys(restored.tensors).length, 2 * a.params.specs.length);
    const b = new Learner(cloneParams(a.params), { schedule: { kind: "constant", lr: 1 } });
    b.restoreState(restored);
    assert.equal(b.stepCount, 2);
    assert.equal(b.nextLr, a.nextLr);
    const fresh = new Learner(cloneParams(a.params), opts);
    const ma = a.update(batch, sumNllEnt);
    const mb = b.update(batch, sumNllEnt);
    fresh.update(batch, sumNllEnt);
    assert.deepEqual(b.params.flat, a.params.flat);
    assert.equal(mb.lr, ma.lr);
    assert.equal(mb.gradNorm, ma.gradNorm);
    assert.deepEqual(
      b.exportState().tensors["adam.v.output_norm.weight"],
      a.exportState().tensors["adam.v.output_norm.weight"],
    );
    assert.notDeepEqual(fresh.params.flat, a.params.flat);
    // Wrong shapes are refused.
    const wrong = new Learner(allocParams(micro));
    assert.throws(() => wrong.restoreState(restored), UsageError);
  });

  it("overfits a small fixed batch: the loss drops by more than half in 30 steps", () => {
    const learner = Learner.create(tiny, Rng.seeded("overfit"), {
      schedule: { kind: "constant", lr: 3e-3 },
      adamw: { weightDecay: 0 },
    });
    const batch = makeBatch("overfit-batch", [16, 12, 20]);
    const first = learner.update(batch, meanNll).loss;
    let last = first;
    for (let i = 0; i < 29; i++) last = learner.update(batch, meanNll).loss;
    const after = learner.score(batch);
    const final = -after.logp.reduce((s, x) => s + x, 0) / after.logp.length;
    assert.ok(first > 6, `initial loss ${first} should be near ln(1024)`);
    assert.ok(final < 0.5 * first, `loss ${first} -> ${final} (last update reported ${last})`);
    assert.ok(getTensor(learner.params, "token_embd.weight").every(Number.isFinite));
  });
});
