/**
 * Child process of the torch-compare bench: runs training steps of one preset on a random
 * batch and prints `{"maxRssMiB": …, "ms": …}` as its last line, so the peak memory of a
 * training step is measured in a process that did nothing else.
 *
 *   node dist/bench/train-rss-child.js PRESET BATCH SEQLEN KERNELS [STEPS]
 */
import { readFileSync } from "node:fs";
import { Rng } from "../core/rng.js";
import { presetConfig } from "../model/config.js";
import { selectKernels } from "../model/kernels/select.js";
import { Learner } from "../model/learner.js";
import type { LossFn } from "../model/loss-types.js";
import type { Batch } from "../model/transformer.js";

/**
 * This process's peak resident set. On Linux, VmHWM of /proc/self/status: getrusage's maxRSS is
 * wrong here, as a child started by fork + exec inherits its parent's high-water mark.
 */
function peakRssMiB(): number {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync("/proc/self/status", "utf8"));
    if (m) return Number(m[1]) / 1024;
  } catch {
    // not Linux
  }
  return process.resourceUsage().maxRSS / 1024;
}

async function main(): Promise<void> {
  const [preset, b, l, kernelName, s] = process.argv.slice(2);
  const batchSize = Number(b);
  const seqLen = Number(l);
  const steps = Number(s ?? 2);
  const kernels = await selectKernels(kernelName);
  const config = presetConfig(preset, { contextLength: Math.max(seqLen, 128) });
  const rng = Rng.seeded("bench-train-rss").derive(preset);
  const batch: Batch = {
    sequences: Array.from({ length: batchSize }, () =>
      Int32Array.from({ length: seqLen }, () => rng.int(config.vocabSize)),
    ),
    lossMask: Array.from({ length: batchSize }, () =>
      Uint8Array.from({ length: seqLen }, (_, t) => (t > 0 ? 1 : 0)),
    ),
  };
  const loss: LossFn = (st) => {
    const n = st.logp.length;
    let sum = 0;
    for (let i = 0; i < n; i++) sum -= st.logp[i] / n;
    return {
      loss: sum,
      dLogp: new Float64Array(n).fill(-1 / n),
      dEntropy: new Float64Array(n),
      metrics: {},
    };
  };
  const learner = Learner.create(config, rng.derive("init"), { kernels });
  let ms = 0;
  for (let i = 0; i < steps; i++) ms = learner.update(batch, loss).ms;
  const maxRssMiB = peakRssMiB();
  console.log(JSON.stringify({ maxRssMiB, ms, kernels: kernels.name }));
}

await main();
