import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { renderChat } from "../../src/model/chat-template.js";
import { type ModelConfig, validateModelConfig } from "../../src/model/config.js";
import { jsKernels } from "../../src/model/kernels/js.js";
import { cloneParams, getTensor, initParams, type ModelParams } from "../../src/model/params.js";
import { ContextLengthError } from "../../src/model/sampler.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";
import { forwardLogits } from "../../src/model/transformer.js";
import { EmbeddedPolicy } from "../../src/policy/embedded.js";
import { ScriptedPolicy } from "../../src/policy/scripted.js";
import type { ChatMessage, GenerateRequest, SamplingParams } from "../../src/policy/types.js";

const CORPUS = [
  "You are playing tic-tac-toe. Reply with <action>row,col</action>.",
  "The board is empty. It is your turn to move; think, then answer.",
  "<action>1,1</action> <action>0,2</action> <remark>the centre is strong</remark>",
  "Kuhn poker: you hold the King. Legal moves: CHECK, BET. Reply with <action>BET</action>.",
];

let tok: Tokenizer;
let config: ModelConfig;
let params: ModelParams;
/** A model that ends its reply with probability ≈ 0.3 at every step (see `biasTowardsEnd`). */
let stopper: ModelParams;

/**
 * Rewrites the embeddings so every ordinary row is u + small noise and `<|end|>` is α·u:
 * whatever the context, logit(end) − logit(other) ≈ (α − 1)·|u|², here ≈ ln(0.3·(V−1)/0.7).
 */
function biasTowardsEnd(p: ModelParams, endId: number): void {
  const E = getTensor(p, "token_embd.weight");
  const d = p.config.dModel;
  const r = Rng.seeded(4).derive("bias");
  const u = Array.from({ length: d }, () => r.normal());
  const gap = Math.log((0.3 * (p.config.vocabSize - 1)) / 0.7);
  const alpha = 1 + gap / d;
  for (let t = 0; t < p.config.vocabSize; t++)
    for (let j = 0; j < d; j++) E[t * d + j] = t === endId ? alpha * u[j] : u[j] + 0.05 * r.normal();
}

const SAMPLE: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 24, stop: [] };
const MESSAGES: ChatMessage[] = [
  { role: "system", content: "You are playing tic-tac-toe." },
  { role: "user", content: "The board is empty. Reply with <action>row,col</action>." },
];

function logSoftmaxAt(row: Float32Array, off: number, V: number, id: number): number {
  let m = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < V; i++) m = Math.max(m, row[off + i]);
  let z = 0;
  for (let i = 0; i < V; i++) z += Math.exp(row[off + i] - m);
  return row[off + id] - m - Math.log(z);
}

before(() => {
  tok = trainTokenizer(CORPUS, { vocabSize: 320 });
  config = validateModelConfig({
    vocabSize: tok.vocabSize,
    dModel: 64,
    nLayers: 2,
    nHeads: 4,
    dFf: 128,
    contextLength: 192,
    ropeBase: 10000,
    normEps: 1e-5,
  });
  params = initParams(config, Rng.seeded(1), { std: 0.2 });
  // Small layer weights so the residual stream stays close to the (biased) embeddings.
  stopper = initParams(config, Rng.seeded(7), { std: 0.02 });
  biasTowardsEnd(stopper, tok.endId);
});

