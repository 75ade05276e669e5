import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { type ModelConfig, validateModelConfig } from "../../src/model/config.js";
import { jsKernels } from "../../src/model/kernels/js.js";
import { wasmKernels, wasmSimdSupported } from "../../src/model/kernels/wasm.js";
import { initParams } from "../../src/model/params.js";
import {
  ContextLengthError,
  generate,
  randomWeights,
  type SampleRequest,
  Sampler,
  type WeightSource,
} from "../../src/model/sampler.js";
import { TokenSampler } from "../../src/model/sampling.js";
import { forwardLogits } from "../../src/model/transformer.js";

const CFG: ModelConfig = validateModelConfig({
  vocabSize: 64,
  dModel: 32,
  nLayers: 2,
  nHeads: 4,
  dFf: 48,
  contextLength: 64,
  ropeBase: 10000,
  normEps: 1e-5,
});
// Embeddings of std 0.35 give logits of std ≈ 2: spread enough that truncation keeps several tokens.
const W = randomWeights(CFG, 1, { embeddingStd: 0.35 });

/**
 * An independent float64 full-sequence forward written from the architecture description
 * (no cache, plain loops): logits [T][V].
 */
function referenceLogits(
  w: Map<string, Float32Array>,
  c: ModelConfig,
  tokens: readonly number[],
): number[][] {
  const d = c.dModel;
  const hd = d / c.nHeads;
  const T = tokens.length;
  const get = (n: string) => w.get(n)!;
  const matvec = (m: Float32Array, rows: number, cols: number, x: number[]): number[] => {
    const y = new Array(rows).fill(0);
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) y[i] += m[i * cols + j] * x[j];
    return y;
  };
  const norm = (x: number[], g: Float32Array): number[] => {
    const ms = x.reduce((s, v) => s + v * v, 0) / x.length;
    return x.map((v, i) => (v / Math.sqrt(ms + c.normEps)) * g[i]);
  };
  const rope = (x: number[], pos: number): number[] => {
    const y = x.slice();
    for (let h = 0; h < c.nHeads; h++)
      for (let i = 0; i < hd / 2; i++) {
        const a = pos * c.ropeBase ** (-(2 * i) / hd);
        const j = h * hd + 2 * i;
        y[j] = x[j] * Math.cos(a) - x[j + 1] * Math.sin(a);
        y[j + 1] = x[j] * Math.sin(a) + x[j + 1] * Math.cos(a);
      }
    return y;
  };
  const E = get("token_embd.weight");
  let h: number[][] = tokens.map((t) => Array.from(E.subarray(t * d, (t + 1) * d)));
  for (let l = 0; l < c.nLayers; l++) {
    const p = `blk.${l}.`;
    const xn = h.map((x) => norm(x, get(`${p}attn_norm.weight`)));
    const Q = xn.map((x, t) => rope(matvec(get(`${p}attn_q.weight`), d, d, x), t));
    const K = xn.map((x, t) => rope(matvec(get(`${p}attn_k.weight`), d, d, x), t));
    const V = xn.map((x) => matvec(get(`${p}attn_v.weight`), d, d, x));
    const att: number[][] = [];
    for (let t = 0; t < T; t++) {
      const o = new Array(d).fill(0);
      for (let hh = 0; hh < c.nHeads; hh++) {
        const sc = [];
        for (let j = 0; j <= t; j++) {
          let s = 0;
          for (let i = 0; i < hd; i++) s += Q[t][hh * hd + i] * K[j][hh * hd + i];
          sc.push(s / Math.sqrt(hd));
        }
        const m = Math.max(...sc);
        const e = sc.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j <= t; j++)
          for (let i = 0; i < hd; i++) o[hh * hd + i] += (e[j] / z) * V[j][hh * hd + i];
      }
      att.push(o);
    }
    h = h.map((x, t) => {
      const a = matvec(get(`${p}attn_output.weight`), d, d, att[t]);
      return x.map((v, i) => v + a[i]);
    });
    h = h.map((x) => {
      const n = norm(x, get(`${p}ffn_norm.weight`));
      const g = matvec(get(`${p}ffn_gate.weight`), c.dFf, d, n);
      const u = matvec(get(`${p}ffn_up.weight`), c.dFf, d, n);
      const act = g.map((v, i) => (v / (1 + Math.exp(-v))) * u[i]);
      const dn = matvec(get(`${p}ffn_down.weight`), d, c.dFf, act);
      return x.map((v, i) => v + dn[i]);
    });
  }
  return h.map((x) => matvec(E, c.vocabSize, d, norm(x, get("output_norm.weight"))));
}

