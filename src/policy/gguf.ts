/**
 * A `Policy` over a local GGUF file through node-llama-cpp (llama.cpp bindings with prebuilt
 * CPU/CUDA/Vulkan binaries). node-llama-cpp is an OPTIONAL dependency: it is imported
 * dynamically, and asking for a GGUF policy without it throws a UsageError saying how to add it.
 *
 * Settings (see `GgufPolicyOptions`): threads default 1 (llama.cpp decodes 4–6× slower with 2
 * threads on 2-core machines), no GPU unless asked, and — by default — an F32 KV cache with
 * flash attention off, the settings under which llama.cpp's log-probs match the embedded model's
 * float32 forward to ~1e-5 (the default F16 cache with flash attention is off by ~1e-2).
 *
 * Prompts:
 * - "mage" (chosen automatically when the file's `tokenizer.chat_template` is mage's, i.e. an
 *   exported mage model): the mage chat template `<|bos|>(<|role|>content<|end|>)*<|assistant|>`
 *   built from token ids, each message's content tokenized on its own with special-token text
 *   kept literal, and assistant `tokenIds` used verbatim — exactly `renderChat` of the embedded
 *   model, so transcripts score the sampled tokens.
 * - "template": the model's own chat template through node-llama-cpp's chat wrappers (Jinja from
 *   the GGUF or a built-in wrapper). Assistant `tokenIds` cannot be honoured there (text is used).
 *
 * Generation: each request runs on its own context sequence (up to `sequences` at once, which
 * node-llama-cpp evaluates together in one batch), seeded with the request's seed. Sampling is
 * llama.cpp's chain (top-k → top-p → temperature → draw; min-p off), so with temperature ≠ 1 and
 * top-p < 1 the distribution differs from the embedded sampler's (temperature first); at
 * temperature 1, or without truncation, both sample the same distribution. The reported
 * log-prob of each token is log(p) under the distribution llama.cpp actually sampled from
 * (0 for greedy, temperature 0), as `Generation.logprobs` asks. An end-of-generation token
 * (`<|end|>`, EOS, EOT...) ends the sequence and is kept in `tokenIds` (its text is empty);
 * stop strings are kept in `text`.
 */
import { basename } from "node:path";
import { UsageError } from "../core/errors.js";
import { CHAT_TEMPLATE_JINJA } from "../model/chat-template.js";
import type { ChatMessage, GenerateRequest, Generation, Policy } from "./types.js";

export const NODE_LLAMA_CPP_VERSION = "3.22.1";

export const NODE_LLAMA_CPP_HELP =
  `GGUF policies need the optional dependency node-llama-cpp, which is not installed; add it with ` +
  `\`npm install node-llama-cpp@${NODE_LLAMA_CPP_VERSION}\` (or \`npm install node-llama-cpp\`; ` +
  "it ships prebuilt llama.cpp binaries and downloads nothing else), or use an embedded checkpoint " +
  "(checkpoint:DIR) or an OpenAI-compatible server (openai:URL#MODEL) instead";

// ---- the slice of node-llama-cpp's API used here (kept structural so mage compiles without it) ----

export type LlamaGpu = false | "auto" | "cuda" | "vulkan" | "metal";

interface NlcEvalOutput {
  token: number;
  confidence?: number;
}

interface NlcControlledOutput {
  next?: { token?: number | null; logits?: Map<number, number>; totalLogitWeight?: number };
}

export interface NlcSequence {
  readonly contextSize: number;
  clearHistory(): Promise<void>;
  evaluateWithMetadata(
    tokens: number[],
    metadata: { confidence: true },
    options: Record<string, unknown>,
  ): AsyncGenerator<NlcEvalOutput, void, unknown>;
  controlledEvaluate(input: unknown[]): Promise<Array<NlcControlledOutput | undefined>>;
  dispose(): void;
}

export interface NlcContext {
  readonly contextSize: number;
  getSequence(): NlcSequence;
  dispose(): Promise<void>;
}

export interface NlcModel {
  readonly tokenizer: unknown;
  readonly trainContextSize: number;
  readonly fileInfo: { metadata?: { tokenizer?: { chat_template?: unknown } } };
  tokenize(text: string, specialTokens?: boolean): number[];
  detokenize(tokens: readonly number[], specialTokens?: boolean): string;
  isEogToken(token: number | undefined): boolean;
  createContext(options: Record<string, unknown>): Promise<NlcContext>;
  dispose(): Promise<void>;
}

