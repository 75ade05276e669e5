import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import { type ModelConfig, paramSpecs } from "./config.js";
import type { FusedOps, Kernels } from "./kernels/types.js";
import { TokenSampler, type TruncationParams, validateSampling } from "./sampling.js";

/**
 * Incremental decoding of the embedded llama-style model with a KV cache, for many
 * sequences at once.
 *
 * The unit of work is a block of rows, each row one token of one sequence at its position.
 * Every weight product of a block is one `kernels.gemm` over all its rows, so a decode
 * step is one GEMM per weight matrix over all active sequences, and a prompt is prefilled
 * as a block. Attention reads each row's own cache, so rows of different sequences never
 * mix: with a kernel whose output rows depend only on their input rows (the pure-TS one),
 * a sequence's logits — and, with its own seeded stream, its samples — are bit-identical
 * whatever else is in the batch.
 *
 * Architecture (llama/GGUF convention): token embedding; per layer RMSNorm → Q, K, V →
 * RoPE on adjacent pairs (2i, 2i+1) of each head, angle pos·base^(−2i/headDim) → causal
 * attention scaled 1/√headDim → output projection → residual; RMSNorm → SwiGLU
 * down(silu(gate(x)) ⊙ up(x)) → residual; final RMSNorm; logits = h · token_embdᵀ.
 */

/**
 * Where the sampler reads weights, by llama.cpp name (see `paramSpecs`): a `ModelParams`
 * container (anything with `specs` and `tensors` in the same order), a Map, a plain record,
 * or anything with `get(name)`. Looked up at the start of every call and never copied, so
 * a learner that updates the tensors in place is seen by the next call.
 */
export type WeightSource =
  | { readonly specs: readonly { name: string }[]; readonly tensors: readonly Float32Array[] }
  | ReadonlyMap<string, Float32Array>
  | Readonly<Record<string, Float32Array>>
  | { get(name: string): Float32Array | undefined };

/** The sampling fields the sampler uses; `SamplingParams` from the policy layer fits. */
export interface SamplerSampling extends TruncationParams {
  maxTokens: number;
  /** Stop strings (added to `stopStrings` of the request). */
  stop?: readonly string[];
}

export interface SampleRequest {
  promptIds: readonly number[];
  sampling: SamplerSampling;
  /** uint32 seed of this sequence's own random stream (one uniform draw per sampled token). */
  seed: number;
  /** Sampling one of these ends the sequence; the stop token is kept in `tokenIds`/`logprobs`. */
  stopIds?: readonly number[];
  /** The sequence ends once its decoded output contains one of these; the completing token is kept. */
  stopStrings?: readonly string[];
}

export interface SampleOutput {
  /** Sampled ids, including the stop token when one ended the sequence. */
  tokenIds: number[];
  /** Log-prob of each sampled id under the distribution actually sampled (0 for greedy). */
  logprobs: number[];
  finishReason: "stop" | "length";
  /** What stopped it, when finishReason is "stop". */
  stoppedBy?: { tokenId: number } | { text: string };
  promptTokens: number;
}

export interface GenerateOptions {
  /** Needed when any request has stop strings: turns sampled ids into text. */
  decode?: (ids: readonly number[]) => string;
  /** Most prompt rows per prefill block (default 512). Long prompts split at fixed offsets. */
  prefillChunk?: number;
  /** Most sequences decoded together (default 64); more requests run in successive waves. */
  maxConcurrent?: number;
  /** KV-cache memory one wave may use (default 512 MiB); at least one sequence always runs. */
  kvCacheBytes?: number;
  /** Prefill identical prompts once and copy the cache (default true; results are identical). */
  sharePrompts?: boolean;
  /**
   * Called with each token as it is sampled (request index, token id, its log-prob), in sampling
   * order; it must not call back into this sampler. With `generateAsync` the tokens of a decode
   * step are reported before the event loop runs, so a server can stream them.
   */
  onToken?: (request: number, tokenId: number, logprob: number) => void;
  /**
   * `generateAsync` only: asked after each wave's prefill and every decode step; true ends the
   * generation there, each sequence as far as it got (a server shutting down uses it).
   */
  stop?: () => boolean;
}

/** Where the time of the last `generate` call went. */
export interface SamplerStats {
  /** Prompt tokens run through the model (shared prompts count once). */
  prefillTokens: number;
  /** Milliseconds spent prefilling (including sampling each first token). */
  prefillMs: number;
  /** Decode steps (one row per active sequence each) and the tokens they produced. */
  decodeSteps: number;
  decodeTokens: number;
  decodeMs: number;
}

/** A prompt plus the tokens to generate do not fit in the model's context. */
export class ContextLengthError extends UsageError {
  constructor(
    readonly needed: number,
    readonly limit: number,
    detail: string,
  ) {
    super(
      `${detail} needs ${needed} positions but the model's context length (model.contextLength) is ${limit}; ` +
        "shorten the prompt, lower sampling.maxTokens or use a model with a longer context",
    );
    this.name = "ContextLengthError";
  }
}

