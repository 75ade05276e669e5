import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { startServeFromArgs } from "../../src/cli/commands/serve.js";
import { UsageError } from "../../src/core/errors.js";
import { renderChatIds, renderChatText } from "../../src/model/chat-template.js";
import { saveCheckpoint } from "../../src/model/checkpoint.js";
import { type ModelConfig, presetConfig } from "../../src/model/config.js";
import { jsKernels } from "../../src/model/kernels/js.js";
import type { ModelParams } from "../../src/model/params.js";
import { randomWeights } from "../../src/model/sampler.js";
import { logSoftmaxAt } from "../../src/model/sampling.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";
import { forwardLogits } from "../../src/model/transformer.js";
import { EmbeddedPolicy } from "../../src/policy/embedded.js";
import { OpenAIChatPolicy } from "../../src/policy/openai.js";
import type { ChatMessage, SamplingParams } from "../../src/policy/types.js";
import { paramsFromMap, ServeEngine } from "../../src/serve/engine.js";
import { encodeWithSpecials, StreamText, streamPieces } from "../../src/serve/protocol.js";
import { type ServeHandle, startServer } from "../../src/serve/server.js";

const KEY_ENV = "MAGE_SERVE_TEST_KEY";
const KEY = "sk-test-8c1f5e0d2b";

let dir: string;
let ckptDir: string;
let tok: Tokenizer;
let config: ModelConfig;
let params: ModelParams;
let policy: EmbeddedPolicy;
let handle: ServeHandle;
let modelName: string;
let client: OpenAI;
const logLines: string[] = [];

const messages: ChatMessage[] = [
  { role: "system", content: "You play TicTacToe." },
  { role: "user", content: "Board: X at (1, 1). Your move?" },
];
const T1: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 24, stop: [] };

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "mage-serve-"));
  tok = trainTokenizer(
    Array.from(
      { length: 200 },
      (_, i) => `Board: X at (${i % 3}, ${(i * 7) % 3}). Your move? <answer>(${i % 3}, 2)</answer>`,
    ),
    { vocabSize: 400 },
  );
  config = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 128 });
  const w = randomWeights(config, 5);
  const embd = w.get("token_embd.weight")!;
  for (let i = 0; i < embd.length; i++) embd[i] *= 0.3;
  params = paramsFromMap(config, w);
  ckptDir = join(dir, "ckpt-7");
  await saveCheckpoint(ckptDir, { config, params: w, tokenizer: tok });
  policy = new EmbeddedPolicy({ params, tokenizer: tok, kernels: jsKernels });
  process.env[KEY_ENV] = KEY;
  ({ handle, modelName } = await startServeFromArgs(
    [
      "--checkpoint",
      ckptDir,
      "--port",
      "0",
      "--api-key-env",
      KEY_ENV,
      "--kernels",
      "js",
      "--max-tokens",
      "48",
    ],
    process.env,
    (l) => logLines.push(l),
  ));
  client = new OpenAI({ baseURL: handle.baseUrl, apiKey: KEY, maxRetries: 0, timeout: 30_000 });
});

after(async () => {
  await handle?.close();
  delete process.env[KEY_ENV];
  await rm(dir, { recursive: true, force: true });
});

/** Our model's log-softmax at every position of `ids`: (t, id) → log p(id | ids[0..t]). */
function modelLogprobs(ids: readonly number[]): (t: number, id: number) => number {
  const V = config.vocabSize;
  const logits = forwardLogits(params, ids);
  return (t, id) => logSoftmaxAt(logits, t * V, V, id);
}

