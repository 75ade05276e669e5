/**
 * What every `mage serve` request handler shares: the backend and its tokenizer, the served
 * model's name and limits, the batcher, the seed and id streams, and the server's own counts.
 */
import type { Rng } from "../core/rng.js";
import type { Tokenizer } from "../model/tokenizer.js";
import type { ServeBackend } from "./backend.js";
import type { Batcher } from "./batcher.js";
import { ApiError, type GenResult, type ServeLimits, streamPieces } from "./protocol.js";

/** What the server counts itself; in-flight requests and the sampler's figures are read when asked. */
export interface ServeCounts {
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

/** One piece of a finished reply's stream: its text and the tokens [from, to) it came from. */
export interface StreamSpan {
  text: string;
  from: number;
  to: number;
}

export class ServeContext {
  readonly tok: Tokenizer | null;
  readonly counts: ServeCounts = { requests: 0, promptTokens: 0, completionTokens: 0 };
  /** When the server started, in Unix seconds (the model card's `created`). */
  readonly created = Math.floor(Date.now() / 1000);
  private counter = 0;

  constructor(
    readonly engine: ServeBackend,
    readonly modelName: string,
    readonly limits: ServeLimits,
    readonly batcher: Batcher,
    private readonly seeds: Rng,
    private readonly ids: Rng,
  ) {
    this.tok = engine.tokenizer;
  }

  newId(prefix: string): string {
    return `${prefix}-${(++this.counter).toString(36)}${this.ids.nextU32().toString(16).padStart(8, "0")}`;
  }

  /** The request's seed, else one drawn from the server's seed stream. */
  seedFor(requestSeed: number | null): number {
    return requestSeed ?? this.seeds.nextU32();
  }

  /** Counts the tokens in the server's stats and returns the OpenAI `usage` object. */
  recordUsage(promptTokens: number, completionTokens: number) {
    this.counts.promptTokens += promptTokens;
    this.counts.completionTokens += completionTokens;
    return {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    };
  }

  /** The fields every response and chat stream chunk starts with. */
  responseHead(id: string, object: string, created: number) {
    return { id, object, created, model: this.modelName, system_fingerprint: this.engine.fingerprint };
  }

  modelCard() {
    return { id: this.modelName, object: "model", created: this.created, owned_by: "mage" };
  }

  checkModel(model: string): void {
    if (model !== this.modelName)
      throw new ApiError(
        404,
        `the model "${model}" does not exist; this server serves "${this.modelName}"`,
        "invalid_request_error",
        "model",
        "model_not_found",
      );
  }

  /**
   * The backend's tokenizer for a feature that needs one (log-probs, text prompts); a backend
   * without one refuses the request with a 400 naming `param`.
   */
  tokenizerFor(param: string, what: string): Tokenizer {
    if (this.tok) return this.tok;
    throw new ApiError(
      400,
      `${what} not supported for this model: it is sampled out of process and this server has no tokenizer of it`,
      "invalid_request_error",
      param,
      "unsupported_parameter",
    );
  }

  /** Content of a generation: decoded ids without a final stop-id token, cut before a stop string. */
  contentOf(r: GenResult, stopIds: readonly number[]): { bodyIds: number[]; content: string } {
    const ids = r.tokenIds;
    const last = ids[ids.length - 1];
    const bodyIds =
      r.finishReason === "stop" && r.stopString === null && stopIds.includes(last) ? ids.slice(0, -1) : ids;
    let content = this.textOf(r, bodyIds);
    if (r.stopString !== null) {
      const at = content.indexOf(r.stopString);
      if (at >= 0) content = content.slice(0, at);
    }
    return { bodyIds, content };
  }

  /**
   * A finished reply's stream pieces: one per token with the backend's tokenizer (their texts add
   * up to `content`), else the whole reply as one piece.
   */
  streamSpans(r: GenResult, bodyIds: readonly number[], content: string): StreamSpan[] {
    if (r.tokenIds.length === 0) return [];
    if (!this.tok) return [{ text: content, from: 0, to: r.tokenIds.length }];
    const pieces = streamPieces(this.tok, bodyIds, content);
    return r.tokenIds.map((_, t) => ({ text: pieces[t] ?? "", from: t, to: t + 1 }));
  }

  /** The generation's own text, else its ids decoded with the backend's tokenizer. */
  private textOf(r: GenResult, bodyIds: readonly number[]): string {
    if (r.text !== undefined) return r.text;
    if (!this.tok) throw new Error("the backend returned a generation without text and has no tokenizer");
    return this.tok.decode(bodyIds);
  }
}