/**
 * One sequence's KV cache, head-major: K and V laid out [layer, head, position, headDim], so
 * one head's keys (or values) for positions [0, n) are one contiguous n × headDim matrix.
 */
export class KvCache {
  /** Positions filled so far. */
  length = 0;
  readonly k: Float32Array;
  readonly v: Float32Array;
  constructor(
    readonly capacity: number,
    readonly nLayers: number,
    readonly nHeads: number,
    readonly headDim: number,
  ) {
    this.k = new Float32Array(nLayers * nHeads * capacity * headDim);
    this.v = new Float32Array(nLayers * nHeads * capacity * headDim);
  }
  /** Offset of position 0 of head `h` in layer `l`. */
  base(l: number, h: number): number {
    return (l * this.nHeads + h) * this.capacity * this.headDim;
  }
  /** Copies the first `n` positions of every layer and head from `src` and sets length to n. */
  copyPrefix(src: KvCache, n: number): void {
    const span = n * this.headDim;
    for (let l = 0; l < this.nLayers; l++) {
      for (let h = 0; h < this.nHeads; h++) {
        const so = src.base(l, h);
        const to = this.base(l, h);
        this.k.set(src.k.subarray(so, so + span), to);
        this.v.set(src.v.subarray(so, so + span), to);
      }
    }
    this.length = n;
  }
}

interface LayerWeights {
  attnNorm: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  o: Float32Array;
  ffnNorm: Float32Array;
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
}

interface BoundWeights {
  embd: Float32Array;
  layers: LayerWeights[];
  outNorm: Float32Array;
}

function getter(src: WeightSource): (name: string) => Float32Array | undefined {
  const o = src as Record<string, unknown>;
  if (Array.isArray(o.specs) && Array.isArray(o.tensors)) {
    const specs = o.specs as { name: string }[];
    const tensors = o.tensors as Float32Array[];
    const byName = new Map<string, Float32Array>();
    for (let i = 0; i < specs.length; i++) byName.set(specs[i].name, tensors[i]);
    return (name) => byName.get(name);
  }
  if (src instanceof Map) return (name) => src.get(name);
  if (typeof o.get === "function")
    return (name) => (src as { get(n: string): Float32Array | undefined }).get(name);
  return (name) => o[name] as Float32Array | undefined;
}

function lookup(get: (name: string) => Float32Array | undefined, name: string, size: number): Float32Array {
  const t = get(name);
  if (!(t instanceof Float32Array)) throw new Error(`model weights: tensor "${name}" is missing`);
  if (t.length !== size)
    throw new Error(`model weights: tensor "${name}" has ${t.length} values, expected ${size}`);
  return t;
}

function bindWeights(source: WeightSource, c: ModelConfig): BoundWeights {
  const src = getter(source);
  const d = c.dModel;
  const layers: LayerWeights[] = [];
  for (let l = 0; l < c.nLayers; l++) {
    const p = `blk.${l}.`;
    layers.push({
      attnNorm: lookup(src, `${p}attn_norm.weight`, d),
      q: lookup(src, `${p}attn_q.weight`, d * d),
      k: lookup(src, `${p}attn_k.weight`, d * d),
      v: lookup(src, `${p}attn_v.weight`, d * d),
      o: lookup(src, `${p}attn_output.weight`, d * d),
      ffnNorm: lookup(src, `${p}ffn_norm.weight`, d),
      gate: lookup(src, `${p}ffn_gate.weight`, c.dFf * d),
      up: lookup(src, `${p}ffn_up.weight`, c.dFf * d),
      down: lookup(src, `${p}ffn_down.weight`, d * c.dFf),
    });
  }
  return {
    embd: lookup(src, "token_embd.weight", c.vocabSize * d),
    layers,
    outNorm: lookup(src, "output_norm.weight", d),
  };
}

/** Per-request state inside one `generate` call. */
interface SeqState {
  /** Position of the request in the call. */
  index: number;
  req: SampleRequest;
  cache: KvCache;
  rng: Rng;
  out: SampleOutput;
  stopIds: ReadonlySet<number> | null;
  stopStrings: readonly string[];
  /** Tokens of decoded tail to check for stop strings. */
  stopWindow: number;
  maxTokens: number;
  done: boolean;
}

/**
 * The incremental forward pass and the batched generation loop. Holds preallocated
 * work buffers (grown only when a bigger block than before arrives) and a pool of KV
 * caches, so repeated calls and decode steps allocate nothing per token.
 */
