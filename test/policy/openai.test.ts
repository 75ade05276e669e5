import assert from "node:assert/strict";
import { afterEach, describe, it } from "node:test";
import { inspect } from "node:util";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  OpenAIChatPolicy,
  type OpenAIChatPolicyOptions,
  PolicyBackendError,
} from "../../src/policy/openai.js";
import { ConcurrencyLimiter, parseRetryAfterMs, realSleep } from "../../src/policy/retry.js";
import type { GenerateRequest, SamplingParams } from "../../src/policy/types.js";
import {
  drop,
  emptyChoices,
  type FaultScript,
  type FaultServer,
  hangup,
  invalidJson,
  ok,
  slow,
  startFaultServer,
  status,
} from "./fault-server.js";

const SECRET = "sk-test-SECRET-7f3a9c1e5b";
const KEY_ENV = "MAGE_TEST_OPENAI_KEY";

const SAMPLING: SamplingParams = {
  temperature: 0.7,
  topP: 0.8,
  topK: 20,
  maxTokens: 48,
  stop: ["</answer>"],
};

function req(content: string, seed = 1, sampling: SamplingParams = SAMPLING): GenerateRequest {
  return {
    messages: [
      { role: "system", content: "You play TicTacToe." },
      { role: "user", content },
    ],
    sampling,
    seed,
  };
}

let servers: FaultServer[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});

async function serve(script: FaultScript = []): Promise<FaultServer> {
  const s = await startFaultServer(script);
  servers.push(s);
  return s;
}

/** A sleep that records the requested delays and returns at once. */
function fakeSleep() {
  const delays: number[] = [];
  const sleep = async (ms: number) => {
    delays.push(ms);
    await Promise.resolve();
  };
  return { delays, sleep };
}

function policy(server: FaultServer, extra: Partial<OpenAIChatPolicyOptions> = {}) {
  const { delays, sleep } = fakeSleep();
  const p = new OpenAIChatPolicy({ baseUrl: server.baseUrl, model: "test-model", sleep, ...extra });
  return { p, delays };
}

async function rejection(promise: Promise<unknown>): Promise<PolicyBackendError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof PolicyBackendError, `expected PolicyBackendError, got ${inspect(err)}`);
    return err;
  }
  assert.fail("expected the call to reject");
}