describe("EmbeddedPolicy", () => {
  it("samples replies whose ids and log-probs the learner scores identically through the template", async () => {
    const policy = new EmbeddedPolicy({ params: stopper, tokenizer: tok });
    const reqs: GenerateRequest[] = Array.from({ length: 8 }, (_, i) => ({
      messages: MESSAGES,
      sampling: SAMPLE,
      seed: i,
    }));
    const gens = await policy.generate(reqs);
    const prompt = renderChat(tok, MESSAGES, { addGenerationPrompt: true }).ids;
    let stopped = 0;
    let withText = 0;
    let maxErr = 0;
    for (const g of gens) {
      assert.equal(g.promptTokens, prompt.length);
      assert.equal(g.logprobs.length, g.tokenIds.length);
      const ended = g.tokenIds.at(-1) === tok.endId;
      assert.equal(g.finishReason, ended ? "stop" : "length");
      if (!ended) assert.equal(g.tokenIds.length, SAMPLE.maxTokens);
      assert.ok(!g.tokenIds.slice(0, -1).includes(tok.endId), "<|end|> only ever last");
      assert.equal(g.text, tok.decode(ended ? g.tokenIds.slice(0, -1) : g.tokenIds));
      if (ended) stopped++;
      if (ended && g.tokenIds.length > 2) withText++;
      // The learner's view: the transcript with the sampled ids verbatim, scored by a full forward.
      const transcript = [...MESSAGES, { role: "assistant" as const, content: g.text, tokenIds: g.tokenIds }];
      const rendered = renderChat(tok, transcript);
      const span = rendered.assistantSpans[0];
      assert.deepEqual(rendered.ids.slice(0, span.start), prompt);
      assert.deepEqual(rendered.ids.slice(span.start, span.start + g.tokenIds.length), g.tokenIds);
      assert.equal(span.endSampled, ended);
      const logits = forwardLogits(stopper, rendered.ids, jsKernels);
      g.tokenIds.forEach((id, j) => {
        const lp = logSoftmaxAt(logits, (span.start - 1 + j) * config.vocabSize, config.vocabSize, id);
        maxErr = Math.max(maxErr, Math.abs(lp - g.logprobs[j]));
      });
    }
    assert.ok(stopped >= 4, `only ${stopped} of 8 replies ended with <|end|>`);
    assert.ok(withText >= 2, `only ${withText} replies had text before <|end|>`);
    assert.ok(maxErr <= 1e-4, `max log-prob difference ${maxErr}`);
  });

  it("gives each request the same reply alone or in a batch", async () => {
    const policy = new EmbeddedPolicy({ params, tokenizer: tok });
    const other: ChatMessage[] = [{ role: "user", content: "Kuhn poker: you hold the King." }];
    const reqs: GenerateRequest[] = [
      { messages: MESSAGES, sampling: { ...SAMPLE, temperature: 0.8, topK: 40 }, seed: 3 },
      { messages: other, sampling: SAMPLE, seed: 3 },
      { messages: MESSAGES, sampling: { ...SAMPLE, temperature: 0 }, seed: 9 },
    ];
    const batch = await policy.generate(reqs);
    for (let i = 0; i < reqs.length; i++) assert.deepEqual((await policy.generate([reqs[i]]))[0], batch[i]);
    assert.deepEqual(await policy.generate([reqs[2], reqs[0]]), [batch[2], batch[0]]);
  });

  it("stops after a stop string, keeping it in the text", async () => {
    const policy = new EmbeddedPolicy({ params, tokenizer: tok });
    // Find a printable character the free-running model writes after its first token.
    let found: { seed: number; ch: string; free: number[] } | null = null;
    for (let seed = 0; seed < 16 && !found; seed++) {
      const [g] = await policy.generate([{ messages: MESSAGES, sampling: SAMPLE, seed }]);
      const first = tok.decode(g.tokenIds.slice(0, 1)).length;
      const m = /[a-z]/.exec(g.text.slice(first));
      if (m) found = { seed, ch: m[0], free: g.tokenIds };
    }
    assert.ok(found, "no seed wrote a lowercase letter");
    const [g] = await policy.generate([
      { messages: MESSAGES, sampling: { ...SAMPLE, stop: [found.ch] }, seed: found.seed },
    ]);
    assert.equal(g.finishReason, "stop");
    assert.ok(g.text.includes(found.ch), `text ${JSON.stringify(g.text)} lacks the stop string`);
    assert.ok(
      !tok.decode(g.tokenIds.slice(0, -1)).includes(found.ch),
      "did not stop at the first occurrence",
    );
    assert.deepEqual(g.tokenIds, found.free.slice(0, g.tokenIds.length));
  });

  it("uses weights updated in place and swapped in with updateParams", async () => {
    const own = cloneParams(params);
    const policy = new EmbeddedPolicy({ params: own, tokenizer: tok });
    const req: GenerateRequest = { messages: MESSAGES, sampling: { ...SAMPLE, maxTokens: 6 }, seed: 5 };
    const before1 = (await policy.generate([req]))[0];
    own.flat.set(stopper.flat);
    const inPlace = (await policy.generate([req]))[0];
    const viaStopper = (await new EmbeddedPolicy({ params: stopper, tokenizer: tok }).generate([req]))[0];
    assert.deepEqual(inPlace, viaStopper);
    assert.notDeepEqual(inPlace.logprobs, before1.logprobs);
    policy.updateParams(params);
    assert.deepEqual((await policy.generate([req]))[0], before1);
    const wider = initParams({ ...config, dModel: 32 }, Rng.seeded(2));
    assert.throws(() => policy.updateParams(wider), UsageError);
  });

  it("refuses a prompt that does not fit the context, naming the limit", async () => {
    const policy = new EmbeddedPolicy({ params, tokenizer: tok });
    const long: ChatMessage[] = [{ role: "user", content: CORPUS.join(" ").repeat(4) }];
    await assert.rejects(
      policy.generate([{ messages: long, sampling: SAMPLE, seed: 0 }]),
      (e: unknown) => e instanceof ContextLengthError && e.message.includes("192"),
    );
  });

  it("refuses a tokenizer whose vocabulary differs from the model's", () => {
    const other = initParams({ ...config, vocabSize: config.vocabSize + 1 }, Rng.seeded(2));
    assert.throws(() => new EmbeddedPolicy({ params: other, tokenizer: tok }), /vocabSize/);
  });
});

describe("ScriptedPolicy", () => {
  it("replies by script, with template prompt counts, <|end|>, maxTokens and stop strings", async () => {
    const policy = new ScriptedPolicy(
      (msgs, ctx) => `${msgs.at(-1)!.content.length} ${ctx.rng.int(1000)} <action>1,1</action> done`,
      tok,
    );
    const req: GenerateRequest = { messages: MESSAGES, sampling: SAMPLE, seed: 1 };
    const [a, b] = await policy.generate([req, { ...req, seed: 2 }]);
    assert.ok(a.text.startsWith(`${MESSAGES[1].content.length} `), a.text);
    assert.notEqual(a.text, b.text);
    assert.deepEqual(a.tokenIds, [...tok.encode(a.text), tok.endId]);
    assert.equal(a.finishReason, "stop");
    assert.equal(a.promptTokens, renderChat(tok, MESSAGES, { addGenerationPrompt: true }).ids.length);
    const [again] = await policy.generate([req]);
    assert.deepEqual(again, a);
    const [cut] = await policy.generate([{ ...req, sampling: { ...SAMPLE, stop: ["</action>"] } }]);
    assert.ok(cut.text.endsWith("</action>"), cut.text);
    assert.deepEqual(cut.tokenIds, tok.encode(cut.text));
    const [short] = await policy.generate([{ ...req, sampling: { ...SAMPLE, maxTokens: 3 } }]);
    assert.equal(short.finishReason, "length");
    assert.equal(short.tokenIds.length, 3);
    assert.equal(policy.requests.length, 5);
  });
});