export class Sampler {
  readonly config: ModelConfig;
  readonly kernels: Kernels;
  private readonly headDim: number;
  /** cos/sin of pos·base^(−2i/headDim), [contextLength, headDim/2]. */
  private readonly ropeCos: Float64Array;
  private readonly ropeSin: Float64Array;
  private readonly tokenSampler: TokenSampler;

  // Row descriptors of the block being run.
  private rowCache: KvCache[] = [];
  private rowPos = new Int32Array(0);
  private rowTok = new Int32Array(0);
  /** Output row in `logits` for each row, or -1. */
  private rowLogit = new Int32Array(0);
  private rowCap = 0;

  // Activations [rows, width].
  private x = new Float32Array(0);
  private xn = new Float32Array(0);
  private q = new Float32Array(0);
  private k = new Float32Array(0);
  private v = new Float32Array(0);
  private att = new Float32Array(0);
  private proj = new Float32Array(0);
  private gate = new Float32Array(0);
  private up = new Float32Array(0);
  /** Scratch of the kernel set's fused SwiGLU and RMSNorm (sigmoids, inverse RMS). */
  private sig = new Float32Array(0);
  private rstd = new Float32Array(0);
  private scores = new Float32Array(0);
  /** One head's attention output, accumulated in float64. */
  private readonly headAcc: Float64Array;
  private gathered = new Float32Array(0);
  /** Logits of the rows that asked for them, [n, vocabSize]. */
  logits = new Float32Array(0);

  /** Timings of the last `generate` call. */
  stats: SamplerStats = { prefillTokens: 0, prefillMs: 0, decodeSteps: 0, decodeTokens: 0, decodeMs: 0 };
  private weights: BoundWeights | null = null;
  private pool: KvCache[] = [];

  /**
   * Whether a single decode row attends in plain TypeScript loops (default for the "js"
   * kernel) or through two GEMM calls per head (other kernels, which have SIMD).
   */
  readonly inlineDecodeAttention: boolean;

  constructor(config: ModelConfig, kernels: Kernels, opts: { inlineDecodeAttention?: boolean } = {}) {
    this.config = config;
    this.kernels = kernels;
    this.inlineDecodeAttention = opts.inlineDecodeAttention ?? kernels.name === "js";
    this.headDim = config.dModel / config.nHeads;
    const half = this.headDim / 2;
    this.ropeCos = new Float64Array(config.contextLength * half);
    this.ropeSin = new Float64Array(config.contextLength * half);
    for (let pos = 0; pos < config.contextLength; pos++) {
      for (let i = 0; i < half; i++) {
        const angle = pos * config.ropeBase ** ((-2 * i) / this.headDim);
        this.ropeCos[pos * half + i] = Math.cos(angle);
        this.ropeSin[pos * half + i] = Math.sin(angle);
      }
    }
    this.tokenSampler = new TokenSampler(config.vocabSize);
    this.headAcc = new Float64Array(this.headDim);
  }

  /** Resolves the weight tensors for the following forward calls. */
  bind(params: WeightSource): void {
    this.weights = bindWeights(params, this.config);
  }

  /** A KV cache for `capacity` positions (≤ contextLength), from the pool when possible. */
  newCache(capacity: number): KvCache {
    if (capacity > this.config.contextLength)
      throw new ContextLengthError(capacity, this.config.contextLength, "a KV cache");
    let best = -1;
    for (let i = 0; i < this.pool.length; i++) {
      const c = this.pool[i];
      if (c.capacity >= capacity && (best < 0 || c.capacity < this.pool[best].capacity)) best = i;
    }
    if (best >= 0) {
      const c = this.pool[best];
      this.pool[best] = this.pool[this.pool.length - 1];
      this.pool.pop();
      c.length = 0;
      return c;
    }
    return new KvCache(capacity, this.config.nLayers, this.config.nHeads, this.headDim);
  }

  /** Returns a cache to the pool (keeps at most 256 caches). */
  releaseCache(c: KvCache): void {
    if (this.pool.length < 256) this.pool.push(c);
  }

  /** Frees pooled caches. */
  clearPool(): void {
    this.pool = [];
  }

  /**
   * Appends `tokens` to each cache (a block: one GEMM per weight over all of them) and
   * returns the logits of every appended position, [Σ tokens, vocabSize] in item order, in
   * `this.logits` (overwritten by the next call). For tests and scoring; `generate` uses
   * the same forward without materialising unneeded logits.
   */
  append(
    params: WeightSource,
    items: readonly { cache: KvCache; tokens: readonly number[] }[],
  ): Float32Array {
    this.bind(params);
    let n = 0;
    for (const it of items) n += it.tokens.length;
    this.ensureRows(n);
    let r = 0;
    const seen = new Set<KvCache>();
    for (const it of items) {
      if (seen.has(it.cache)) throw new Error("Sampler.append: the same KV cache appears twice in one call");
      seen.add(it.cache);
      if (it.cache.length + it.tokens.length > it.cache.capacity)
        throw new ContextLengthError(
          it.cache.length + it.tokens.length,
          Math.min(it.cache.capacity, this.config.contextLength),
          "appending to a KV cache",
        );
      for (let i = 0; i < it.tokens.length; i++) {
        this.rowCache[r] = it.cache;
        this.rowPos[r] = it.cache.length + i;
        this.rowTok[r] = it.tokens[i];
        this.rowLogit[r] = r;
        r++;
      }
    }
    this.forward(n, n);
    for (const it of items) it.cache.length += it.tokens.length;
    return this.logits;
  }

