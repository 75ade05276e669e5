/**
 * The PyTorch learner worker (`model.backend: torch`) against the embedded learner and sampler,
 * on the same weights: a `tiny` and a `base` model with random weights, exported with `exportHf`
 * and loaded by the worker in float32 on the CPU. One thread each: the worker runs with
 * OMP_NUM_THREADS=1 (torch's intra-op threads), the embedded kernels are single-threaded.
 *
 * 1. Update: one PPO step (forward, loss, backward, clip, AdamW) on `tiny` 16 × 128 tokens and
 *    `base` 4 × 128 tokens (the `train-step` section's batches), ms per step, median of 3 after a
 *    warm-up. The protocol's share of a torch update is the client's round trip minus the time the
 *    worker reports for the update itself (`ms`): encoding, the socket both ways, decoding.
 * 2. Generate: tokens/s of 1 and 16 sequences of 32 new tokens after short chat prompts
 *    (temperature 1), `EmbeddedPolicy` vs `TorchPolicy` (the worker's own `generate`), the same requests.
 *
 * Wall times and CPU times are both printed (this process's, plus the worker's from /proc for the
 * torch rows): on a shared machine the CPU figures are the steadier ones.
 *
 * Needs the Python environment (MAGE_PYTHON, $MAGE_VENV or the project's .venv); prints why it
 * skips otherwise. MAGE_BENCH_TORCH_PRESETS=tiny picks presets.
 */
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_PPO_OPTIONS, makePpoLoss } from "../algo/ppo-loss.js";
import { Rng } from "../core/rng.js";
import { batchArrays, TorchLearner } from "../learner/torch/learner.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import { presetConfig } from "../model/config.js";
import { exportHf } from "../model/hf-export.js";
import { selectKernels } from "../model/kernels/select.js";
import { Learner } from "../model/learner.js";
import { cloneParams, initParams } from "../model/params.js";
import { paramsToMap } from "../model/params-io.js";
import { trainTokenizer } from "../model/tokenizer.js";
import { type Batch, scoreBatch } from "../model/transformer.js";
import { EmbeddedPolicy } from "../policy/embedded.js";
import type { GenerateRequest, Generation, Policy } from "../policy/types.js";
import { TorchModelSchema } from "../train/config.js";
import { median } from "./median.js";

const CASES = [
  { preset: "tiny", batch: 16, seqLen: 128 },
  { preset: "base", batch: 4, seqLen: 128 },
] as const;
const REPS = 3;
const NEW_TOKENS = 32;
const LR = 1e-5;

function words(rng: Rng, n: number): string {
  const syll = ["ba", "ko", "ri", "tu", "me", "sa", "lo", "pi", "ne", "da", "ve", "gu"];
  return Array.from({ length: n }, () => {
    let w = "";
    for (let j = 0, len = 1 + rng.int(3); j < len; j++) w += rng.pick(syll);
    return w;
  }).join(" ");
}

/** The worker's process id: the child of this process running mage_learner.worker (Linux /proc), or null. */
function workerPid(): number | null {
  try {
    for (const task of readdirSync("/proc/self/task")) {
      const kids = readFileSync(`/proc/self/task/${task}/children`, "utf8").trim().split(/\s+/);
      for (const k of kids) {
        if (!k) continue;
        if (readFileSync(`/proc/${k}/cmdline`, "utf8").includes("mage_learner.worker")) return Number(k);
      }
    }
  } catch {
    return null;
  }
  return null;
}

/** CPU time (user + system, ms) of a process from /proc/PID/stat (clock ticks of 10 ms). */
function procCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function selfCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** Wall and CPU time of `f`: this process's CPU, plus the worker's when `pid` is given. */
async function timed<T>(
  f: () => Promise<T> | T,
  pid: number | null = null,
): Promise<{ ms: number; cpu: number; value: T }> {
  const c0 = selfCpuMs() + (pid ? procCpuMs(pid) : 0);
  const t0 = performance.now();
  const value = await f();
  const ms = performance.now() - t0;
  return { ms, cpu: selfCpuMs() + (pid ? procCpuMs(pid) : 0) - c0, value };
}

function tokensOf(gens: readonly Generation[]): number {
  return gens.reduce((s, g) => s + g.tokenIds.length, 0);
}

/** Median tokens per wall second and per CPU second of `policy` on `requests` over REPS runs after a warm-up. */
async function tokensPerSecond(
  policy: Policy,
  requests: GenerateRequest[],
  pid: number | null,
): Promise<{ wall: number; cpu: number }> {
  await policy.generate(requests);
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let r = 0; r < REPS; r++) {
    const t = await timed(() => policy.generate(requests), pid);
    wall.push((tokensOf(t.value) / t.ms) * 1000);
    cpu.push((tokensOf(t.value) / t.cpu) * 1000);
  }
  return { wall: median(wall), cpu: median(cpu) };
}

