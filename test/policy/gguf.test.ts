import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { renderChatIds } from "../../src/model/chat-template.js";
import { type ModelConfig, presetConfig } from "../../src/model/config.js";
import { exportGguf } from "../../src/model/gguf.js";
import { allocParams, type ModelParams } from "../../src/model/params.js";
import { randomWeights } from "../../src/model/sampler.js";
import { logSoftmaxAt } from "../../src/model/sampling.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";
import { forwardLogits } from "../../src/model/transformer.js";
import {
  GgufPolicy,
  loadNodeLlamaCpp,
  NODE_LLAMA_CPP_HELP,
  nodeLlamaCppAvailable,
} from "../../src/policy/gguf.js";
import type { ChatMessage, SamplingParams } from "../../src/policy/types.js";

function missingImporter(): (s: string) => Promise<unknown> {
  return async (s) => {
    const err = new Error(`Cannot find package '${s}' imported from /x/src/policy/gguf.js`) as Error & {
      code: string;
    };
    err.code = "ERR_MODULE_NOT_FOUND";
    throw err;
  };
}

describe("GGUF policy without node-llama-cpp", () => {
  it("throws a UsageError saying how to install it", async () => {
    await assert.rejects(loadNodeLlamaCpp(missingImporter()), (err: unknown) => {
      assert.ok(err instanceof UsageError);
      assert.match(err.message, /npm install node-llama-cpp/);
      return true;
    });
    await assert.rejects(
      GgufPolicy.load({ path: "/nonexistent/model.gguf", importer: missingImporter() }),
      (err: unknown) => err instanceof UsageError && err.message === NODE_LLAMA_CPP_HELP,
    );
    assert.equal(await nodeLlamaCppAvailable(missingImporter()), false);
  });

  it("rejects bad options before loading anything", async () => {
    await assert.rejects(GgufPolicy.load({ path: "x.gguf", threads: 0 }), UsageError);
    await assert.rejects(GgufPolicy.load({ path: "x.gguf", gpu: "tpu" as never }), /valid choices/);
    await assert.rejects(GgufPolicy.load({ path: "x.gguf", prompt: "raw" as never }), /valid choices/);
  });
});

const available = await nodeLlamaCppAvailable();
if (!available)
  console.log(
    "# gguf.test: node-llama-cpp is not installed, skipping the llama.cpp checks (npm install node-llama-cpp)",
  );