  /**
   * Samples continuations for all requests together. Results are in request order and do
   * not depend on which other requests share the call.
   */
  generate(
    params: WeightSource,
    requests: readonly SampleRequest[],
    options: GenerateOptions = {},
  ): SampleOutput[] {
    const seqs = this.begin(params, requests, options);
    try {
      for (const wave of this.waves(seqs, options)) {
        try {
          const active = this.prefillWave(wave, options);
          let n = active.length;
          while (n > 0) n = this.decodeStep(active, n, options);
        } finally {
          this.endWave(wave);
        }
      }
      return seqs.map((s) => s.out);
    } finally {
      this.busy = false;
    }
  }

  /**
   * `generate`, giving the event loop a turn after the prefill of each wave and after every decode
   * step (so `onToken` output can be sent while sampling goes on). Same results as `generate`.
   * One call at a time per sampler: the work buffers are shared.
   */
  async generateAsync(
    params: WeightSource,
    requests: readonly SampleRequest[],
    options: GenerateOptions = {},
  ): Promise<SampleOutput[]> {
    const seqs = this.begin(params, requests, options);
    const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
    try {
      const stopped = () => options.stop?.() === true;
      for (const wave of this.waves(seqs, options)) {
        if (stopped()) break;
        try {
          const active = this.prefillWave(wave, options);
          let n = active.length;
          await turn();
          while (n > 0 && !stopped()) {
            n = this.decodeStep(active, n, options);
            await turn();
          }
        } finally {
          this.endWave(wave);
        }
      }
      return seqs.map((s) => s.out);
    } finally {
      this.busy = false;
    }
  }

  private busy = false;

  /** Validates the requests and claims the work buffers (one generation at a time). */
  private begin(
    params: WeightSource,
    requests: readonly SampleRequest[],
    options: GenerateOptions,
  ): SeqState[] {
    if (this.busy)
      throw new Error("this Sampler is already generating (generateAsync in flight); use one per caller");
    const seqs = requests.map((req, i) => this.prepare(req, i, options));
    this.bind(params);
    this.stats = { prefillTokens: 0, prefillMs: 0, decodeSteps: 0, decodeTokens: 0, decodeMs: 0 };
    this.busy = true;
    return seqs;
  }

  /** Successive waves: as many sequences as fit the concurrency and memory limits. */
  private waves(seqs: SeqState[], options: GenerateOptions): SeqState[][] {
    const c = this.config;
    const maxConcurrent = options.maxConcurrent ?? 64;
    const budget = options.kvCacheBytes ?? 512 * 1024 * 1024;
    const perPos = 2 * c.nLayers * c.dModel * 4;
    const out: SeqState[][] = [];
    let next = 0;
    while (next < seqs.length) {
      const wave: SeqState[] = [];
      let bytes = 0;
      while (next < seqs.length && wave.length < maxConcurrent) {
        const s = seqs[next];
        const b = (s.req.promptIds.length + s.maxTokens) * perPos;
        if (wave.length > 0 && bytes + b > budget) break;
        bytes += b;
        wave.push(s);
        next++;
      }
      out.push(wave);
    }
    return out;
  }

  private prepare(req: SampleRequest, index: number, options: GenerateOptions): SeqState {
    const c = this.config;
    const where = `requests[${index}]`;
    validateSampling(req.sampling, `${where}.sampling`);
    const prompt = req.promptIds;
    if (prompt.length === 0)
      throw new UsageError(`${where}.promptIds is empty; a prompt needs at least one token`);
    for (const t of prompt)
      if (!Number.isInteger(t) || t < 0 || t >= c.vocabSize)
        throw new UsageError(`${where}.promptIds contains ${t}, not a token id in [0, ${c.vocabSize})`);
    if (!Number.isInteger(req.seed))
      throw new UsageError(`${where}.seed must be an integer, got ${req.seed}`);
    const maxTokens = req.sampling.maxTokens;
    if (prompt.length + maxTokens > c.contextLength)
      throw new ContextLengthError(
        prompt.length + maxTokens,
        c.contextLength,
        `${where}: a prompt of ${prompt.length} tokens plus sampling.maxTokens ${maxTokens}`,
      );
    const stopStrings = [...(req.stopStrings ?? []), ...(req.sampling.stop ?? [])].filter(
      (s) => s.length > 0,
    );
    if (stopStrings.length > 0 && !options.decode)
      throw new UsageError(`${where} has stop strings but generate() was given no decode function`);
    const longest = stopStrings.reduce((m, s) => Math.max(m, s.length), 0);
    return {
      index,
      req,
      cache: null as unknown as KvCache,
      rng: Rng.seeded(req.seed >>> 0).derive("sampler"),
      out: { tokenIds: [], logprobs: [], finishReason: "length", promptTokens: prompt.length },
      stopIds: req.stopIds && req.stopIds.length > 0 ? new Set(req.stopIds) : null,
      stopStrings,
      // A UTF-8 character is at most 4 bytes and every ordinary token decodes to ≥ 1 byte.
      stopWindow: 4 * longest + 8,
      maxTokens,
      done: maxTokens === 0,
    };
  }

