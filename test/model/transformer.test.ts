import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { parameterCount, presetConfig } from "../../src/model/config.js";
import { ropeInPlace, ropeTables } from "../../src/model/ops.js";
import { getTensor, initParams, parameterTotal } from "../../src/model/params.js";
import { reference64Logits, toParams64 } from "../../src/model/reference64.js";
import { type Batch, forwardLogits, forwardTrain, scoreBatch } from "../../src/model/transformer.js";

const config = presetConfig("tiny", { contextLength: 64 });
const params = initParams(config, Rng.seeded("transformer-test"), { std: 0.08 });

function randomTokens(rng: Rng, n: number): Int32Array {
  return Int32Array.from({ length: n }, () => rng.int(config.vocabSize));
}

function allScored(n: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, t) => (t > 0 ? 1 : 0));
}

function logSoftmaxRow(
  z: Float32Array,
  o: number,
  V: number,
): { logp: (j: number) => number; entropy: number } {
  let mx = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < V; j++) mx = Math.max(mx, z[o + j]);
  let s = 0;
  for (let j = 0; j < V; j++) s += Math.exp(z[o + j] - mx);
  const lse = mx + Math.log(s);
  let h = 0;
  for (let j = 0; j < V; j++) {
    const lp = z[o + j] - lse;
    h -= Math.exp(lp) * lp;
  }
  return { logp: (j) => z[o + j] - lse, entropy: h };
}

describe("parameters", () => {
  it("has paramSpecs' size, is deterministic per seed and follows the init rules", () => {
    assert.equal(parameterTotal(params), parameterCount(config));
    const again = initParams(config, Rng.seeded("transformer-test"), { std: 0.08 });
    assert.deepEqual(again.flat, params.flat);
    const other = initParams(config, Rng.seeded("other"));
    assert.notDeepEqual(other.flat.subarray(0, 100), params.flat.subarray(0, 100));
    assert.ok(getTensor(other, "blk.0.attn_norm.weight").every((x) => x === 1));
    const std = (t: Float32Array) => Math.sqrt(t.reduce((s, x) => s + x * x, 0) / t.length);
    const q = std(getTensor(other, "blk.1.attn_q.weight"));
    const o = std(getTensor(other, "blk.1.attn_output.weight"));
    assert.ok(Math.abs(q - 0.02) < 0.001, `q std ${q}`);
    assert.ok(Math.abs(o - 0.02 / Math.sqrt(2 * config.nLayers)) < 0.001, `output std ${o}`);
  });
});

describe("rotary embedding", () => {
  it("rotates adjacent pairs (2i, 2i+1) by pos·base^(-2i/headDim) and inverts exactly", () => {
    const hd = 8;
    const tables = ropeTables(4, hd, 10000);
    const x = new Float32Array(4 * 2 * hd);
    for (let i = 0; i < x.length; i++) x[i] = ((i * 7) % 5) - 2;
    const orig = x.slice();
    ropeInPlace(x, 0, 4, 2, hd, tables, false);
    for (let p = 0; p < 4; p++)
      for (let h = 0; h < 2; h++)
        for (let i = 0; i < hd / 2; i++) {
          const o = p * 2 * hd + h * hd + 2 * i;
          const th = p * 10000 ** ((-2 * i) / hd);
          const a = orig[o];
          const b = orig[o + 1];
          assert.ok(Math.abs(x[o] - (a * Math.cos(th) - b * Math.sin(th))) < 1e-5);
          assert.ok(Math.abs(x[o + 1] - (a * Math.sin(th) + b * Math.cos(th))) < 1e-5);
        }
    ropeInPlace(x, 0, 4, 2, hd, tables, true);
    for (let i = 0; i < x.length; i++) assert.ok(Math.abs(x[i] - orig[i]) < 1e-5);
  });
});