export interface NlcLlama {
  loadModel(options: Record<string, unknown>): Promise<NlcModel>;
  dispose(): Promise<void>;
}

interface NlcLlamaText {
  tokenize(tokenizer: unknown): number[];
  toJSON(): unknown;
}

interface NlcChatWrapper {
  generateContextState(options: { chatHistory: unknown[] }): {
    contextText: NlcLlamaText;
    stopGenerationTriggers: NlcLlamaText[];
  };
}

export interface NodeLlamaCpp {
  getLlama(options: Record<string, unknown>): Promise<NlcLlama>;
  resolveChatWrapper(model: NlcModel): NlcChatWrapper | null;
}

export type ModuleImporter = (specifier: string) => Promise<unknown>;

const defaultImporter: ModuleImporter = (specifier) => import(specifier);

function isMissingModule(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return (
    (e?.code === "ERR_MODULE_NOT_FOUND" || e?.code === "MODULE_NOT_FOUND") &&
    String(e.message ?? "").includes("node-llama-cpp")
  );
}

/**
 * Imports node-llama-cpp. Throws a UsageError explaining how to install it when it is absent;
 * other failures (a broken install) are rethrown with that advice appended.
 */
export async function loadNodeLlamaCpp(importer: ModuleImporter = defaultImporter): Promise<NodeLlamaCpp> {
  let mod: unknown;
  try {
    mod = await importer("node-llama-cpp");
  } catch (err) {
    if (isMissingModule(err)) throw new UsageError(NODE_LLAMA_CPP_HELP);
    const why = err instanceof Error ? err.message : String(err);
    throw new UsageError(
      `node-llama-cpp failed to load (${why}); reinstall it with ${NODE_LLAMA_CPP_HELP.slice(NODE_LLAMA_CPP_HELP.indexOf("`npm"))}`,
    );
  }
  const m = mod as Partial<NodeLlamaCpp>;
  if (typeof m.getLlama !== "function" || typeof m.resolveChatWrapper !== "function")
    throw new UsageError(
      `the installed node-llama-cpp does not export getLlama/resolveChatWrapper; install version ${NODE_LLAMA_CPP_VERSION}`,
    );
  return m as NodeLlamaCpp;
}

/** True when node-llama-cpp can be imported here. */
export async function nodeLlamaCppAvailable(importer: ModuleImporter = defaultImporter): Promise<boolean> {
  try {
    await loadNodeLlamaCpp(importer);
    return true;
  } catch {
    return false;
  }
}

// ---- the policy -------------------------------------------------------------------------------

export const GGUF_PROMPT_MODES = ["auto", "mage", "template"] as const;
export type GgufPromptMode = (typeof GGUF_PROMPT_MODES)[number];

export interface GgufPolicyOptions {
  /** The .gguf file. */
  path: string;
  /** Positions per sequence (prompt + generated). Default: the model's training context, at most 4096. */
  contextSize?: number;
  /** CPU threads for evaluation (default 1). */
  threads?: number;
  /** GPU backend (default false: CPU only; "auto" lets node-llama-cpp pick). */
  gpu?: LlamaGpu;
  /** Sequences evaluated together (default 8): the most requests in flight at once. */
  sequences?: number;
  /** Tokens per evaluation batch (default: node-llama-cpp's, 512 or the context size). */
  batchSize?: number;
  /**
   * F32 KV cache and no flash attention, for log-probs that match a float32 reference
   * (default true). False uses node-llama-cpp's defaults (F16 cache, flash attention when supported).
   */
  exactLogprobs?: boolean;
  /** How messages become prompt tokens (default "auto": "mage" for exported mage models, else "template"). */
  prompt?: GgufPromptMode;
  /** Policy name (default `gguf:FILE`). */
  name?: string;
  /** llama.cpp log level (default "error"). */
  logLevel?: "disabled" | "fatal" | "error" | "warn" | "info" | "log" | "debug";
  /** Loads node-llama-cpp (tests inject a failing importer). */
  importer?: ModuleImporter;
}

interface MageTokens {
  bos: number;
  end: number;
  roles: Record<ChatMessage["role"], number>;
}

function positiveInt(field: string, v: number | undefined, fallback: number): number {
  const x = v ?? fallback;
  if (!Number.isInteger(x) || x < 1) throw new UsageError(`${field} must be a positive integer, got ${v}`);
  return x;
}

