import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { FAKE_LOGPROB, startFakeVllm } from "../learner/fake-vllm.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";

/**
 * Rollouts from an OpenAI-compatible server (`model.torch.rollout: openai`) while the PyTorch
 * worker trains: the new weights reach the server after every update (a LoRA adapter through
 * vLLM's runtime LoRA API, or full weights reloaded from disk), rollouts ask for the newest
 * adapter, and the old log-probs of the PPO ratio come from the learner, not the server.
 */
const ITERATIONS = 2;

function metrics(dir: string): Record<string, number>[] {
  return readFileSync(join(dir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
}

describe("rollouts from a vLLM server", { skip: NO_WORKER }, () => {
  let root: string;
  const write = (name: string, torch: string, url: string) => {
    const file = join(root, `${name}.yaml`);
    writeFileSync(
      file,
      [
        `name: ${name}`,
        "seed: 1",
        "game: kuhn",
        `model: { backend: torch, torch: { path: ${JSON.stringify(join(root, "hf"))}, rollout: openai, rolloutUrl: ${JSON.stringify(url)}, rolloutModel: base, ${torch} } }`,
        "task: { attempts: 2, maxTurns: 2 }",
        "population: { opponents: [{ spec: aggressive }] }",
        // One mini-batch per iteration: its PPO ratio compares the learner with itself.
        "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 8 }",
        "optim: { lr: 1.0e-3, miniBatchRows: 1000 }",
        `train: { iterations: ${ITERATIONS}, checkpointEvery: 1 }`,
        "eval: { every: 0, finalTrials: 1 }",
        "",
      ].join("\n"),
    );
    return loadConfig(file);
  };

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-torch-served-"));
    await saveTinyHf(join(root, "hf"), { seed: 6, contextLength: 512 });
  });

  it("LoRA: a new adapter directory per update, loaded through /v1/load_lora_adapter, the previous one unloaded", async () => {
    const server = await startFakeVllm();
    try {
      const config = write("lora", "lora: { rank: 4 }", server.baseUrl);
      const out = join(root, "lora-run");
      await train({ config, outDir: out, resume: false, progress: false, log: () => {} });

      const loads = server.calls.filter((c) => c.path === "/v1/load_lora_adapter");
      const unloads = server.calls.filter((c) => c.path === "/v1/unload_lora_adapter");
      // Once at the start (the weights the run starts from), then after every iteration's updates.
      assert.equal(loads.length, 1 + ITERATIONS);
      const names = loads.map((c) => c.body.lora_name as string);
      const paths = loads.map((c) => c.body.lora_path as string);
      assert.equal(new Set(names).size, names.length, "a new adapter name per push");
      assert.equal(new Set(paths).size, paths.length, "a new adapter directory per push");
      for (const c of loads)
        assert.ok(
          c.files!.includes("adapter_model.safetensors"),
          `adapter saved before ${c.body.lora_name} was loaded`,
        );
      assert.deepEqual(
        unloads.map((c) => c.body.lora_name),
        names.slice(0, -1),
        "each adapter is unloaded once its successor is loaded",
      );
      for (const p of paths.slice(0, -1)) assert.ok(!existsSync(p), `old adapter ${p} deleted`);
      assert.ok(existsSync(paths[paths.length - 1]));

      // Every chat request asks for the adapter loaded last before it, with token ids.
      let current: string | null = null;
      let chats = 0;
      for (const c of server.calls) {
        if (c.path === "/v1/load_lora_adapter") current = c.body.lora_name;
        if (c.path !== "/v1/chat/completions") continue;
        chats += 1;
        assert.equal(c.body.model, current);
        assert.equal(c.body.return_tokens_as_token_ids, true);
        assert.equal(c.body.logprobs, true);
      }
      assert.ok(chats > 0);

      // The server's log-probs (all -0.5) were not used: the learner recomputed the old log-probs,
      // so the single mini-batch's ratio is exactly 1.
      for (const m of metrics(out)) {
        assert.ok(
          Math.abs(m.ppo_kl) < 1e-6,
          `ppo_kl ${m.ppo_kl} (the server said ${FAKE_LOGPROB} per token)`,
        );
        assert.equal(m.clipfrac, 0);
        assert.equal(m.optimizer_steps, 1);
      }
    } finally {
      await server.close();
    }
  });

  it("full weights: saved into rolloutWeightsDir, then the server reloads them (POST /collective_rpc reload_weights)", async () => {
    const weightsDir = join(root, "served-weights");
    const server = await startFakeVllm({ weightsDir });
    try {
      const config = write("full", `rolloutWeightsDir: ${JSON.stringify(weightsDir)}`, server.baseUrl);
      await train({ config, outDir: join(root, "full-run"), resume: false, progress: false, log: () => {} });
      const reloads = server.calls.filter((c) => c.path === "/collective_rpc");
      assert.equal(reloads.length, 1 + ITERATIONS);
      for (const c of reloads) {
        assert.deepEqual(c.body, { method: "reload_weights" });
        assert.ok(
          c.files!.includes("model.safetensors") && c.files!.includes("config.json"),
          "weights on disk before the reload",
        );
      }
      assert.equal(server.calls.filter((c) => c.path.includes("lora")).length, 0);
      const chats = server.calls.filter((c) => c.path === "/v1/chat/completions");
      assert.ok(chats.length > 0 && chats.every((c) => c.body.model === "base"));
    } finally {
      await server.close();
    }
  });
});
