import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import { openTorchCheckpoint } from "../../src/learner/torch/open-checkpoint.js";
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
    assert.equal(learner.worker.hello?.protocol, 2);
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

  it("checks a batch's contexts with one render round trip and reuses the ids to sample", async () => {
    const policy = new TorchPolicy(learner);
    const calls: number[] = [];
    const renderMany = learner.renderMany.bind(learner);
    learner.renderMany = async (transcripts, addGenerationPrompt) => {
      calls.push(transcripts.length);
      return renderMany(transcripts, addGenerationPrompt);
    };
    try {
      const requests: GenerateRequest[] = ["a", "bb", "ccc", "dddd"].map((content, i) => ({
        messages: [{ role: "user", content }],
        sampling: SAMPLING,
        seed: i,
      }));
      const errors = await Promise.all(requests.map((r) => policy.contextError(r)));
      assert.deepEqual(errors, [null, null, null, null]);
      assert.deepEqual(calls, [4], "one render request for the four checks");
      const gens = await policy.generate(requests);
      assert.deepEqual(calls, [4], "generate reuses the rendered prompts");
      const alone = await learner.renderMany([requests[3].messages], true);
      assert.equal(gens[3].promptTokens, alone[0].ids.length);
    } finally {
      learner.renderMany = renderMany;
    }
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
    process.env.MAGE_LEARNER_PROTOCOL_OVERRIDE = "3";
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

describe("torch run checkpoints", { skip: NO_WORKER }, () => {
  it("a LoRA checkpoint reopens for evaluation on its base model with the trained adapter's log-probs", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-torch-ck-"));
    await saveTinyHf(join(root, "hf"), { seed: 8, contextLength: 128 });
    const learner = await TorchLearner.open({
      torch: TorchModelSchema.parse({ path: join(root, "hf"), lora: { rank: 4 } }),
      optimizer: { lr: 5e-2, weightDecay: 0, gradClip: 1 },
      seed: 2,
      reference: false,
    });
    let trained: Float64Array;
    let before0: Float64Array;
    const [t] = await learner.render([
      [
        { role: "user", content: "check or bet?" },
        { role: "assistant", content: "bet" },
      ],
    ]);
    const mask = new Uint8Array(t.ids.length);
    for (let j = t.assistantSpans[0].start; j < t.assistantSpans[0].end; j++) mask[j] = 1;
    const batch = { sequences: [Int32Array.from(t.ids)], lossMask: [mask] };
    try {
      before0 = (await learner.logprobs(batch)).logp;
      for (let k = 0; k < 3; k++) {
        const cur = await learner.logprobs(batch);
        await learner.update(
          batch,
          { oldLogp: cur.logp, advantages: cur.logp.map(() => 1) },
          { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, entropyCoef: 0, klCoef: 0, klClamp: 10 },
          { microBatchTokens: 4096 },
        );
      }
      trained = (await learner.logprobs(batch)).logp;
      await learner.save(join(root, "ck"), { json: { iteration: 3 }, meta: { run: "t" } });
    } finally {
      await learner.close();
    }
    assert.ok(
      trained.some((x, i) => Math.abs(x - before0[i]) > 1e-3),
      "the adapter changed the model",
    );
    const opened = await openTorchCheckpoint(join(root, "ck"));
    try {
      assert.equal(opened.info.saved, "peft-adapter");
      const again = (await opened.learner.logprobs(batch)).logp;
      for (let i = 0; i < again.length; i++)
        assert.ok(Math.abs(again[i] - trained[i]) < 1e-6, `token ${i}: ${again[i]} vs ${trained[i]}`);
    } finally {
      await opened.close();
    }
  });
});

describe("several processes", { skip: NO_WORKER }, () => {
  it("model.torch.processes 2 starts the worker under torchrun (gloo on CPU); rank 0 answers for both", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-torch-ranks-"));
    await saveTinyHf(join(root, "hf"), { seed: 9, contextLength: 128 });
    const learner = await TorchLearner.open({
      torch: TorchModelSchema.parse({ path: join(root, "hf"), processes: 2 }),
      optimizer: OPT,
      seed: 1,
      reference: false,
    });
    try {
      assert.equal(learner.worker.hello?.worldSize, 2);
      const [gen] = await new TorchPolicy(learner).generate([
        { messages: [{ role: "user", content: "hi" }], sampling: SAMPLING, seed: 3 },
      ]);
      assert.ok(gen.tokenIds.length > 0);
      const [t] = await learner.render([
        [
          { role: "user", content: "hi" },
          { role: "assistant", content: gen.text, tokenIds: gen.tokenIds },
        ],
      ]);
      const mask = new Uint8Array(t.ids.length);
      for (let j = 0; j < gen.tokenIds.length; j++) mask[t.assistantSpans[0].start + j] = 1;
      // Two sequences: one per rank.
      const batch = { sequences: [Int32Array.from(t.ids), Int32Array.from(t.ids)], lossMask: [mask, mask] };
      const lp = await learner.logprobs(batch);
      const m = await learner.update(
        batch,
        { oldLogp: lp.logp, advantages: lp.logp.map(() => 1) },
        { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, entropyCoef: 0, klCoef: 0, klClamp: 10 },
        { microBatchTokens: 64 },
      );
      assert.equal(m.step, 1);
      assert.ok(Number.isFinite(m.gradNorm) && m.gradNorm > 0);
    } finally {
      await learner.close();
    }
  });
});
