/**
 * A `Policy` backed by any OpenAI-compatible `/chat/completions` endpoint: vLLM, SGLang,
 * llama.cpp's `llama-server`, Ollama (`http://127.0.0.1:11434/v1`), or a hosted API.
 *
 * `generate(requests)` sends one HTTP request per `GenerateRequest` (never batched into `n`),
 * at most `concurrency` in flight across all calls on this policy, and returns the results in
 * request order. If one request fails for good, the rest of that batch is cancelled and the
 * call rejects with a `PolicyBackendError`.
 *
 * What is sent (`buildChatBody`):
 * - `model`, `messages` as `{role, content}`; with `sendTokenIds: true` an assistant message's
 *   `tokenIds` also go as the extension field `token_ids` (`mage serve` uses them verbatim instead
 *   of re-tokenizing `content`; off by default because strict servers may reject unknown fields);
 * - `temperature`, `top_p`, `max_tokens`, `seed` (the request's own seed), `stop` when non-empty;
 * - `top_k` only when `sampling.topK > 0` (a non-standard field that vLLM, SGLang and llama.cpp
 *   accept; the OpenAI API itself rejects it);
 * - `logprobs: true` unless the `logprobs` option is false;
 * - every `extraBody` field (e.g. `chat_template_kwargs: { enable_thinking: false }`), which may
 *   override the sampling fields above but not `model`, `messages` or `stream` (always false).
 *
 * What comes back (`parseChatResponse`):
 * - `text`: `choices[0].message.content` (null counts as ""). Servers cut the stop string off;
 *   when the server says which one matched (vLLM `stop_reason`, SGLang `matched_stop`) it is put
 *   back, so `text` keeps it as `SamplingParams.stop` promises. Other servers: text as given.
 * - `logprobs`: from `choices[0].logprobs.content[].logprob` when the server returns them, else [].
 *   Their meaning is the server's (vLLM reports the raw model distribution unless configured).
 * - `tokenIds`: token ids are not part of the OpenAI format. `choices[0].token_ids` (an array of
 *   non-negative integers, as `mage serve` returns) is used when present; else they are filled only
 *   when every logprob token has the form `token_id:123` (vLLM with `extraBody:
 *   { return_tokens_as_token_ids: true }`); otherwise `tokenIds` is EMPTY, even when `logprobs` is not.
 * - `finishReason`: "length" when the server says so, "stop" for anything else.
 * - `promptTokens` from `usage.prompt_tokens` (0 when absent); `usage.completion_tokens` is
 *   summed into `metrics.completionTokens`.
 *
 * Defaults: timeout 120 s per attempt (headers and body), 5 retries (6 attempts), backoff base
 * 0.5 s doubling up to 30 s with full jitter, concurrency 8, logprobs requested, no API key.
 *
 * Retried: HTTP 408, 429, 5xx; timeouts; dropped or refused connections (fetch `TypeError`,
 * ECONNRESET...); a 2xx body that is not JSON or has no `choices`. A `Retry-After` (or
 * `retry-after-ms`) header replaces the jittered delay, capped at `maxDelayMs`.
 * Not retried: every other 4xx.
 *
 * The API key is read once from the environment variable named by `apiKeyEnv`; it is sent only in
 * the Authorization header and is never logged, put in errors (server text is redacted too) or
 * exposed through `metrics`, `name` or `toJSON`.
 */
import { setMaxListeners } from "node:events";
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import {
  backoffDelayMs,
  CancelledError,
  ConcurrencyLimiter,
  isRetryableStatus,
  PolicyBackendError,
  parseRetryAfterMs,
  realSleep,
  redact,
  type Sleep,
} from "./retry.js";
import type { GenerateRequest, Generation, Policy } from "./types.js";

export { PolicyBackendError } from "./retry.js";

export const OPENAI_DEFAULTS = {
  timeoutMs: 120_000,
  retries: 5,
  baseDelayMs: 500,
  maxDelayMs: 30_000,
  concurrency: 8,
  logprobs: true,
} as const;