  /** Gives the wave its caches, prefills the prompts and samples each first token; returns the sequences still going. */
  private prefillWave(wave: SeqState[], options: GenerateOptions): SeqState[] {
    const chunk = Math.max(1, options.prefillChunk ?? 512);
    const share = options.sharePrompts ?? true;
    for (const s of wave) s.cache = this.newCache(s.req.promptIds.length + s.maxTokens);
    // Leaders prefill; followers (identical prompt) copy the leader's cache and logits.
    const followers = new Map<SeqState, SeqState[]>();
    const leaders: SeqState[] = [];
    const byPrompt = new Map<string, SeqState>();
    for (const s of wave) {
      if (s.done) continue;
      if (share) {
        const key = s.req.promptIds.join(",");
        const lead = byPrompt.get(key);
        if (lead) {
          followers.get(lead)!.push(s);
          continue;
        }
        byPrompt.set(key, s);
      }
      leaders.push(s);
      followers.set(s, []);
    }
    // Prefill blocks: whole prompts packed up to `chunk` rows; a longer prompt is split at
    // multiples of `chunk` from its own start, so its block structure never depends on others.
    type Piece = { s: SeqState; from: number; to: number };
    let block: Piece[] = [];
    let rows = 0;
    const flush = (): void => {
      if (block.length === 0) return;
      this.ensureRows(rows);
      let r = 0;
      let nl = 0;
      for (const pc of block) {
        const ids = pc.s.req.promptIds;
        for (let i = pc.from; i < pc.to; i++) {
          this.rowCache[r] = pc.s.cache;
          this.rowPos[r] = i;
          this.rowTok[r] = ids[i];
          this.rowLogit[r] = i === ids.length - 1 ? nl++ : -1;
          r++;
        }
      }
      this.forward(rows, nl);
      let li = 0;
      for (const pc of block) {
        pc.s.cache.length = pc.to;
        if (pc.to !== pc.s.req.promptIds.length) continue;
        const off = li++ * this.config.vocabSize;
        for (const f of followers.get(pc.s)!) {
          f.cache.copyPrefix(pc.s.cache, pc.to);
          this.sampleInto(f, off, options);
        }
        this.sampleInto(pc.s, off, options);
      }
      block = [];
      rows = 0;
    };
    const t0 = performance.now();
    for (const s of leaders) {
      const len = s.req.promptIds.length;
      this.stats.prefillTokens += len;
      for (let from = 0; from < len; from += chunk) {
        const to = Math.min(len, from + chunk);
        if (rows + (to - from) > chunk) flush();
        block.push({ s, from, to });
        rows += to - from;
      }
    }
    flush();
    this.stats.prefillMs += performance.now() - t0;
    const active = wave.filter((s) => !s.done);
    this.ensureRows(active.length);
    return active;
  }

  /** One decode step: one row per sequence in `active[0, n)`; returns how many are still going (compacted to the front). */
  private decodeStep(active: SeqState[], n: number, options: GenerateOptions): number {
    const t1 = performance.now();
    for (let r = 0; r < n; r++) {
      const s = active[r];
      const ids = s.out.tokenIds;
      this.rowCache[r] = s.cache;
      this.rowPos[r] = s.cache.length;
      this.rowTok[r] = ids[ids.length - 1];
      this.rowLogit[r] = r;
    }
    this.forward(n, n);
    this.stats.decodeSteps++;
    this.stats.decodeTokens += n;
    let w = 0;
    for (let r = 0; r < n; r++) {
      const s = active[r];
      s.cache.length++;
      this.sampleInto(s, r * this.config.vocabSize, options);
      if (!s.done) active[w++] = s;
    }
    this.stats.decodeMs += performance.now() - t1;
    return w;
  }

  private endWave(wave: SeqState[]): void {
    for (const s of wave) {
      if (s.cache) this.releaseCache(s.cache);
      s.cache = null as unknown as KvCache;
    }
  }

