/**
 * The learner against PyTorch on identical weights and batch (local measurement; CI skips it).
 *
 * For `tiny` (batch 16 × 128 tokens) and `base` (4 × 128) this writes the weights, the batch
 * and the advantages to a safetensors file, runs scripts/torch_reference.py (our architecture
 * in PyTorch, float32 and float64, torch.set_num_threads(1)) when `/usr/bin/python3` can import
 * torch (Debian: `apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread`),
 * and prints side by side:
 *   - the loss, ours vs torch (target |Δ| ≤ 1e-4), and the largest relative gradient
 *     difference over the weight tensors (max |Δg| / max |g| per tensor) against torch float32
 *     and float64 (with torch float32 vs float64 for scale);
 *   - ms per training step (forward, loss, backward, clip, AdamW) for each kernel set and for
 *     torch, wall and process-CPU time, and the ratios with PASS/MISS against the targets:
 *     ≤ 3× torch on the native kernels, ≤ 10× on wasm (the pure-npm path). The verdict uses
 *     CPU time, which a shared machine disturbs less than wall time.
 * Then the peak RSS of a `small` training step (16 × 128) in a fresh child process per kernel
 * set, against the 2 GiB target (this part runs without torch too).
 *
 * MAGE_TORCH_PYTHON overrides the interpreter; the pure-TS `js` kernels (tens of seconds per
 * tiny step) run only with MAGE_BENCH_SLOW=1.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Rng } from "../core/rng.js";
import { DEFAULT_ADAMW } from "../model/adamw.js";
import { type ModelConfig, presetConfig } from "../model/config.js";
import { availableKernels } from "../model/kernels/select.js";
import type { Kernels } from "../model/kernels/types.js";
import { Learner } from "../model/learner.js";
import type { LossFn } from "../model/loss-types.js";
import { initParams } from "../model/params.js";
import { paramsToMap } from "../model/params-io.js";
import { readSafetensors, type TensorInput, writeSafetensors } from "../model/safetensors.js";
import type { Batch } from "../model/transformer.js";
import { median } from "./median.js";

const ENTROPY_COEF = 0.01;
const LR = 1e-4;
const MAX_GRAD_NORM = 1;
const LOSS_TOL = 1e-4;
const TARGETS: Record<string, number> = { native: 3, wasm: 10 };
const RSS_LIMIT_MIB = 2048;

interface Case {
  preset: "tiny" | "base";
  batch: number;
  seqLen: number;
}

const CASES: Case[] = [
  { preset: "tiny", batch: 16, seqLen: 128 },
  { preset: "base", batch: 4, seqLen: 128 },
];

const here = fileURLToPath(import.meta.url);
const root = resolve(dirname(here), "..", "..");

function python(): string {
  return process.env.MAGE_TORCH_PYTHON || "/usr/bin/python3";
}

/** Why torch cannot be used here, or null when it can. */
function torchUnavailable(): string | null {
  const r = spawnSync(python(), ["-c", "import torch"], { encoding: "utf8", timeout: 60_000 });
  if (r.error) return `${python()} cannot run (${r.error.message})`;
  if (r.status !== 0) return `${python()} cannot import torch (${(r.stderr || "").trim().split("\n").pop()})`;
  return null;
}

interface Setup {
  config: ModelConfig;
  batch: Batch;
  /** Advantage per token [B·L] (entry t of a sequence belongs to target token t). */
  adv: Float32Array;
  /** Advantages of the scored tokens, in the learner's order. */
  advScored: Float64Array;
}

function setup(c: Case): Setup {
  const config = presetConfig(c.preset, { contextLength: Math.max(c.seqLen, 128) });
  const rng = Rng.seeded("bench-torch-compare").derive(c.preset);
  const sequences = Array.from({ length: c.batch }, () =>
    Int32Array.from({ length: c.seqLen }, () => rng.int(config.vocabSize)),
  );
  const lossMask = Array.from({ length: c.batch }, () =>
    Uint8Array.from({ length: c.seqLen }, (_, t) => (t > 0 ? 1 : 0)),
  );
  const adv = Float32Array.from({ length: c.batch * c.seqLen }, () => rng.normal());
  const scored: number[] = [];
  for (let s = 0; s < c.batch; s++)
    for (let t = 1; t < c.seqLen; t++) if (lossMask[s][t]) scored.push(adv[s * c.seqLen + t]);
  return { config, batch: { sequences, lossMask }, adv, advScored: Float64Array.from(scored) };
}

