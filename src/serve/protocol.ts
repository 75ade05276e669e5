/**
 * The OpenAI wire format of `mage serve`: request validation into generation jobs, and the
 * response, stream-chunk and error shapes. Pure functions, no I/O.
 *
 * Extensions beyond the OpenAI format (so mage's own client can train from served rollouts):
 * - every choice carries `token_ids` (all sampled ids, the closing `<|end|>` included) and the
 *   `seed` it was sampled with; `stop_reason` names the stop string that ended it (as vLLM);
 * - each log-prob entry carries `token_id`; `return_tokens_as_token_ids: true` writes tokens
 *   as `token_id:N` (as vLLM), which mage's OpenAI client reads back as token ids;
 * - chat messages may carry `token_ids` (an assistant reply's exact ids, used verbatim);
 * - `top_k` (0 or -1 = off); completions accept token-id prompts (OpenAI allows them).
 */
import type { Tokenizer } from "../model/tokenizer.js";
import { SPECIAL_TOKENS } from "../model/tokenizer.js";
import type { ChatMessage, SamplingParams } from "../policy/types.js";

/** Most `top_logprobs` (chat) or `logprobs` (completions) alternatives per position. */
export const MAX_TOP_LOGPROBS = 20;
/** Most choices per prompt (`n`). */
export const MAX_N = 16;
/** Most stop strings per request. */
export const MAX_STOP = 16;
/** Most prompts in one completions request. */
export const MAX_PROMPTS = 64;

/** An error returned to the client as `{"error": {...}}` with an HTTP status. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = "invalid_request_error",
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
    this.name = "ApiError";
  }
  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

function bad(param: string, message: string, code: string | null = null): ApiError {
  return new ApiError(400, message, "invalid_request_error", param, code);
}

/** One sequence to sample. */
export interface GenJob {
  promptIds: number[];
  sampling: SamplingParams;
  seed: number;
  /** Sampling one of these ends the sequence (kept in the ids). */
  stopIds: number[];
  /** Alternatives to report per position (0 = none). */
  topLogprobs: number;
  /** Hears each token as it is sampled (for streaming). */
  onToken?: (tokenId: number, logprob: number) => void;
}

/** What the engine returns for a job. */
export interface GenResult {
  tokenIds: number[];
  logprobs: number[];
  finishReason: "stop" | "length";
  /** The stop string that ended the sequence, if one did. */
  stopString: string | null;
  promptTokens: number;
  /** Per position, the best alternatives (id, log-prob), best first; only when asked. */
  top: { id: number; logprob: number }[][] | null;
  /**
   * The reply's text as a backend without a tokenizer in this process decoded it (the ids
   * without a closing stop id, not yet cut at a stop string); absent where the server decodes
   * `tokenIds` with the backend's tokenizer.
   */
  text?: string;
}

export interface ServeLimits {
  /** Model context length. */
  contextLength: number;
  /** Most new tokens one choice may ask for (also the default when max_tokens is absent). */
  maxTokens: number;
}

/** Fields shared by both endpoints, already validated. */
interface CommonParams {
  sampling: Omit<SamplingParams, "maxTokens">;
  maxTokens: number | null;
  n: number;
  seed: number | null;
  stream: boolean;
  includeUsage: boolean;
  tokensAsIds: boolean;
}

export interface ChatRequest extends CommonParams {
  kind: "chat";
  model: string;
  messages: ChatMessage[];
  logprobs: boolean;
  topLogprobs: number;
}