export interface OpenAIChatPolicyOptions {
  /** Base URL ending before `/chat/completions`, e.g. `http://127.0.0.1:8000/v1`. */
  baseUrl: string;
  /** The served model name (`--served-model-name` for vLLM, `qwen3:4b` for Ollama...). */
  model: string;
  /** Name of the environment variable that holds the API key; none is sent when omitted. */
  apiKeyEnv?: string;
  /** Extra JSON fields merged into every request body. */
  extraBody?: Record<string, unknown>;
  /** Request `logprobs: true` (default true). */
  logprobs?: boolean;
  /** Max HTTP requests in flight (default 8). */
  concurrency?: number;
  /** Per-attempt timeout in ms (default 120 000). */
  timeoutMs?: number;
  /** Retries after the first attempt (default 5). */
  retries?: number;
  /** First backoff ceiling in ms (default 500); doubles each retry. */
  baseDelayMs?: number;
  /** Cap on any single wait, jittered or from Retry-After (default 30 000). */
  maxDelayMs?: number;
  /** Source of the backoff jitter (default `Rng.seeded("openai-policy")`). */
  rng?: Rng;
  /** How to wait between attempts (default: real timers). Tests inject a fake. */
  sleep?: Sleep;
  /** Clock for HTTP-date `Retry-After` values (default `Date.now`). */
  now?: () => number;
  /** The fetch implementation (default: global fetch). */
  fetch?: typeof fetch;
  /** Where `apiKeyEnv` is looked up (default `process.env`). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Policy name (default `openai:MODEL`). */
  name?: string;
  /** Send assistant messages' `tokenIds` as the extension field `token_ids` (default false). */
  sendTokenIds?: boolean;
}

/** Counters since the policy was made. Never contains the API key. */
export interface OpenAIPolicyMetrics {
  /** HTTP attempts sent, retries included. */
  requests: number;
  /** Attempts beyond the first of a request. */
  retries: number;
  /** Sum of `usage.prompt_tokens` over successful responses. */
  promptTokens: number;
  /** Sum of `usage.completion_tokens` over successful responses. */
  completionTokens: number;
  /** Requests that ended in a PolicyBackendError (not those cancelled because a sibling failed). */
  failures: number;
}

type AttemptOutcome =
  | { ok: true; generation: Generation; completionTokens: number }
  | { ok: false; retryable: boolean; status?: number; cause: string; retryAfterMs?: number; hint?: string };

const BODY_EXCERPT = 300;

function positiveInt(what: string, value: number | undefined, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min) {
    throw new UsageError(`${what} must be an integer >= ${min}, got ${value}`);
  }
  return value;
}

function nonNegative(what: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value < 0) {
    throw new UsageError(`${what} must be a non-negative number, got ${value}`);
  }
  return value;
}

/** The URL as shown in messages: credentials in it replaced by `***`. */
function displayUrl(url: URL): string {
  if (!url.username && !url.password) return url.toString();
  const copy = new URL(url.toString());
  copy.username = "***";
  copy.password = "";
  return copy.toString();
}

/** Normalises a base URL: http(s) only, no trailing slash, `/chat/completions` suffix removed. */
export function normaliseBaseUrl(baseUrl: string): URL {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new UsageError(`invalid baseUrl "${baseUrl}"; expected e.g. http://127.0.0.1:8000/v1`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new UsageError(`baseUrl must be http:// or https://, got "${url.protocol}"`);
  }
  let path = url.pathname.replace(/\/+$/, "");
  if (path.endsWith("/chat/completions")) path = path.slice(0, -"/chat/completions".length);
  url.pathname = path;
  return url;
}

/** The JSON body for one request (exported for tests and debugging; contains no key). */
export function buildChatBody(
  request: GenerateRequest,
  model: string,
  extraBody: Record<string, unknown> | undefined,
  logprobs: boolean,
  sendTokenIds = false,
): Record<string, unknown> {
  const s = request.sampling;
  const body: Record<string, unknown> = {
    temperature: s.temperature,
    top_p: s.topP,
    max_tokens: s.maxTokens,
    seed: request.seed,
  };
  if (s.topK > 0) body.top_k = s.topK;
  if (s.stop.length > 0) body.stop = [...s.stop];
  if (logprobs) body.logprobs = true;
  if (extraBody) Object.assign(body, extraBody);
  body.model = model;
  body.messages = request.messages.map((m) =>
    sendTokenIds && m.role === "assistant" && m.tokenIds !== undefined
      ? { role: m.role, content: m.content, token_ids: [...m.tokenIds] }
      : { role: m.role, content: m.content },
  );
  body.stream = false;
  return body;
}

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > BODY_EXCERPT ? `${flat.slice(0, BODY_EXCERPT)}…` : flat;
}

