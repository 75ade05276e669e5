import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startServeFromArgs } from "../../src/cli/commands/serve.js";
import { Rng } from "../../src/core/rng.js";
import { saveCheckpoint } from "../../src/model/checkpoint.js";
import { presetConfig } from "../../src/model/config.js";
import { jsKernels } from "../../src/model/kernels/js.js";
import { randomWeights } from "../../src/model/sampler.js";
import { trainTokenizer } from "../../src/model/tokenizer.js";
import { EmbeddedPolicy } from "../../src/policy/embedded.js";
import { buildChatBody, OpenAIChatPolicy, parseChatResponse } from "../../src/policy/openai.js";
import { parsePolicySpec } from "../../src/policy/spec.js";
import type { GenerateRequest, Policy } from "../../src/policy/types.js";
import { type RunnerOptions, runTrials } from "../../src/rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../../src/rollout/types.js";
import { paramsFromMap } from "../../src/serve/engine.js";
import type { ServeHandle } from "../../src/serve/server.js";
import { loadTask } from "../../src/tasks/registry.js";

let dir: string;
let embedded: EmbeddedPolicy;
let handle: ServeHandle;
let modelName: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "mage-serve-parity-"));
  // A tokenizer that knows the game's prompt text, from a scripted run of the same trials.
  const seen = await play(scripted);
  const corpus = seen.flatMap((t) => t.rows.flatMap((r) => [...r.prompt.map((m) => m.content), r.response]));
  const tok = trainTokenizer(corpus, { vocabSize: 400 });
  const config = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 1024 });
  const w = randomWeights(config, 11);
  const embd = w.get("token_embd.weight")!;
  for (let i = 0; i < embd.length; i++) embd[i] *= 0.3;
  const ckpt = join(dir, "kuhn-tiny");
  await saveCheckpoint(ckpt, { config, params: w, tokenizer: tok });
  embedded = new EmbeddedPolicy({ params: paramsFromMap(config, w), tokenizer: tok, kernels: jsKernels });
  ({ handle, modelName } = await startServeFromArgs(
    ["--checkpoint", ckpt, "--port", "0", "--kernels", "js", "--max-tokens", "64"],
    {},
    () => {},
  ));
});

after(async () => {
  await handle?.close();
  await rm(dir, { recursive: true, force: true });
});

/** Answers PASS or BET from the request seed, with a remark when asked to reflect. */
const scripted: Policy = {
  name: "scripted",
  async generate(requests) {
    return requests.map((r) => {
      const last = r.messages[r.messages.length - 1].content;
      const text = last.includes("remark")
        ? "<remark>bet with K</remark>"
        : `<action>${Rng.seeded(r.seed).pick(["PASS", "BET"])}</action>`;
      return { text, tokenIds: [], logprobs: [], finishReason: "stop", promptTokens: 0 };
    });
  },
};

const OPTS: RunnerOptions = {
  attempts: 2,
  maxTurns: 2,
  reflection: "reflection_only",
  promptStyle: "compact",
  hindsight: false,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 12, stop: [] },
  maxBatch: 8,
  concurrency: 2,
};