/** −(1/N) Σ (adv · logp + coef · entropy), the loss scripts/torch_reference.py computes. */
function pgLoss(adv: Float64Array): LossFn {
  return (st) => {
    const n = st.logp.length;
    let loss = 0;
    const dLogp = new Float64Array(n);
    const dEntropy = new Float64Array(n).fill(-ENTROPY_COEF / n);
    for (let i = 0; i < n; i++) {
      loss -= (adv[i] * st.logp[i] + ENTROPY_COEF * st.entropy[i]) / n;
      dLogp[i] = -adv[i] / n;
    }
    return { loss, dLogp, dEntropy, metrics: {} };
  };
}

function initRng(): Rng {
  return Rng.seeded("bench-torch-compare").derive("init");
}

function newLearner(s: Setup, k: Kernels): Learner {
  return Learner.create(s.config, initRng(), {
    kernels: k,
    schedule: { kind: "constant", lr: LR },
    maxGradNorm: MAX_GRAD_NORM,
  });
}

interface TorchResult {
  torch: string;
  threads: number;
  loss32: number;
  loss64: number;
  stepMs: number;
  stepCpuMs: number;
  grads32: Map<string, Float32Array>;
  grads64: Map<string, Float32Array>;
}

async function runTorch(s: Setup, c: Case, dir: string): Promise<TorchResult> {
  const params = initParams(s.config, initRng());
  const tensors: Record<string, TensorInput> = {};
  params.specs.forEach((spec, i) => {
    tensors[spec.name] = { shape: spec.shape, data: params.tensors[i] };
  });
  const tokens = new Int32Array(c.batch * c.seqLen);
  const mask = new Uint8Array(c.batch * c.seqLen);
  s.batch.sequences.forEach((q, i) => {
    tokens.set(q, i * c.seqLen);
    mask.set(s.batch.lossMask[i], i * c.seqLen);
  });
  const shape = [c.batch, c.seqLen];
  tensors["batch.tokens"] = { shape, data: tokens };
  tensors["batch.mask"] = { shape, data: mask };
  tensors["batch.adv"] = { shape, data: s.adv };
  const adamw = { ...DEFAULT_ADAMW, lr: LR };
  const input = join(dir, `${c.preset}-in.safetensors`);
  const output = join(dir, `${c.preset}-out.safetensors`);
  await writeSafetensors(input, tensors, {
    config: JSON.stringify(s.config),
    adamw: JSON.stringify(adamw),
    maxGradNorm: String(MAX_GRAD_NORM),
    entropyCoef: String(ENTROPY_COEF),
  });
  const script = join(root, "scripts", "torch_reference.py");
  const r = spawnSync(python(), [script, input, output, "--steps", "3", "--warmup", "1"], {
    encoding: "utf8",
    timeout: 600_000,
    env: { ...process.env, OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", MKL_NUM_THREADS: "1" },
  });
  if (r.status !== 0)
    throw new Error(`torch_reference.py failed (${r.error?.message ?? `exit ${r.status}`}): ${r.stderr}`);
  const res = JSON.parse(r.stdout.trim().split("\n").pop() as string);
  const out = await readSafetensors(output);
  const grads32 = new Map<string, Float32Array>();
  const grads64 = new Map<string, Float32Array>();
  for (const [name, t] of out.tensors) {
    if (name.startsWith("grad32.")) grads32.set(name.slice(7), t.data as Float32Array);
    if (name.startsWith("grad64.")) grads64.set(name.slice(7), t.data as Float32Array);
  }
  return { ...res, grads32, grads64 };
}

/** Largest per-tensor max|a − b| / max|b| over the named tensors, and where. */
function maxRelDiff(
  a: Map<string, Float32Array>,
  b: Map<string, Float32Array>,
): { rel: number; name: string } {
  let worst = { rel: 0, name: "-" };
  for (const [name, x] of a) {
    const y = b.get(name);
    if (!y || y.length !== x.length)
      throw new Error(`gradient "${name}" missing or mis-sized in torch output`);
    let diff = 0;
    let scale = 0;
    for (let i = 0; i < x.length; i++) {
      diff = Math.max(diff, Math.abs(x[i] - y[i]));
      scale = Math.max(scale, Math.abs(y[i]));
    }
    const rel = diff / (scale || 1);
    if (rel > worst.rel || Number.isNaN(rel)) worst = { rel, name };
  }
  return worst;
}

interface Ours {
  loss: number;
  grads: Map<string, Float32Array>;
  ms: number;
  cpuMs: number;
}

/** One gradient evaluation (kept for the comparison, then applied as the warm-up step), then timed steps. */
function runOurs(s: Setup, k: Kernels, steps: number): Ours {
  const learner = newLearner(s, k);
  const loss = pgLoss(s.advScored);
  const acc = learner.accumulate(s.batch, loss);
  const grads = new Map([...paramsToMap(learner.grads)].map(([n, t]) => [n, t.slice()]));
  learner.step();
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < steps; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    learner.update(s.batch, loss);
    wall.push(performance.now() - t0);
    const u = process.cpuUsage(c0);
    cpu.push((u.user + u.system) / 1000);
  }
  return { loss: acc.loss, grads, ms: median(wall), cpuMs: median(cpu) };
}