function fmt(x: number): string {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

export async function run(): Promise<void> {
  const wanted = (process.env.MAGE_BENCH_TORCH_PRESETS ?? "tiny,base").split(",").map((s) => s.trim());
  const kernels = await selectKernels("auto");
  const rng = Rng.seeded("bench-torch");
  const corpus = Array.from({ length: 300 }, (_, i) => words(rng.derive("corpus", i), 40));
  const tok = trainTokenizer(corpus, { vocabSize: 1024 });
  const dir = await mkdtemp(join(tmpdir(), "mage-bench-torch-"));
  console.log(
    `embedded kernels ${kernels.name} (1 thread); worker torch on cpu, float32, OMP_NUM_THREADS=1; ` +
      `${cpus().length} CPUs, load ${loadavg()[0].toFixed(2)}; median of ${REPS} after a warm-up`,
  );
  const rows: string[] = [];
  try {
    for (const c of CASES) {
      if (!wanted.includes(c.preset)) continue;
      const config = presetConfig(c.preset, { vocabSize: tok.vocabSize });
      const params = initParams(config, rng.derive("init", c.preset));
      const hf = join(dir, c.preset);
      await exportHf(hf, { config, params: paramsToMap(params), tokenizer: tok });
      let torch: TorchLearner;
      try {
        torch = await TorchLearner.open({
          torch: TorchModelSchema.parse({ path: hf }),
          optimizer: { lr: LR, weightDecay: 0.01, gradClip: 1 },
          seed: 0,
          reference: false,
          worker: { env: { OMP_NUM_THREADS: "1", MKL_NUM_THREADS: "1" } },
        });
      } catch (err) {
        console.log(`skipped: the PyTorch worker did not start (${(err as Error).message.split("\n")[0]})`);
        return;
      }
      try {
        // ---- update ----------------------------------------------------------------------------
        const r = rng.derive("batch", c.preset);
        const batch: Batch = {
          sequences: Array.from({ length: c.batch }, () =>
            Int32Array.from({ length: c.seqLen }, () => r.int(tok.vocabSize)),
          ),
          lossMask: Array.from({ length: c.batch }, () =>
            Uint8Array.from({ length: c.seqLen }, (_, t) => (t > 0 ? 1 : 0)),
          ),
        };
        const now = scoreBatch(params, batch, kernels);
        const inputs = {
          oldLogp: Float64Array.from(now.logp),
          advantages: Float64Array.from(now.logp, () => r.normal()),
        };
        const learner = new Learner(cloneParams(params), {
          kernels,
          schedule: { kind: "constant", lr: LR },
          adamw: { weightDecay: 0.01 },
          maxGradNorm: 1,
        });
        const loss = makePpoLoss(inputs, DEFAULT_PPO_OPTIONS);
        learner.update(batch, loss);
        const embeddedMs: number[] = [];
        const embeddedCpu: number[] = [];
        for (let i = 0; i < REPS; i++) {
          const t = await timed(() => learner.update(batch, loss));
          embeddedMs.push(t.ms);
          embeddedCpu.push(t.cpu);
        }
        const pid = workerPid();

        const arrays = {
          ...batchArrays(batch),
          old_logp: inputs.oldLogp,
          advantages: inputs.advantages,
        };
        const fields = {
          loss: { ...DEFAULT_PPO_OPTIONS },
          microBatchTokens: c.batch * c.seqLen,
          lr: LR,
        };
        await torch.worker.request("update", fields, arrays);
        const torchMs: number[] = [];
        const torchCpu: number[] = [];
        const protocolMs: number[] = [];
        for (let i = 0; i < REPS; i++) {
          const t = await timed(() => torch.worker.request("update", fields, arrays), pid);
          torchMs.push(t.ms);
          torchCpu.push(t.cpu);
          protocolMs.push(t.ms - Number(t.value.header.ms));
        }
        const e = median(embeddedMs);
        const tm = median(torchMs);
        const p = median(protocolMs);
        const ec = median(embeddedCpu);
        const tc = pid ? median(torchCpu) : Number.NaN;
        rows.push(
          `${c.preset.padEnd(5)} update ${c.batch}×${c.seqLen}`.padEnd(28) +
            `ms/step: embedded ${fmt(e)} (cpu ${fmt(ec)}), torch ${fmt(tm)} (cpu ${fmt(tc)}); ` +
            `torch speed ÷ embedded ${(e / tm).toFixed(2)}× (cpu ${(ec / tc).toFixed(2)}×); ` +
            `protocol ${fmt(p)} ms = ${((100 * p) / tm).toFixed(2)}% of the torch update`,
        );

        // ---- generate --------------------------------------------------------------------------
        const embeddedPolicy = new EmbeddedPolicy({ params, tokenizer: tok, kernels });
        const torchPolicy = new TorchPolicy(torch);
        for (const n of [1, 16]) {
          const requests: GenerateRequest[] = Array.from({ length: n }, (_, i) => ({
            messages: [{ role: "user", content: words(rng.derive("prompt", i), 6) }],
            sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: NEW_TOKENS, stop: [] },
            seed: 100 + i,
          }));
          const a = await tokensPerSecond(embeddedPolicy, requests, null);
          const b = await tokensPerSecond(torchPolicy, requests, pid);
          rows.push(
            `${c.preset.padEnd(5)} generate ${n} seq × ${NEW_TOKENS}`.padEnd(28) +
              `tok/s: embedded ${fmt(a.wall)} (per cpu s ${fmt(a.cpu)}), torch ${fmt(b.wall)} (per cpu s ${fmt(b.cpu)}); ` +
              `torch speed ÷ embedded ${(b.wall / a.wall).toFixed(2)}× (cpu ${(b.cpu / a.cpu).toFixed(2)}×)`,
          );
        }
      } finally {
        await torch.close();
      }
      console.log(rows.splice(0).join("\n"));
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