async function play(policy: Policy): Promise<TrialRecord[]> {
  const def = await loadTask("kuhn");
  const specs: TrialSpec[] = Array.from({ length: 4 }, (_, i) => ({
    trialId: i,
    groupId: i >> 1,
    taskSeed: 40 + (i >> 1),
    opponent: i % 2 ? "aggressive" : "conservative",
    seat: i % 2 ? "second" : "first",
  }));
  return runTrials(
    specs,
    (s) => def.create({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
    policy,
    Rng.seeded(2026),
    OPTS,
  );
}

describe("OpenAIChatPolicy through mage serve", () => {
  it("multi-attempt Kuhn trials over HTTP equal the in-process EmbeddedPolicy, token for token", async () => {
    const sent: unknown[] = [];
    const fetchSpy: typeof fetch = (input, init) => {
      sent.push(JSON.parse(String(init?.body)));
      return fetch(input, init);
    };
    const remote = new OpenAIChatPolicy({
      baseUrl: handle.baseUrl,
      model: modelName,
      sendTokenIds: true,
      retries: 0,
      timeoutMs: 60_000,
      fetch: fetchSpy,
    });
    const local = await play(embedded);
    const viaHttp = await play(remote);
    assert.equal(viaHttp.length, local.length);
    let rows = 0;
    let withHistory = 0;
    for (let i = 0; i < local.length; i++) {
      const a = local[i];
      const b = viaHttp[i];
      assert.equal(b.aborted, false);
      assert.deepEqual(b.attempts, a.attempts);
      assert.equal(b.rows.length, a.rows.length);
      for (let r = 0; r < a.rows.length; r++) {
        const x = a.rows[r];
        const y = b.rows[r];
        assert.deepEqual(y.prompt, x.prompt, `trial ${i} row ${r}: prompt`);
        assert.equal(y.response, x.response, `trial ${i} row ${r}: response`);
        assert.deepEqual(y.responseTokenIds, x.responseTokenIds, `trial ${i} row ${r}: token ids`);
        assert.ok(x.responseTokenIds.length > 0);
        assert.equal(y.behaviourLogprobs.length, x.behaviourLogprobs.length);
        for (let j = 0; j < x.behaviourLogprobs.length; j++) {
          assert.ok(Math.abs(y.behaviourLogprobs[j] - x.behaviourLogprobs[j]) <= 1e-6, `logprob ${j}`);
        }
        assert.equal(y.promptTokens, x.promptTokens);
        assert.equal(y.finishReason, x.finishReason);
        rows++;
        if (x.prompt.some((m) => m.role === "assistant")) withHistory++;
      }
    }
    assert.ok(rows >= 6 && withHistory >= 3, `enough rows with earlier replies (${rows}, ${withHistory})`);
    // Assistant messages carried their sampled ids to the server.
    const assistants = sent.flatMap(
      (b) => (b as { messages: { role: string; token_ids?: number[] }[] }).messages,
    );
    const replies = assistants.filter((m) => m.role === "assistant");
    assert.ok(replies.length > 0);
    for (const m of replies) assert.ok(Array.isArray(m.token_ids) && m.token_ids.length > 0);
  });

  it("sends token_ids only when asked, and reads choices[].token_ids", () => {
    const req: GenerateRequest = {
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "<action>BET</action>", tokenIds: [5, 6, 7] },
        { role: "user", content: "again" },
      ],
      sampling: OPTS.sampling,
      seed: 3,
    };
    const off = buildChatBody(req, "m", undefined, true) as { messages: Record<string, unknown>[] };
    assert.ok(off.messages.every((m) => !("token_ids" in m)));
    const on = buildChatBody(req, "m", undefined, true, true) as { messages: Record<string, unknown>[] };
    assert.deepEqual(on.messages[1].token_ids, [5, 6, 7]);
    assert.equal("token_ids" in on.messages[0], false);
    const body = JSON.stringify({
      choices: [
        {
          message: { content: "ab" },
          finish_reason: "stop",
          token_ids: [9, 4],
          logprobs: {
            content: [
              { token: "a", logprob: -1 },
              { token: "b", logprob: -2 },
            ],
          },
        },
      ],
    });
    const parsed = parseChatResponse(body, []);
    assert.ok("generation" in parsed);
    assert.deepEqual(parsed.generation.tokenIds, [9, 4]);
    assert.deepEqual(parsed.generation.logprobs, [-1, -2]);
    assert.equal(parsePolicySpec("openai:http://127.0.0.1:1/v1#m?sendTokenIds=true").kind, "openai");
    const spec = parsePolicySpec("openai:http://127.0.0.1:1/v1#m?sendTokenIds=true");
    assert.equal(spec.kind === "openai" && spec.options.sendTokenIds, true);
  });
});
