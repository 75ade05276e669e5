import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { OpenAIChatPolicy } from "../../src/policy/openai.js";
import { parsePolicySpec } from "../../src/policy/spec.js";

function usageError(spec: string, pattern: RegExp): void {
  assert.throws(
    () => parsePolicySpec(spec),
    (e: unknown) => {
      assert.ok(e instanceof UsageError, `expected UsageError for ${JSON.stringify(spec)}`);
      assert.match(e.message, pattern);
      assert.match(e.message, /accepted forms: openai:URL#MODEL.*gguf:PATH\.gguf.*checkpoint:DIR/);
      return true;
    },
  );
}

describe("parsePolicySpec", () => {
  it("reads openai:URL#MODEL", () => {
    const d = parsePolicySpec("openai:http://127.0.0.1:8000/v1#Qwen3-4B");
    assert.deepEqual(d, {
      kind: "openai",
      spec: "openai:http://127.0.0.1:8000/v1#Qwen3-4B",
      options: { baseUrl: "http://127.0.0.1:8000/v1", model: "Qwen3-4B" },
    });
  });

  it("keeps model names with slashes and colons, and strips a trailing /chat/completions", () => {
    const a = parsePolicySpec("openai:https://api.example.com/v1/#Qwen/Qwen3-4B");
    assert.equal(a.kind, "openai");
    if (a.kind !== "openai") return;
    assert.equal(a.options.baseUrl, "https://api.example.com/v1");
    assert.equal(a.options.model, "Qwen/Qwen3-4B");
    const b = parsePolicySpec("openai:http://localhost:11434/v1/chat/completions#qwen3:4b");
    assert.ok(b.kind === "openai");
    assert.equal(b.options.baseUrl, "http://localhost:11434/v1");
    assert.equal(b.options.model, "qwen3:4b");
  });

  it("reads options after the model or before the '#', converting seconds to ms", () => {
    const expected = {
      baseUrl: "http://127.0.0.1:8000/v1",
      model: "Qwen3-4B",
      apiKeyEnv: "OPENAI_API_KEY",
      concurrency: 4,
      timeoutMs: 60_000,
      retries: 2,
      baseDelayMs: 250,
      maxDelayMs: 10_000,
      logprobs: false,
      extraBody: { chat_template_kwargs: { enable_thinking: false } },
    };
    const opts =
      "apiKeyEnv=OPENAI_API_KEY&concurrency=4&timeout=60&retries=2&baseDelay=0.25&maxDelay=10&logprobs=false&thinking=false";
    const after = parsePolicySpec(`openai:http://127.0.0.1:8000/v1#Qwen3-4B?${opts}`);
    const before = parsePolicySpec(`openai:http://127.0.0.1:8000/v1?${opts}#Qwen3-4B`);
    assert.ok(after.kind === "openai" && before.kind === "openai");
    assert.deepEqual(after.options, expected);
    assert.deepEqual(before.options, expected);
  });

  it("its options build a working OpenAIChatPolicy", () => {
    const d = parsePolicySpec("openai:http://127.0.0.1:8000/v1#m?concurrency=3&timeout=1.5");
    assert.ok(d.kind === "openai");
    const p = new OpenAIChatPolicy(d.options);
    assert.equal(p.concurrency, 3);
    assert.equal(p.timeoutMs, 1500);
    assert.equal(p.retries, 5);
    assert.equal(p.url, "http://127.0.0.1:8000/v1/chat/completions");
    assert.equal(p.name, "openai:m");
  });

  it("reads gguf: and bare .gguf paths", () => {
    assert.deepEqual(parsePolicySpec("gguf:/models/tiny.gguf"), {
      kind: "gguf",
      spec: "gguf:/models/tiny.gguf",
      path: "/models/tiny.gguf",
    });
    assert.deepEqual(parsePolicySpec("./m/Q8.GGUF"), {
      kind: "gguf",
      spec: "./m/Q8.GGUF",
      path: "./m/Q8.GGUF",
    });
  });

  it("reads checkpoint:DIR and bare directories (including Windows drive paths)", () => {
    assert.deepEqual(parsePolicySpec("checkpoint:runs/a/ckpt-100"), {
      kind: "checkpoint",
      spec: "checkpoint:runs/a/ckpt-100",
      dir: "runs/a/ckpt-100",
    });
    assert.deepEqual(parsePolicySpec("runs/a/ckpt-100"), {
      kind: "checkpoint",
      spec: "runs/a/ckpt-100",
      dir: "runs/a/ckpt-100",
    });
    const win = parsePolicySpec("C:\\runs\\ckpt");
    assert.ok(win.kind === "checkpoint");
    assert.equal(win.dir, "C:\\runs\\ckpt");
  });

  it("rejects malformed specs with UsageError listing the accepted forms", () => {
    usageError("", /empty spec/);
    usageError("   ", /empty spec/);
    usageError("openai:http://127.0.0.1:8000/v1", /missing the model name/);
    usageError("openai:http://127.0.0.1:8000/v1#", /empty model name/);
    usageError("openai:#m", /missing the server URL/);
    usageError("openai:127.0.0.1:8000#m", /invalid baseUrl|http/);
    usageError("openai:ftp://host/v1#m", /http:\/\/ or https:\/\//);
    usageError("openai:http://h/v1#m?concurrency=0", /concurrency="0" must be an integer >= 1/);
    usageError("openai:http://h/v1#m?concurrency=2.5", /concurrency/);
    usageError("openai:http://h/v1#m?timeout=0", /timeout must be > 0/);
    usageError("openai:http://h/v1#m?timeout=abc", /timeout="abc"/);
    usageError("openai:http://h/v1#m?retries=-1", /retries/);
    usageError("openai:http://h/v1#m?logprobs=maybe", /true or false/);
    usageError(
      "openai:http://h/v1#m?temperature=1",
      /unknown option "temperature"; valid options: apiKeyEnv/,
    );
    usageError("openai:http://h/v1#m?concurrency", /needs a value/);
    usageError("openai:http://h/v1#m?retries=1&retries=2", /given twice/);
    usageError("openai:http://h/v1?retries=1#m?retries=2", /options given twice/);
    usageError("openai:http://h/v1#m?apiKeyEnv=sk-abc123", /apiKeyEnv must name an environment variable/);
    assert.throws(
      () => parsePolicySpec("openai:http://h/v1#m?apiKeyEnv=sk-abc123"),
      (e: unknown) => e instanceof UsageError && !e.message.includes("sk-abc123"),
    );
    usageError("gguf:", /missing the file path/);
    usageError("checkpoint:", /missing the directory/);
    usageError("http://127.0.0.1:8000/v1", /needs the openai: prefix/);
    usageError("vllm:http://x#m", /unknown scheme "vllm:"/);
  });
});