/** The server's error message from an error body, or an excerpt of the raw body. */
function errorBodyMessage(text: string): string {
  try {
    const parsed = JSON.parse(text) as any;
    const msg = parsed?.error?.message ?? parsed?.message ?? parsed?.detail ?? parsed?.error;
    if (typeof msg === "string" && msg.length > 0) return excerpt(msg);
  } catch {
    // not JSON: fall through
  }
  return text.trim() === "" ? "(empty body)" : excerpt(text);
}

function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  let text = `${err.name}: ${err.message}`;
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    text += ` (${typeof code === "string" ? `${code}: ` : ""}${cause.message})`;
  } else if (cause !== undefined) {
    text += ` (${String(cause)})`;
  }
  return text;
}

/**
 * Reads one chat-completions response body. Returns an error string for a malformed
 * response (which the caller treats as a retryable server fault).
 */
export function parseChatResponse(
  text: string,
  stop: readonly string[],
): { generation: Generation; completionTokens: number } | { error: string } {
  let data: any;
  try {
    data = JSON.parse(text);
  } catch {
    return { error: `response is not valid JSON: ${excerpt(text) || "(empty body)"}` };
  }
  if (data === null || typeof data !== "object") return { error: "response is not a JSON object" };
  const choices = data.choices;
  if (!Array.isArray(choices) || choices.length === 0) return { error: "response has no choices" };
  const choice = choices[0];
  const content = choice?.message?.content;
  if (content !== null && content !== undefined && typeof content !== "string") {
    return { error: "choices[0].message.content is not a string" };
  }
  let out = typeof content === "string" ? content : "";
  const finish = choice?.finish_reason;
  const finishReason: Generation["finishReason"] = finish === "length" ? "length" : "stop";
  if (finish === "stop") {
    const matched = typeof choice.stop_reason === "string" ? choice.stop_reason : choice.matched_stop;
    if (typeof matched === "string" && stop.includes(matched) && !out.endsWith(matched)) out += matched;
  }

  const logprobs: number[] = [];
  const tokenIds: number[] = [];
  const items = choice?.logprobs?.content;
  if (Array.isArray(items)) {
    let allIds = items.length > 0;
    for (const item of items) {
      const lp = item?.logprob;
      if (typeof lp !== "number")
        return { error: "choices[0].logprobs.content has an entry without a logprob" };
      logprobs.push(lp);
      const m = typeof item.token === "string" ? /^token_id:(\d+)$/.exec(item.token) : null;
      if (m && allIds) tokenIds.push(Number(m[1]));
      else allIds = false;
    }
    if (!allIds) tokenIds.length = 0;
  }
  const ids = choice?.token_ids;
  if (Array.isArray(ids) && ids.every((t: unknown) => Number.isInteger(t) && (t as number) >= 0)) {
    tokenIds.length = 0;
    tokenIds.push(...(ids as number[]));
  }

  const usage = data.usage ?? {};
  const promptTokens = Number.isFinite(usage.prompt_tokens) ? Number(usage.prompt_tokens) : 0;
  const completionTokens = Number.isFinite(usage.completion_tokens) ? Number(usage.completion_tokens) : 0;
  return { generation: { text: out, tokenIds, logprobs, finishReason, promptTokens }, completionTokens };
}

export class OpenAIChatPolicy implements Policy {
  readonly name: string;
  readonly model: string;
  /** The chat-completions URL as shown in errors (no credentials). */
  readonly url: string;
  readonly concurrency: number;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;

