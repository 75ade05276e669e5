/**
 * Training-step speed of the embedded learner: ms per step (forward + loss + backward +
 * clip + AdamW) for the `tiny` preset at batch 16 × 128 tokens and `base` at 4 × 128, with
 * every GEMM kernel set that loads here, plus the forward / backward / optimizer split,
 * tokens per second and the process's peak RSS so far. "cpu" is the process CPU time per
 * step, a steadier figure than wall time on a shared machine.
 *
 * The pure-TS kernel on `base` takes minutes per step, so it runs only with MAGE_BENCH_SLOW=1.
 */
import { Rng } from "../core/rng.js";
import { presetConfig } from "../model/config.js";
import type { Kernels } from "../model/kernels/types.js";
import { Learner } from "../model/learner.js";
import type { LossFn } from "../model/loss-types.js";
import { type Batch, backward, forwardTrain } from "../model/transformer.js";
import { median } from "./median.js";

interface Case {
  preset: "tiny" | "base";
  batch: number;
  seqLen: number;
}

const CASES: Case[] = [
  { preset: "tiny", batch: 16, seqLen: 128 },
  { preset: "base", batch: 4, seqLen: 128 },
];

/** Policy-gradient style loss: −mean(adv · logp) − 0.01 · mean(entropy). */
function pgLoss(adv: Float64Array): LossFn {
  return (st) => {
    const n = st.logp.length;
    let loss = 0;
    const dLogp = new Float64Array(n);
    const dEntropy = new Float64Array(n).fill(-0.01 / n);
    for (let i = 0; i < n; i++) {
      loss -= (adv[i] * st.logp[i] + 0.01 * st.entropy[i]) / n;
      dLogp[i] = -adv[i] / n;
    }
    return { loss, dLogp, dEntropy, metrics: {} };
  };
}

async function kernelSets(): Promise<Kernels[]> {
  const { availableKernels } = await import("../model/kernels/select.js");
  return availableKernels();
}

export async function run(): Promise<void> {
  const kernels = await kernelSets();
  console.log(`kernels: ${kernels.map((k) => k.name).join(", ")}`);
  console.log("preset  kernels  batch     ms/step  cpu ms   fwd    bwd    opt   tok/s   peak RSS");
  for (const c of CASES) {
    const config = presetConfig(c.preset, { contextLength: Math.max(c.seqLen, 128) });
    const rng = Rng.seeded("bench-train-step").derive(c.preset);
    const batch: Batch = {
      sequences: Array.from({ length: c.batch }, () =>
        Int32Array.from({ length: c.seqLen }, () => rng.int(config.vocabSize)),
      ),
      lossMask: Array.from({ length: c.batch }, () =>
        Uint8Array.from({ length: c.seqLen }, (_, t) => (t > 0 ? 1 : 0)),
      ),
    };
    const adv = Float64Array.from({ length: c.batch * (c.seqLen - 1) }, () => rng.normal());
    const loss = pgLoss(adv);
    for (const k of kernels) {
      const learner = Learner.create(config, rng.derive("init"), {
        kernels: k,
        schedule: { kind: "constant", lr: 1e-4 },
      });
      const slow = k.name === "js" && c.preset === "base";
      if (slow && process.env.MAGE_BENCH_SLOW !== "1") {
        console.log(
          `${c.preset.padEnd(7)} ${k.name.padEnd(8)} skipped (minutes per step; MAGE_BENCH_SLOW=1 runs it)`,
        );
        continue;
      }
      const steps = slow ? 1 : 3;
      if (!slow) learner.update(batch, loss);
      const total: number[] = [];
      const fwd: number[] = [];
      const bwd: number[] = [];
      const opt: number[] = [];
      const cpu: number[] = [];
      for (let i = 0; i < steps; i++) {
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        const fw = forwardTrain(learner.params, batch, k);
        const t1 = performance.now();
        const res = loss(fw.stats);
        backward(fw, res.dLogp, res.dEntropy, learner.grads);
        const t2 = performance.now();
        learner.step();
        const t3 = performance.now();
        fwd.push(t1 - t0);
        bwd.push(t2 - t1);
        opt.push(t3 - t2);
        total.push(t3 - t0);
        const used = process.cpuUsage(c0);
        cpu.push((used.user + used.system) / 1000);
      }
      const ms = median(total);
      const tokens = c.batch * c.seqLen;
      const rss = process.resourceUsage().maxRSS / 1024;
      console.log(
        `${c.preset.padEnd(7)} ${k.name.padEnd(8)} ${`${c.batch}x${c.seqLen}`.padEnd(7)} ${ms.toFixed(0).padStart(9)} ${median(cpu).toFixed(0).padStart(7)} ${median(fwd).toFixed(0).padStart(6)} ${median(bwd).toFixed(0).padStart(6)} ${median(opt).toFixed(0).padStart(5)} ${((tokens / ms) * 1000).toFixed(0).padStart(7)} ${rss.toFixed(0).padStart(7)} MB`,
      );
    }
  }
}