export interface CompletionRequest extends CommonParams {
  kind: "completion";
  model: string;
  /** Each prompt as text or token ids. */
  prompts: (string | number[])[];
  /** null: no log-probs; k ≥ 0: sampled-token log-probs and k alternatives. */
  logprobs: number | null;
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function optNumber(body: Record<string, unknown>, key: string, lo: number, hi: number, def: number): number {
  const v = body[key];
  if (v === undefined || v === null) return def;
  if (typeof v !== "number" || !Number.isFinite(v) || v < lo || v > hi)
    throw bad(key, `${key} must be a number in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
  return v;
}

function optInt(body: Record<string, unknown>, key: string, lo: number, hi: number): number | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi)
    throw bad(key, `${key} must be an integer in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
  return v;
}

function optBool(body: Record<string, unknown>, key: string): boolean {
  const v = body[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== "boolean") throw bad(key, `${key} must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function common(body: Record<string, unknown>, limits: ServeLimits): CommonParams & { model: string } {
  const model = body.model;
  if (typeof model !== "string" || model === "") throw bad("model", "model is required (a string)");
  for (const key of ["presence_penalty", "frequency_penalty"]) {
    const v = body[key];
    if (v !== undefined && v !== null && v !== 0) throw bad(key, `${key} is not supported (only 0)`);
  }
  if (
    body.repetition_penalty !== undefined &&
    body.repetition_penalty !== null &&
    body.repetition_penalty !== 1
  )
    throw bad("repetition_penalty", "repetition_penalty is not supported (only 1)");
  if (isObject(body.logit_bias) && Object.keys(body.logit_bias).length > 0)
    throw bad("logit_bias", "logit_bias is not supported");
  for (const key of ["tools", "functions", "tool_choice", "function_call", "suffix"]) {
    const v = body[key];
    if (v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0) && v !== "none")
      throw bad(key, `${key} is not supported by mage serve`);
  }
  if (isObject(body.response_format) && body.response_format.type !== "text")
    throw bad("response_format", "only response_format {type: text} is supported");
  if (body.echo === true) throw bad("echo", "echo is not supported");
  if (body.best_of !== undefined && body.best_of !== null && body.best_of !== 1 && body.best_of !== body.n)
    throw bad("best_of", "best_of is not supported");

  const temperature = optNumber(body, "temperature", 0, 2, 1);
  const topP = optNumber(body, "top_p", Number.MIN_VALUE, 1, 1);
  const topKRaw = optInt(body, "top_k", -1, 1_000_000) ?? 0;
  const topK = Math.max(0, topKRaw);
  const mt1 = optInt(body, "max_tokens", 0, Number.MAX_SAFE_INTEGER);
  const mt2 = optInt(body, "max_completion_tokens", 0, Number.MAX_SAFE_INTEGER);
  const maxTokens = mt2 ?? mt1;
  const maxParam = mt2 !== null ? "max_completion_tokens" : "max_tokens";
  if (maxTokens !== null && maxTokens > limits.maxTokens)
    throw bad(maxParam, `${maxParam} is ${maxTokens} but this server allows at most ${limits.maxTokens}`);
  const n = optInt(body, "n", 1, MAX_N) ?? 1;
  const seedRaw = body.seed;
  let seed: number | null = null;
  if (seedRaw !== undefined && seedRaw !== null) {
    if (typeof seedRaw !== "number" || !Number.isSafeInteger(seedRaw))
      throw bad("seed", `seed must be an integer, got ${JSON.stringify(seedRaw)}`);
    seed = seedRaw >>> 0;
  }
  let stop: string[] = [];
  const s = body.stop;
  if (typeof s === "string") stop = [s];
  else if (Array.isArray(s)) {
    if (!s.every((x) => typeof x === "string"))
      throw bad("stop", "stop must be a string or a list of strings");
    stop = s as string[];
  } else if (s !== undefined && s !== null) throw bad("stop", "stop must be a string or a list of strings");
  stop = stop.filter((x) => x.length > 0);
  if (stop.length > MAX_STOP) throw bad("stop", `at most ${MAX_STOP} stop strings`);
  const stream = optBool(body, "stream");
  let includeUsage = false;
  if (isObject(body.stream_options)) includeUsage = body.stream_options.include_usage === true;
  return {
    model,
    sampling: { temperature, topP, topK, stop },
    maxTokens,
    n,
    seed,
    stream,
    includeUsage,
    tokensAsIds: optBool(body, "return_tokens_as_token_ids"),
  };
}

function messageText(content: unknown, where: string): string {
  if (typeof content === "string") return content;
  if (content === null || content === undefined) return "";
  if (Array.isArray(content)) {
    let s = "";
    for (const part of content) {
      if (!isObject(part) || part.type !== "text" || typeof part.text !== "string")
        throw bad(where, `${where}: only text content parts ({type: "text", text}) are supported`);
      s += part.text;
    }
    return s;
  }
  throw bad(where, `${where} must be a string or a list of text parts`);
}

export function parseChatRequest(body: unknown, limits: ServeLimits, vocabSize: number): ChatRequest {
  if (!isObject(body)) throw bad("body", "the request body must be a JSON object");
  const c = common(body, limits);
  const raw = body.messages;
  if (!Array.isArray(raw) || raw.length === 0) throw bad("messages", "messages must be a non-empty list");
  const messages: ChatMessage[] = raw.map((m, i) => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw bad(where, `${where} must be an object`);
    let role = m.role;
    if (role === "developer") role = "system";
    if (role !== "system" && role !== "user" && role !== "assistant")
      throw bad(
        `${where}.role`,
        `${where}.role must be one of system, developer, user, assistant; got ${JSON.stringify(m.role)}`,
      );
    const msg: ChatMessage = { role, content: messageText(m.content, `${where}.content`) };
    if (m.token_ids !== undefined && m.token_ids !== null) {
      if (role !== "assistant")
        throw bad(`${where}.token_ids`, "token_ids are only accepted on assistant messages");
      if (
        !Array.isArray(m.token_ids) ||
        !m.token_ids.every((t) => Number.isInteger(t) && t >= 0 && t < vocabSize)
      )
        throw bad(`${where}.token_ids`, `${where}.token_ids must be token ids in [0, ${vocabSize})`);
      msg.tokenIds = m.token_ids as number[];
    }
    return msg;
  });
  const logprobs = optBool(body, "logprobs");
  const top = optInt(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) ?? 0;
  if (top > 0 && !logprobs) throw bad("top_logprobs", "top_logprobs needs logprobs: true");
  return { kind: "chat", ...c, messages, logprobs, topLogprobs: top };
}

export function parseCompletionRequest(
  body: unknown,
  limits: ServeLimits,
  vocabSize: number,
): CompletionRequest {
  if (!isObject(body)) throw bad("body", "the request body must be a JSON object");
  const c = common(body, limits);
  const p = body.prompt;
  let prompts: (string | number[])[];
  const isIds = (x: unknown): x is number[] =>
    Array.isArray(x) && x.length > 0 && x.every((t) => typeof t === "number");
  if (typeof p === "string") prompts = [p];
  else if (isIds(p)) prompts = [p];
  else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === "string" || isIds(x)))
    prompts = p as (string | number[])[];
  else
    throw bad("prompt", "prompt must be a string, a list of strings, token ids or a list of token-id lists");
  if (prompts.length > MAX_PROMPTS) throw bad("prompt", `at most ${MAX_PROMPTS} prompts per request`);
  for (const q of prompts)
    if (typeof q !== "string" && !q.every((t) => Number.isInteger(t) && t >= 0 && t < vocabSize))
      throw bad("prompt", `token-id prompts must hold integers in [0, ${vocabSize})`);
  let logprobs: number | null = null;
  const lp = body.logprobs;
  if (lp === true) logprobs = 0;
  else if (lp !== undefined && lp !== null && lp !== false)
    logprobs = optInt(body, "logprobs", 0, MAX_TOP_LOGPROBS);
  return { kind: "completion", ...c, prompts, logprobs };
}

/** Text → ids, with the literal text of mage's special tokens (`<|user|>`...) read as those tokens. */
export function encodeWithSpecials(tok: Tokenizer, text: string): number[] {
  const ids: number[] = [];
  let rest = text;
  while (rest.length > 0) {
    let at = -1;
    let which = "";
    for (const sp of SPECIAL_TOKENS) {
      const i = rest.indexOf(sp);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        which = sp;
      }
    }
    if (at < 0) {
      ids.push(...tok.encode(rest));
      break;
    }
    if (at > 0) ids.push(...tok.encode(rest.slice(0, at)));
    ids.push(tok.specialId(which as (typeof SPECIAL_TOKENS)[number]));
    rest = rest.slice(at + which.length);
  }
  return ids;
}

/** Checks the context and picks max_tokens for a prompt. */
export function resolveMaxTokens(
  promptLength: number,
  requested: number | null,
  limits: ServeLimits,
  param = "max_tokens",
): number {
  if (promptLength === 0) throw bad("prompt", "the prompt is empty");
  const room = limits.contextLength - promptLength;
  if (room <= 0 || (requested !== null && requested > room))
    throw bad(
      requested !== null ? param : "messages",
      `this model's context length is ${limits.contextLength} tokens, but the prompt has ${promptLength} tokens` +
        (requested !== null ? ` and ${param} asks for ${requested} more` : ""),
      "context_length_exceeded",
    );
  return requested ?? Math.min(limits.maxTokens, room);
}

// ---- responses ---------------------------------------------------------------------------------

export interface TokenView {
  /** Display text of a token (or `token_id:N`). */
  token(id: number): string;
  bytes(id: number): number[];
}

export function tokenView(tok: Tokenizer, asIds: boolean): TokenView {
  return {
    token: (id) => (asIds ? `token_id:${id}` : tok.tokenText(id)),
    bytes: (id) => Array.from(tok.decodeBytes([id])),
  };
}

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  token_id: number;
  top_logprobs: { token: string; logprob: number; bytes: number[]; token_id: number }[];
}

export function chatLogprobEntries(
  r: GenResult,
  view: TokenView,
  from = 0,
  to = r.tokenIds.length,
): ChatLogprobEntry[] {
  const out: ChatLogprobEntry[] = [];
  for (let i = from; i < to; i++) {
    const id = r.tokenIds[i];
    out.push({
      token: view.token(id),
      logprob: r.logprobs[i],
      bytes: view.bytes(id),
      token_id: id,
      top_logprobs: (r.top?.[i] ?? []).map((t) => ({
        token: view.token(t.id),
        logprob: t.logprob,
        bytes: view.bytes(t.id),
        token_id: t.id,
      })),
    });
  }
  return out;
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[] | null;
  text_offset: number[];
  token_ids: number[];
}

export function completionLogprobs(
  r: GenResult,
  view: TokenView,
  tok: Tokenizer,
  k: number,
  from = 0,
  to = r.tokenIds.length,
  offset0 = 0,
): CompletionLogprobs {
  const tokens: string[] = [];
  const textOffset: number[] = [];
  const top: Record<string, number>[] = [];
  let off = offset0;
  for (let i = from; i < to; i++) {
    const id = r.tokenIds[i];
    tokens.push(view.token(id));
    textOffset.push(off);
    off += tok.tokenText(id).length;
    if (k > 0) {
      const m: Record<string, number> = {};
      for (const t of r.top?.[i] ?? []) {
        const key = view.token(t.id);
        if (!(key in m)) m[key] = t.logprob;
      }
      top.push(m);
    }
  }
  return {
    tokens,
    token_logprobs: r.logprobs.slice(from, to),
    top_logprobs: k > 0 ? top : null,
    text_offset: textOffset,
    token_ids: r.tokenIds.slice(from, to),
  };
}

/**
 * Splits a finished generation into per-token text pieces for streaming: piece i is the text
 * that token i completes (characters still waiting for more UTF-8 bytes move to a later piece).
 * The pieces concatenate to `content` exactly.
 */
export function streamPieces(tok: Tokenizer, ids: readonly number[], content: string): string[] {
  const pieces: string[] = [];
  let done = 0;
  for (let i = 0; i < ids.length; i++) {
    let text = tok.decode(ids.slice(0, i + 1));
    // An incomplete UTF-8 sequence at the end decodes to U+FFFD; hold it back.
    if (i < ids.length - 1) while (text.endsWith("\uFFFD")) text = text.slice(0, -1);
    const upTo = Math.min(content.length, Math.max(done, text.length));
    pieces.push(content.slice(done, upTo));
    done = upTo;
  }
  if (pieces.length > 0 && done < content.length) pieces[pieces.length - 1] += content.slice(done);
  return pieces;
}

/**
 * The text of a generation as it streams, token by token: each `push` returns the new text that
 * is certain to be in the final content. It holds back characters still waiting for UTF-8 bytes
 * and any tail that could grow into a stop string, and stops at a stop string; `finish` returns
 * what is left of the final content. The pieces concatenate to the content exactly (tested).
 */
export class StreamText {
  private readonly ids: number[] = [];
  private sent = "";

