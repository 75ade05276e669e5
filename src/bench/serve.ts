import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Rng } from "../core/rng.js";
import { presetConfig } from "../model/config.js";
import { exportGguf } from "../model/gguf.js";
import { selectKernels } from "../model/kernels/select.js";
import { randomWeights } from "../model/sampler.js";
import { trainTokenizer } from "../model/tokenizer.js";
import { EmbeddedPolicy } from "../policy/embedded.js";
import { GgufPolicy, nodeLlamaCppAvailable } from "../policy/gguf.js";
import type { ChatMessage, GenerateRequest, Generation, SamplingParams } from "../policy/types.js";
import { paramsFromMap, ServeEngine } from "../serve/engine.js";
import { startServer } from "../serve/server.js";
import { median } from "./median.js";

/**
 * Serving throughput of the `small` preset with random weights (MAGE_BENCH_SERVE_PRESET=tiny|base
 * picks another preset).
 *
 * 1. 32 concurrent chat requests (short prompts, 32 new tokens, T 1): generated tokens/s through
 *    `mage serve` over HTTP (server and client in this process, loopback) vs the in-process
 *    `EmbeddedPolicy` given the same 32 requests in one call. Target ratio ≥ 0.8.
 * 2. Sampling tokens/s at 1 and 16 sequences: our sampler vs llama.cpp (node-llama-cpp, same
 *    weights as an F32 GGUF, 1 thread, exact-log-prob settings), when node-llama-cpp is installed.
 *
 * Each figure is the median of a few timed runs after a warm-up; the machine may be shared, so
 * the load average is printed.
 */

const N_CONCURRENT = 32;
const NEW_TOKENS = 32;
const REPS = 3;
/** Rounds of the HTTP vs in-process comparison (alternating, medians compared). */
const HTTP_REPS = 5;

function words(rng: Rng, n: number): string {
  const syll = [
    "ba",
    "ko",
    "ri",
    "tu",
    "me",
    "sa",
    "lo",
    "pi",
    "ne",
    "da",
    "ve",
    "gu",
    "zo",
    "hi",
    "ya",
    "fe",
  ];
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + rng.int(4);
    let w = "";
    for (let j = 0; j < len; j++) w += rng.pick(syll);
    out.push(rng.bernoulli(0.1) ? `${w},` : w);
  }
  return out.join(" ");
}

async function timeIt<T>(f: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await f();
  return { ms: performance.now() - t0, value };
}

function tokensOf(gens: readonly Generation[]): number {
  return gens.reduce((s, g) => s + g.tokenIds.length, 0);
}

function fmt(x: number): string {
  return x >= 100 ? x.toFixed(0) : x.toFixed(1);
}

