/**
 * `mage serve --model DIR`: a Hugging Face model (a tiny exported Llama) sampled by the real
 * PyTorch worker behind the OpenAI endpoints, on loopback. Replies are checked against the same
 * model sampled in process by `TorchPolicy`.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startServeFromArgs } from "../../src/cli/commands/serve.js";
import { openTorchModelDir, workerWithThreads } from "../../src/cli/open-torch-model.js";
import { UsageError } from "../../src/core/errors.js";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import { TorchPolicy } from "../../src/learner/torch/policy.js";
import type { ChatMessage, SamplingParams } from "../../src/policy/types.js";
import { type ServeHandle, startServer } from "../../src/serve/server.js";
import { TorchServeBackend } from "../../src/serve/torch-backend.js";
import { TorchModelSchema } from "../../src/train/config.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";
import { exchange, startCli, terminate, upload } from "./probes.js";

const KEY_ENV = "MAGE_SERVE_TORCH_TEST_KEY";
const KEY = "sk-torch-5e1b07";
const messages: ChatMessage[] = [
  { role: "system", content: "You play Kuhn poker." },
  { role: "user", content: "You hold the King. Bet or check?" },
];

interface Choice {
  message?: { content: string };
  delta?: { role?: string; content?: string };
  text?: string;
  finish_reason: string | null;
  stop_reason?: string | null;
  token_ids?: number[];
  seed?: number;
}
interface Reply {
  status: number;
  body: {
    choices: Choice[];
    usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
    system_fingerprint: string;
    error?: { message: string; param: string | null; code: string | null };
    data?: { id: string }[];
  };
}

let root: string;
let hfDir: string;

before(async () => {
  root = mkdtempSync(join(tmpdir(), "mage-serve-torch-"));
  hfDir = join(root, "tiny-llama");
  await saveTinyHf(hfDir, { seed: 5, contextLength: 128 });
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

async function call(base: string, path: string, body: unknown, key: string | null = KEY): Promise<Reply> {
  const r = await exchange(`${base}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: r.status, body: JSON.parse(r.text) };
}

/** The `data:` events of an SSE body, `[DONE]` as the string. */
function sseEvents(text: string): unknown[] {
  return text
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice("data: ".length))
    .map((d) => (d === "[DONE]" ? d : JSON.parse(d)));
}

