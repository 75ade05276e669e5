import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import type { Batch } from "../../src/model/transformer.js";
import { TorchModelSchema } from "../../src/train/config.js";
import { NO_WORKER, saveTinyHf } from "./tiny-hf.js";

/** Five sequences of 20-40 byte tokens, the second half of each scored. */
function someBatch(): Batch {
  const sequences: Int32Array[] = [];
  const lossMask: Uint8Array[] = [];
  for (let i = 0; i < 5; i++) {
    const n = 20 + 5 * i;
    sequences.push(Int32Array.from({ length: n }, (_, j) => 32 + ((7 * i + 13 * j) % 90)));
    lossMask.push(Uint8Array.from({ length: n }, (_, j) => (j >= n / 2 ? 1 : 0)));
  }
  return { sequences, lossMask };
}

describe("TorchLearner: micro-batched log-probs and the worker's peak memory", { skip: NO_WORKER }, () => {
  let learner: TorchLearner;
  before(async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-torch-scoring-"));
    await saveTinyHf(join(root, "hf"), { seed: 3, contextLength: 128 });
    learner = await TorchLearner.open({
      torch: TorchModelSchema.parse({ path: join(root, "hf") }),
      optimizer: { lr: 1e-3, weightDecay: 0.01, gradClip: 1 },
      seed: 1,
      reference: false,
    });
  });
  after(async () => {
    await learner?.close();
  });

  it("scores in micro-batches of microBatchTokens as in one pass, and reports worker_peak_rss_mb", async () => {
    const batch = someBatch();
    const whole = await learner.logprobs(batch);
    const split = await learner.logprobs(batch, "policy", { microBatchTokens: 40 });
    assert.equal(split.logp.length, whole.logp.length);
    // Float32 forward passes over differently padded batches: equal to rounding.
    for (let i = 0; i < whole.logp.length; i++) {
      assert.ok(
        Math.abs(split.logp[i] - whole.logp[i]) < 1e-5,
        `logp ${i}: ${split.logp[i]} vs ${whole.logp[i]}`,
      );
      assert.ok(
        Math.abs(split.entropy[i] - whole.entropy[i]) < 1e-5,
        `entropy ${i}: ${split.entropy[i]} vs ${whole.entropy[i]}`,
      );
    }
    const m = await learner.update(
      batch,
      { oldLogp: whole.logp, advantages: whole.logp.map(() => 1) },
      { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, entropyCoef: 0, klCoef: 0, klClamp: 10 },
      { microBatchTokens: 40 },
    );
    const rss = m.metrics.worker_peak_rss_mb;
    assert.ok(rss > 50 && rss < 1 << 20, `worker_peak_rss_mb ${rss}`);
  });
});