  constructor(
    private readonly tok: Tokenizer,
    private readonly stopStrings: readonly string[],
    private readonly stopIds: readonly number[],
  ) {}

  push(id: number): string {
    if (this.stopIds.includes(id)) return "";
    this.ids.push(id);
    let text = this.tok.decode(this.ids);
    while (text.endsWith("\uFFFD")) text = text.slice(0, -1);
    let safe = text.length;
    for (const stop of this.stopStrings) {
      if (stop.length === 0) continue;
      const at = text.indexOf(stop);
      if (at >= 0) safe = Math.min(safe, at);
      for (let k = Math.min(stop.length - 1, text.length); k > 0; k--) {
        if (text.endsWith(stop.slice(0, k))) {
          safe = Math.min(safe, text.length - k);
          break;
        }
      }
    }
    if (safe <= this.sent.length || !text.startsWith(this.sent)) return "";
    const piece = text.slice(this.sent.length, safe);
    this.sent += piece;
    return piece;
  }

  /** The rest of `content` (the generation's final text) after what `push` has returned. */
  finish(content: string): string {
    if (!content.startsWith(this.sent))
      throw new Error(
        "streamed text is not a prefix of the final content (tokenizer decode is not prefix-stable)",
      );
    const rest = content.slice(this.sent.length);
    this.sent = content;
    return rest;
  }
}