function logSoftmax(row: number[]): number[] {
  const m = Math.max(...row);
  const z = Math.log(row.reduce((s, v) => s + Math.exp(v - m), 0));
  return row.map((v) => v - m - z);
}

function randomPrompt(seed: number, len: number, vocab = CFG.vocabSize): number[] {
  const r = Rng.seeded(seed).derive("prompt");
  return Array.from({ length: len }, () => r.int(vocab));
}

const sampling = (over: Partial<SampleRequest["sampling"]> = {}): SampleRequest["sampling"] => ({
  temperature: 1,
  topK: 0,
  topP: 1,
  maxTokens: 12,
  ...over,
});

/** Sampling distribution computed the naive way: temperature, sort, top-k, top-p, renormalise. */
function naiveDistribution(logits: number[], t: number, k: number, p: number): Map<number, number> {
  const scaled = logits.map((v) => v / t);
  const ids = scaled.map((_, i) => i).sort((a, b) => scaled[b] - scaled[a] || a - b);
  let kept = k > 0 ? ids.slice(0, k) : ids;
  const m = scaled[kept[0]];
  let z = kept.reduce((s, i) => s + Math.exp(scaled[i] - m), 0);
  if (p < 1) {
    let cum = 0;
    let n = 0;
    while (n < kept.length) {
      cum += Math.exp(scaled[kept[n]] - m) / z;
      n++;
      if (cum >= p) break;
    }
    kept = kept.slice(0, n);
    z = kept.reduce((s, i) => s + Math.exp(scaled[i] - m), 0);
  }
  return new Map(kept.map((i) => [i, Math.exp(scaled[i] - m) / z]));
}

describe("Sampler forward with KV cache", () => {
  for (const inline of [true, false])
    it(`gives the same logits as a full forward, for blocks, single steps and mixed blocks (${inline ? "inline" : "GEMM"} decode attention)`, () => {
      const tokens = randomPrompt(5, 20);
      const ref = referenceLogits(W, CFG, tokens);
      const s = new Sampler(CFG, jsKernels, { inlineDecodeAttention: inline });
      const a = s.newCache(32);
      const b = s.newCache(20);
      const got: number[][] = [];
      const V = CFG.vocabSize;
      const take = (logits: Float32Array, rows: number, from = 0) => {
        for (let r = from; r < from + rows; r++) got.push(Array.from(logits.subarray(r * V, (r + 1) * V)));
      };
      take(s.append(W, [{ cache: a, tokens: tokens.slice(0, 6) }]), 6);
      for (let i = 6; i < 10; i++) take(s.append(W, [{ cache: a, tokens: [tokens[i]] }]), 1);
      // Cache b gets the first 7 tokens in the same block as a's next 3, so blocks mix sequences.
      const mixed = s.append(W, [
        { cache: b, tokens: tokens.slice(0, 7) },
        { cache: a, tokens: tokens.slice(10, 13) },
      ]);
      const bLogits = Array.from({ length: 7 }, (_, r) => Array.from(mixed.subarray(r * V, (r + 1) * V)));
      take(mixed, 3, 7);
      take(s.append(W, [{ cache: a, tokens: tokens.slice(13, 20) }]), 7);
      assert.equal(a.length, 20);
      let maxErr = 0;
      let maxAbs = 0;
      for (let t = 0; t < 20; t++)
        for (let v = 0; v < V; v++) {
          maxErr = Math.max(maxErr, Math.abs(got[t][v] - ref[t][v]));
          maxAbs = Math.max(maxAbs, Math.abs(ref[t][v]));
        }
      for (let t = 0; t < 7; t++)
        for (let v = 0; v < V; v++) maxErr = Math.max(maxErr, Math.abs(bLogits[t][v] - ref[t][v]));
      assert.ok(maxAbs > 1, `logits should not be trivially small (max |logit| ${maxAbs})`);
      assert.ok(maxErr <= 1e-5, `max logit difference ${maxErr}`);
    });

  it("agrees with the training forward (forwardLogits) on a ModelParams container", () => {
    const params = initParams(CFG, Rng.seeded(3), { std: 0.3 });
    const tokens = randomPrompt(6, 24);
    const ref = forwardLogits(params, tokens, jsKernels);
    const s = new Sampler(CFG, jsKernels);
    const cache = s.newCache(24);
    const V = CFG.vocabSize;
    const got = new Float32Array(24 * V);
    got.set(s.append(params, [{ cache, tokens: tokens.slice(0, 9) }]).subarray(0, 9 * V));
    for (let t = 9; t < 24; t++)
      got.set(s.append(params, [{ cache, tokens: [tokens[t]] }]).subarray(0, V), t * V);
    let maxErr = 0;
    for (let i = 0; i < got.length; i++) maxErr = Math.max(maxErr, Math.abs(got[i] - ref[i]));
    assert.ok(maxErr <= 1e-5, `max logit difference ${maxErr}`);
    // In-place updates of the container are seen by the next call.
    params.flat[0] += 1;
    params.tensors[params.tensors.length - 1].fill(2);
    const after = s.append(params, [{ cache: s.newCache(4), tokens: tokens.slice(0, 4) }]);
    const ref2 = forwardLogits(params, tokens.slice(0, 4), jsKernels);
    for (let i = 0; i < 4 * V; i++)
      assert.ok(Math.abs(after[i] - ref2[i]) <= 1e-5, `logit ${i} after update`);
    assert.ok(Math.abs(after[3 * V] - ref[3 * V]) > 1e-3, "the update changed the logits");
  });

  it("names the context limit when a sequence would not fit", () => {
    const req: SampleRequest = {
      promptIds: randomPrompt(1, 60),
      sampling: sampling({ maxTokens: 10 }),
      seed: 1,
    };
    assert.throws(
      () => generate(W, CFG, jsKernels, [req]),
      (e: unknown) =>
        e instanceof ContextLengthError && /context length.*64/.test(e.message) && e.needed === 70,
    );
    // Exactly filling the context is allowed.
    const ok = generate(W, CFG, jsKernels, [{ ...req, sampling: sampling({ maxTokens: 4 }) }]);
    assert.equal(ok[0].tokenIds.length, 4);
  });
});

