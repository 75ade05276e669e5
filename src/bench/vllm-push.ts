/**
 * Weight pushes to the vLLM CPU server (issue 57, part 3): the LoRA adapter through vLLM's runtime
 * LoRA API (`model.torch.vllm.push: lora`) against the adapter merged into the weights by the
 * worker and reloaded by the server (`merged`), in iteration-shaped rounds: push the learner's
 * weights, then sample N sequences (chat prompts, temperature 1, up to NEW_TOKENS new tokens,
 * mage's 8 requests in flight), on SmolLM2-135M-Instruct in bfloat16 with real-quickstart's LoRA
 * (rank 16 on all seven projections), through `ServedRolloutPolicy`, the run's own push path.
 *
 * 1. One server started with both (`--enable-lora` and mage's reload extension), the two pushes
 *    interleaved round by round (order alternating), so both see the same machine; first the
 *    greedy check: the same learner weights pushed both ways, greedy replies compared token by
 *    token with each other and with the worker's own greedy samples.
 * 2. That server stopped; a server as `push: merged` starts it (no `--enable-lora`), merged rounds
 *    again: whether serving LoRA at all slows the base model's sampling.
 *
 * One vLLM server at a time (each holds 6-8 GB). Skipped without `.venv-vllm` or the model.
 * MAGE_BENCH_VLLM_PUSH_N (sequences per round, default 8), MAGE_BENCH_VLLM_PUSH_ROUNDS (default 2),
 * MAGE_BENCH_VLLM_PUSH_TOKENS (new tokens per sequence, default 48). Requests are not retried and may
 * take 10 minutes: on a loaded machine a vLLM step slows many times over, and a timed-out request
 * retried only adds load. The server's log: $TMPDIR/mage-bench-vllm-push-*.log (kept).
 */

import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { TorchLearner } from "../learner/torch/learner.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import { ServedRolloutPolicy } from "../learner/torch/served.js";
import {
  resolveVllmPython,
  VLLM_WORKER_EXTENSION,
  VllmServer,
  type VllmServerOptions,
} from "../learner/torch/vllm-server.js";
import { PACKAGE_ROOT } from "../learner/torch/worker.js";
import type { GenerateRequest, Generation } from "../policy/types.js";
import { TorchModelSchema, TorchVllmSchema } from "../train/config.js";
import { median } from "./median.js";
import { storyMessages } from "./story-prompts.js";

const MODEL = "models/smollm2-135m-instruct";
const NEW_TOKENS = Number(process.env.MAGE_BENCH_VLLM_PUSH_TOKENS ?? 48);
const GREEDY_TOKENS = 24;
const DTYPE = "bfloat16";
const LORA = {
  rank: 16,
  alpha: 32,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
};

function requests(n: number, round: number, temperature: number, maxTokens: number): GenerateRequest[] {
  return Array.from({ length: n }, (_, i) => ({
    messages: storyMessages(i),
    sampling: { temperature, topP: 1, topK: 0, maxTokens, stop: [] },
    seed: 1000 * round + i,
  }));
}

/** No retries, 10 minutes a request (see the file comment). */
const PATIENT = { retries: 0, timeoutMs: 600_000 };

const tokensOf = (gens: readonly Generation[]) => gens.reduce((s, g) => s + g.tokenIds.length, 0);

interface Round {
  pushS: number;
  genS: number;
  tokens: number;
}

async function round(policy: ServedRolloutPolicy, tag: number, n: number): Promise<Round> {
  const t0 = performance.now();
  await policy.push(tag);
  const t1 = performance.now();
  const gens = await policy.generate(requests(n, tag, 1, NEW_TOKENS));
  const t2 = performance.now();
  return { pushS: (t1 - t0) / 1000, genS: (t2 - t1) / 1000, tokens: tokensOf(gens) };
}

