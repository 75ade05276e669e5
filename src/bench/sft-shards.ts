/**
 * Data-parallel SFT (the pretraining step): ms per optimizer step of the `tiny` preset on a
 * pretraining-shaped batch (about 4,096 tokens in transcripts of 250–500 tokens) with the batch
 * computed in 1, 2 and 3 shards (one thread each), for every kernel set that loads here, and the
 * speed-up over one shard. On a machine with two free cores two shards should approach 2×.
 */
import { availableParallelism } from "node:os";
import { Rng } from "../core/rng.js";
import { presetConfig } from "../model/config.js";
import { availableKernels } from "../model/kernels/select.js";
import { Learner } from "../model/learner.js";
import type { Batch } from "../model/transformer.js";
import { sftLossFor } from "../train/pretrain/sft.js";
import { SftShardPool } from "../train/pretrain/sft-shards.js";
import { median } from "./median.js";

const STEPS = 8;
const SHARDS = [1, 2, 3];

export async function run(): Promise<void> {
  const config = presetConfig("tiny", { vocabSize: 1024 });
  const rng = Rng.seeded("bench-sft-shards");
  const lengths: number[] = [];
  for (let n = 0; n < 4096; ) {
    const len = Math.min(250 + rng.int(251), 4096 - n);
    lengths.push(len);
    n += len;
  }
  const batch: Batch = {
    sequences: lengths.map((n) => Int32Array.from({ length: n }, () => rng.int(config.vocabSize))),
    lossMask: lengths.map((n) => Uint8Array.from({ length: n }, (_, t) => (t > 0 ? 1 : 0))),
  };
  console.log(
    `tiny preset, ${lengths.length} sequences, 4096 tokens per step, median of ${STEPS} steps; ${availableParallelism()} cores`,
  );
  console.log("kernels  shards   ms/step   speed-up");
  for (const kernels of await availableKernels()) {
    if (kernels.name === "js") continue; // minutes per run; the ratio is what matters and wasm shows it
    let oneShard = Number.NaN;
    for (const shards of SHARDS) {
      const learner = Learner.create(config, rng.derive("init"), {
        init: { std: 0.1 },
        kernels,
        schedule: { kind: "constant", lr: 1e-3 },
      });
      const pool = shards > 1 ? await SftShardPool.start(config, kernels, shards) : null;
      const times: number[] = [];
      try {
        for (let s = 0; s <= STEPS; s++) {
          const t0 = performance.now();
          if (pool) await pool.update(learner, batch);
          else learner.update(batch, sftLossFor(batch));
          if (s > 0) times.push(performance.now() - t0); // the first step warms the buffers
        }
      } finally {
        await pool?.close();
      }
      const ms = median(times);
      if (shards === 1) oneShard = ms;
      console.log(
        `${kernels.name.padEnd(8)} ${String(shards).padStart(6)} ${ms.toFixed(0).padStart(9)} ${(oneShard / ms).toFixed(2).padStart(9)}×`,
      );
    }
  }
}