  /** Samples the next token of `s` from `this.logits[off ..]`, records it and checks the stops. */
  private sampleInto(s: SeqState, off: number, options: GenerateOptions): void {
    const u = s.rng.float();
    const id = this.tokenSampler.sample(this.logits, off, s.req.sampling, u);
    const out = s.out;
    out.tokenIds.push(id);
    out.logprobs.push(this.tokenSampler.logprob);
    options.onToken?.(s.index, id, this.tokenSampler.logprob);
    if (s.stopIds?.has(id)) {
      out.finishReason = "stop";
      out.stoppedBy = { tokenId: id };
      s.done = true;
      return;
    }
    if (s.stopStrings.length > 0) {
      const ids = out.tokenIds;
      const tail = options.decode!(ids.length <= s.stopWindow ? ids : ids.slice(ids.length - s.stopWindow));
      for (const stop of s.stopStrings) {
        if (tail.includes(stop)) {
          out.finishReason = "stop";
          out.stoppedBy = { text: stop };
          s.done = true;
          return;
        }
      }
    }
    if (out.tokenIds.length >= s.maxTokens) s.done = true;
  }

  private ensureRows(n: number): void {
    if (n <= this.rowCap) return;
    const c = this.config;
    const cap = Math.max(n, this.rowCap * 2, 16);
    this.rowCap = cap;
    this.rowCache = new Array(cap);
    this.rowPos = new Int32Array(cap);
    this.rowTok = new Int32Array(cap);
    this.rowLogit = new Int32Array(cap);
    const d = c.dModel;
    this.x = new Float32Array(cap * d);
    this.xn = new Float32Array(cap * d);
    this.q = new Float32Array(cap * d);
    this.k = new Float32Array(cap * d);
    this.v = new Float32Array(cap * d);
    this.att = new Float32Array(cap * d);
    this.proj = new Float32Array(cap * d);
    this.gate = new Float32Array(cap * c.dFf);
    this.up = new Float32Array(cap * c.dFf);
    this.sig = new Float32Array(cap * c.dFf);
    this.rstd = new Float32Array(cap);
    this.gathered = new Float32Array(cap * d);
    this.logits = new Float32Array(cap * c.vocabSize);
  }

  /** y[n, out] = x[n, in] · Wᵀ with W stored [out, in]. */
  private linear(
    n: number,
    x: Float32Array,
    w: Float32Array,
    inDim: number,
    outDim: number,
    y: Float32Array,
  ): void {
    this.kernels.gemm(false, true, n, outDim, inDim, 1, x, 0, inDim, w, 0, inDim, 0, y, 0, outDim);
  }

  private rmsNorm(n: number, x: Float32Array, w: Float32Array, y: Float32Array, yRow?: Int32Array): void {
    const d = this.config.dModel;
    const eps = this.config.normEps;
    const ops = this.kernels.ops;
    if (ops && !yRow) {
      ops.rmsNormForward(x, w, y, this.rstd, n, d, eps);
      return;
    }
    for (let r = 0; r < n; r++) {
      const dst = yRow ? yRow[r] : r;
      if (dst < 0) continue;
      const xo = r * d;
      const yo = dst * d;
      let ss = 0;
      for (let i = 0; i < d; i++) ss += x[xo + i] * x[xo + i];
      const inv = 1 / Math.sqrt(ss / d + eps);
      for (let i = 0; i < d; i++) y[yo + i] = x[xo + i] * inv * w[i];
    }
  }

