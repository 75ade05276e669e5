import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { presetConfig } from "../../src/model/config.js";
import { selectKernels } from "../../src/model/kernels/select.js";
import type { Kernels } from "../../src/model/kernels/types.js";
import { Learner } from "../../src/model/learner.js";
import type { Batch } from "../../src/model/transformer.js";
import { sftLossFor } from "../../src/train/pretrain/sft.js";
import { SftShardPool, shardBatch } from "../../src/train/pretrain/sft-shards.js";

const config = presetConfig("tiny", { vocabSize: 200, contextLength: 256 });

function randomBatch(seed: number, lengths: number[]): Batch {
  const rng = Rng.seeded(seed);
  const sequences = lengths.map((n) => Int32Array.from({ length: n }, () => rng.int(config.vocabSize)));
  const lossMask = lengths.map((n) => {
    // Mask values are loss weights: 0 (unscored), 1 or 3.
    const m = Uint8Array.from({ length: n }, () => (rng.bernoulli(0.3) ? 0 : rng.bernoulli(0.5) ? 1 : 3));
    m[0] = 0;
    return m;
  });
  return { sequences, lossMask };
}

function learner(kernels: Kernels): Learner {
  return Learner.create(config, Rng.seeded(5), { init: { std: 0.1 }, kernels });
}

describe("shardBatch", () => {
  it("balances tokens, keeps each shard in batch order and places every sequence once", () => {
    const batch = randomBatch(1, [50, 200, 30, 120, 90, 10, 60]);
    const shards = shardBatch(batch, 2);
    assert.equal(shards.length, 2);
    const tokens = shards.map((s) => s.sequences.reduce((n, q) => n + q.length, 0));
    assert.equal(tokens[0] + tokens[1], 560);
    assert.ok(Math.abs(tokens[0] - tokens[1]) <= 30, `unbalanced: ${tokens}`);
    const placed = shards.flatMap((s) => s.sequences.map((q) => batch.sequences.indexOf(q)));
    assert.deepEqual(
      [...placed].sort((a, b) => a - b),
      [0, 1, 2, 3, 4, 5, 6],
    );
    for (const s of shards) {
      const idx = s.sequences.map((q) => batch.sequences.indexOf(q));
      assert.deepEqual(
        idx,
        [...idx].sort((a, b) => a - b),
      );
      s.lossMask.forEach((m, i) => {
        assert.equal(m, batch.lossMask[batch.sequences.indexOf(s.sequences[i])]);
      });
    }
  });

  it("drops empty shards and keeps a one-shard batch whole", () => {
    const batch = randomBatch(2, [40, 20]);
    assert.equal(shardBatch(batch, 4).length, 2);
    assert.deepEqual(shardBatch(batch, 1)[0].sequences, batch.sequences);
    assert.throws(() => shardBatch(batch, 0), /positive integer/);
  });
});

describe("SftShardPool", () => {
  let kernels: Kernels;
  let pool: SftShardPool;
  before(async () => {
    kernels = await selectKernels("auto");
    pool = await SftShardPool.start(config, kernels, 2);
  });
  after(async () => {
    await pool.close();
  });

  it("adds up to the single-thread gradient and loss of the whole batch", async () => {
    const batch = randomBatch(3, [180, 40, 120, 90, 60, 150]);
    const one = learner(kernels);
    const ref = one.accumulate(batch, sftLossFor(batch));
    const two = learner(kernels);
    const got = await pool.accumulate(two, batch);
    // Float32 kernels (OpenBLAS especially) may round a shard's logits differently from the whole
    // batch's, by matrix shape and buffer alignment: 3.7e-9 relative was seen in CI.
    assert.ok(Math.abs(got.loss - ref.loss) <= 1e-6 * ref.loss, `${got.loss} vs ${ref.loss}`);
    assert.equal(got.scored, ref.scored);
    assert.equal(got.tokens, ref.tokens);
    let maxRef = 0;
    let maxDiff = 0;
    for (let i = 0; i < one.grads.flat.length; i++) {
      maxRef = Math.max(maxRef, Math.abs(one.grads.flat[i]));
      maxDiff = Math.max(maxDiff, Math.abs(one.grads.flat[i] - two.grads.flat[i]));
    }
    assert.ok(maxRef > 0);
    assert.ok(maxDiff <= 1e-5 * maxRef, `max gradient difference ${maxDiff} (largest entry ${maxRef})`);
  });

  it("gives bit-identical steps on every run (thread timing does not enter)", async () => {
    const batches = [randomBatch(4, [100, 70, 130]), randomBatch(5, [60, 200, 20, 90])];
    const runs: Float32Array[] = [];
    for (let r = 0; r < 2; r++) {
      const l = learner(kernels);
      for (const b of batches) await pool.update(l, b);
      runs.push(l.params.flat.slice());
    }
    assert.deepEqual(runs[0], runs[1]);
  });

  it("reports a bad shard as an error, and keeps working after it", async () => {
    const tooLong = randomBatch(6, [300, 300]);
    await assert.rejects(pool.accumulate(learner(kernels), tooLong), /contextLength/);
    const l = learner(kernels);
    const m = await pool.update(l, randomBatch(7, [50, 60]));
    assert.ok(Number.isFinite(m.loss) && m.step === 1);
  });
});