function summary(name: string, rounds: readonly Round[]): { iter: number; tps: number } {
  const push = median(rounds.map((r) => r.pushS));
  const gen = median(rounds.map((r) => r.genS));
  const iter = median(rounds.map((r) => r.pushS + r.genS));
  const tps = median(rounds.map((r) => r.tokens / r.genS));
  console.log(
    `  ${name.padEnd(34)} push ${push.toFixed(2).padStart(5)} s  generate ${gen.toFixed(1).padStart(5)} s ` +
      `(${tps.toFixed(0).padStart(4)} tok/s)  push+generate ${iter.toFixed(1).padStart(5)} s` +
      `   [rounds: ${rounds.map((r) => (r.pushS + r.genS).toFixed(1)).join(", ")}]`,
  );
  return { iter, tps };
}

/** Sequences equal token for token, and the mean share of the shorter one that agrees from the start. */
function agreement(a: readonly Generation[], b: readonly Generation[]): string {
  let same = 0;
  let shared = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i].tokenIds;
    const y = b[i].tokenIds;
    let k = 0;
    while (k < x.length && k < y.length && x[k] === y[k]) k++;
    if (k === x.length && k === y.length) same++;
    shared += k / Math.max(1, Math.min(x.length, y.length));
  }
  return `${same}/${a.length} identical, ${((100 * shared) / a.length).toFixed(0)}% shared prefix`;
}

async function startServer(push: "lora" | "weights", both: boolean): Promise<VllmServer> {
  const opts: VllmServerOptions = {
    model: resolve(MODEL),
    servedName: "base",
    vllm: TorchVllmSchema.parse({
      kvCacheGiB: 2,
      extraArgs: both ? ["--worker-extension-cls", VLLM_WORKER_EXTENSION] : [],
    }),
    loraRank: LORA.rank,
    push,
    dtype: DTYPE,
    contextLength: 8192,
    logFile: join(tmpdir(), `mage-bench-vllm-push-${push}.log`),
    ...(both
      ? {
          env: {
            ...process.env,
            VLLM_SERVER_DEV_MODE: "1",
            PYTHONPATH: join(PACKAGE_ROOT, "python"),
          },
        }
      : {}),
  };
  const t0 = performance.now();
  const server = await VllmServer.start(opts);
  console.log(
    `  (server up in ${((performance.now() - t0) / 1000).toFixed(0)} s: ${push === "lora" ? "--enable-lora" : "no LoRA"} + the reload extension)`,
  );
  return server;
}