  /**
   * Runs rows [0, n) described by rowCache/rowPos/rowTok through the model, writing each
   * row's K and V into its cache, and the logits of rows with rowLogit ≥ 0 into
   * `this.logits[rowLogit]`. `nLogits` is the number of such rows.
   */
  private forward(n: number, nLogits: number): void {
    const c = this.config;
    const W = this.weights!;
    const d = c.dModel;
    const hd = this.headDim;
    const half = hd / 2;
    const { x, xn, q, k, v, att, proj, gate, up } = this;
    for (let r = 0; r < n; r++) {
      const t = this.rowTok[r];
      if (!(t >= 0 && t < c.vocabSize)) throw new UsageError(`token id ${t} is outside [0, ${c.vocabSize})`);
      const pos = this.rowPos[r];
      if (pos >= c.contextLength) throw new ContextLengthError(pos + 1, c.contextLength, "a sequence");
      const eo = t * d;
      const xo = r * d;
      for (let i = 0; i < d; i++) x[xo + i] = W.embd[eo + i];
    }
    const scale = 1 / Math.sqrt(hd);
    for (let l = 0; l < c.nLayers; l++) {
      const L = W.layers[l];
      this.rmsNorm(n, x, L.attnNorm, xn);
      this.linear(n, xn, L.q, d, d, q);
      this.linear(n, xn, L.k, d, d, k);
      this.linear(n, xn, L.v, d, d, v);
      // RoPE on q and k, then store k and v in the caches.
      for (let r = 0; r < n; r++) {
        const pos = this.rowPos[r];
        const ro = pos * half;
        for (let h = 0; h < c.nHeads; h++) {
          const base = r * d + h * hd;
          for (let i = 0; i < half; i++) {
            const cs = this.ropeCos[ro + i];
            const sn = this.ropeSin[ro + i];
            const a = base + 2 * i;
            const q0 = q[a];
            const q1 = q[a + 1];
            q[a] = q0 * cs - q1 * sn;
            q[a + 1] = q0 * sn + q1 * cs;
            const k0 = k[a];
            const k1 = k[a + 1];
            k[a] = k0 * cs - k1 * sn;
            k[a + 1] = k0 * sn + k1 * cs;
          }
        }
        const cache = this.rowCache[r];
        const ck = cache.k;
        const cv = cache.v;
        for (let h = 0; h < c.nHeads; h++) {
          const co = cache.base(l, h) + pos * hd;
          const ro2 = r * d + h * hd;
          for (let i = 0; i < hd; i++) {
            ck[co + i] = k[ro2 + i];
            cv[co + i] = v[ro2 + i];
          }
        }
      }
      // Causal attention per segment (consecutive rows of one cache at consecutive positions).
      let r0 = 0;
      while (r0 < n) {
        const cache = this.rowCache[r0];
        let m = 1;
        while (r0 + m < n && this.rowCache[r0 + m] === cache && this.rowPos[r0 + m] === this.rowPos[r0] + m)
          m++;
        if (m === 1 && this.kernels.ops) this.attendOneFused(r0, cache, l, scale, this.kernels.ops);
        else if (m === 1 && this.inlineDecodeAttention) this.attendOne(r0, cache, l, scale);
        else this.attendBlock(r0, m, cache, l, scale);
        r0 += m;
      }
      this.linear(n, att, L.o, d, d, proj);
      for (let i = 0, e = n * d; i < e; i++) x[i] += proj[i];
      // SwiGLU MLP.
      this.rmsNorm(n, x, L.ffnNorm, xn);
      this.linear(n, xn, L.gate, d, c.dFf, gate);
      this.linear(n, xn, L.up, d, c.dFf, up);
      if (this.kernels.ops) this.kernels.ops.swigluForward(gate, up, this.sig, gate, n * c.dFf);
      else
        for (let i = 0, e = n * c.dFf; i < e; i++) {
          const g = gate[i];
          gate[i] = (g / (1 + Math.exp(-g))) * up[i];
        }
      this.linear(n, gate, L.down, c.dFf, d, proj);
      for (let i = 0, e = n * d; i < e; i++) x[i] += proj[i];
    }
    if (nLogits > 0) {
      // Final norm only for rows that want logits, gathered contiguously, then the tied head.
      this.rmsNorm(n, x, W.outNorm, this.gathered, this.rowLogit);
      this.kernels.gemm(
        false,
        true,
        nLogits,
        c.vocabSize,
        d,
        1,
        this.gathered,
        0,
        d,
        W.embd,
        0,
        d,
        0,
        this.logits,
        0,
        c.vocabSize,
      );
    }
  }

  private ensureScores(size: number): Float32Array {
    if (this.scores.length < size) this.scores = new Float32Array(Math.max(size, this.scores.length * 2));
    return this.scores;
  }

  /**
   * Attention of one row against its cache positions [0, pos] in the kernel set's fused op (one
   * native call for all heads, instead of two tiny GEMMs per head whose call overhead dominates).
   */
  private attendOneFused(r: number, cache: KvCache, l: number, scale: number, ops: FusedOps): void {
    const c = this.config;
    const len = this.rowPos[r] + 1;
    const hd = this.headDim;
    const s = this.ensureScores(len);
    const d = c.dModel;
    ops.attendDecode(
      this.q,
      r * d,
      cache.k,
      cache.v,
      cache.base(l, 0),
      cache.capacity * hd,
      len,
      c.nHeads,
      hd,
      scale,
      this.att,
      r * d,
      s,
    );
  }

