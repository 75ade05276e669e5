/**
 * A real pretrained LLM (SmolLM2-135M-Instruct, `mage fetch-model`) through the PyTorch worker on
 * this machine's CPU, the worker on every core torch sees:
 *
 * 1. Sampling tokens/s at 1 and 16 sequences (chat prompts, temperature 1, up to 48 new tokens):
 *    the worker's `generate` (prefix store off, so every prompt is prefilled as llama.cpp's is)
 *    with float32 and bfloat16 weights, each with the Hugging Face and the lean decoder, vs
 *    llama.cpp (node-llama-cpp) on the same weights written as an F32 GGUF by fetch-model, with as
 *    many threads; median of 3 after a warm-up. Target: the worker (float32, hf) ≥ 0.5× llama.cpp.
 * 2. MAGE iterations on Kuhn as `configs/real-quickstart.yaml` trains them (16 trials × 3
 *    attempts, compact prompts, LoRA r16), through `mage train` itself, for float32 and bfloat16
 *    with the HF and the lean decoder, and bfloat16 with LoRA on layers 20-29 only: wall time per
 *    iteration and its split (the worker's generate, render, logprobs and update; the protocol;
 *    the rest is the trainer's own), the first mini-batch's PPO ratio spread (mean |π/π_old − 1|:
 *    the sampler's and the learner's log-probs apart) and the worker's peak RSS. Target: ≤ 25 s
 *    per iteration (median). With
 *    MAGE_BENCH_REAL_BASELINE=DIR (another built checkout, e.g. a `git worktree` of an older
 *    commit) the same iterations run through that checkout's CLI and worker too, side by side;
 *    MAGE_BENCH_REAL_BASELINE_CONFIG names the config it reads instead of real-quickstart.yaml
 *    (an older checkout's strict schema refuses fields added since, e.g. prefixCacheMB).
 *
 * MAGE_BENCH_REAL_SECTIONS=sampling|iterations runs one section only.
 * MAGE_BENCH_REAL_MODEL: the model the iterations train (default models/smollm2-kuhn-warm when
 * present, else the base); MAGE_BENCH_REAL_ITERATIONS (default 2).
 */

import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { TorchLearner } from "../learner/torch/learner.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import { PACKAGE_ROOT, resolvePython } from "../learner/torch/worker.js";
import { GgufPolicy, nodeLlamaCppAvailable } from "../policy/gguf.js";
import type { GenerateRequest, Generation, Policy } from "../policy/types.js";
import { TorchModelSchema } from "../train/config.js";
import { median } from "./median.js";
import { storyMessages } from "./story-prompts.js";

const BASE = "models/smollm2-135m-instruct";
const WARM = "models/smollm2-kuhn-warm";
const F32_GGUF = "models/gguf/SmolLM2-135M-Instruct.F32.gguf";
const REPS = 3;
const NEW_TOKENS = 48;

function requests(n: number): GenerateRequest[] {
  return Array.from({ length: n }, (_, i) => ({
    messages: storyMessages(i),
    sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: NEW_TOKENS, stop: [] },
    seed: 1000 + i,
  }));
}

function tokensOf(gens: readonly Generation[]): number {
  return gens.reduce((s, g) => s + g.tokenIds.length, 0);
}

async function tokensPerSecond(policy: Policy, n: number): Promise<number> {
  const reqs = requests(n);
  await policy.generate(reqs);
  const runs: number[] = [];
  for (let r = 0; r < REPS; r++) {
    const t0 = performance.now();
    const gens = await policy.generate(requests(n));
    runs.push((tokensOf(gens) / (performance.now() - t0)) * 1000);
  }
  return median(runs);
}