/** Waiters for free sequences, first come first served. */
class SequencePool {
  private readonly free: NlcSequence[];
  private readonly waiting: ((s: NlcSequence) => void)[] = [];
  constructor(readonly all: NlcSequence[]) {
    this.free = [...all];
  }
  acquire(): Promise<NlcSequence> {
    const s = this.free.pop();
    if (s) return Promise.resolve(s);
    return new Promise((resolve) => this.waiting.push(resolve));
  }
  release(s: NlcSequence): void {
    const w = this.waiting.shift();
    if (w) w(s);
    else this.free.push(s);
  }
}

/** A Policy generating with a GGUF model through node-llama-cpp. Create with `GgufPolicy.load`. */
export class GgufPolicy implements Policy {
  readonly name: string;
  /** Positions each sequence holds (prompt + generated tokens). */
  readonly contextSize: number;
  /** How this policy turns messages into tokens. */
  readonly promptMode: "mage" | "template";
  private closed = false;

  private constructor(
    readonly path: string,
    private readonly llama: NlcLlama,
    private readonly model: NlcModel,
    private readonly context: NlcContext,
    private readonly pool: SequencePool,
    private readonly nlc: NodeLlamaCpp,
    promptMode: "mage" | "template",
    private readonly mageTokens: MageTokens | null,
    name: string,
  ) {
    this.name = name;
    this.promptMode = promptMode;
    this.contextSize = pool.all[0].contextSize;
  }