  /**
   * Attention of one row against its cache positions [0, pos] in plain loops: for the
   * pure-TS kernel, where a kernel call per head would only add overhead.
   */
  private attendOne(r: number, cache: KvCache, l: number, scale: number): void {
    const d = this.config.dModel;
    const hd = this.headDim;
    const len = this.rowPos[r] + 1;
    const s = this.ensureScores(len);
    const acc = this.headAcc;
    const q = this.q;
    const att = this.att;
    const K = cache.k;
    const V = cache.v;
    const hd4 = hd & ~3;
    for (let h = 0; h < this.config.nHeads; h++) {
      const qo = r * d + h * hd;
      const base = cache.base(l, h);
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0, ko = base; j < len; j++, ko += hd) {
        let d0 = 0;
        let d1 = 0;
        let d2 = 0;
        let d3 = 0;
        let i = 0;
        for (; i < hd4; i += 4) {
          d0 += q[qo + i] * K[ko + i];
          d1 += q[qo + i + 1] * K[ko + i + 1];
          d2 += q[qo + i + 2] * K[ko + i + 2];
          d3 += q[qo + i + 3] * K[ko + i + 3];
        }
        for (; i < hd; i++) d0 += q[qo + i] * K[ko + i];
        const sc = (d0 + d1 + (d2 + d3)) * scale;
        s[j] = sc;
        if (sc > max) max = sc;
      }
      let sum = 0;
      for (let j = 0; j < len; j++) {
        const e = Math.exp(s[j] - max);
        s[j] = e;
        sum += e;
      }
      acc.fill(0);
      for (let j = 0, vo = base; j < len; j++, vo += hd) {
        const p = s[j];
        for (let i = 0; i < hd; i++) acc[i] += p * V[vo + i];
      }
      const inv = 1 / sum;
      for (let i = 0; i < hd; i++) att[qo + i] = acc[i] * inv;
    }
  }

  /**
   * Attention of rows [r0, r0 + m) at consecutive positions of one cache: per head, scores
   * = scale · Q·Kᵀ and output = softmax · V as two GEMMs (m = 1 for a decode row).
   */
  private attendBlock(r0: number, m: number, cache: KvCache, l: number, scale: number): void {
    const d = this.config.dModel;
    const hd = this.headDim;
    const p0 = this.rowPos[r0];
    const len = p0 + m;
    const s = this.ensureScores(m * len);
    for (let h = 0; h < this.config.nHeads; h++) {
      const base = cache.base(l, h);
      // scores[i, j] = scale · q_i · k_j for j < len
      this.kernels.gemm(
        false,
        true,
        m,
        len,
        hd,
        scale,
        this.q,
        r0 * d + h * hd,
        d,
        cache.k,
        base,
        hd,
        0,
        s,
        0,
        len,
      );
      if (this.kernels.ops?.causalSoftmax) this.kernels.ops.causalSoftmax(s, m, len, p0 + 1);
      else
        for (let i = 0; i < m; i++) {
          const so = i * len;
          const visible = p0 + i + 1;
          let max = Number.NEGATIVE_INFINITY;
          for (let j = 0; j < visible; j++) if (s[so + j] > max) max = s[so + j];
          let sum = 0;
          for (let j = 0; j < visible; j++) {
            const e = Math.exp(s[so + j] - max);
            s[so + j] = e;
            sum += e;
          }
          const inv = 1 / sum;
          for (let j = 0; j < visible; j++) s[so + j] *= inv;
          s.fill(0, so + visible, so + len);
        }
      // att[i, head] = Σ_j p[i, j] · v_j
      this.kernels.gemm(
        false,
        false,
        m,
        hd,
        len,
        1,
        s,
        0,
        len,
        cache.v,
        base,
        hd,
        0,
        this.att,
        r0 * d + h * hd,
        d,
      );
    }
  }
}

/** One-shot convenience: a fresh `Sampler` for this call (reuse a `Sampler` to keep its buffers). */
export function generate(
  params: WeightSource,
  config: ModelConfig,
  kernels: Kernels,
  requests: readonly SampleRequest[],
  options: GenerateOptions = {},
): SampleOutput[] {
  return new Sampler(config, kernels).generate(params, requests, options);
}

/**
 * Random weights for tests and benchmarks, by llama.cpp name: matrices N(0, std²) with
 * std = `scale`/√fan_in (default scale 1), norm weights 1 ± 0.1, embeddings N(0, embeddingStd²)
 * (default 1). Not a training init (see `initParams` for that).
 */
export function randomWeights(
  config: ModelConfig,
  seed: number,
  opts: { scale?: number; embeddingStd?: number } = {},
): Map<string, Float32Array> {
  const scale = opts.scale ?? 1;
  const embStd = opts.embeddingStd ?? 1;
  const rng = Rng.seeded(seed).derive("random-weights");
  const out = new Map<string, Float32Array>();
  for (const spec of paramSpecs(config)) {
    const size = spec.shape.reduce((a, b) => a * b, 1);
    const t = new Float32Array(size);
    const r = rng.derive(spec.name);
    if (spec.shape.length === 1) for (let i = 0; i < size; i++) t[i] = 1 + 0.1 * (2 * r.float() - 1);
    else {
      const std = spec.name === "token_embd.weight" ? embStd : scale / Math.sqrt(spec.shape[1]);
      for (let i = 0; i < size; i++) t[i] = std * r.normal();
    }
    out.set(spec.name, t);
  }
  return out;
}