describe("Sampler.generate", () => {
  it("reports log-probs at temperature 1 equal to teacher-forced log-probs of a full forward", () => {
    const prompts = [randomPrompt(11, 7), randomPrompt(12, 3), randomPrompt(13, 12)];
    const outs = generate(
      W,
      CFG,
      jsKernels,
      prompts.map((p, i) => ({ promptIds: p, sampling: sampling({ maxTokens: 16 }), seed: 100 + i })),
    );
    let maxErr = 0;
    outs.forEach((o, i) => {
      assert.equal(o.tokenIds.length, 16);
      assert.equal(o.finishReason, "length");
      assert.equal(o.promptTokens, prompts[i].length);
      const seq = [...prompts[i], ...o.tokenIds];
      const ref = referenceLogits(W, CFG, seq);
      o.tokenIds.forEach((tok, j) => {
        const lp = logSoftmax(ref[prompts[i].length - 1 + j])[tok];
        maxErr = Math.max(maxErr, Math.abs(lp - o.logprobs[j]));
      });
    });
    assert.ok(maxErr <= 1e-4, `max log-prob difference ${maxErr}`);
  });

  it("greedy output is the same alone and inside batches of other prompts, in any order", () => {
    const prompts = Array.from({ length: 8 }, (_, i) => randomPrompt(200 + i, 2 + ((i * 5) % 11)));
    const reqs = prompts.map(
      (p): SampleRequest => ({
        promptIds: p,
        sampling: sampling({ temperature: 0, maxTokens: 10 }),
        seed: 7,
      }),
    );
    const s = new Sampler(CFG, jsKernels);
    const alone = reqs.map((r) => s.generate(W, [r])[0]);
    // Greedy continuations should not all be the same text, or the test would be weak.
    assert.ok(new Set(alone.map((o) => o.tokenIds.join(","))).size > 4, "greedy outputs are too alike");
    for (const seed of [1, 2]) {
      const order = Rng.seeded(seed).shuffle(reqs.map((_, i) => i));
      const batch = s.generate(
        W,
        order.map((i) => reqs[i]),
        { prefillChunk: 16 },
      );
      order.forEach((i, j) => {
        assert.deepEqual(batch[j].tokenIds, alone[i].tokenIds);
        assert.deepEqual(batch[j].logprobs, alone[i].logprobs);
      });
    }
    // Greedy agrees with the arg-max of the reference forward.
    const ref = referenceLogits(W, CFG, [...prompts[0], ...alone[0].tokenIds]);
    alone[0].tokenIds.forEach((t, j) => {
      const row = ref[prompts[0].length - 1 + j];
      assert.equal(t, row.indexOf(Math.max(...row)));
    });
  });

  it("seeded sampling is reproducible, batch-independent, and differs across seeds", () => {
    const p = randomPrompt(300, 5);
    const req = (seed: number): SampleRequest => ({
      promptIds: p,
      sampling: sampling({ temperature: 1.2, maxTokens: 20 }),
      seed,
    });
    const a = generate(W, CFG, jsKernels, [req(5)])[0];
    const b = generate(W, CFG, jsKernels, [req(5)])[0];
    assert.deepEqual(a, b);
    const others = [1, 2, 3].map((i) => ({
      promptIds: randomPrompt(400 + i, 4 + i),
      sampling: sampling({ temperature: 0.8, topK: 10 }),
      seed: i,
    }));
    const inBatch = generate(W, CFG, jsKernels, [others[0], req(6), req(5), others[1], others[2]]);
    assert.deepEqual(inBatch[2], a);
    // Same prompt, other seed (shared prefill): a different sample.
    assert.notDeepEqual(inBatch[1].tokenIds, a.tokenIds);
    // Prompt sharing does not change anything.
    const unshared = generate(W, CFG, jsKernels, [others[0], req(6), req(5), others[1], others[2]], {
      sharePrompts: false,
    });
    assert.deepEqual(unshared, inBatch);
  });

  it("with the wasm kernel: batch-independent bit for bit and exact log-probs", {
    skip: !wasmSimdSupported(),
  }, () => {
    const wasm = wasmKernels();
    const reqs = Array.from(
      { length: 6 },
      (_, i): SampleRequest => ({
        promptIds: randomPrompt(900 + i, 3 + 4 * i),
        sampling: sampling({ maxTokens: 10, temperature: i % 2 === 0 ? 1 : 0.7, topK: i % 4 === 1 ? 12 : 0 }),
        seed: i,
      }),
    );
    const s = new Sampler(CFG, wasm);
    const alone = reqs.map((r) => s.generate(W, [r])[0]);
    assert.deepEqual(s.generate(W, reqs), alone);
    assert.deepEqual(s.generate(W, [...reqs].reverse()).reverse(), alone);
    let maxErr = 0;
    for (const i of [0, 2, 4]) {
      const ref = referenceLogits(W, CFG, [...reqs[i].promptIds, ...alone[i].tokenIds]);
      alone[i].tokenIds.forEach((tok, j) => {
        const lp = logSoftmax(ref[reqs[i].promptIds.length - 1 + j])[tok];
        maxErr = Math.max(maxErr, Math.abs(lp - alone[i].logprobs[j]));
      });
    }
    assert.ok(maxErr <= 1e-4, `max log-prob difference ${maxErr}`);
  });

  it("top-k = 1 equals greedy, with log-prob 0", () => {
    const reqs = [randomPrompt(500, 6), randomPrompt(501, 9)].map(
      (p, i): SampleRequest => ({ promptIds: p, sampling: sampling({ maxTokens: 12 }), seed: i }),
    );
    const greedy = generate(
      W,
      CFG,
      jsKernels,
      reqs.map((r) => ({ ...r, sampling: sampling({ temperature: 0, maxTokens: 12 }) })),
    );
    const top1 = generate(
      W,
      CFG,
      jsKernels,
      reqs.map((r) => ({ ...r, sampling: sampling({ temperature: 0.7, topK: 1, maxTokens: 12 }) })),
    );
    for (let i = 0; i < reqs.length; i++) {
      assert.deepEqual(top1[i].tokenIds, greedy[i].tokenIds);
      assert.ok(
        top1[i].logprobs.every((x) => x === 0),
        `top-1 log-probs ${top1[i].logprobs}`,
      );
    }
  });

  for (const [name, t, k, p] of [
    ["top-k", 0.8, 5, 1],
    ["top-p", 1.3, 0, 0.7],
    ["top-k with top-p", 0.7, 20, 0.8],
  ] as const) {
    it(`${name} log-probs are those of the renormalised distribution`, () => {
      const prompt = randomPrompt(600, 8);
      const outs = generate(
        W,
        CFG,
        jsKernels,
        [0, 1, 2].map((seed) => ({
          promptIds: prompt,
          sampling: sampling({ temperature: t, topK: k, topP: p, maxTokens: 14 }),
          seed,
        })),
      );
      let maxErr = 0;
      let wide = 0;
      for (const o of outs) {
        const ref = referenceLogits(W, CFG, [...prompt, ...o.tokenIds]);
        o.tokenIds.forEach((tok, j) => {
          const dist = naiveDistribution(ref[prompt.length - 1 + j], t, k, p);
          if (dist.size > 1 && dist.size < CFG.vocabSize) wide++;
          assert.ok(dist.has(tok), `sampled token ${tok} is outside the kept set`);
          maxErr = Math.max(maxErr, Math.abs(Math.log(dist.get(tok)!) - o.logprobs[j]));
        });
      }
      // Most steps must keep several tokens but not all, or the check says little.
      assert.ok(wide >= 20, `only ${wide} of 42 steps kept 2..${CFG.vocabSize - 1} tokens`);
      assert.ok(maxErr <= 1e-4, `max log-prob difference ${maxErr}`);
    });
  }

  it("stops on stop token ids and stop strings, keeping the stopping token", () => {
    const decode = (ids: readonly number[]) => ids.map((i) => String.fromCharCode(65 + (i % 26))).join("");
    const prompt = randomPrompt(700, 5);
    const base: SampleRequest = {
      promptIds: prompt,
      sampling: sampling({ temperature: 0, maxTokens: 24 }),
      seed: 1,
    };
    const free = generate(W, CFG, jsKernels, [base])[0];
    const text = decode(free.tokenIds);
    // Stop id: the 4th token; generation ends at its first occurrence.
    const stopId = free.tokenIds[3];
    const firstAt = free.tokenIds.indexOf(stopId);
    const byId = generate(W, CFG, jsKernels, [{ ...base, stopIds: [stopId] }])[0];
    assert.deepEqual(byId.tokenIds, free.tokenIds.slice(0, firstAt + 1));
    assert.equal(byId.finishReason, "stop");
    assert.deepEqual(byId.stoppedBy, { tokenId: stopId });
    // Stop string: characters 5..7 of the free text; ends where it first appears, inclusive.
    const stop = text.slice(5, 8);
    const end = text.indexOf(stop) + stop.length;
    const byString = generate(W, CFG, jsKernels, [{ ...base, stopStrings: [stop] }], { decode })[0];
    assert.equal(decode(byString.tokenIds), text.slice(0, end));
    assert.equal(byString.finishReason, "stop");
    assert.deepEqual(byString.stoppedBy, { text: stop });
    // sampling.stop works the same way; a string that never appears runs to maxTokens.
    const viaSampling = generate(
      W,
      CFG,
      jsKernels,
      [
        { ...base, sampling: { ...base.sampling, stop: [stop] } },
        { ...base, stopStrings: ["@@"] },
      ],
      { decode },
    );
    assert.deepEqual(viaSampling[0].tokenIds, byString.tokenIds);
    assert.equal(viaSampling[1].finishReason, "length");
    assert.equal(viaSampling[1].tokenIds.length, 24);
    assert.throws(() => generate(W, CFG, jsKernels, [{ ...base, stopStrings: ["x"] }]), /decode/);
  });

  it("runs many requests in waves with the same results, and handles maxTokens 0", () => {
    const reqs = Array.from(
      { length: 6 },
      (_, i): SampleRequest => ({
        promptIds: randomPrompt(800 + i, 3 + i),
        sampling: sampling({ temperature: 0.9, maxTokens: i === 2 ? 0 : 8 }),
        seed: i,
      }),
    );
    const all = generate(W, CFG, jsKernels, reqs);
    const waves = generate(W, CFG, jsKernels, reqs, { maxConcurrent: 2 });
    assert.deepEqual(waves, all);
    assert.deepEqual(all[2].tokenIds, []);
    assert.equal(all[2].finishReason, "length");
  });

  it("generateAsync equals generate, reports every token as sampled, and lets the event loop run", async () => {
    const reqs = Array.from(
      { length: 5 },
      (_, i): SampleRequest => ({
        promptIds: randomPrompt(900 + i, 3 + i),
        sampling: sampling({ temperature: 1, maxTokens: 4 + i }),
        seed: 10 + i,
        stopIds: [3],
      }),
    );
    const sampler = new Sampler(CFG, jsKernels);
    const sync = sampler.generate(W, reqs, { maxConcurrent: 3 });
    const seen: number[][] = reqs.map(() => []);
    const seenLp: number[][] = reqs.map(() => []);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const pending = sampler.generateAsync(W, reqs, {
      maxConcurrent: 3,
      onToken: (i, id, lp) => {
        seen[i].push(id);
        seenLp[i].push(lp);
      },
    });
    assert.throws(() => sampler.generate(W, reqs), /already generating/);
    const asyncOut = await pending;
    clearInterval(timer);
    assert.deepEqual(asyncOut, sync);
    assert.deepEqual(
      seen,
      sync.map((o) => o.tokenIds),
    );
    assert.deepEqual(
      seenLp,
      sync.map((o) => o.logprobs),
    );
    assert.ok(ticks > 0, "timers ran while sampling");
    // Free again once done, and after a failing call.
    assert.deepEqual(sampler.generate(W, reqs, { maxConcurrent: 3 }), sync);
    await assert.rejects(sampler.generateAsync(W, [{ ...reqs[0], promptIds: [] }]), /empty/);
    assert.deepEqual(sampler.generate(W, reqs, { maxConcurrent: 3 }), sync);
  });

  it("rejects bad sampling settings and token ids with usage errors", () => {
    const base: SampleRequest = { promptIds: [1, 2], sampling: sampling(), seed: 0 };
    assert.throws(
      () => generate(W, CFG, jsKernels, [{ ...base, sampling: sampling({ temperature: -1 }) }]),
      /temperature/,
    );
    assert.throws(() => generate(W, CFG, jsKernels, [{ ...base, sampling: sampling({ topP: 0 }) }]), /topP/);
    assert.throws(() => generate(W, CFG, jsKernels, [{ ...base, promptIds: [] }]), /empty/);
    assert.throws(() => generate(W, CFG, jsKernels, [{ ...base, promptIds: [64] }]), /token id/);
    const missing: WeightSource = new Map([...W].filter(([n]) => n !== "blk.1.ffn_up.weight"));
    assert.throws(() => generate(missing, CFG, jsKernels, [base]), /blk\.1\.ffn_up\.weight/);
  });
});