describe("OpenAIChatPolicy: request mapping and response parsing", () => {
  it("sends messages, sampling, seed and extra body; returns text, logprobs and usage", async () => {
    const server = await serve([ok({ text: "<answer>B2</answer>" })]);
    const { p } = policy(server, {
      apiKeyEnv: KEY_ENV,
      env: { [KEY_ENV]: SECRET },
      extraBody: { chat_template_kwargs: { enable_thinking: false }, min_tokens: 5 },
    });
    const [g] = await p.generate([req("Your move.", 12345)]);

    assert.equal(server.received.length, 1);
    const r = server.received[0];
    assert.equal(r.method, "POST");
    assert.equal(r.url, "/v1/chat/completions");
    assert.equal(r.headers.authorization, `Bearer ${SECRET}`);
    assert.deepEqual(r.body, {
      model: "test-model",
      messages: [
        { role: "system", content: "You play TicTacToe." },
        { role: "user", content: "Your move." },
      ],
      temperature: 0.7,
      top_p: 0.8,
      top_k: 20,
      max_tokens: 48,
      stop: ["</answer>"],
      seed: 12345,
      logprobs: true,
      chat_template_kwargs: { enable_thinking: false },
      min_tokens: 5,
      stream: false,
    });

    assert.equal(g.text, "<answer>B2</answer>");
    assert.equal(g.finishReason, "stop");
    assert.equal(g.logprobs.length, g.text.length);
    assert.ok(Math.abs(g.logprobs[2] - -0.3) < 1e-12);
    assert.deepEqual(g.tokenIds, [], "plain token strings give no token ids");
    const promptChars = "You play TicTacToe.".length + "Your move.".length;
    assert.equal(g.promptTokens, promptChars);
    assert.deepEqual(p.metrics, {
      requests: 1,
      retries: 0,
      promptTokens: promptChars,
      completionTokens: g.text.length,
      failures: 0,
    });
  });

  it("omits top_k when 0, stop when empty, logprobs when disabled, and no key without apiKeyEnv", async () => {
    const server = await serve();
    const { p } = policy(server, { logprobs: false });
    const sampling: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 8, stop: [] };
    const [g] = await p.generate([req("hi", 7, sampling)]);
    const body = server.received[0].body;
    assert.equal("top_k" in body, false);
    assert.equal("stop" in body, false);
    assert.equal("logprobs" in body, false);
    assert.equal(body.temperature, 1);
    assert.equal(server.received[0].headers.authorization, undefined);
    assert.equal(g.text, "echo:hi");
    assert.deepEqual(g.logprobs, []);
  });

  it("extraBody can override sampling fields but not model, messages or stream", async () => {
    const server = await serve();
    const { p } = policy(server, { extraBody: { top_k: -1, model: "other", stream: true, messages: [] } });
    await p.generate([req("x")]);
    const body = server.received[0].body;
    assert.equal(body.top_k, -1);
    assert.equal(body.model, "test-model");
    assert.equal(body.stream, false);
    assert.equal(body.messages.length, 2);
  });

  it("reads vLLM token_id:N tokens as token ids, finish_reason length, and restores a matched stop string", async () => {
    const server = await serve([
      ok({ text: "AB", tokenIds: true, finishReason: "length" }),
      ok({ text: "<answer>A1", stopReason: "</answer>" }),
      ok({ text: "plain", stopReason: null }),
    ]);
    const { p } = policy(server, { concurrency: 1 });
    const [a, b, c] = await p.generate([req("1"), req("2"), req("3")]);
    assert.deepEqual(a.tokenIds, [65, 66]);
    assert.equal(a.logprobs.length, 2);
    assert.equal(a.finishReason, "length");
    assert.equal(b.text, "<answer>A1</answer>");
    assert.equal(c.text, "plain");
  });

  it("a base URL ending in /chat/completions or a slash reaches the same endpoint", async () => {
    const server = await serve();
    for (const baseUrl of [`${server.baseUrl}/`, `${server.baseUrl}/chat/completions`]) {
      const p = new OpenAIChatPolicy({ baseUrl, model: "m" });
      const [g] = await p.generate([req("u")]);
      assert.equal(g.text, "echo:u");
    }
    assert.deepEqual(
      server.received.map((r) => r.url),
      ["/v1/chat/completions", "/v1/chat/completions"],
    );
  });

  it("rejects a missing key variable, a bad URL and an empty model with UsageError (no key in text)", () => {
    assert.throws(
      () =>
        new OpenAIChatPolicy({ baseUrl: "http://127.0.0.1:1/v1", model: "m", apiKeyEnv: KEY_ENV, env: {} }),
      (e: unknown) => e instanceof UsageError && e.message.includes(KEY_ENV),
    );
    assert.throws(
      () => new OpenAIChatPolicy({ baseUrl: "127.0.0.1:8000", model: "m" }),
      (e: unknown) => e instanceof UsageError,
    );
    assert.throws(
      () => new OpenAIChatPolicy({ baseUrl: "http://127.0.0.1:1/v1", model: " " }),
      (e: unknown) => e instanceof UsageError && /model/.test(e.message),
    );
    assert.throws(
      () =>
        new OpenAIChatPolicy({
          baseUrl: "http://127.0.0.1:1/v1",
          model: "m",
          apiKeyEnv: KEY_ENV,
          env: { [KEY_ENV]: `${SECRET}\n` },
        }),
      (e: unknown) => e instanceof UsageError && !e.message.includes(SECRET),
    );
  });
});