function fmt(x: number): string {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

/** The worker's samplers measured side by side: weights' dtype × decoder (docs/design.md). */
const SAMPLERS = [
  { dtype: "float32", decoder: "hf" },
  { dtype: "float32", decoder: "lean" },
  { dtype: "bfloat16", decoder: "hf" },
  { dtype: "bfloat16", decoder: "lean" },
] as const;

async function workerTokensPerSecond(dtype: string, decoder: string): Promise<number[]> {
  const learner = await TorchLearner.open({
    torch: TorchModelSchema.parse({ path: BASE, prefixCacheMB: 0, dtype, decoder }),
    optimizer: { lr: 1e-5, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
  });
  try {
    const policy = new TorchPolicy(learner);
    return [await tokensPerSecond(policy, 1), await tokensPerSecond(policy, 16)];
  } finally {
    await learner.close();
  }
}

async function samplingSection(threads: number): Promise<void> {
  console.log(`\n1. sampling tokens/s (T 1, ≤${NEW_TOKENS} new tokens, ${BASE}, ${threads} threads):`);
  console.log(`  ${"".padEnd(28)} ${"1 seq".padStart(8)} ${"16 seqs".padStart(8)}`);
  let ours: number[] = [];
  for (const { dtype, decoder } of SAMPLERS) {
    const rates = await workerTokensPerSecond(dtype, decoder);
    if (ours.length === 0) ours = rates;
    const name = `worker ${dtype} ${decoder}`;
    const vs = `  (×${(rates[0] / ours[0]).toFixed(2)} / ×${(rates[1] / ours[1]).toFixed(2)} of float32 hf)`;
    console.log(`  ${name.padEnd(28)} ${fmt(rates[0]).padStart(8)} ${fmt(rates[1]).padStart(8)}${vs}`);
  }
  if (!(await nodeLlamaCppAvailable()) || !existsSync(F32_GGUF)) {
    console.log(`  llama.cpp: skipped (needs node-llama-cpp and ${F32_GGUF} from \`mage fetch-model\`)`);
    return;
  }
  const gguf = await GgufPolicy.load({ path: F32_GGUF, threads, sequences: 16, contextSize: 4096 });
  try {
    const theirs = [await tokensPerSecond(gguf, 1), await tokensPerSecond(gguf, 16)];
    console.log(
      `  ${"llama.cpp F32".padEnd(28)} ${fmt(theirs[0]).padStart(8)} ${fmt(theirs[1]).padStart(8)}`,
    );
    console.log(
      `  ${"ratio worker / llama.cpp".padEnd(28)} ${(ours[0] / theirs[0]).toFixed(2).padStart(8)} ${(ours[1] / theirs[1]).toFixed(2).padStart(8)}  (target ≥ 0.50)`,
    );
  } finally {
    await gguf.close();
  }
}

/** The iteration variants measured side by side: the config's `--set`s (docs/measurements.md). */
const VARIANTS: readonly { label: string; sets: readonly string[] }[] = [
  { label: "float32 hf", sets: ["model.torch.dtype=float32", "model.torch.decoder=hf"] },
  { label: "float32 lean", sets: ["model.torch.dtype=float32", "model.torch.decoder=lean"] },
  { label: "bfloat16 hf", sets: ["model.torch.dtype=bfloat16", "model.torch.decoder=hf"] },
  { label: "bfloat16 lean", sets: ["model.torch.dtype=bfloat16", "model.torch.decoder=lean"] },
  {
    label: "bfloat16 hf, LoRA 20-29",
    sets: [
      "model.torch.dtype=bfloat16",
      "model.torch.decoder=hf",
      `model.torch.lora.layers=[${Array.from({ length: 10 }, (_, i) => 20 + i).join(", ")}]`,
    ],
  },
];

/** Runs `mage train` of `checkout` on the real-quickstart config for `iterations`, returns metrics.jsonl's rows. */
async function trainIterations(
  checkout: string,
  model: string,
  iterations: number,
  config = join(PACKAGE_ROOT, "configs/real-quickstart.yaml"),
  sets: readonly string[] = [],
): Promise<Record<string, number>[]> {
  const out = await mkdtemp(join(tmpdir(), "mage-bench-real-"));
  const args = [
    join(checkout, "dist/cli/main.js"),
    "train",
    "--config",
    config,
    "--out",
    out,
    "--no-progress",
    "--set",
    `model.torch.path=${resolve(model)}`,
    "--set",
    `train.iterations=${iterations}`,
    "--set",
    "eval.atStart=false",
    "--set",
    "eval.finalTrials=1",
    "--set",
    "eval.cells=[{opponent: intermediate, seat: first, unseen: false}]",
    ...sets.flatMap((x) => ["--set", x]),
  ];
  try {
    const code = await new Promise<number>((done) => {
      const child = spawn(process.execPath, args, {
        stdio: ["ignore", "ignore", "inherit"],
        env: { ...process.env, MAGE_PYTHON: resolvePython(null).python },
      });
      child.on("close", (c) => done(c ?? 1));
    });
    if (code !== 0) throw new Error(`mage train (${checkout}) exited with ${code}`);
    return readFileSync(join(out, "metrics.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, number>);
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

const SPLIT = [
  ["generate", "worker_generate_ms"],
  ["render", "worker_render_ms"],
  ["logprobs", "worker_logprobs_ms"],
  ["update", "worker_update_ms"],
  ["protocol", "protocol_ms"],
] as const;

function printIterations(label: string, rows: readonly Record<string, number>[]): void {
  let prevWall = 0;
  for (const m of rows) {
    const wall = m.wall_s - prevWall;
    prevWall = m.wall_s;
    const known = SPLIT.reduce((s, [, k]) => s + (m[k] ?? 0), 0);
    const parts = SPLIT.filter(([, k]) => m[k] !== undefined).map(
      ([n, k]) => `${n} ${(m[k] / 1000).toFixed(1)}`,
    );
    parts.push(`trainer ${Math.max(0, wall - known / 1000).toFixed(1)}`);
    const rss =
      m.worker_peak_rss_mb !== undefined
        ? `, worker peak RSS ${(m.worker_peak_rss_mb / 1024).toFixed(2)} GiB`
        : "";
    const spread =
      m.ratio_dev_first !== undefined ? `, first ratio spread ${m.ratio_dev_first.toFixed(4)}` : "";
    console.log(
      `  ${label} iteration ${m.iteration}: ${wall.toFixed(1)} s (${parts.join(", ")} s); ` +
        `${m.scored_tokens ?? "?"} scored tokens, valid ${((m.valid_action ?? Number.NaN) * 100).toFixed(0)}%${spread}${rss}`,
    );
  }
}

/** Each iteration's own wall seconds (metrics.jsonl keeps the run's cumulative wall time). */
function iterationWalls(rows: readonly Record<string, number>[]): number[] {
  return rows.map((m, i) => m.wall_s - (i > 0 ? rows[i - 1].wall_s : 0));
}

async function iterationSection(): Promise<void> {
  const model =
    process.env.MAGE_BENCH_REAL_MODEL ?? (existsSync(join(WARM, "model.safetensors")) ? WARM : BASE);
  const iterations = Number(process.env.MAGE_BENCH_REAL_ITERATIONS ?? 2);
  console.log(
    `\n2. MAGE iterations on Kuhn (configs/real-quickstart.yaml, model ${model}; target ≤ 25 s median):`,
  );
  const walls: string[] = [];
  for (const v of VARIANTS) {
    const rows = await trainIterations(PACKAGE_ROOT, model, iterations, undefined, v.sets);
    printIterations(v.label, rows);
    walls.push(`${v.label} ${median(iterationWalls(rows)).toFixed(1)} s`);
  }
  console.log(`  median iteration: ${walls.join("; ")} (target ≤ 25 s)`);
  const baseline = process.env.MAGE_BENCH_REAL_BASELINE;
  if (baseline)
    printIterations(
      `baseline ${baseline}`,
      await trainIterations(
        resolve(baseline),
        model,
        iterations,
        process.env.MAGE_BENCH_REAL_BASELINE_CONFIG,
      ),
    );
}

export async function run(): Promise<void> {
  if (!existsSync(join(BASE, "model.safetensors"))) {
    console.log(`skipped: ${BASE} is absent (run \`mage fetch-model\` first)`);
    return;
  }
  const threads = cpus().length;
  console.log(`${threads} CPUs, load ${loadavg()[0].toFixed(2)} at the start`);
  if (process.env.MAGE_BENCH_REAL_SECTIONS !== "iterations") await samplingSection(threads);
  if (process.env.MAGE_BENCH_REAL_SECTIONS !== "sampling") await iterationSection();
  console.log(`load ${loadavg()[0].toFixed(2)} at the end`);
}