export async function run(): Promise<void> {
  const rng = Rng.seeded("bench-serve");
  const corpus = Array.from({ length: 400 }, (_, i) => words(rng.derive("corpus", i), 40));
  const tok = trainTokenizer(corpus, { vocabSize: 1024 });
  const preset = process.env.MAGE_BENCH_SERVE_PRESET || "small";
  const config = presetConfig(preset, { vocabSize: tok.vocabSize });
  const weights = randomWeights(config, 1);
  const params = paramsFromMap(config, weights);
  const kernels = await selectKernels("auto");
  console.log(
    `${preset} preset: d ${config.dModel}, ${config.nLayers} layers, vocab ${config.vocabSize}, random weights; ` +
      `kernels ${kernels.name}; ${cpus().length} CPUs, load ${loadavg()[0].toFixed(2)}`,
  );
  const sampling: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: NEW_TOKENS, stop: [] };
  const prompts: ChatMessage[][] = Array.from({ length: N_CONCURRENT }, (_, i) => [
    { role: "user", content: words(rng.derive("prompt", i), 6) },
  ]);
  const requests: GenerateRequest[] = prompts.map((messages, i) => ({ messages, sampling, seed: 1000 + i }));
  const policy = new EmbeddedPolicy({ params, tokenizer: tok, kernels });

  // ---- 1. HTTP vs in-process at 32 concurrent requests -----------------------------------------
  const engine = new ServeEngine({ params, tokenizer: tok, kernels });
  const server = await startServer({ engine, modelName: "bench", port: 0, maxTokens: NEW_TOKENS, seed: 1 });
  const post = async (req: GenerateRequest): Promise<number> => {
    const res = await fetch(`${server.baseUrl}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "bench",
        messages: req.messages,
        max_tokens: NEW_TOKENS,
        temperature: 1,
        seed: req.seed,
        logprobs: true,
      }),
    });
    if (res.status !== 200) throw new Error(`bench: server answered ${res.status}: ${await res.text()}`);
    const json = (await res.json()) as { usage: { completion_tokens: number } };
    return json.usage.completion_tokens;
  };
  try {
    await policy.generate(requests);
    await Promise.all(requests.map(post));
    const inproc: number[] = [];
    const http: number[] = [];
    let tokens = 0;
    const calls0 = engine.calls;
    for (let r = 0; r < HTTP_REPS; r++) {
      const a = await timeIt(() => policy.generate(requests));
      tokens = tokensOf(a.value);
      inproc.push((tokens / a.ms) * 1000);
      const b = await timeIt(() => Promise.all(requests.map(post)));
      const served = b.value.reduce((s, x) => s + x, 0);
      if (served !== tokens) throw new Error(`bench: HTTP generated ${served} tokens, in-process ${tokens}`);
      http.push((served / b.ms) * 1000);
    }
    const calls = (engine.calls - calls0) / HTTP_REPS;
    const ti = median(inproc);
    const th = median(http);
    console.log(
      `\n${N_CONCURRENT} concurrent requests × ≤${NEW_TOKENS} new tokens (${tokens} generated), tokens/s, median of ${HTTP_REPS} alternating rounds:`,
    );
    console.log(`  ${"in-process EmbeddedPolicy".padEnd(34)} ${fmt(ti).padStart(8)}`);
    console.log(
      `  ${"mage serve over HTTP".padEnd(34)} ${fmt(th).padStart(8)}   ratio ${(th / ti).toFixed(2)} (target ≥ 0.8), ` +
        `${calls.toFixed(1)} sampler calls per round`,
    );
  } finally {
    await server.close();
  }

  // ---- 2. our sampler vs llama.cpp at 1 and 16 sequences ---------------------------------------
  const ours = async (n: number): Promise<number> => {
    const reqs = requests.slice(0, n);
    await policy.generate(reqs);
    const runs: number[] = [];
    for (let r = 0; r < REPS; r++) {
      const t = await timeIt(() => policy.generate(reqs));
      runs.push((tokensOf(t.value) / t.ms) * 1000);
    }
    return median(runs);
  };
  const ours1 = await ours(1);
  const ours16 = await ours(16);
  console.log(`\nsampling tokens/s (T 1, ≤${NEW_TOKENS} new tokens per sequence):`);
  console.log(`  ${"".padEnd(34)} ${"1 seq".padStart(8)} ${"16 seqs".padStart(8)}`);
  console.log(
    `  ${`mage sampler (${kernels.name})`.padEnd(34)} ${fmt(ours1).padStart(8)} ${fmt(ours16).padStart(8)}`,
  );
  if (!(await nodeLlamaCppAvailable())) {
    console.log("  llama.cpp: skipped (node-llama-cpp is not installed; npm install node-llama-cpp)");
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), "mage-bench-serve-"));
  try {
    const path = join(dir, `${preset}-f32.gguf`);
    await exportGguf(path, { config, params: weights, tokenizer: tok, type: "F32" });
    const gguf = await GgufPolicy.load({ path, threads: 1, sequences: 16, contextSize: 256 });
    try {
      const theirs = async (n: number): Promise<number> => {
        const reqs = requests.slice(0, n);
        await gguf.generate(reqs);
        const runs: number[] = [];
        for (let r = 0; r < REPS; r++) {
          const t = await timeIt(() => gguf.generate(reqs));
          runs.push((tokensOf(t.value) / t.ms) * 1000);
        }
        return median(runs);
      };
      const l1 = await theirs(1);
      const l16 = await theirs(16);
      console.log(`  ${"llama.cpp F32, 1 thread".padEnd(34)} ${fmt(l1).padStart(8)} ${fmt(l16).padStart(8)}`);
      console.log(
        `  ${"ratio mage / llama.cpp".padEnd(34)} ${(ours1 / l1).toFixed(2).padStart(8)} ${(ours16 / l16).toFixed(2).padStart(8)}`,
      );
    } finally {
      await gguf.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