describe("OpenAIChatPolicy: retries", () => {
  const faults: Array<[string, FaultScript]> = [
    ["HTTP 500", [status(500)]],
    ["HTTP 502", [status(502)]],
    ["HTTP 503", [status(503)]],
    ["HTTP 408", [status(408)]],
    ["HTTP 429 without retry-after", [status(429)]],
    ["connection dropped mid-response", [drop]],
    ["connection closed before any response", [hangup]],
    ["invalid JSON", [invalidJson]],
    ["empty choices", [emptyChoices]],
  ];
  for (const [label, script] of faults) {
    it(`retries after ${label} and then succeeds`, async () => {
      const server = await serve(script);
      const { p, delays } = policy(server);
      const [g] = await p.generate([req("again")]);
      assert.equal(g.text, "echo:again");
      assert.equal(server.received.length, 2);
      assert.equal(delays.length, 1);
      assert.ok(delays[0] >= 0 && delays[0] < 500, `first backoff ${delays[0]} within [0, 500)`);
      assert.deepEqual(
        { requests: p.metrics.requests, retries: p.metrics.retries, failures: p.metrics.failures },
        { requests: 2, retries: 1, failures: 0 },
      );
    });
  }

  const causes: Array<[string, FaultScript, RegExp]> = [
    ["HTTP 503", [status(503)], /HTTP 503: scripted failure 503/],
    ["a dropped connection", [drop], /HTTP 200: TypeError: terminated.*(other side closed|ECONNRESET)/],
    ["a hang-up", [hangup], /no HTTP response: TypeError: fetch failed.*(other side closed|ECONNRESET)/],
    ["invalid JSON", [invalidJson], /HTTP 200: response is not valid JSON/],
    ["empty choices", [emptyChoices], /HTTP 200: response has no choices/],
  ];
  for (const [label, script, pattern] of causes) {
    it(`with no retries left, ${label} is reported as such`, async () => {
      const server = await serve(script);
      const { p } = policy(server, { retries: 0 });
      const err = await rejection(p.generate([req("x")]));
      assert.equal(err.attempts, 1);
      assert.equal(err.retryable, true);
      assert.match(err.message, pattern);
    });
  }

  it("survives every kind of fault in a row within the retry limit", async () => {
    const server = await serve([status(500), drop, hangup, invalidJson, emptyChoices, ok({ text: "fine" })]);
    const { p, delays } = policy(server, { retries: 5 });
    const [g] = await p.generate([req("x")]);
    assert.equal(g.text, "fine");
    assert.equal(server.received.length, 6);
    assert.equal(delays.length, 5);
    assert.equal(p.metrics.retries, 5);
  });

  it("times out a slow response, retries it, and succeeds", async () => {
    const server = await serve([slow(5000)]);
    const { p } = policy(server, { timeoutMs: 200 });
    const t0 = performance.now();
    const [g] = await p.generate([req("late")]);
    const elapsed = performance.now() - t0;
    assert.equal(g.text, "echo:late");
    assert.equal(server.received.length, 2);
    assert.ok(elapsed >= 150 && elapsed < 3000, `took ${elapsed.toFixed(0)} ms`);
  });

  it("backoff is exponential with full jitter drawn from the Rng, reproducible per seed", async () => {
    const run = async (seed: number) => {
      const server = await serve([status(500), status(500), status(500), status(500), status(500)]);
      const { p, delays } = policy(server, {
        baseDelayMs: 100,
        maxDelayMs: 1000,
        retries: 5,
        rng: Rng.seeded(seed),
      });
      await p.generate([req("x")]);
      return delays;
    };
    const a = await run(1);
    const b = await run(1);
    const c = await run(2);
    assert.equal(a.length, 5);
    a.forEach((d, k) => {
      assert.ok(d >= 0 && d < Math.min(1000, 100 * 2 ** k), `delay ${k} = ${d}`);
    });
    assert.deepEqual(a, b, "same seed, same jitter");
    assert.notDeepEqual(a, c, "another seed, other jitter");
    assert.equal(new Set(a).size, 5, "delays are jittered, not constant");
  });

  it("honours Retry-After seconds, HTTP dates and caps them at maxDelayMs", async () => {
    const now = Date.UTC(2025, 0, 2, 3, 4, 5);
    const date = new Date(now + 12_000).toUTCString();
    const server = await serve([
      status(429, "7"),
      status(429, date),
      status(503, "600"),
      status(429, "soon"),
      ok({ text: "done" }),
    ]);
    const { p, delays } = policy(server, { now: () => now, maxDelayMs: 30_000, baseDelayMs: 10 });
    const [g] = await p.generate([req("x")]);
    assert.equal(g.text, "done");
    assert.deepEqual(delays.slice(0, 3), [7000, 12_000, 30_000]);
    assert.ok(delays[3] < 10 * 2 ** 3, "an unreadable Retry-After falls back to jittered backoff");
  });

  it("parseRetryAfterMs reads seconds and dates and rejects junk", () => {
    const now = Date.UTC(2025, 5, 1);
    assert.equal(parseRetryAfterMs("3", now), 3000);
    assert.equal(parseRetryAfterMs("1.5", now), 1500);
    assert.equal(parseRetryAfterMs(new Date(now + 4000).toUTCString(), now), 4000);
    assert.equal(parseRetryAfterMs(new Date(now - 4000).toUTCString(), now), 0);
    assert.equal(parseRetryAfterMs("-5", now), undefined);
    assert.equal(parseRetryAfterMs("", now), undefined);
    assert.equal(parseRetryAfterMs(null, now), undefined);
  });

  for (const code of [400, 401, 404, 422]) {
    it(`does not retry HTTP ${code}`, async () => {
      const server = await serve([status(code)]);
      const { p, delays } = policy(server, { apiKeyEnv: KEY_ENV, env: { [KEY_ENV]: SECRET } });
      const err = await rejection(p.generate([req("x")]));
      assert.equal(err.status, code);
      assert.equal(err.attempts, 1);
      assert.equal(err.retryable, false);
      assert.match(err.message, new RegExp(`HTTP ${code}: scripted failure ${code}`));
      assert.equal(server.received.length, 1);
      assert.deepEqual(delays, []);
      assert.equal(p.metrics.failures, 1);
    });
  }

  it("exhausted retries give a clear error naming URL, status, attempts and cause, without the key", async () => {
    // A hostile server that echoes the Authorization header back in its error body.
    const received: string[] = [];
    const server: FaultServer = await serve((i) => {
      const auth = String(server.received[i].headers.authorization);
      received.push(auth);
      return status(500, undefined, `upstream broke (attempt ${i}); you sent: ${auth}`);
    });
    const { p, delays } = policy(server, {
      apiKeyEnv: KEY_ENV,
      env: { [KEY_ENV]: SECRET },
      retries: 3,
    });
    const err = await rejection(p.generate([req("x")]));
    assert.equal(received.length, 4);
    assert.ok(
      received.every((a) => a === `Bearer ${SECRET}`),
      "the key was really sent",
    );
    assert.equal(delays.length, 3);
    assert.equal(err.status, 500);
    assert.equal(err.attempts, 4);
    assert.equal(err.retryable, true);
    assert.equal(err.url, `${server.baseUrl}/chat/completions`);
    assert.ok(err.message.includes(`${server.baseUrl}/chat/completions`));
    assert.match(err.message, /gave up after 4 attempts/);
    assert.match(err.message, /HTTP 500/);
    assert.match(err.message, /upstream broke \(attempt 3\)/);
    assert.match(err.message, /\[redacted\]/);
    const everything = [
      err.message,
      err.stack ?? "",
      err.lastCause,
      inspect(err, { depth: 5 }),
      String(err),
      JSON.stringify(p.metrics),
      JSON.stringify(p),
      inspect(p, { depth: 5, showHidden: true }),
      p.name,
    ].join("\n");
    assert.equal(everything.includes(SECRET), false, "the API key must not appear anywhere");
    assert.deepEqual(p.metrics, {
      requests: 4,
      retries: 3,
      promptTokens: 0,
      completionTokens: 0,
      failures: 1,
    });
  });

  it("exhausted timeouts report no HTTP response and the timeout", async () => {
    const server = await serve([slow(5000), slow(5000)]);
    const { p } = policy(server, { timeoutMs: 100, retries: 1 });
    const err = await rejection(p.generate([req("x")]));
    assert.equal(err.status, undefined);
    assert.equal(err.attempts, 2);
    assert.match(err.message, /no HTTP response: timed out after 100 ms/);
  });

  it("a refused connection is retried, then reported with its code", async () => {
    const server = await serve();
    const baseUrl = server.baseUrl;
    await server.close();
    const { p, delays } = policy(server, { baseUrl, retries: 2 });
    const err = await rejection(p.generate([req("x")]));
    assert.equal(err.attempts, 3);
    assert.equal(delays.length, 2);
    assert.match(err.message, /ECONNREFUSED/);
  });

  it("one request failing for good rejects the batch and cancels the rest", async () => {
    const server = await serve((_i, body) => {
      const last = body.messages[body.messages.length - 1].content;
      return last === "bad" ? status(400) : ok({ delayMs: 50 });
    });
    const { p } = policy(server, { concurrency: 2 });
    const batch = ["a", "bad", "c", "d", "e", "f"].map((m) => req(m));
    const err = await rejection(p.generate(batch));
    assert.equal(err.status, 400);
    assert.equal(p.metrics.failures, 1);
    assert.ok(
      server.received.length < batch.length,
      `queued requests were cancelled (${server.received.length} sent)`,
    );
  });
});

