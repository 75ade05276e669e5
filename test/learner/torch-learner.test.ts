import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import { TorchPolicy } from "../../src/learner/torch/policy.js";
import { TorchWorkerError } from "../../src/learner/torch/worker.js";
import type { ChatMessage, GenerateRequest } from "../../src/policy/types.js";
import { TorchModelSchema } from "../../src/train/config.js";
import { NO_WORKER, saveTinyHf } from "./tiny-hf.js";

const OPT = { lr: 1e-3, weightDecay: 0.01, gradClip: 1 };
const SAMPLING = { temperature: 1, topP: 1, topK: 0, maxTokens: 6, stop: [] as string[] };

describe("TorchLearner and TorchPolicy against the real worker", { skip: NO_WORKER }, () => {
  let root: string;
  let learner: TorchLearner;
  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-torch-learner-"));
    await saveTinyHf(join(root, "hf"), { seed: 5, contextLength: 128 });
    learner = await TorchLearner.open({
      torch: TorchModelSchema.parse({ path: join(root, "hf") }),
      optimizer: OPT,
      seed: 1,
      reference: true,
    });
  });
  after(async () => {
    await learner?.close();
  });

  it("loads the model and reports it", () => {
    assert.equal(learner.info.architecture, "LlamaForCausalLM");
    assert.equal(learner.contextLength, 128);
    assert.ok(learner.info.parameters > 0);
    assert.equal(learner.worker.hello?.protocol, 1);
  });

  it("samples per request seed, whatever the batch; trains on exactly the sampled ids; log-probs agree", async () => {
    const policy = new TorchPolicy(learner);
    const ask = (content: string, seed: number): GenerateRequest => ({
      messages: [{ role: "user", content }],
      sampling: SAMPLING,
      seed,
    });
    const [alone] = await policy.generate([ask("bet or check?", 11)]);
    const batch = await policy.generate([ask("another prompt", 3), ask("bet or check?", 11)]);
    assert.deepEqual(batch[1].tokenIds, alone.tokenIds, "a request's sample does not depend on its batch");
    assert.equal(alone.tokenIds.length, alone.logprobs.length);
    assert.ok(alone.tokenIds.length > 0);

    // The transcript with the sampled ids: append-only, and the ids appear verbatim at the span.
    const prompt: ChatMessage[] = [{ role: "user", content: "bet or check?" }];
    const done: ChatMessage[] = [
      ...prompt,
      { role: "assistant", content: alone.text, tokenIds: alone.tokenIds },
    ];
    const [p, t] = await learner
      .renderMany([prompt], true)
      .then(async (a) => [a[0], (await learner.render([done]))[0]]);
    assert.deepEqual(t.ids.slice(0, p.ids.length), p.ids, "the prompt is a prefix of the transcript");
    const span = t.assistantSpans[0];
    assert.deepEqual(t.ids.slice(span.start, span.start + alone.tokenIds.length), alone.tokenIds);

    // At temperature 1 without truncation the sampler's log-probs are the model's own.
    const mask = new Uint8Array(t.ids.length);
    for (let j = 0; j < alone.tokenIds.length; j++) mask[span.start + j] = 1;
    const batchT = { sequences: [Int32Array.from(t.ids)], lossMask: [mask] };
    const scored = await learner.logprobs(batchT);
    for (let j = 0; j < alone.logprobs.length; j++)
      assert.ok(
        Math.abs(scored.logp[j] - alone.logprobs[j]) < 1e-4,
        `token ${j}: ${scored.logp[j]} vs ${alone.logprobs[j]}`,
      );
    const ref = await learner.logprobs(batchT, "reference");
    assert.deepEqual(
      Array.from(ref.logp),
      Array.from(scored.logp),
      "before any update the reference is the policy",
    );

    // One update with a positive advantage raises the sampled tokens' log-probs; the reference stays.
    const m = await learner.update(
      batchT,
      { oldLogp: scored.logp, advantages: scored.logp.map(() => 1), refLogp: ref.logp },
      { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, entropyCoef: 0, klCoef: 0.1, klClamp: 10 },
      { microBatchTokens: 4096 },
    );
    assert.equal(m.step, 1);
    assert.ok(Math.abs(m.metrics.ppo_kl) < 1e-6, "old log-probs equal the current ones at the first step");
    const after1 = await learner.logprobs(batchT);
    const sum = (a: Float64Array) => a.reduce((s, x) => s + x, 0);
    assert.ok(
      sum(after1.logp) > sum(scored.logp),
      "the update raised the log-probs of positively rewarded tokens",
    );
    assert.deepEqual(Array.from((await learner.logprobs(batchT, "reference")).logp), Array.from(ref.logp));
  });

  it("knows its context: a prompt plus maxTokens over the limit is refused before sampling", async () => {
    const policy = new TorchPolicy(learner);
    const long: GenerateRequest = {
      messages: [{ role: "user", content: "x".repeat(200) }],
      sampling: SAMPLING,
      seed: 1,
    };
    assert.match((await policy.contextError(long)) ?? "", /exceeds the context length 128/);
    const short: GenerateRequest = {
      messages: [{ role: "user", content: "hi" }],
      sampling: SAMPLING,
      seed: 1,
    };
    assert.equal(await policy.contextError(short), null);
  });
});

describe("worker errors at load", { skip: NO_WORKER }, () => {
  it("a bad model path is a UsageError naming model.torch.path, not a traceback", async () => {
    await assert.rejects(
      TorchLearner.open({
        torch: TorchModelSchema.parse({ path: "/nowhere/model" }),
        optimizer: OPT,
        seed: 0,
        reference: false,
      }),
      (e: unknown) =>
        e instanceof UsageError && /model\.torch\.path/.test(e.message) && !/Traceback/.test(e.message),
    );
  });

  it("a trainer that speaks another protocol version is refused with what to update", async () => {
    process.env.MAGE_LEARNER_PROTOCOL_OVERRIDE = "2";
    try {
      await assert.rejects(
        TorchLearner.open({
          torch: TorchModelSchema.parse({ path: "/nowhere/model" }),
          optimizer: OPT,
          seed: 0,
          reference: false,
        }),
        (e: unknown) =>
          e instanceof TorchWorkerError &&
          e.kind === "protocol" &&
          /version/.test(e.message) &&
          /python-env\.mjs/.test(e.message),
      );
    } finally {
      delete process.env.MAGE_LEARNER_PROTOCOL_OVERRIDE;
    }
  });
});