describe("forward", () => {
  it("forwardLogits matches the independent float64 reference", () => {
    const tokens = randomTokens(Rng.seeded("fl"), 19);
    const got = forwardLogits(params, tokens);
    const ref = reference64Logits(toParams64(config, params.tensors), tokens);
    assert.equal(got.length, 19 * config.vocabSize);
    let maxErr = 0;
    let maxAbs = 0;
    for (let i = 0; i < got.length; i++) {
      maxErr = Math.max(maxErr, Math.abs(got[i] - ref[i]));
      maxAbs = Math.max(maxAbs, Math.abs(ref[i]));
    }
    assert.ok(maxAbs > 0.1, "logits are not trivially small");
    assert.ok(maxErr < 1e-4 * Math.max(1, maxAbs), `max logit error ${maxErr}`);
  });

  it("is causal: changing a later token leaves earlier logits unchanged", () => {
    const tokens = randomTokens(Rng.seeded("causal"), 24);
    const a = forwardLogits(params, tokens);
    const changed = tokens.slice();
    changed[15] = (changed[15] + 1) % config.vocabSize;
    const b = forwardLogits(params, changed);
    const V = config.vocabSize;
    assert.deepEqual(a.subarray(0, 15 * V), b.subarray(0, 15 * V));
    assert.notDeepEqual(a.subarray(15 * V, 16 * V), b.subarray(15 * V, 16 * V));
    // A prefix alone gives the same logits as inside the longer sequence.
    const prefix = forwardLogits(params, tokens.subarray(0, 10));
    for (let i = 0; i < prefix.length; i++) assert.ok(Math.abs(prefix[i] - a[i]) < 1e-5);
  });

  it("the training forward's logits, logp and entropy equal forwardLogits on every scored position", () => {
    const rng = Rng.seeded("train-vs-logits");
    const seqs = [randomTokens(rng, 7), randomTokens(rng, 30), randomTokens(rng, 2)];
    const batch: Batch = { sequences: seqs, lossMask: seqs.map((s) => allScored(s.length)) };
    const fw = forwardTrain(params, batch);
    const V = config.vocabSize;
    let n = 0;
    seqs.forEach((seq, s) => {
      const full = forwardLogits(params, seq);
      for (let t = 1; t < seq.length; t++, n++) {
        const row = logSoftmaxRow(full, (t - 1) * V, V);
        assert.ok(Math.abs(fw.stats.logp[n] - row.logp(seq[t])) < 1e-5, `logp s${s} t${t}`);
        assert.ok(Math.abs(fw.stats.entropy[n] - row.entropy) < 1e-5, `entropy s${s} t${t}`);
        assert.equal(fw.stats.sequence[n], s);
        assert.equal(fw.stats.position[n], t - 1);
        for (let j = 0; j < V; j++)
          assert.ok(Math.abs(fw.probs![n * V + j] - Math.exp(row.logp(j))) < 1e-6, "kept probabilities");
      }
    });
    assert.equal(n, fw.stats.logp.length);
  });

  it("scores only masked tokens, and a sequence's scores do not depend on its batch neighbours", () => {
    const rng = Rng.seeded("mask");
    const a = randomTokens(rng, 12);
    const b = randomTokens(rng, 20);
    const maskA = new Uint8Array(12);
    maskA[3] = maskA[4] = maskA[11] = 1;
    const maskB = allScored(20);
    const both = scoreBatch(params, { sequences: [b, a], lossMask: [maskB, maskA] });
    const alone = scoreBatch(params, { sequences: [a], lossMask: [maskA] });
    assert.equal(both.logp.length, 19 + 3);
    assert.deepEqual(Array.from(both.sequence.subarray(19)), [1, 1, 1]);
    assert.deepEqual(Array.from(both.position.subarray(19)), [0, 1, 2]);
    for (let i = 0; i < 3; i++) {
      assert.ok(Math.abs(both.logp[19 + i] - alone.logp[i]) < 1e-5);
      assert.ok(Math.abs(both.entropy[19 + i] - alone.entropy[i]) < 1e-5);
    }
    // No-grad scoring equals the training forward.
    const fw = forwardTrain(params, { sequences: [a], lossMask: [maskA] });
    assert.deepEqual(fw.stats.logp, alone.logp);
  });

  it("rejects malformed batches with usage errors", () => {
    const ok = Int32Array.from([1, 2, 3]);
    const bad = (batch: Batch) => assert.throws(() => scoreBatch(params, batch), UsageError);
    bad({ sequences: [ok], lossMask: [] });
    bad({ sequences: [ok], lossMask: [Uint8Array.from([1, 1, 1])] });
    bad({ sequences: [ok], lossMask: [Uint8Array.from([0, 1])] });
    bad({ sequences: [Int32Array.from([1, config.vocabSize])], lossMask: [Uint8Array.from([0, 1])] });
    bad({ sequences: [new Int32Array(65)], lossMask: [new Uint8Array(65)] });
    bad({ sequences: [new Int32Array(0)], lossMask: [new Uint8Array(0)] });
  });
});