describe("OpenAIChatPolicy: concurrency", () => {
  it("never has more than `concurrency` requests in flight", async () => {
    const server = await serve(() => ok({ delayMs: 150 }));
    const { p } = policy(server, { concurrency: 3 });
    const out = await p.generate(Array.from({ length: 9 }, (_, i) => req(`m${i}`)));
    assert.equal(out.length, 9);
    assert.equal(server.received.length, 9);
    assert.equal(server.maxInFlight, 3);
  });

  it("returns results in request order when later requests finish first", async () => {
    const n = 8;
    const server = await serve((_i, body) => {
      const k = Number(body.messages[1].content.slice(1));
      return ok({ delayMs: (n - k) * 25 });
    });
    const { p } = policy(server, { concurrency: 8 });
    const out = await p.generate(Array.from({ length: n }, (_, i) => req(`q${i}`, i)));
    assert.deepEqual(
      out.map((g) => g.text),
      Array.from({ length: n }, (_, i) => `echo:q${i}`),
    );
    assert.ok(server.maxInFlight > 1, "requests really overlapped");
    assert.deepEqual(
      server.received.map((r) => r.body.seed).sort((a, b) => a - b),
      Array.from({ length: n }, (_, i) => i),
      "each request carries its own seed",
    );
  });

  it("the limit is shared by concurrent generate calls and includes retries", async () => {
    const server = await serve((i) => (i % 3 === 0 ? status(500) : ok({ delayMs: 60 })));
    const { p } = policy(server, { concurrency: 2 });
    const [a, b] = await Promise.all([
      p.generate([req("a0"), req("a1"), req("a2")]),
      p.generate([req("b0"), req("b1"), req("b2")]),
    ]);
    assert.deepEqual(
      [...a, ...b].map((g) => g.text),
      ["echo:a0", "echo:a1", "echo:a2", "echo:b0", "echo:b1", "echo:b2"],
    );
    assert.equal(server.maxInFlight, 2);
    assert.ok(p.metrics.retries >= 1);
  });

  it("realSleep waits, and returns early when its signal aborts", async () => {
    let t0 = performance.now();
    await realSleep(60);
    assert.ok(performance.now() - t0 >= 50);
    const ctrl = new AbortController();
    setTimeout(() => ctrl.abort(), 20);
    t0 = performance.now();
    await realSleep(10_000, ctrl.signal);
    assert.ok(performance.now() - t0 < 5000);
  });

  it("ConcurrencyLimiter runs waiters in FIFO order", async () => {
    const limiter = new ConcurrencyLimiter(1);
    const order: number[] = [];
    await Promise.all(
      [0, 1, 2, 3].map((i) =>
        limiter.run(async () => {
          order.push(i);
          await new Promise((r) => setTimeout(r, 5));
        }),
      ),
    );
    assert.deepEqual(order, [0, 1, 2, 3]);
  });
});