describe("TokenSampler", () => {
  it("draws tokens with the frequencies of its distribution (inverse CDF over u)", () => {
    const r = Rng.seeded(9);
    const logits = Float32Array.from({ length: 64 }, () => 2 * r.normal());
    const ts = new TokenSampler(64);
    for (const params of [
      { temperature: 1, topK: 0, topP: 1 },
      { temperature: 0.5, topK: 0, topP: 1 },
      { temperature: 0.6, topK: 7, topP: 1 },
      { temperature: 1.5, topK: 0, topP: 0.5 },
    ]) {
      const dist = new Float64Array(64);
      ts.distribution(logits, 0, params, dist);
      const naive = naiveDistribution(Array.from(logits), params.temperature, params.topK, params.topP);
      for (let i = 0; i < 64; i++)
        assert.ok(Math.abs(dist[i] - (naive.get(i) ?? 0)) < 1e-9, `distribution of token ${i}`);
      const n = 20000;
      const counts = new Float64Array(64);
      for (let j = 0; j < n; j++) {
        const id = ts.sample(logits, 0, params, (j + 0.5) / n);
        counts[id]++;
        assert.ok(Math.abs(ts.logprob - Math.log(dist[id])) < 1e-9, `log-prob of token ${id}`);
      }
      for (let i = 0; i < 64; i++) assert.ok(Math.abs(counts[i] / n - dist[i]) <= 1.5 / n, `token ${i}`);
    }
  });
});
