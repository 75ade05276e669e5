import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { validateConfig } from "../../src/train/config.js";

const base = { game: "kuhn", population: { opponents: [{ spec: "aggressive" }] } };
const withTorch = (torch: Record<string, unknown>) =>
  validateConfig({ ...base, model: { backend: "torch", torch } }, "test.yaml");
const fails = (torch: Record<string, unknown>, pattern: RegExp) =>
  assert.throws(
    () => withTorch(torch),
    (e: unknown) => e instanceof UsageError && pattern.test(e.message),
  );

describe("model.backend and model.torch", () => {
  it("defaults to the embedded model; torch fields have defaults", () => {
    const c = validateConfig(base);
    assert.equal(c.model.backend, "embedded");
    const t = withTorch({ path: "/m" }).model.torch;
    assert.equal(t.dtype, "float32");
    assert.equal(t.device, "cpu");
    assert.equal(t.processes, 1);
    assert.equal(t.lora, null);
    assert.equal(t.rollout, "worker");
  });

  it("names the field that is wrong or missing", () => {
    fails({}, /model\.torch\.path: required with model\.backend: torch/);
    fails({ path: "/m", dtype: "fp8" }, /model\.torch\.dtype/);
    fails({ path: "/m", device: "gpu0" }, /model\.torch\.device: must be cpu, cuda or cuda:N/);
    fails({ path: "/m", processes: 0 }, /model\.torch\.processes/);
    fails({ path: "/m", lora: { rank: 0 } }, /model\.torch\.lora\.rank/);
    fails({ path: "/m", rollout: "openai" }, /model\.torch\.rolloutUrl: required with rollout: openai/);
    fails(
      { path: "/m", rollout: "openai", rolloutUrl: "http://x/v1", rolloutModel: "m" },
      /model\.torch\.rolloutWeightsDir: required with rollout: openai and full fine-tuning/,
    );
    fails({ path: "/m", speed: 1 }, /model\.torch/);
  });

  it("accepts LoRA with a server, and fills the LoRA defaults", () => {
    const t = withTorch({
      path: "/m",
      lora: { rank: 8 },
      rollout: "openai",
      rolloutUrl: "http://127.0.0.1:8000/v1",
      rolloutModel: "base",
    }).model.torch;
    assert.deepEqual(t.lora, {
      rank: 8,
      dropout: 0,
      targetModules: ["q_proj", "k_proj", "v_proj", "o_proj"],
      layers: null,
    });
  });
});