export async function run(): Promise<void> {
  const python = resolveVllmPython(null).python;
  if (!existsSync(python) || !existsSync(join(MODEL, "config.json"))) {
    console.log(`skipped: needs ${python} (node scripts/vllm-env.mjs) and ${MODEL} (mage fetch-model)`);
    return;
  }
  const n = Number(process.env.MAGE_BENCH_VLLM_PUSH_N ?? 8);
  const rounds = Number(process.env.MAGE_BENCH_VLLM_PUSH_ROUNDS ?? 2);
  console.log(
    `vLLM weight pushes, ${MODEL} ${DTYPE}, LoRA r${LORA.rank} on 7 projections; ${n} sequences × ≤${NEW_TOKENS} new tokens per round, ` +
      `${rounds} rounds (median); ${cpus().length} cores, load average ${loadavg()[0].toFixed(1)} at the start`,
  );
  const learner = await TorchLearner.open({
    torch: TorchModelSchema.parse({ path: MODEL, dtype: DTYPE, lora: LORA, prefixCacheMB: 0 }),
    optimizer: { lr: 1e-4, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
  });
  const dir = await mkdtemp(join(tmpdir(), "mage-bench-vllm-push-"));
  let server: VllmServer | null = null;
  try {
    // A trained adapter (peft starts B at zero, which would make every comparison trivial).
    const seqs = Array.from({ length: 4 }, (_, s) =>
      Int32Array.from({ length: 64 }, (_, t) => 1000 + ((s * 131 + t * 17) % 3000)),
    );
    const mask = seqs.map((q) => Uint8Array.from(q, (_, t) => (t > 0 ? 1 : 0)));
    for (let s = 0; s < 3; s++)
      await learner.sft({ sequences: seqs, lossMask: mask }, { lr: 3e-4, microBatchTokens: 4096 });
    const t0 = performance.now();
    const pushed = await learner.pushWeights(join(dir, "probe"), DTYPE);
    console.log(
      `  the worker's merge + write alone: ${((performance.now() - t0) / 1000).toFixed(2)} s (${(pushed.bytes / 2 ** 20).toFixed(0)} MiB)`,
    );

    console.log("\n1. one server with --enable-lora and the reload extension, pushes interleaved:");
    server = await startServer("lora", true);
    const s = server;
    const served = (reload: boolean) =>
      new ServedRolloutPolicy({
        learner,
        baseUrl: s.baseUrl,
        model: "base",
        lora: !reload,
        adapterDir: join(dir, reload ? "merged" : "lora"),
        weightsDir: null,
        reload: reload ? { dtype: DTYPE } : null,
        policy: PATIENT,
        serverFailure: () => (s.exit ? s.deathError() : null),
      });
    const lora = served(false);
    const merged = served(true);
    const greedy = requests(8, 0, 0, GREEDY_TOKENS);
    await lora.push(0);
    const byAdapter = await lora.generate(greedy);
    await merged.push(0);
    const byMerged = await merged.generate(greedy);
    const byWorker = await new TorchPolicy(learner).generate(greedy);
    console.log(
      `  greedy, ${GREEDY_TOKENS} tokens, 8 prompts: merged vs adapter ${agreement(byMerged, byAdapter)}`,
    );
    console.log(
      `  greedy: adapter vs the worker ${agreement(byAdapter, byWorker)}; merged vs the worker ${agreement(byMerged, byWorker)}`,
    );
    // Warm-up of both paths, then the measured rounds.
    await round(lora, 1, n);
    await round(merged, 1, n);
    const lr: Round[] = [];
    const mr: Round[] = [];
    for (let r = 0; r < rounds; r++) {
      const tag = 10 + r;
      if (r % 2 === 0) {
        lr.push(await round(lora, tag, n));
        mr.push(await round(merged, tag, n));
      } else {
        mr.push(await round(merged, tag, n));
        lr.push(await round(lora, tag, n));
      }
    }
    const a = summary("lora push (adapter active)", lr);
    const b = summary("merged push (base model, LoRA on)", mr);
    console.log(
      `  merged / lora: push+generate ×${(b.iter / a.iter).toFixed(2)}, sampling tokens/s ×${(b.tps / a.tps).toFixed(2)}`,
    );
    await server.stop();
    server = null;

    console.log("\n2. a server as push: merged starts it (no --enable-lora), merged pushes only:");
    server = await startServer("weights", false);
    const plain = server;
    const mergedOnly = new ServedRolloutPolicy({
      learner,
      baseUrl: plain.baseUrl,
      model: "base",
      lora: false,
      adapterDir: join(dir, "merged-only"),
      weightsDir: null,
      reload: { dtype: DTYPE },
      policy: PATIENT,
      serverFailure: () => (plain.exit ? plain.deathError() : null),
    });
    await mergedOnly.push(0);
    const byPlain = await mergedOnly.generate(greedy);
    console.log(`  greedy: this server vs the adapter on the first ${agreement(byPlain, byAdapter)}`);
    await round(mergedOnly, 1, n);
    const pr: Round[] = [];
    for (let r = 0; r < rounds; r++) pr.push(await round(mergedOnly, 10 + r, n));
    const c = summary("merged push (no LoRA served)", pr);
    console.log(
      `  vs section 1 (not interleaved): ×${(c.iter / a.iter).toFixed(2)} of the lora rounds' push+generate, ` +
        `×${(c.tps / b.tps).toFixed(2)} of the merged rounds' tokens/s on the LoRA server`,
    );
  } finally {
    await server?.stop();
    await learner.close();
    await rm(dir, { recursive: true, force: true });
  }
}