describe("GGUF policy through node-llama-cpp", {
  skip: available ? false : "node-llama-cpp not installed",
}, () => {
  const config: ModelConfig = presetConfig("tiny", { contextLength: 256 });
  let dir: string;
  let tok: Tokenizer;
  let params: ModelParams;
  let f32: GgufPolicy;
  const messages: ChatMessage[] = [
    { role: "system", content: "Play TicTacToe." },
    { role: "user", content: "Board: X at (1, 1). Your move <|end|> please." },
  ];
  const T1: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 24, stop: [] };

  /** Our model's log-probs of ids[from..] (float32 forward, float64 log-softmax). */
  function ourLogprobs(ids: readonly number[], from: number): number[] {
    const V = config.vocabSize;
    const logits = forwardLogits(params, ids);
    const out: number[] = [];
    for (let i = from; i < ids.length; i++) out.push(logSoftmaxAt(logits, (i - 1) * V, V, ids[i]));
    return out;
  }

  function maxAbsDiff(a: readonly number[], b: readonly number[]): number {
    assert.equal(a.length, b.length);
    let m = 0;
    for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
    return m;
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mage-gguf-policy-"));
    tok = trainTokenizer(
      Array.from(
        { length: 200 },
        (_, i) => `Board: X at (${i % 3}, ${(i * 7) % 3}). Your move please. <answer>(${i % 3}, 2)</answer>`,
      ),
      { vocabSize: 400 },
    );
    // Random weights; embeddings scaled down so next-token distributions are not one-hot.
    const w = randomWeights(config, 11);
    const embd = w.get("token_embd.weight")!;
    for (let i = 0; i < embd.length; i++) embd[i] *= 0.15;
    params = allocParams(config);
    for (const [i, s] of params.specs.entries()) params.tensors[i].set(w.get(s.name)!);
    await exportGguf(join(dir, "f32.gguf"), { config, params: w, tokenizer: tok, type: "F32" });
    await exportGguf(join(dir, "q8.gguf"), { config, params: w, tokenizer: tok, type: "Q8_0" });
    f32 = await GgufPolicy.load({ path: join(dir, "f32.gguf"), sequences: 4 });
  });

  after(async () => {
    await f32?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("renders mage's chat template to the same ids as the embedded model, in both prompt modes", async () => {
    assert.equal(f32.promptMode, "mage");
    const ours = renderChatIds(tok, messages, { addGenerationPrompt: true });
    assert.deepEqual(f32.promptIds(messages), ours);
    const withReply: ChatMessage[] = [
      ...messages,
      { role: "assistant", content: "ignored", tokenIds: [5, 290, 77] },
      { role: "user", content: "again" },
    ];
    assert.deepEqual(f32.promptIds(withReply), renderChatIds(tok, withReply, { addGenerationPrompt: true }));
    // llama.cpp's Jinja rendering of the template stored in the GGUF gives the same ids.
    const tpl = await GgufPolicy.load({ path: join(dir, "f32.gguf"), prompt: "template", sequences: 1 });
    try {
      assert.equal(tpl.promptMode, "template");
      assert.deepEqual(tpl.promptIds(messages), ours);
      // Same prompt, same seed: the same sample (the template's triggers also stop at <|eos|>).
      const [a] = await tpl.generate([{ messages, sampling: T1, seed: 21 }]);
      const [b] = await f32.generate([{ messages, sampling: T1, seed: 21 }]);
      const eos = b.tokenIds.indexOf(tok.eosId);
      assert.deepEqual(a.tokenIds, eos >= 0 ? b.tokenIds.slice(0, eos + 1) : b.tokenIds);
    } finally {
      await tpl.close();
    }
    for (const text of ["Your move please.", "(2, 1) <answer>", "héllo wörld  \n\t x"])
      assert.deepEqual(f32.tokenize(text), tok.encode(text), text);
  });

  it("llama.cpp's log-probs of a token sequence match forwardLogits within 1e-3 (RoPE and layout)", async () => {
    const ids = [...renderChatIds(tok, messages, { addGenerationPrompt: true }), ...tok.encode("(1, 2) ok")];
    const theirs = await f32.score(ids, 1);
    const ours = ourLogprobs(ids, 1);
    const diff = maxAbsDiff(theirs, ours);
    assert.ok(diff < 1e-3, `max |Δ log-prob| = ${diff}`);
    // Sanity: the distributions are not degenerate, so the comparison means something.
    assert.ok(
      ours.some((x) => x < -1),
      "some log-probs are well below 0",
    );
  });

  it("samples with per-request seeds and reports the sampled tokens' log-probs exactly", async () => {
    const seeds = [1, 2, 1, 3];
    const gens = await f32.generate(seeds.map((seed) => ({ messages, sampling: T1, seed })));
    // Same seed, same tokens; log-probs agree to float32 rounding (llama.cpp's numerics depend
    // slightly on how sequences are batched together).
    assert.deepEqual(gens[0].tokenIds, gens[2].tokenIds, "same seed, same sample");
    assert.ok(maxAbsDiff(gens[0].logprobs, gens[2].logprobs) < 1e-4);
    assert.notDeepEqual(gens[0].tokenIds, gens[1].tokenIds);
    const prompt = f32.promptIds(messages);
    for (const g of gens) {
      assert.equal(g.promptTokens, prompt.length);
      assert.ok(g.tokenIds.length >= 1 && g.tokenIds.length <= T1.maxTokens);
      assert.equal(g.logprobs.length, g.tokenIds.length);
      assert.equal(g.finishReason === "length", g.tokenIds.length === T1.maxTokens);
      const ours = ourLogprobs([...prompt, ...g.tokenIds], prompt.length);
      const diff = maxAbsDiff(g.logprobs, ours);
      assert.ok(diff < 1e-3, `sampled-token log-probs differ by ${diff}`);
      assert.equal(g.text, tok.decode(g.tokenIds.filter((id) => !tok.isSpecial(id) && id < tok.vocabSize)));
    }
    // Greedy: the arg-max of our logits at every step, log-prob 0 by convention.
    const [greedy] = await f32.generate([
      { messages, sampling: { ...T1, temperature: 0, maxTokens: 8 }, seed: 9 },
    ]);
    const all = [...prompt, ...greedy.tokenIds];
    const logits = forwardLogits(params, all);
    const V = config.vocabSize;
    for (let j = 0; j < greedy.tokenIds.length; j++) {
      const row = logits.subarray((prompt.length - 1 + j) * V, (prompt.length + j) * V);
      let best = 0;
      for (let i = 1; i < V; i++) if (row[i] > row[best]) best = i;
      assert.equal(greedy.tokenIds[j], best, `greedy step ${j}`);
    }
    assert.ok(greedy.logprobs.every((x) => x === 0));
  });

  it("stops at stop strings (kept in the text) and at <|end|>, and checks the context size", async () => {
    const [g] = await f32.generate([{ messages, sampling: { ...T1, maxTokens: 40 }, seed: 5 }]);
    const text = g.text;
    assert.ok(text.length >= 2, "needs some text to cut");
    const stop = text.slice(1, 2);
    const [cut] = await f32.generate([
      { messages, sampling: { ...T1, maxTokens: 40, stop: [stop] }, seed: 5 },
    ]);
    assert.equal(cut.finishReason, "stop");
    assert.ok(cut.text.endsWith(stop) || cut.text.includes(stop));
    assert.deepEqual(
      cut.tokenIds,
      g.tokenIds.slice(0, cut.tokenIds.length),
      "a prefix of the unstopped sample",
    );
    // Force <|end|> by making it the only token left: top-k 1 on a model whose best token we
    // cannot choose, so instead check that any sampled <|end|> ends the sequence and is kept.
    const endId = tok.endId;
    const many = await f32.generate(
      Array.from({ length: 8 }, (_, i) => ({ messages, sampling: { ...T1, maxTokens: 60 }, seed: 100 + i })),
    );
    for (const m of many) {
      const at = m.tokenIds.indexOf(endId);
      if (at >= 0) {
        assert.equal(at, m.tokenIds.length - 1, "<|end|> is the last token");
        assert.equal(m.finishReason, "stop");
      }
    }
    await assert.rejects(
      f32.generate([{ messages, sampling: { ...T1, maxTokens: 10_000 }, seed: 1 }]),
      (err: unknown) => err instanceof UsageError && /context/.test(err.message),
    );
  });

  it("loads Q8_0 and generates with log-probs close to F32", async () => {
    const q8 = await GgufPolicy.load({ path: join(dir, "q8.gguf"), sequences: 2 });
    try {
      const gens = await q8.generate([
        { messages, sampling: T1, seed: 1 },
        { messages, sampling: { ...T1, temperature: 0.7, topK: 20, topP: 0.8 }, seed: 2 },
      ]);
      for (const g of gens) {
        assert.ok(g.tokenIds.length > 0);
        assert.ok(g.logprobs.every((x) => Number.isFinite(x) && x <= 1e-6));
      }
      const prompt = q8.promptIds(messages);
      const ids = [...prompt, ...gens[0].tokenIds];
      const theirs = await q8.score(ids, prompt.length);
      const ours = ourLogprobs(ids, prompt.length);
      const max = maxAbsDiff(theirs, ours);
      const mean = theirs.reduce((s, x, i) => s + Math.abs(x - ours[i]), 0) / ours.length;
      // 8-bit weights: close to F32 but not exact.
      assert.ok(mean < 0.05 && max < 0.5, `Q8_0 vs F32 log-probs: mean |Δ| ${mean}, max ${max}`);
      assert.ok(max > 1e-6, "Q8_0 really is quantised");
    } finally {
      await q8.close();
    }
  });

  it("a missing file is a UsageError", async () => {
    await assert.rejects(GgufPolicy.load({ path: join(dir, "nope.gguf") }), UsageError);
  });
});