function fmt(x: number, digits = 0): string {
  return x.toFixed(digits);
}

function childRss(kernel: string): { maxRssMiB: number; ms: number } | string {
  const ext = extname(here);
  const child = join(dirname(here), `train-rss-child${ext}`);
  const r = spawnSync(process.execPath, [...process.execArgv, child, "small", "16", "128", kernel, "2"], {
    encoding: "utf8",
    timeout: 600_000,
    env: { ...process.env, MAGE_KERNELS: kernel },
  });
  if (r.status !== 0) return `child failed (${r.error?.message ?? `exit ${r.status}`}): ${r.stderr.trim()}`;
  return JSON.parse(r.stdout.trim().split("\n").pop() as string);
}

export async function run(): Promise<void> {
  const slow = process.env.MAGE_BENCH_SLOW === "1";
  const all = await availableKernels();
  const kernels = all.filter((k) => k.name !== "js" || slow);
  const missing = ["native", "wasm"].filter((n) => !all.some((k) => k.name === n));
  if (missing.length > 0) console.log(`kernel sets not available here: ${missing.join(", ")}`);
  if (!slow) console.log("js kernels skipped (tens of seconds per step; MAGE_BENCH_SLOW=1 runs them)");
  const why = torchUnavailable();
  if (why) {
    console.log(`PyTorch comparison skipped: ${why}.`);
    console.log(
      "  To run it (Debian/Ubuntu): apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread",
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "mage-torch-"));
  try {
    for (const c of CASES) {
      const s = setup(c);
      const torch = why ? null : await runTorch(s, c, dir);
      console.log(`\n${c.preset} (batch ${c.batch}x${c.seqLen}, ${s.config.vocabSize} vocab)`);
      if (torch) {
        console.log(
          `  torch ${torch.torch}, ${torch.threads} thread: ${fmt(torch.stepMs)} ms/step wall, ${fmt(torch.stepCpuMs)} ms cpu; loss f32 ${torch.loss32.toFixed(7)}, f64 ${torch.loss64.toFixed(7)}`,
        );
        const ref = maxRelDiff(torch.grads32, torch.grads64);
        console.log(`  torch f32 vs f64 gradients: max rel diff ${ref.rel.toExponential(2)} (${ref.name})`);
      }
      console.log(
        "  kernels   ms/step  cpu ms  loss         |Δloss| f32  grad rel f32  grad rel f64  ratio cpu (wall)  target",
      );
      for (const k of kernels) {
        const o = runOurs(s, k, k.name === "js" ? 1 : 3);
        let cmp = "";
        if (torch) {
          const dl = Math.abs(o.loss - torch.loss32);
          const g32 = maxRelDiff(o.grads, torch.grads32);
          const g64 = maxRelDiff(o.grads, torch.grads64);
          const ratio = o.cpuMs / torch.stepCpuMs;
          const target = TARGETS[k.name];
          const verdict = target === undefined ? "-" : `≤${target}× ${ratio <= target ? "PASS" : "MISS"}`;
          cmp = `${dl.toExponential(1).padStart(7)} ${dl <= LOSS_TOL ? "PASS" : "MISS"}  ${g32.rel.toExponential(2).padStart(12)}  ${g64.rel.toExponential(2).padStart(12)}  ${`${ratio.toFixed(2)}× (${(o.ms / torch.stepMs).toFixed(2)}×)`.padStart(16)}  ${verdict}`;
        }
        console.log(
          `  ${k.name.padEnd(8)} ${fmt(o.ms).padStart(8)} ${fmt(o.cpuMs).padStart(7)}  ${o.loss.toFixed(7).padEnd(11)}  ${cmp}`,
        );
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(
    `\nsmall training step (batch 16x128), peak RSS of a fresh process (target ≤ ${RSS_LIMIT_MIB} MiB):`,
  );
  for (const k of all.filter((x) => x.name !== "js")) {
    const r = childRss(k.name);
    if (typeof r === "string") {
      console.log(`  ${k.name.padEnd(8)} ${r}`);
      continue;
    }
    console.log(
      `  ${k.name.padEnd(8)} ${fmt(r.maxRssMiB).padStart(6)} MiB  ${r.maxRssMiB <= RSS_LIMIT_MIB ? "PASS" : "MISS"}  (${fmt(r.ms)} ms/step)`,
    );
  }
}