describe("mage serve through the official openai client", () => {
  it("listens on loopback and lists the model", async () => {
    assert.equal(handle.host, "127.0.0.1");
    assert.equal(modelName, "ckpt-7");
    const list = await client.models.list();
    assert.deepEqual(
      list.data.map((m) => m.id),
      ["ckpt-7"],
    );
    const one = await client.models.retrieve("ckpt-7");
    assert.equal(one.owned_by, "mage");
    await assert.rejects(client.models.retrieve("other"), (e: unknown) => e instanceof OpenAI.NotFoundError);
  });

  it("a seeded chat request gives exactly the in-process EmbeddedPolicy result", async () => {
    for (const seed of [1, 77, 4_000_000_000]) {
      const res = await client.chat.completions.create({
        model: modelName,
        messages,
        temperature: 1,
        max_tokens: 24,
        seed,
        logprobs: true,
      });
      const [ref] = await policy.generate([{ messages, sampling: T1, seed }]);
      const choice = res.choices[0] as (typeof res.choices)[0] & { token_ids: number[]; seed: number };
      assert.equal(choice.message.content, ref.text);
      assert.deepEqual(choice.token_ids, ref.tokenIds);
      assert.deepEqual(
        choice.logprobs!.content!.map((e) => e.logprob),
        ref.logprobs,
      );
      assert.deepEqual(
        choice.logprobs!.content!.map((e) => (e as { token_id?: number }).token_id),
        ref.tokenIds,
      );
      assert.equal(choice.finish_reason, ref.finishReason);
      assert.equal(choice.seed, seed);
      assert.equal(res.usage!.prompt_tokens, ref.promptTokens);
      assert.equal(res.usage!.completion_tokens, ref.tokenIds.length);
      assert.equal(res.usage!.total_tokens, ref.promptTokens + ref.tokenIds.length);
    }
    // Truncated sampling (T 0.7, top-p 0.8, top-k 20) as well.
    const res = await client.chat.completions.create({
      model: modelName,
      messages,
      temperature: 0.7,
      top_p: 0.8,
      max_tokens: 16,
      seed: 9,
      logprobs: true,
      // @ts-expect-error top_k is an extension
      top_k: 20,
    });
    const [ref] = await policy.generate([
      { messages, sampling: { temperature: 0.7, topP: 0.8, topK: 20, maxTokens: 16, stop: [] }, seed: 9 },
    ]);
    assert.deepEqual((res.choices[0] as unknown as { token_ids: number[] }).token_ids, ref.tokenIds);
    assert.deepEqual(
      res.choices[0].logprobs!.content!.map((e) => e.logprob),
      ref.logprobs,
    );
  });

  it("batches concurrent requests into few sampler calls without changing any result", async () => {
    const before = handle.stats();
    const seeds = Array.from({ length: 12 }, (_, i) => 1000 + i);
    const served = await Promise.all(
      seeds.map((seed) =>
        client.chat.completions.create({ model: modelName, messages, max_tokens: 20, seed, temperature: 1 }),
      ),
    );
    const after = handle.stats();
    const calls = after.samplerCalls - before.samplerCalls;
    assert.ok(calls < seeds.length, `12 concurrent requests took ${calls} sampler calls`);
    assert.ok(after.largestBatch > 1);
    const refs = await policy.generate(
      seeds.map((seed) => ({ messages, sampling: { ...T1, maxTokens: 20 }, seed })),
    );
    for (const [i, r] of served.entries()) {
      assert.deepEqual((r.choices[0] as unknown as { token_ids: number[] }).token_ids, refs[i].tokenIds);
      assert.equal(r.choices[0].message.content, refs[i].text);
    }
  });

  it("streams chat chunks that add up to the non-streamed response", async () => {
    const body = { model: modelName, messages, max_tokens: 30, seed: 5, temperature: 1, logprobs: true };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = "";
    const ids: number[] = [];
    const lps: number[] = [];
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    let role: string | undefined;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        content += c.delta.content ?? "";
        ids.push(...((c as unknown as { token_ids?: number[] }).token_ids ?? []));
        for (const e of c.logprobs?.content ?? []) lps.push(e.logprob);
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    const w = whole.choices[0] as (typeof whole.choices)[0] & { token_ids: number[] };
    assert.equal(role, "assistant");
    assert.equal(content, w.message.content);
    assert.deepEqual(ids, w.token_ids);
    assert.deepEqual(
      lps,
      w.logprobs!.content!.map((e) => e.logprob),
    );
    assert.equal(finish, w.finish_reason);
    assert.deepEqual(usage, whole.usage);

    // With top log-probs the stream is sent after the batch (a second pass): the same chunks' sum.
    const topBody = { ...body, top_logprobs: 2 };
    const topWhole = (await client.chat.completions.create(topBody)).choices[0];
    const after = await client.chat.completions.create({ ...topBody, stream: true });
    const roles: string[] = [];
    let afterContent = "";
    const tops: string[][] = [];
    for await (const chunk of after)
      for (const c of chunk.choices) {
        if (c.delta.role) roles.push(c.delta.role);
        afterContent += c.delta.content ?? "";
        for (const e of c.logprobs?.content ?? []) tops.push(e.top_logprobs.map((t) => t.token));
      }
    assert.deepEqual(roles, ["assistant"]);
    assert.equal(afterContent, topWhole.message.content);
    assert.deepEqual(
      tops,
      topWhole.logprobs!.content!.map((e) => e.top_logprobs.map((t) => t.token)),
    );
  });

  it("reports top log-probs under the sampling distribution, in OpenAI's shape", async () => {
    const res = await client.chat.completions.create({
      model: modelName,
      messages,
      max_tokens: 8,
      seed: 3,
      temperature: 1,
      logprobs: true,
      top_logprobs: 5,
    });
    const choice = res.choices[0] as (typeof res.choices)[0] & { token_ids: number[] };
    const prompt = renderChatIds(tok, messages, { addGenerationPrompt: true });
    const entries = choice.logprobs!.content!;
    assert.equal(entries.length, choice.token_ids.length);
    const lp = modelLogprobs([...prompt, ...choice.token_ids]);
    for (const [t, e] of entries.entries()) {
      assert.equal(e.top_logprobs.length, 5);
      const at = prompt.length - 1 + t;
      for (let j = 1; j < 5; j++) assert.ok(e.top_logprobs[j - 1].logprob >= e.top_logprobs[j].logprob);
      for (const alt of e.top_logprobs) {
        const id = (alt as unknown as { token_id: number }).token_id;
        assert.equal(alt.token, tok.tokenText(id));
        assert.deepEqual(alt.bytes, Array.from(tok.decodeBytes([id])));
        assert.ok(Math.abs(alt.logprob - lp(at, id)) < 1e-4, "alternative's log-prob");
      }
      assert.ok(Math.abs(e.logprob - lp(at, choice.token_ids[t])) < 1e-4, "sampled log-prob");
      assert.ok(e.top_logprobs[0].logprob >= e.logprob - 1e-5, "the best alternative is at least as likely");
    }
    await assert.rejects(
      client.chat.completions.create({ model: modelName, messages, logprobs: true, top_logprobs: 21 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError,
    );
  });

  it("completions: text prompts with special tokens, token-id prompts, log-probs and streaming", async () => {
    const text = renderChatText(messages, { addGenerationPrompt: true });
    const promptIds = renderChatIds(tok, messages, { addGenerationPrompt: true });
    assert.deepEqual(encodeWithSpecials(tok, text), promptIds);
    const a = await client.completions.create({
      model: modelName,
      prompt: text,
      max_tokens: 12,
      seed: 42,
      logprobs: 3,
    });
    const b = await client.completions.create({
      model: modelName,
      prompt: promptIds,
      max_tokens: 12,
      seed: 42,
      logprobs: 3,
    });
    const ca = a.choices[0] as (typeof a.choices)[0] & { token_ids: number[] };
    const cb = b.choices[0] as (typeof b.choices)[0] & { token_ids: number[] };
    assert.deepEqual(ca.token_ids, cb.token_ids);
    assert.equal(ca.text, cb.text);
    assert.equal(a.usage!.prompt_tokens, promptIds.length);
    // The same sequence as a chat request with that seed (completions also stop at <|eos|>).
    const [ref] = await policy.generate([{ messages, sampling: { ...T1, maxTokens: 12 }, seed: 42 }]);
    const eosAt = ref.tokenIds.indexOf(tok.eosId);
    assert.deepEqual(ca.token_ids, eosAt >= 0 ? ref.tokenIds.slice(0, eosAt + 1) : ref.tokenIds);
    const lp = ca.logprobs!;
    assert.deepEqual(lp.token_logprobs, ref.logprobs.slice(0, ca.token_ids.length));
    assert.equal(lp.tokens!.length, ca.token_ids.length);
    assert.equal(lp.top_logprobs!.length, ca.token_ids.length);
    assert.ok(lp.top_logprobs!.every((m) => Object.keys(m).length >= 1 && Object.keys(m).length <= 3));
    assert.equal(lp.text_offset![0], 0);

    const stream = await client.completions.create({
      model: modelName,
      prompt: promptIds,
      max_tokens: 12,
      seed: 42,
      stream: true,
    });
    let streamed = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      streamed += chunk.choices[0]?.text ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(streamed, ca.text);
    assert.equal(finish, ca.finish_reason);

    // Streamed log-probs, live (logprobs: 0) and after the batch (logprobs: 3), place each token
    // where the whole response does.
    for (const k of [0, 3]) {
      const whole = await client.completions.create({
        model: modelName,
        prompt: promptIds,
        max_tokens: 12,
        seed: 42,
        logprobs: k,
      });
      const parts = await client.completions.create({
        model: modelName,
        prompt: promptIds,
        max_tokens: 12,
        seed: 42,
        logprobs: k,
        stream: true,
      });
      const offsets: number[] = [];
      const tokens: string[] = [];
      for await (const chunk of parts) {
        offsets.push(...(chunk.choices[0]?.logprobs?.text_offset ?? []));
        tokens.push(...(chunk.choices[0]?.logprobs?.tokens ?? []));
      }
      assert.deepEqual(offsets, whole.choices[0].logprobs!.text_offset, `text offsets, logprobs ${k}`);
      assert.deepEqual(tokens, whole.choices[0].logprobs!.tokens, `tokens, logprobs ${k}`);
      assert.ok(offsets.length > 1 && offsets.at(-1)! > 0);
    }

    // Several prompts × n choices, in prompt-major order.
    const multi = await client.completions.create({
      model: modelName,
      prompt: [text, "Board:"],
      n: 2,
      max_tokens: 5,
      seed: 100,
    });
    assert.equal(multi.choices.length, 4);
    assert.deepEqual(
      multi.choices.map((c) => c.index),
      [0, 1, 2, 3],
    );
    assert.deepEqual(
      multi.choices.map((c) => (c as unknown as { seed: number }).seed),
      [100, 101, 102, 103],
    );
  });

  it("stop strings end the reply: cut from the content, named in stop_reason, kept in token_ids", async () => {
    const [ref] = await policy.generate([{ messages, sampling: { ...T1, maxTokens: 40 }, seed: 8 }]);
    const text = ref.text;
    assert.ok(text.length >= 4, `need text to cut: ${JSON.stringify(text)}`);
    const stop = text.slice(2, 4);
    const res = await client.chat.completions.create({
      model: modelName,
      messages,
      max_tokens: 40,
      seed: 8,
      temperature: 1,
      stop: [stop],
    });
    const [cut] = await policy.generate([
      { messages, sampling: { ...T1, maxTokens: 40, stop: [stop] }, seed: 8 },
    ]);
    const c = res.choices[0] as (typeof res.choices)[0] & { token_ids: number[]; stop_reason: string | null };
    assert.equal(c.finish_reason, "stop");
    assert.equal(c.stop_reason, stop);
    assert.deepEqual(c.token_ids, cut.tokenIds);
    assert.equal(c.message.content, cut.text.slice(0, cut.text.indexOf(stop)));
  });

  it("mage's own OpenAI client policy gets the exact token ids and log-probs back", async () => {
    const remote = new OpenAIChatPolicy({
      baseUrl: handle.baseUrl,
      model: modelName,
      apiKeyEnv: KEY_ENV,
      extraBody: { return_tokens_as_token_ids: true },
      retries: 0,
    });
    const reqs = [11, 12, 13].map((seed) => ({ messages, sampling: T1, seed }));
    const got = await remote.generate(reqs);
    const ref = await policy.generate(reqs);
    for (const [i, g] of got.entries()) {
      assert.deepEqual(g.tokenIds, ref[i].tokenIds);
      assert.deepEqual(g.logprobs, ref[i].logprobs);
      assert.equal(g.text, ref[i].text);
      assert.equal(g.finishReason, ref[i].finishReason);
    }
    // A served reply fed back with its ids renders exactly as in-process.
    const next: ChatMessage[] = [
      ...messages,
      { role: "assistant", content: got[0].text, tokenIds: got[0].tokenIds },
      { role: "user", content: "Again." },
    ];
    const res = await fetch(`${handle.baseUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: modelName,
        messages: next.map((m) => ({ role: m.role, content: m.content, token_ids: m.tokenIds })),
        max_tokens: 4,
        seed: 1,
      }),
    });
    const json = (await res.json()) as { usage: { prompt_tokens: number } };
    assert.equal(json.usage.prompt_tokens, renderChatIds(tok, next, { addGenerationPrompt: true }).length);
  });
});

describe("mage serve: API key and limits", () => {
  it("requires the API key on every request and never logs it", async () => {
    const noKey = new OpenAI({ baseURL: handle.baseUrl, apiKey: "wrong-key", maxRetries: 0 });
    await assert.rejects(noKey.models.list(), (e: unknown) => e instanceof OpenAI.AuthenticationError);
    await assert.rejects(
      noKey.chat.completions.create({ model: modelName, messages }),
      (e: unknown) => e instanceof OpenAI.AuthenticationError,
    );
    const bare = await fetch(`${handle.baseUrl}/models`);
    assert.equal(bare.status, 401);
    const body = (await bare.json()) as { error: { type: string; code: string } };
    assert.equal(body.error.code, "invalid_api_key");
    assert.ok(logLines.length > 5);
    assert.ok(!logLines.some((l) => l.includes(KEY)), "the key is never logged");
  });

  it("rejects max_tokens over the cap or past the context, bad fields and unknown models (400/404)", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: modelName, messages, max_tokens: 49 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /at most 48/.test(e.message),
    );
    const long: ChatMessage[] = [{ role: "user", content: "x y z ".repeat(60) }];
    await assert.rejects(
      client.chat.completions.create({ model: modelName, messages: long, max_tokens: 48 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded",
    );
    await assert.rejects(
      client.chat.completions.create({ model: modelName, messages, temperature: 3 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
    );
    await assert.rejects(
      client.chat.completions.create({ model: "gpt-4o", messages }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
    const res = await fetch(`${handle.baseUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}` },
      body: "{not json",
    });
    assert.equal(res.status, 400);
  });

  it("answers 413 for oversized bodies and 429 past the concurrency limit", async () => {
    const engine = new ServeEngine({ params, tokenizer: tok, kernels: jsKernels });
    const small = await startServer({
      engine,
      modelName: "m",
      port: 0,
      maxConcurrent: 2,
      maxBodyBytes: 4096,
      batchWindowMs: 300,
      seed: 1,
    });
    try {
      const big = await fetch(`${small.baseUrl}/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "a".repeat(10_000) }] }),
      });
      assert.equal(big.status, 413);
      assert.equal(((await big.json()) as { error: { code: string } }).error.code, "request_too_large");
      const post = () =>
        fetch(`${small.baseUrl}/chat/completions`, {
          method: "POST",
          body: JSON.stringify({ model: "m", messages, max_tokens: 4, seed: 1 }),
        });
      // Two requests wait in the 300 ms batching window; a third one is over the limit.
      const first = [post(), post()];
      await new Promise((r) => setTimeout(r, 100));
      const third = await post();
      assert.equal(third.status, 429);
      assert.equal(((await third.json()) as { error: { type: string } }).error.type, "rate_limit_error");
      const ok = await Promise.all(first);
      assert.deepEqual(
        ok.map((r) => r.status),
        [200, 200],
      );
      assert.equal(engine.calls, 1, "the two waiting requests shared one sampler call");
      // Through the openai client the 429 is a RateLimitError.
      const c = new OpenAI({ baseURL: small.baseUrl, apiKey: "unused", maxRetries: 0 });
      const held = [post(), post()];
      await new Promise((r) => setTimeout(r, 100));
      await assert.rejects(
        c.chat.completions.create({ model: "m", messages }),
        (e: unknown) => e instanceof OpenAI.RateLimitError,
      );
      await Promise.all(held);
    } finally {
      await small.close();
    }
  });

  it("drops a queued request whose client went away", async () => {
    const engine = new ServeEngine({ params, tokenizer: tok, kernels: jsKernels });
    const s = await startServer({ engine, modelName: "m", port: 0, batchWindowMs: 300, seed: 1 });
    try {
      const ctrl = new AbortController();
      const req = fetch(`${s.baseUrl}/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ model: "m", messages, max_tokens: 4 }),
        signal: ctrl.signal,
      });
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(s.stats().inFlight, 1);
      ctrl.abort();
      await assert.rejects(req);
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(s.stats().inFlight, 0);
      assert.equal(engine.calls, 0, "nothing was sampled for it");
    } finally {
      await s.close();
    }
  });

  it("finishes in-flight requests on close, then refuses connections", async () => {
    const engine = new ServeEngine({ params, tokenizer: tok, kernels: jsKernels });
    const s = await startServer({ engine, modelName: "m", port: 0, batchWindowMs: 200, seed: 1 });
    const pending = fetch(`${s.baseUrl}/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "m", messages, max_tokens: 6, seed: 2 }),
    });
    await new Promise((r) => setTimeout(r, 50));
    const closed = s.close();
    const res = await pending;
    assert.equal(res.status, 200);
    const [ref] = await policy.generate([{ messages, sampling: { ...T1, maxTokens: 6 }, seed: 2 }]);
    assert.deepEqual(
      ((await res.json()) as { choices: { token_ids: number[] }[] }).choices[0].token_ids,
      ref.tokenIds,
    );
    await closed;
    await assert.rejects(fetch(`${s.baseUrl}/models`));
  });

  it("CLI: bad flags are usage errors; SIGTERM shuts the server down cleanly", async () => {
    await assert.rejects(startServeFromArgs(["--port", "1"], {}), UsageError);
    await assert.rejects(
      startServeFromArgs(["--checkpoint", ckptDir, "--api-key-env", "MAGE_UNSET_VAR_X"], {}),
      (e: unknown) => e instanceof UsageError && /MAGE_UNSET_VAR_X/.test(e.message),
    );
    await assert.rejects(startServeFromArgs(["--checkpoint", ckptDir, "--max-tokens", "0"], {}), UsageError);
    await assert.rejects(startServeFromArgs(["--checkpoint", join(dir, "nope")], {}), UsageError);
    await assert.rejects(
      startServeFromArgs(["--checkpoint", ckptDir, "--port", String(handle.port), "--quiet"], {}, () => {}),
      (e: unknown) => e instanceof UsageError && /in use/.test(e.message),
    );

    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "serve",
        "--checkpoint",
        ckptDir,
        "--port",
        "0",
        "--kernels",
        "js",
      ],
      { cwd: process.cwd(), stdio: ["ignore", "ignore", "pipe"] },
    );
    let err = "";
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start line: ${err}`)), 30_000);
      child.stderr.on("data", (d: Buffer) => {
        err += d.toString();
        const m = /at (http:\/\/\S+\/v1)/.exec(err);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
    });
    const models = await fetch(`${url}/models`);
    assert.equal(models.status, 200);
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    child.kill("SIGTERM");
    assert.equal(await exited, 0);
    assert.match(err, /SIGTERM/);
  });
});

describe("serve protocol helpers", () => {
  it("streams each token while the batch is still sampling", async () => {
    const body = { model: modelName, messages, max_tokens: 40, seed: 11, temperature: 1 };
    const whole = await client.chat.completions.create(body);
    const n = (whole.choices[0] as unknown as { token_ids: number[] }).token_ids.length;
    assert.ok(n >= 10, `this seed samples ${n} tokens; the check needs a longer generation`);
    const before = handle.stats().completionTokens;
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let tokensSeen = 0;
    let finishedWhenFirstSeen: number | null = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        const ids = (c as unknown as { token_ids?: number[] }).token_ids ?? [];
        if (ids.length > 0 && tokensSeen === 0) finishedWhenFirstSeen = handle.stats().completionTokens;
        tokensSeen += ids.length;
      }
    }
    assert.equal(tokensSeen, n);
    // The batch's tokens are counted when it finishes: the first token arrived before that.
    assert.equal(finishedWhenFirstSeen, before);
    assert.equal(handle.stats().completionTokens, before + n);
  });

  it("stream text: pieces add up to the content, hold back split UTF-8 and stop-string prefixes", () => {
    const ids = tok.encode("héllo wörld ✓ and more");
    const content = tok.decode(ids);
    const plain = new StreamText(tok, [], []);
    const pieces = ids.map((id) => plain.push(id));
    assert.ok(!pieces.some((p) => p.includes("\uFFFD")));
    assert.equal(pieces.join("") + plain.finish(content), content);
    assert.equal(pieces.join(""), content, "nothing is left for the end without stop strings");

    const stopAt = content.indexOf("wör");
    const stopped = new StreamText(tok, ["wör"], []);
    let sent = "";
    for (const id of ids) {
      sent += stopped.push(id);
      assert.ok(!sent.includes("w"), `a possible start of the stop string was sent: ${JSON.stringify(sent)}`);
    }
    assert.equal(sent, content.slice(0, stopAt));
    assert.equal(stopped.finish(content.slice(0, stopAt)), "");
    // A tail held back as a possible stop, which the generation then ended on, comes out at the end.
    const held = new StreamText(tok, ["wörx"], [tok.endId]);
    let out = "";
    for (const id of [...ids, tok.endId]) out += held.push(id);
    assert.equal(out + held.finish(content), content);
  });

  it("stream pieces concatenate to the content and hold back split UTF-8", () => {
    const ids = tok.encode("héllo wörld ✓");
    const content = tok.decode(ids);
    const pieces = streamPieces(tok, ids, content);
    assert.equal(pieces.length, ids.length);
    assert.equal(pieces.join(""), content);
    assert.ok(!pieces.some((p) => p.includes("\uFFFD")));
    assert.equal(streamPieces(tok, ids, content.slice(0, 5)).join(""), content.slice(0, 5));
  });
});