  readonly #endpoint: string;
  readonly #apiKey: string | undefined;
  readonly #apiKeyEnv: string | undefined;
  readonly #extraBody: Record<string, unknown> | undefined;
  readonly #logprobs: boolean;
  readonly #sendTokenIds: boolean;
  readonly #rng: Rng;
  readonly #sleep: Sleep;
  readonly #now: () => number;
  readonly #fetch: typeof fetch;
  readonly #limiter: ConcurrencyLimiter;
  readonly #metrics: OpenAIPolicyMetrics = {
    requests: 0,
    retries: 0,
    promptTokens: 0,
    completionTokens: 0,
    failures: 0,
  };
  #calls = 0;

  constructor(options: OpenAIChatPolicyOptions) {
    if (typeof options.model !== "string" || options.model.trim() === "") {
      throw new UsageError("model is required for an OpenAI-compatible policy (e.g. openai:URL#Qwen3-4B)");
    }
    const base = normaliseBaseUrl(options.baseUrl);
    const endpoint = new URL(base.toString());
    endpoint.pathname = `${base.pathname}/chat/completions`;
    this.#endpoint = endpoint.toString();
    this.url = displayUrl(endpoint);
    this.model = options.model;
    this.name = options.name ?? `openai:${options.model}`;
    this.concurrency = positiveInt("concurrency", options.concurrency, OPENAI_DEFAULTS.concurrency);
    this.timeoutMs = nonNegative("timeoutMs", options.timeoutMs, OPENAI_DEFAULTS.timeoutMs);
    if (this.timeoutMs === 0) throw new UsageError("timeoutMs must be > 0");
    this.retries = positiveInt("retries", options.retries, OPENAI_DEFAULTS.retries, 0);
    this.baseDelayMs = nonNegative("baseDelayMs", options.baseDelayMs, OPENAI_DEFAULTS.baseDelayMs);
    this.maxDelayMs = nonNegative("maxDelayMs", options.maxDelayMs, OPENAI_DEFAULTS.maxDelayMs);
    this.#logprobs = options.logprobs ?? OPENAI_DEFAULTS.logprobs;
    this.#sendTokenIds = options.sendTokenIds ?? false;
    this.#extraBody = options.extraBody ? structuredClone(options.extraBody) : undefined;
    this.#rng = options.rng ?? Rng.seeded("openai-policy");
    this.#sleep = options.sleep ?? realSleep;
    this.#now = options.now ?? Date.now;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#limiter = new ConcurrencyLimiter(this.concurrency);

    this.#apiKeyEnv = options.apiKeyEnv;
    if (options.apiKeyEnv !== undefined) {
      const env = options.env ?? process.env;
      const key = env[options.apiKeyEnv];
      if (key === undefined || key === "") {
        throw new UsageError(
          `environment variable ${options.apiKeyEnv} (apiKeyEnv) is not set; set it or drop apiKeyEnv`,
        );
      }
      if (!/^[\x21-\x7e]+$/.test(key)) {
        throw new UsageError(
          `environment variable ${options.apiKeyEnv} (apiKeyEnv) holds characters not allowed in an HTTP header`,
        );
      }
      this.#apiKey = key;
    }
  }

  /** A snapshot of the counters. */
  get metrics(): OpenAIPolicyMetrics {
    return { ...this.#metrics };
  }

  /** Requests waiting for or holding a connection slot right now (for tests and progress displays). */
  get inFlight(): number {
    return this.#limiter.inFlight;
  }

  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      url: this.url,
      model: this.model,
      apiKeyEnv: this.#apiKeyEnv,
      concurrency: this.concurrency,
      timeoutMs: this.timeoutMs,
      retries: this.retries,
    };
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    if (requests.length === 0) return [];
    const call = this.#calls++;
    const batch = new AbortController();
    // Each request waiting or in flight listens on it (Node warns past 10 listeners by default).
    setMaxListeners(Math.max(10, 2 * requests.length), batch.signal);
    let firstError: unknown;
    const settled = await Promise.allSettled(
      requests.map((request, i) =>
        this.#runOne(request, this.#rng.derive("backoff", call, i), batch.signal).catch((err: unknown) => {
          if (firstError === undefined && !(err instanceof CancelledError)) {
            firstError = err;
            batch.abort();
          }
          throw err;
        }),
      ),
    );
    if (firstError !== undefined) throw firstError;
    return settled.map((s) => (s as PromiseFulfilledResult<Generation>).value);
  }

  async #runOne(request: GenerateRequest, rng: Rng, batch: AbortSignal): Promise<Generation> {
    const body = JSON.stringify(
      buildChatBody(request, this.model, this.#extraBody, this.#logprobs, this.#sendTokenIds),
    );
    const attempts = this.retries + 1;
    let last: Extract<AttemptOutcome, { ok: false }> | undefined;
    for (let attempt = 0; attempt < attempts; attempt++) {
      if (last) {
        const delay =
          last.retryAfterMs !== undefined
            ? Math.min(this.maxDelayMs, last.retryAfterMs)
            : backoffDelayMs(attempt - 1, this.baseDelayMs, this.maxDelayMs, rng);
        await this.#sleep(delay, batch);
        if (batch.aborted) throw new CancelledError();
        this.#metrics.retries++;
      }
      const outcome = await this.#limiter.run(() => this.#attempt(body, request.sampling.stop, batch), batch);
      if (batch.aborted) throw new CancelledError();
      if (outcome.ok) {
        this.#metrics.promptTokens += outcome.generation.promptTokens;
        this.#metrics.completionTokens += outcome.completionTokens;
        return outcome.generation;
      }
      last = outcome;
      if (!outcome.retryable) {
        this.#metrics.failures++;
        throw this.#error(outcome, attempt + 1);
      }
    }
    this.#metrics.failures++;
    throw this.#error(last!, attempts);
  }

  #error(outcome: Extract<AttemptOutcome, { ok: false }>, attempts: number): PolicyBackendError {
    const err = new PolicyBackendError({
      url: this.url,
      status: outcome.status,
      attempts,
      retryable: outcome.retryable,
      lastCause: redact(outcome.cause, this.#apiKey),
      hint: outcome.hint,
    });
    err.message = redact(err.message, this.#apiKey);
    err.stack = redact(err.stack ?? "", this.#apiKey);
    return err;
  }

  async #attempt(body: string, stop: readonly string[], batch: AbortSignal): Promise<AttemptOutcome> {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.timeoutMs);
    const onBatchAbort = () => controller.abort();
    batch.addEventListener("abort", onBatchAbort, { once: true });
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json",
    };
    if (this.#apiKey !== undefined) headers.authorization = `Bearer ${this.#apiKey}`;
    let status: number | undefined;
    try {
      this.#metrics.requests++;
      const response = await this.#fetch(this.#endpoint, {
        method: "POST",
        headers,
        body,
        signal: controller.signal,
      });
      status = response.status;
      const text = await response.text();
      if (!response.ok) {
        const retryable = isRetryableStatus(status);
        const retryAfterMs = retryable ? this.#retryAfter(response.headers) : undefined;
        let hint: string | undefined;
        if (status === 401 || status === 403) {
          hint =
            this.#apiKeyEnv === undefined
              ? "the server wants an API key: pass apiKeyEnv=NAME_OF_ENV_VAR"
              : `check the key in $${this.#apiKeyEnv}`;
        } else if (status === 404) {
          hint = `check the base URL and that the server serves model "${this.model}"`;
        }
        return { ok: false, retryable, status, cause: errorBodyMessage(text), retryAfterMs, hint };
      }
      const parsed = parseChatResponse(text, stop);
      if ("error" in parsed) return { ok: false, retryable: true, status, cause: parsed.error };
      return { ok: true, generation: parsed.generation, completionTokens: parsed.completionTokens };
    } catch (err) {
      if (timedOut) {
        return { ok: false, retryable: true, status, cause: `timed out after ${this.timeoutMs} ms` };
      }
      if (batch.aborted) return { ok: false, retryable: false, status, cause: "cancelled" };
      // fetch reports network trouble (refused, reset, closed mid-body) as a TypeError.
      const code = (err as { code?: unknown; cause?: { code?: unknown } })?.cause?.code;
      const retryable = err instanceof TypeError || typeof code === "string";
      return { ok: false, retryable, status, cause: describeError(err) };
    } finally {
      clearTimeout(timer);
      batch.removeEventListener("abort", onBatchAbort);
    }
  }

  #retryAfter(headers: Headers): number | undefined {
    const ms = headers.get("retry-after-ms");
    if (ms !== null && /^\d+(\.\d+)?$/.test(ms.trim())) return Number(ms.trim());
    return parseRetryAfterMs(headers.get("retry-after"), this.#now());
  }
}