describe("mage serve --model: a Hugging Face model through the PyTorch worker", { skip: NO_WORKER }, () => {
  let handle: ServeHandle;
  let modelName: string;
  let base: string;
  /** The same model in process, one thread as the server's worker, no prefix store. */
  let ref: TorchLearner;
  const chat = (extra: Record<string, unknown>) =>
    call(base, "/v1/chat/completions", { model: modelName, messages, ...extra });

  before(async () => {
    process.env[KEY_ENV] = KEY;
    ({ handle, modelName } = await startServeFromArgs(
      [
        "--model",
        hfDir,
        "--port",
        "0",
        "--api-key-env",
        KEY_ENV,
        "--threads",
        "1",
        "--max-tokens",
        "16",
        // Requests a test sends together always share a batch.
        "--batch-window-ms",
        "300",
        "--batch-max-wait-ms",
        "2000",
        "--quiet",
      ],
      process.env,
      () => {},
    ));
    base = handle.url;
    ref = await TorchLearner.open({
      torch: TorchModelSchema.parse({ path: hfDir, prefixCacheMB: 0 }),
      optimizer: { lr: 1e-3, weightDecay: 0, gradClip: 1 },
      seed: 1,
      reference: false,
      worker: workerWithThreads(1),
    });
  });
  after(async () => {
    await handle?.close();
    await ref?.close();
    delete process.env[KEY_ENV];
  });

  it("lists the model by its directory's name and answers as the in-process TorchPolicy does", async () => {
    assert.equal(modelName, "tiny-llama");
    const models = await call(base, "/v1/models", undefined);
    assert.deepEqual(
      models.body.data?.map((m) => m.id),
      ["tiny-llama"],
    );
    const sampling: SamplingParams = { temperature: 1, topP: 0.9, topK: 40, maxTokens: 12, stop: [] };
    const policy = new TorchPolicy(ref);
    for (const seed of [7, 123_456]) {
      const r = await chat({ seed, max_tokens: 12, temperature: 1, top_p: 0.9, top_k: 40 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const [want] = await policy.generate([{ messages, sampling, seed }]);
      const [c] = r.body.choices;
      assert.deepEqual(c.token_ids, want.tokenIds, `seed ${seed}: the worker's sample`);
      assert.equal(c.message?.content, want.text);
      assert.equal(c.finish_reason, want.finishReason);
      assert.equal(c.seed, seed);
      assert.equal(r.body.system_fingerprint, "mage-torch-cpu");
      assert.deepEqual(r.body.usage, {
        prompt_tokens: want.promptTokens,
        completion_tokens: want.tokenIds.length,
        total_tokens: want.promptTokens + want.tokenIds.length,
      });
    }
  });

  it("a seed gives the same answer; temperature 0 is greedy whatever the seed; max_tokens bounds the reply", async () => {
    const a = await chat({ seed: 42, max_tokens: 10 });
    const b = await chat({ seed: 42, max_tokens: 10 });
    const c = await chat({ seed: 43, max_tokens: 10 });
    assert.deepEqual(b.body.choices[0], a.body.choices[0]);
    assert.notDeepEqual(
      c.body.choices[0].token_ids,
      a.body.choices[0].token_ids,
      "another seed samples anew",
    );
    const g1 = await chat({ seed: 1, temperature: 0, max_tokens: 10 });
    const g2 = await chat({ seed: 2, temperature: 0, max_tokens: 10 });
    assert.deepEqual(g1.body.choices[0].token_ids, g2.body.choices[0].token_ids);
    const short = await chat({ seed: 42, max_tokens: 3 });
    assert.deepEqual(short.body.choices[0].token_ids, a.body.choices[0].token_ids?.slice(0, 3));
    assert.equal(short.body.choices[0].finish_reason, "length");
    assert.equal(short.body.usage.completion_tokens, 3);
  });

  it("a stop string ends the reply: cut from the content, named in stop_reason", async () => {
    let tried = 0;
    for (let seed = 100; seed < 120; seed++) {
      const full = (await chat({ seed, max_tokens: 16 })).body.choices[0];
      const content = full.message?.content ?? "";
      // An ASCII letter or digit that first occurs after the reply's first character.
      const at = [...content].findIndex(
        (ch, i) => i > 0 && /[A-Za-z0-9]/.test(ch) && content.indexOf(ch) === i,
      );
      if (at < 0) continue;
      tried++;
      const stop = content[at];
      const cut = (await chat({ seed, max_tokens: 16, stop: [stop, "never-sampled"] })).body.choices[0];
      assert.equal(cut.message?.content, content.slice(0, at), `seed ${seed}, stop ${JSON.stringify(stop)}`);
      assert.equal(cut.finish_reason, "stop");
      assert.equal(cut.stop_reason, stop);
      assert.ok((cut.token_ids?.length ?? 0) < (full.token_ids?.length ?? 0));
      if (tried === 2) break;
    }
    assert.ok(tried > 0, "some reply had an ASCII character to stop at");
  });

  it("streams the whole reply as one content chunk, then the finish chunk and usage", async () => {
    const plain = await chat({ seed: 9, max_tokens: 12 });
    const r = await exchange(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}` },
      body: JSON.stringify({
        model: modelName,
        messages,
        seed: 9,
        max_tokens: 12,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    assert.equal(r.status, 200);
    assert.match(String(r.headers["content-type"]), /text\/event-stream/);
    const events = sseEvents(r.text);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1) as { choices: Choice[]; usage?: Reply["body"]["usage"] }[];
    assert.equal(chunks.length, 4, "role, content, finish, usage");
    const [role, content, finish, usage] = chunks;
    assert.equal(role.choices[0].delta?.role, "assistant");
    const want = plain.body.choices[0];
    assert.equal(content.choices[0].delta?.content, want.message?.content);
    assert.deepEqual(content.choices[0].token_ids, want.token_ids);
    assert.equal(finish.choices[0].finish_reason, want.finish_reason);
    assert.equal(finish.choices[0].seed, 9);
    assert.deepEqual(usage.usage, plain.body.usage);
  });

  it("samples concurrent requests in one worker generate call, each as it would be alone", async () => {
    const alone: Reply["body"][] = [];
    for (const seed of [11, 12]) alone.push((await chat({ seed, max_tokens: 8 })).body);
    const before = handle.stats();
    const pair = await Promise.all([11, 12].map(async (seed) => (await chat({ seed, max_tokens: 8 })).body));
    const after = handle.stats();
    assert.equal(after.samplerCalls - before.samplerCalls, 1, "the pair shared one generate call");
    assert.ok(after.largestBatch >= 2);
    for (let i = 0; i < 2; i++) assert.deepEqual(pair[i].choices[0].token_ids, alone[i].choices[0].token_ids);
  });

  it("refuses what the worker cannot honour with a 400 naming the field; completions take token ids", async () => {
    const lp = await chat({ logprobs: true, top_logprobs: 2 });
    assert.equal(lp.status, 400);
    assert.equal(lp.body.error?.param, "logprobs");
    assert.equal(lp.body.error?.code, "unsupported_parameter");
    const text = await call(base, "/v1/completions", { model: modelName, prompt: "Bet or check?" });
    assert.equal(text.status, 400);
    assert.equal(text.body.error?.param, "prompt");
    const lpc = await call(base, "/v1/completions", { model: modelName, prompt: [72, 105], logprobs: 1 });
    assert.equal(lpc.body.error?.param, "logprobs");
    const ids = await call(base, "/v1/completions", {
      model: modelName,
      prompt: [72, 105],
      max_tokens: 5,
      seed: 3,
    });
    assert.equal(ids.status, 200, JSON.stringify(ids.body));
    assert.equal(ids.body.usage.prompt_tokens, 2);
    assert.equal(ids.body.choices[0].token_ids?.length, ids.body.usage.completion_tokens);
    const again = await call(base, "/v1/completions", {
      model: modelName,
      prompt: [72, 105],
      max_tokens: 5,
      seed: 3,
    });
    assert.deepEqual(again.body.choices, ids.body.choices);
    const tooMany = await chat({ max_tokens: 17 });
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.body.error?.param, "max_tokens");
    const wrongModel = await call(base, "/v1/chat/completions", { model: "other", messages });
    assert.equal(wrongModel.status, 404);
    const big = await upload(`${base}/v1/chat/completions`, 1024 * 1024 + 10, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    assert.equal(big.status, 413);
  });

  it("needs the API key on every endpoint but /health", async () => {
    assert.equal((await call(base, "/v1/models", undefined, null)).status, 401);
    const noKey = await call(base, "/v1/chat/completions", { model: modelName, messages }, null);
    assert.equal(noKey.status, 401);
    assert.equal(noKey.body.error?.code, "invalid_api_key");
    assert.equal(
      (await call(base, "/v1/chat/completions", { model: modelName, messages }, "sk-wrong")).status,
      401,
    );
    assert.equal((await exchange(`${base}/health`)).status, 200);
  });

  it("serves a torch training run's newest checkpoint with the weights it saved", async () => {
    await ref.save(join(root, "run", "checkpoints", "iter-3"), {
      json: { iteration: 3 },
      meta: { game: "kuhn" },
    });
    const run = await startServeFromArgs(
      ["--model", join(root, "run"), "--port", "0", "--threads", "1", "--quiet"],
      {},
      () => {},
    );
    try {
      assert.equal(run.modelName, "iter-3");
      const body = { messages, seed: 5, max_tokens: 8 };
      const r = await call(run.handle.url, "/v1/chat/completions", { model: "iter-3", ...body }, null);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const want = await chat(body);
      assert.deepEqual(r.body.choices[0].token_ids, want.body.choices[0].token_ids);
    } finally {
      await run.handle.close();
    }
  });
});

describe("mage serve --model: shutdown", { skip: NO_WORKER }, () => {
  it("close() past the grace answers the request still sampling 503 and stops the worker at once", async () => {
    const longDir = join(root, "tiny-llama-512");
    await saveTinyHf(longDir, { seed: 5, contextLength: 512 });
    const opened = await openTorchModelDir(longDir, { threads: 1, prefixCacheMB: 0 });
    const pid = opened.learner.worker.pid;
    const backend = new TorchServeBackend(opened);
    const s = await startServer({
      engine: backend,
      modelName: "m",
      port: 0,
      maxTokens: 400,
      batchWindowMs: 1,
      shutdownGraceMs: 0,
    });
    // Sixteen greedy choices of 400 tokens (this random model's greedy reply never ends early):
    // the worker samples for seconds (4.5 s here when idle).
    const long = call(
      s.url,
      "/v1/chat/completions",
      { model: "m", messages, n: 16, max_tokens: 400, temperature: 0 },
      null,
    );
    for (let i = 0; i < 200 && !backend.sampling; i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(backend.sampling, "the worker is sampling");
    const t0 = performance.now();
    await s.close();
    const ms = performance.now() - t0;
    const r = await long;
    assert.equal(r.status, 503);
    assert.equal(r.body.error?.code, "shutting_down");
    assert.ok(ms < 3000, `close took ${ms.toFixed(0)} ms`);
    assert.throws(() => process.kill(pid as number, 0), "the worker is gone");
  });

  it("SIGTERM after a request exits 0 and stops the worker", async () => {
    const cli = await startCli(["serve", "--model", hfDir, "--port", "0", "--threads", "1"]);
    const r = await call(
      cli.url,
      "/v1/chat/completions",
      { model: "tiny-llama", messages, max_tokens: 4 },
      null,
    );
    assert.equal(r.status, 200);
    const { code, ms } = await terminate(cli);
    assert.equal(code, 0, cli.stderr());
    // About 2 s on an idle machine; the bound is there to catch a hang (a clean-clone CI beside two
    // training runs took 5.8 s).
    assert.ok(ms < 15_000, `exited ${ms.toFixed(0)} ms after SIGTERM`);
    assert.match(cli.stderr(), /LlamaForCausalLM, .*PyTorch worker on cpu in float32, 1 thread/);
    assert.match(cli.stderr(), /SIGTERM[\s\S]*mage serve: stopped/);
  });
});

describe("mage serve: which flags go with which model", () => {
  it("names the flag of each mistake before starting anything", async () => {
    const embedded = join(root, "embedded");
    await saveRandomCheckpoint(embedded, { contextLength: 64, seed: 1 });
    const cases: [string[], RegExp][] = [
      [["--model", hfDir, "--checkpoint", embedded], /one of --checkpoint DIR .* and --model DIR/],
      [["--model", join(root, "nope")], /--model .*nope is neither a Hugging Face model directory/],
      [["--model", embedded], /embedded mage checkpoint; serve it with --checkpoint/],
      [["--model", hfDir, "--kernels", "js"], /--kernels applies to embedded checkpoints only/],
      [["--model", hfDir, "--dtype", "fp8"], /--dtype "fp8"; valid choices: float32, bfloat16, float16/],
      [["--model", hfDir, "--device", "tpu"], /--device must be cpu, cuda or cuda:N/],
      [["--model", hfDir, "--threads", "-1"], /--threads/],
      [
        ["--checkpoint", embedded, "--threads", "2"],
        /--threads applies to models served through the PyTorch worker/,
      ],
      [["--checkpoint", embedded, "--device", "cpu"], /--device applies/],
    ];
    for (const [args, message] of cases)
      await assert.rejects(
        startServeFromArgs([...args, "--port", "0", "--quiet"], {}, () => {}),
        (e: unknown) => e instanceof UsageError && message.test(e.message),
        args.join(" "),
      );
  });
});