  /** Loads the model and creates its context. Throws a UsageError when node-llama-cpp is absent. */
  static async load(options: GgufPolicyOptions): Promise<GgufPolicy> {
    if (typeof options.path !== "string" || options.path === "")
      throw new UsageError("gguf policy: path to a .gguf file is required");
    const threads = positiveInt("gguf threads", options.threads, 1);
    const sequences = positiveInt("gguf sequences", options.sequences, 8);
    const gpu = options.gpu ?? false;
    if (!([false, "auto", "cuda", "vulkan", "metal"] as unknown[]).includes(gpu))
      throw new UsageError(
        `unknown gguf gpu "${String(gpu)}"; valid choices: false, auto, cuda, vulkan, metal`,
      );
    const mode = options.prompt ?? "auto";
    if (!(GGUF_PROMPT_MODES as readonly string[]).includes(mode))
      throw new UsageError(
        `unknown gguf prompt mode "${mode}"; valid choices: ${GGUF_PROMPT_MODES.join(", ")}`,
      );
    const nlc = await loadNodeLlamaCpp(options.importer);
    const { access } = await import("node:fs/promises");
    try {
      await access(options.path);
    } catch {
      throw new UsageError(`gguf policy: file "${options.path}" does not exist or cannot be read`);
    }
    const llama = await nlc.getLlama({ gpu, build: "never", logLevel: options.logLevel ?? "error" });
    let model: NlcModel | undefined;
    try {
      model = await llama.loadModel({ modelPath: options.path, ...(gpu === false ? { gpuLayers: 0 } : {}) });
      const trained = model.trainContextSize > 0 ? model.trainContextSize : 4096;
      const contextSize = positiveInt("gguf contextSize", options.contextSize, Math.min(trained, 4096));
      const exact = options.exactLogprobs ?? true;
      const context = await model.createContext({
        contextSize,
        sequences,
        threads,
        ...(options.batchSize !== undefined
          ? { batchSize: positiveInt("gguf batchSize", options.batchSize, 512) }
          : {}),
        ...(exact
          ? { flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" }
          : {}),
      });
      const seqs: NlcSequence[] = [];
      for (let i = 0; i < sequences; i++) seqs.push(context.getSequence());
      const template = model.fileInfo?.metadata?.tokenizer?.chat_template;
      const isMage = template === CHAT_TEMPLATE_JINJA;
      const promptMode = mode === "auto" ? (isMage ? "mage" : "template") : mode;
      const mageTokens = promptMode === "mage" ? findMageTokens(model, options.path) : null;
      return new GgufPolicy(
        options.path,
        llama,
        model,
        context,
        new SequencePool(seqs),
        nlc,
        promptMode,
        mageTokens,
        options.name ?? `gguf:${basename(options.path)}`,
      );
    } catch (err) {
      if (model) await model.dispose().catch(() => {});
      await llama.dispose().catch(() => {});
      throw err;
    }
  }

  /** Token ids of a prompt for `messages`, ending where the assistant's reply starts. */
  promptIds(messages: readonly ChatMessage[]): number[] {
    return this.render(messages).ids;
  }

  /** Tokenizes plain text with the model's tokenizer (special-token text kept literal). */
  tokenize(text: string): number[] {
    return this.model.tokenize(text, false);
  }

  /** Text of token ids (special tokens give no text). */
  detokenize(ids: readonly number[]): string {
    return this.model.detokenize(ids, false);
  }

  private render(messages: readonly ChatMessage[]): { ids: number[]; stopText: string[]; stopIds: number[] } {
    if (this.mageTokens) {
      const t = this.mageTokens;
      const ids = [t.bos];
      for (const m of messages) {
        const role = t.roles[m.role];
        if (role === undefined)
          throw new UsageError(`unknown chat role "${m.role}"; valid roles: system, user, assistant`);
        ids.push(role);
        if (m.role === "assistant" && m.tokenIds !== undefined) {
          ids.push(...m.tokenIds);
          if (m.tokenIds.length === 0 || m.tokenIds[m.tokenIds.length - 1] !== t.end) ids.push(t.end);
        } else {
          ids.push(...this.model.tokenize(m.content, false), t.end);
        }
      }
      ids.push(t.roles.assistant);
      return { ids, stopText: [], stopIds: [t.end] };
    }
    const wrapper = this.nlc.resolveChatWrapper(this.model);
    if (!wrapper)
      throw new UsageError(`gguf policy: no chat template found for ${this.path}; use prompt mode "mage"`);
    const chatHistory: unknown[] = messages.map((m) =>
      m.role === "assistant" ? { type: "model", response: [m.content] } : { type: m.role, text: m.content },
    );
    chatHistory.push({ type: "model", response: [] });
    const state = wrapper.generateContextState({ chatHistory });
    const ids = state.contextText.tokenize(this.model.tokenizer);
    // Plain-text triggers (e.g. "\nUser:") become stop strings; triggers that are one token
    // (EOS, "<|im_end|>"...) become stop ids, like end-of-generation tokens.
    const stopText: string[] = [];
    const stopIds: number[] = [];
    for (const trig of state.stopGenerationTriggers) {
      const json = trig.toJSON();
      if (typeof json === "string") {
        if (json.length > 0) stopText.push(json);
        continue;
      }
      const tokens = trig.tokenize(this.model.tokenizer);
      if (tokens.length === 1) stopIds.push(tokens[0]);
    }
    return { ids, stopText, stopIds };
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    if (this.closed) throw new Error(`${this.name}: the policy was closed`);
    const prepared = requests.map((r, i) => this.prepare(r, i));
    return Promise.all(prepared.map((p) => this.runOne(p)));
  }

  private prepare(req: GenerateRequest, i: number) {
    const where = `requests[${i}]`;
    const s = req.sampling;
    if (!Number.isFinite(s.temperature) || s.temperature < 0)
      throw new UsageError(`${where}.sampling.temperature must be a finite number ≥ 0, got ${s.temperature}`);
    if (!Number.isFinite(s.topP) || s.topP <= 0 || s.topP > 1)
      throw new UsageError(`${where}.sampling.topP must be in (0, 1], got ${s.topP}`);
    if (!Number.isInteger(s.topK))
      throw new UsageError(`${where}.sampling.topK must be an integer, got ${s.topK}`);
    if (!Number.isInteger(s.maxTokens) || s.maxTokens < 0)
      throw new UsageError(`${where}.sampling.maxTokens must be an integer ≥ 0, got ${s.maxTokens}`);
    if (!Number.isInteger(req.seed))
      throw new UsageError(`${where}.seed must be an integer, got ${req.seed}`);
    const { ids, stopText, stopIds } = this.render(req.messages);
    if (ids.length + s.maxTokens > this.contextSize)
      throw new UsageError(
        `${where}: a prompt of ${ids.length} tokens plus sampling.maxTokens ${s.maxTokens} needs ` +
          `${ids.length + s.maxTokens} positions but the GGUF context holds ${this.contextSize}; ` +
          "raise contextSize, shorten the prompt or lower maxTokens",
      );
    const stop = [...s.stop, ...stopText].filter((x) => x.length > 0);
    return { req, ids, stop, stopIds: new Set(stopIds) };
  }

  private async runOne(p: {
    req: GenerateRequest;
    ids: number[];
    stop: string[];
    stopIds: ReadonlySet<number>;
  }): Promise<Generation> {
    const { req, ids, stop, stopIds } = p;
    const s = req.sampling;
    const out: Generation = {
      text: "",
      tokenIds: [],
      logprobs: [],
      finishReason: "length",
      promptTokens: ids.length,
    };
    if (s.maxTokens === 0) return out;
    const seq = await this.pool.acquire();
    try {
      await seq.clearHistory();
      const greedy = s.temperature === 0;
      const options: Record<string, unknown> = {
        temperature: s.temperature,
        topK: Math.max(s.topK, 0),
        topP: s.topP,
        minP: 0,
        seed: req.seed >>> 0,
        yieldEogToken: true,
      };
      const longest = stop.reduce((m, x) => Math.max(m, x.length), 0);
      const window = 4 * longest + 8;
      const gen = seq.evaluateWithMetadata(ids, { confidence: true }, options);
      try {
        for await (const o of gen) {
          out.tokenIds.push(o.token);
          const c = o.confidence ?? Number.NaN;
          out.logprobs.push(greedy ? 0 : Math.log(c));
          if (stopIds.has(o.token) || this.model.isEogToken(o.token)) {
            out.finishReason = "stop";
            break;
          }
          if (stop.length > 0) {
            const tail = this.detokenize(out.tokenIds.slice(-window));
            if (stop.some((x) => tail.includes(x))) {
              out.finishReason = "stop";
              break;
            }
          }
          if (out.tokenIds.length >= s.maxTokens) break;
        }
      } finally {
        await gen.return(undefined);
      }
      out.text = this.detokenize(out.tokenIds);
      return out;
    } finally {
      this.pool.release(seq);
    }
  }

  /**
   * Teacher-forced log-probs (temperature 1, no truncation) of `ids[from..]` given `ids[..from)`:
   * element j is log p(ids[from + j] | ids[0 .. from + j)). `from` must be ≥ 1.
   */
  async score(ids: readonly number[], from = 1): Promise<number[]> {
    if (this.closed) throw new Error(`${this.name}: the policy was closed`);
    if (!Number.isInteger(from) || from < 1 || from > ids.length)
      throw new UsageError(`score: from must be in [1, ${ids.length}], got ${from}`);
    if (ids.length > this.contextSize)
      throw new UsageError(`score: ${ids.length} tokens exceed the GGUF context of ${this.contextSize}`);
    const seq = await this.pool.acquire();
    try {
      await seq.clearHistory();
      const items: unknown[] = [];
      for (let i = 0; i < ids.length - 1; i++) {
        if (i + 1 < from) items.push(ids[i]);
        else
          items.push([
            ids[i],
            {
              generateNext: {
                logits: { filter: { tokens: [ids[i + 1]], includeTop: 1 } },
                totalLogitWeight: true,
                options: { temperature: 1, topK: 0, topP: 1, minP: 0 },
              },
            },
          ]);
      }
      const res = await seq.controlledEvaluate(items);
      const out: number[] = [];
      for (let i = from - 1; i < ids.length - 1; i++) {
        const next = res[i]?.next;
        const logits = next?.logits;
        const total = next?.totalLogitWeight;
        if (!logits || total === undefined)
          throw new Error(`score: node-llama-cpp returned no logits at ${i}`);
        let max = Number.NEGATIVE_INFINITY;
        for (const v of logits.values()) if (v > max) max = v;
        const lt = logits.get(ids[i + 1]);
        if (lt === undefined) throw new Error(`score: no logit for token ${ids[i + 1]} at ${i}`);
        out.push(lt - max - Math.log(total));
      }
      return out;
    } finally {
      this.pool.release(seq);
    }
  }

  /** Frees the context, model and llama.cpp instance. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.pool.all) s.dispose();
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }
}

function findMageTokens(model: NlcModel, path: string): MageTokens {
  const one = (name: string): number => {
    const ids = model.tokenize(name, true);
    if (ids.length !== 1)
      throw new UsageError(
        `gguf policy: ${path} has mage's chat template but "${name}" is not a single special token; use prompt mode "template"`,
      );
    return ids[0];
  };
  return {
    bos: one("<|bos|>"),
    end: one("<|end|>"),
    roles: { system: one("<|system|>"), user: one("<|user|>"), assistant: one("<|assistant|>") },
  };
}

/** Loads a GGUF policy (see `GgufPolicy.load`). */
export function loadGgufPolicy(options: GgufPolicyOptions): Promise<GgufPolicy> {
  return GgufPolicy.load(options);
}
