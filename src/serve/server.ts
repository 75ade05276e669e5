/**
 * `mage serve`'s HTTP server (node:http): an OpenAI-compatible API over a `ServeBackend` (backend.ts):
 * the embedded model, or a Hugging Face model sampled by the PyTorch worker.
 *
 *   GET  /v1/models, /v1/models/{id}
 *   POST /v1/chat/completions   messages → the mage chat template → sample
 *   POST /v1/completions        prompt text (special-token text such as `<|user|>` is read as
 *                               those tokens; no BOS is added; backends with a tokenizer only)
 *                               or token ids → sample
 *   GET  /health
 *
 * Requests arriving within a few ms are sampled together in one sampler call (`Batcher`).
 * Streaming (`stream: true`) answers with SSE `data:` chunks — one per token as it is sampled
 * (the sampler yields to the event loop after every decode step), then the finish chunk, an
 * optional usage chunk and `data: [DONE]`. Text that could still turn into a stop string or is
 * waiting for UTF-8 bytes is held back a token or two. With top log-probs asked for, which come
 * from a second pass over the finished generation, the chunks are written once the batch is done.
 * A backend without a tokenizer in this process (the PyTorch worker's) streams each reply as one
 * content chunk once its batch is done, and refuses log-probs and text completion prompts (400).
 *
 * Limits, answered with OpenAI-style `{"error": {message, type, param, code}}` bodies:
 * body size (413), `max_tokens` above the server's cap or past the context (400), more than
 * `maxConcurrent` requests in flight (429), unknown model (404), bad fields (400), a missing or
 * wrong API key when one is configured (401, checked on every request but GET /health). The key is compared in
 * constant time and never logged; the access log has method, path, status, time and tokens only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Rng } from "../core/rng.js";
import type { Tokenizer } from "../model/tokenizer.js";
import { bearerCheck } from "./auth.js";
import type { ServeBackend } from "./backend.js";
import { Batcher, ShutdownError } from "./batcher.js";
import { BodyTooLargeError, readLimitedBody, STALL_LIMITS } from "./http-body.js";
import { InFlight } from "./in-flight.js";
import {
  ApiError,
  type ChatRequest,
  type CompletionRequest,
  chatLogprobEntries,
  completionLogprobs,
  encodeWithSpecials,
  type GenJob,
  type GenResult,
  parseChatRequest,
  parseCompletionRequest,
  resolveMaxTokens,
  type ServeLimits,
  StreamText,
  streamPieces,
  type TokenView,
  tokenView,
} from "./protocol.js";

/** A generation with no tokens, to build one-token views of a stream from. */
const NO_TOKENS: GenResult = {
  tokenIds: [],
  logprobs: [],
  finishReason: "length",
  stopString: null,
  promptTokens: 0,
  top: null,
};

export const SERVE_DEFAULTS = {
  host: "127.0.0.1",
  port: 8000,
  maxConcurrent: 64,
  maxTokens: 256,
  maxBodyBytes: 1024 * 1024,
  batchWindowMs: 5,
  batchMaxWaitMs: 50,
  maxBatch: 64,
  shutdownGraceMs: 10_000,
} as const;

export interface ServeOptions {
  /** The model: the embedded `ServeEngine`, or a `TorchServeBackend`; closed with the server. */
  engine: ServeBackend;
  /** The name clients pass as `model`. */
  modelName: string;
  /** Interface to listen on (default 127.0.0.1, loopback only). */
  host?: string;
  /** Port (default 8000; 0 picks a free one). */
  port?: number;
  /** When set, every request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string | null;
  /** Most generation requests in flight (queued, sampling or streaming); more get 429. */
  maxConcurrent?: number;
  /** Most new tokens per choice; also the default when a request gives no max_tokens. */
  maxTokens?: number;
  /** Largest request body in bytes (default 1 MiB); larger gets 413. */
  maxBodyBytes?: number;
  /** A batch starts once no request has arrived for this many ms (default 5)... */
  batchWindowMs?: number;
  /** ...or this many ms after its first request arrived (default 50). */
  batchMaxWaitMs?: number;
  /** Most sequences per sampler call (default 64). */
  maxBatch?: number;
  /** Seed of the stream that draws seeds for requests that give none (default: time-based). */
  seed?: number;
  /** On close, how long requests in flight may take to finish before they are cancelled (default 10 000 ms). */
  shutdownGraceMs?: number;
  /** Access log sink (one line per request); default none. */
  log?: (line: string) => void;
}

export interface ServeStats {
  requests: number;
  inFlight: number;
  promptTokens: number;
  completionTokens: number;
  samplerCalls: number;
  largestBatch: number;
}

export interface ServeHandle {
  /** `http://host:port` */
  url: string;
  /** `http://host:port/v1`, what OpenAI clients take as base URL. */
  baseUrl: string;
  host: string;
  port: number;
  server: Server;
  stats(): ServeStats;
  /**
   * Stops accepting requests and lets the ones in flight finish for up to `shutdownGraceMs`; then
   * cancels the rest (sampling stops at its next decode step; they answer 503 `shutting_down`),
   * closes every connection and then the backend.
   */
  close(): Promise<void>;
}

function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  extra: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    ...extra,
  });
  res.end(text);
}

function sendError(res: ServerResponse, err: ApiError, extra: Record<string, string> = {}): void {
  if (res.headersSent) {
    // A stream already under way: say what went wrong as its last event.
    if (String(res.getHeader("content-type") ?? "").startsWith("text/event-stream") && !res.writableEnded)
      res.write(`data: ${JSON.stringify(err.body())}\n\n`);
    res.end();
    return;
  }
  sendJson(res, err.status, err.body(), extra);
}

/** Reads the body; past `limit` bytes an OpenAI-style 413 at once (the rest is drained, not kept). */
async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  try {
    return await readLimitedBody(req, limit);
  } catch (err) {
    if (!(err instanceof BodyTooLargeError)) throw err;
    throw new ApiError(
      413,
      `request body exceeds ${limit} bytes`,
      "invalid_request_error",
      null,
      "request_too_large",
    );
  }
}

export async function startServer(options: ServeOptions): Promise<ServeHandle> {
  const engine = options.engine;
  const tok = engine.tokenizer;
  const modelName = options.modelName;
  const host = options.host ?? SERVE_DEFAULTS.host;
  const maxConcurrent = options.maxConcurrent ?? SERVE_DEFAULTS.maxConcurrent;
  const maxBodyBytes = options.maxBodyBytes ?? SERVE_DEFAULTS.maxBodyBytes;
  const limits: ServeLimits = {
    contextLength: engine.contextLength,
    maxTokens: options.maxTokens ?? SERVE_DEFAULTS.maxTokens,
  };
  const authorized = bearerCheck(options.apiKey);
  const graceMs = options.shutdownGraceMs ?? SERVE_DEFAULTS.shutdownGraceMs;
  const batcher = new Batcher(engine, {
    windowMs: options.batchWindowMs ?? SERVE_DEFAULTS.batchWindowMs,
    maxWaitMs: options.batchMaxWaitMs ?? SERVE_DEFAULTS.batchMaxWaitMs,
    maxBatch: options.maxBatch ?? SERVE_DEFAULTS.maxBatch,
  });
  const seeds = Rng.seeded(options.seed ?? Date.now()).derive("serve-seeds");
  const ids = Rng.seeded(options.seed ?? Date.now()).derive("serve-ids");
  const created = Math.floor(Date.now() / 1000);
  const log = options.log ?? (() => {});
  // What the server counts itself; in-flight requests and the sampler's figures are read when asked.
  const stats: Omit<ServeStats, "inFlight" | "samplerCalls" | "largestBatch"> = {
    requests: 0,
    promptTokens: 0,
    completionTokens: 0,
  };
  let counter = 0;
  let closing = false;
  const inFlight = new InFlight();

  const newId = (prefix: string): string =>
    `${prefix}-${(++counter).toString(36)}${ids.nextU32().toString(16).padStart(8, "0")}`;

  /** Counts the tokens in the server's stats and returns the OpenAI `usage` object. */
  const recordUsage = (promptTokens: number, completionTokens: number) => {
    stats.promptTokens += promptTokens;
    stats.completionTokens += completionTokens;
    return {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    };
  };

  /** The fields every response and stream chunk starts with. */
  const responseHead = (id: string, object: string, created: number) => ({
    id,
    object,
    created,
    model: modelName,
    system_fingerprint: engine.fingerprint,
  });

  const modelCard = () => ({ id: modelName, object: "model", created, owned_by: "mage" });

  function checkModel(model: string): void {
    if (model !== modelName)
      throw new ApiError(
        404,
        `the model "${model}" does not exist; this server serves "${modelName}"`,
        "invalid_request_error",
        "model",
        "model_not_found",
      );
  }

  function seedFor(requestSeed: number | null): number {
    return requestSeed ?? seeds.nextU32();
  }

  /**
   * The backend's tokenizer for a feature that needs one (log-probs, text prompts); a backend
   * without one refuses the request with a 400 naming `param`.
   */
  function tokenizerFor(param: string, what: string): Tokenizer {
    if (tok) return tok;
    throw new ApiError(
      400,
      `${what} not supported for this model: it is sampled out of process and this server has no tokenizer of it`,
      "invalid_request_error",
      param,
      "unsupported_parameter",
    );
  }

  /** What completion log-probs need: the tokenizer (token texts, their offsets) and a token view. */
  function completionLogprobTools(k: number, asIds: boolean): { k: number; tok: Tokenizer; view: TokenView } {
    const t = tokenizerFor("logprobs", "logprobs are");
    return { k, tok: t, view: tokenView(t, asIds) };
  }

  /** The generation's own text, else its ids decoded with the backend's tokenizer. */
  function textOf(r: GenResult, bodyIds: readonly number[]): string {
    if (r.text !== undefined) return r.text;
    if (!tok) throw new Error("the backend returned a generation without text and has no tokenizer");
    return tok.decode(bodyIds);
  }

  /**
   * A finished reply's stream pieces: one per token with the backend's tokenizer (their texts add
   * up to `content`), else the whole reply as one piece.
   */
  function streamSpans(
    r: GenResult,
    bodyIds: readonly number[],
    content: string,
  ): { text: string; from: number; to: number }[] {
    if (r.tokenIds.length === 0) return [];
    if (!tok) return [{ text: content, from: 0, to: r.tokenIds.length }];
    const pieces = streamPieces(tok, bodyIds, content);
    return r.tokenIds.map((_, t) => ({ text: pieces[t] ?? "", from: t, to: t + 1 }));
  }

  /** Content of a generation: decoded ids without a final stop-id token, cut before a stop string. */
  function contentOf(r: GenResult, stopIds: readonly number[]): { bodyIds: number[]; content: string } {
    const ids = r.tokenIds;
    const last = ids[ids.length - 1];
    const bodyIds =
      r.finishReason === "stop" && r.stopString === null && stopIds.includes(last) ? ids.slice(0, -1) : ids;
    let content = textOf(r, bodyIds);
    if (r.stopString !== null) {
      const at = content.indexOf(r.stopString);
      if (at >= 0) content = content.slice(0, at);
    }
    return { bodyIds, content };
  }

  async function handleChat(body: unknown, res: ServerResponse, aborted: () => boolean): Promise<number> {
    const r: ChatRequest = parseChatRequest(body, limits, engine.vocabSize);
    checkModel(r.model);
    const view: TokenView | null = r.logprobs
      ? tokenView(tokenizerFor("logprobs", "logprobs are"), r.tokensAsIds)
      : null;
    // The prompt may render in another process (the PyTorch worker): the batch waits for it.
    const promptIds = await engine.chatPrompt(r.messages).finally(batcher.expect());
    const maxTokens = resolveMaxTokens(
      promptIds.length,
      r.maxTokens,
      limits,
      body && (body as Record<string, unknown>).max_completion_tokens != null
        ? "max_completion_tokens"
        : "max_tokens",
    );
    const base = seedFor(r.seed);
    const stopIds = [...engine.chatStopIds];
    const jobs: GenJob[] = Array.from({ length: r.n }, (_, i) => ({
      promptIds,
      sampling: { ...r.sampling, maxTokens },
      seed: (base + i) >>> 0,
      stopIds,
      topLogprobs: r.logprobs ? r.topLogprobs : 0,
    }));
    const id = newId("chatcmpl");
    const now = Math.floor(Date.now() / 1000);
    const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => {
      if (!aborted()) writeSse(res, { ...responseHead(id, "chat.completion.chunk", now), choices, ...extra });
    };
    // Tokens go out as they are sampled, unless top log-probs are asked for: those come from a
    // second pass over the finished generation, so such a stream is sent once the batch is done
    // (as is every stream of a backend without a tokenizer here).
    const liveTok = r.stream && !(r.logprobs && r.topLogprobs > 0) ? tok : null;
    const live = liveTok !== null;
    const texts = liveTok ? jobs.map(() => new StreamText(liveTok, r.sampling.stop ?? [], stopIds)) : [];
    if (live) {
      startSse(res);
      jobs.forEach((job, index) => {
        chunk([{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
        job.onToken = (tokenId, logprob) => {
          const one: GenResult = { ...NO_TOKENS, tokenIds: [tokenId], logprobs: [logprob] };
          chunk([
            {
              index,
              delta: { content: texts[index].push(tokenId) },
              logprobs: view ? { content: chatLogprobEntries(one, view) } : null,
              finish_reason: null,
              token_ids: [tokenId],
            },
          ]);
        };
      });
    }
    const results = await batcher.submitAll(jobs, aborted);
    const completionTokens = results.reduce((s, x) => s + x.tokenIds.length, 0);
    const usage = recordUsage(promptIds.length, completionTokens);
    if (!r.stream) {
      sendJson(res, 200, {
        ...responseHead(id, "chat.completion", now),
        choices: results.map((x, index) => {
          const { content } = contentOf(x, stopIds);
          return {
            index,
            message: { role: "assistant", content },
            logprobs: view ? { content: chatLogprobEntries(x, view) } : null,
            finish_reason: x.finishReason,
            stop_reason: x.stopString,
            token_ids: x.tokenIds,
            seed: jobs[index].seed,
          };
        }),
        usage,
      });
      return completionTokens;
    }
    if (!live) startSse(res);
    results.forEach((x, index) => {
      const { bodyIds, content } = contentOf(x, stopIds);
      if (live) {
        const rest = texts[index].finish(content);
        if (rest) chunk([{ index, delta: { content: rest }, logprobs: null, finish_reason: null }]);
      } else {
        streamAfter(x, index, bodyIds, content);
      }
      chunk([
        {
          index,
          delta: {},
          logprobs: null,
          finish_reason: x.finishReason,
          stop_reason: x.stopString,
          seed: jobs[index].seed,
        },
      ]);
    });
    if (r.includeUsage) chunk([], { usage });
    endSse(res);
    return completionTokens;

    function streamAfter(x: GenResult, index: number, bodyIds: number[], content: string): void {
      chunk([{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
      for (const { text, from, to } of streamSpans(x, bodyIds, content)) {
        chunk([
          {
            index,
            delta: { content: text },
            logprobs: view ? { content: chatLogprobEntries(x, view, from, to) } : null,
            finish_reason: null,
            token_ids: x.tokenIds.slice(from, to),
          },
        ]);
      }
    }
  }

  async function handleCompletion(
    body: unknown,
    res: ServerResponse,
    aborted: () => boolean,
  ): Promise<number> {
    const r: CompletionRequest = parseCompletionRequest(body, limits, engine.vocabSize);
    checkModel(r.model);
    const lp = r.logprobs !== null ? completionLogprobTools(r.logprobs, r.tokensAsIds) : null;
    const stopIds = [...engine.completionStopIds];
    const base = seedFor(r.seed);
    const jobs: GenJob[] = [];
    const promptLens: number[] = [];
    for (const p of r.prompts) {
      const promptIds =
        typeof p === "string" ? encodeWithSpecials(tokenizerFor("prompt", "text prompts are"), p) : [...p];
      const maxTokens = resolveMaxTokens(promptIds.length, r.maxTokens, limits);
      promptLens.push(promptIds.length);
      for (let i = 0; i < r.n; i++)
        jobs.push({
          promptIds,
          sampling: { ...r.sampling, maxTokens },
          seed: (base + jobs.length) >>> 0,
          stopIds,
          topLogprobs: r.logprobs ?? 0,
        });
    }
    const id = newId("cmpl");
    const now = Math.floor(Date.now() / 1000);
    const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => {
      if (!aborted())
        writeSse(res, { id, object: "text_completion", created: now, model: modelName, choices, ...extra });
    };
    // As for chat: live unless top log-probs (a second pass after sampling) are asked for.
    const liveTok = r.stream && !(r.logprobs !== null && r.logprobs > 0) ? tok : null;
    const live = liveTok !== null;
    const texts = liveTok ? jobs.map(() => new StreamText(liveTok, r.sampling.stop ?? [], stopIds)) : [];
    if (liveTok) {
      startSse(res);
      jobs.forEach((job, index) => {
        let offset = 0;
        job.onToken = (tokenId, logprob) => {
          const one: GenResult = { ...NO_TOKENS, tokenIds: [tokenId], logprobs: [logprob] };
          chunk([
            {
              index,
              text: texts[index].push(tokenId),
              logprobs: lp ? completionLogprobs(one, lp.view, lp.tok, 0, 0, 1, offset) : null,
              finish_reason: null,
              token_ids: [tokenId],
            },
          ]);
          offset += liveTok.tokenText(tokenId).length;
        };
      });
    }
    const results = await batcher.submitAll(jobs, aborted);
    const completionTokens = results.reduce((s, x) => s + x.tokenIds.length, 0);
    const promptTokens = promptLens.reduce((a, b) => a + b, 0);
    const usage = recordUsage(promptTokens, completionTokens);
    if (!r.stream) {
      sendJson(res, 200, {
        ...responseHead(id, "text_completion", now),
        choices: results.map((x, index) => {
          const { content } = contentOf(x, stopIds);
          return {
            index,
            text: content,
            logprobs: lp ? completionLogprobs(x, lp.view, lp.tok, lp.k) : null,
            finish_reason: x.finishReason,
            stop_reason: x.stopString,
            token_ids: x.tokenIds,
            seed: jobs[index].seed,
          };
        }),
        usage,
      });
      return completionTokens;
    }
    if (!live) startSse(res);
    results.forEach((x, index) => {
      const { bodyIds, content } = contentOf(x, stopIds);
      if (live) {
        const rest = texts[index].finish(content);
        if (rest) chunk([{ index, text: rest, logprobs: null, finish_reason: null }]);
      } else {
        streamAfter(x, index, bodyIds, content);
      }
      chunk([
        {
          index,
          text: "",
          logprobs: null,
          finish_reason: x.finishReason,
          stop_reason: x.stopString,
          seed: jobs[index].seed,
        },
      ]);
    });
    if (r.includeUsage) chunk([], { usage });
    endSse(res);
    return completionTokens;

    function streamAfter(x: GenResult, index: number, bodyIds: number[], content: string): void {
      let offset = 0;
      for (const { text, from, to } of streamSpans(x, bodyIds, content)) {
        chunk([
          {
            index,
            text,
            logprobs: lp ? completionLogprobs(x, lp.view, lp.tok, lp.k, from, to, offset) : null,
            finish_reason: null,
            token_ids: x.tokenIds.slice(from, to),
          },
        ]);
        if (lp) for (const id of x.tokenIds.slice(from, to)) offset += lp.tok.tokenText(id).length;
      }
    }
  }

  function startSse(res: ServerResponse): void {
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
    });
  }
  function writeSse(res: ServerResponse, obj: unknown): void {
    res.write(`data: ${JSON.stringify(obj)}\n\n`);
  }
  function endSse(res: ServerResponse): void {
    res.end("data: [DONE]\n\n");
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    const url = new URL(req.url ?? "/", "http://localhost");
    const path = url.pathname.replace(/\/+$/, "") || "/";
    let generation = false;
    let tokens = 0;
    stats.requests++;
    try {
      // The health check needs no key (load balancers, supervisors); it names the model only to key holders.
      if (path === "/health" && req.method === "GET") {
        sendJson(res, 200, { status: "ok", ...(authorized(req) ? { model: modelName } : {}) });
        return;
      }
      if (!authorized(req))
        throw new ApiError(
          401,
          "missing or incorrect API key (send it as 'Authorization: Bearer KEY')",
          "invalid_request_error",
          null,
          "invalid_api_key",
        );
      if (path === "/v1/models" && req.method === "GET") {
        sendJson(res, 200, { object: "list", data: [modelCard()] });
        return;
      }
      if (path.startsWith("/v1/models/") && req.method === "GET") {
        checkModel(decodeURIComponent(path.slice("/v1/models/".length)));
        sendJson(res, 200, modelCard());
        return;
      }
      const isChat = path === "/v1/chat/completions";
      const isCompletion = path === "/v1/completions";
      if (!isChat && !isCompletion) {
        const known = path === "/v1/models" || path === "/health";
        throw new ApiError(
          known ? 405 : 404,
          known ? `${req.method} is not allowed on ${path}` : `no route ${req.method} ${path}`,
          "invalid_request_error",
        );
      }
      if (req.method !== "POST") throw new ApiError(405, `${path} takes POST`, "invalid_request_error");
      if (closing)
        throw new ApiError(503, "the server is shutting down", "server_error", null, "shutting_down");
      if (inFlight.count >= maxConcurrent)
        throw new ApiError(
          429,
          `too many concurrent requests (the limit is ${maxConcurrent}); retry shortly`,
          "rate_limit_error",
          null,
          "rate_limit_exceeded",
        );
      generation = true;
      inFlight.enter();
      const raw = await readBody(req, maxBodyBytes);
      let body: unknown;
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        throw new ApiError(
          400,
          "the request body is not valid JSON",
          "invalid_request_error",
          null,
          "invalid_json",
        );
      }
      let gone = false;
      res.on("close", () => {
        if (!res.writableFinished) gone = true;
      });
      const aborted = () => gone;
      tokens = isChat ? await handleChat(body, res, aborted) : await handleCompletion(body, res, aborted);
    } catch (caught) {
      const err =
        caught instanceof ShutdownError
          ? new ApiError(503, "the server is shutting down", "server_error", null, "shutting_down")
          : caught;
      if (err instanceof ApiError) {
        sendError(res, err, err.status === 429 ? { "retry-after": "1" } : {});
      } else {
        const message = err instanceof Error ? err.message : String(err);
        sendError(res, new ApiError(500, `internal error: ${message}`, "server_error"));
      }
    } finally {
      if (generation) inFlight.leave();
      log(
        `${req.method} ${path} ${res.statusCode} ${(performance.now() - t0).toFixed(1)}ms` +
          (generation ? ` tokens=${tokens}` : ""),
      );
    }
  }

  // Stalled clients: headers within 10 s, the whole request within 60 s (checked every second).
  const server = createServer(STALL_LIMITS, (req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) sendJson(res, 500, new ApiError(500, String(err), "server_error").body());
      else res.end();
    });
  });
  // A prefill of a big batch blocks the event loop for a while; a short keep-alive timeout would
  // then fire late, right when a client reuses the idle connection (ECONNRESET). Keep idle
  // sockets longer.
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? SERVE_DEFAULTS.port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  const urlBase = `http://${shownHost}:${addr.port}`;
  let closed: Promise<void> | null = null;
  return {
    url: urlBase,
    baseUrl: `${urlBase}/v1`,
    host: addr.address,
    port: addr.port,
    server,
    stats: () => ({
      ...stats,
      inFlight: inFlight.count,
      samplerCalls: engine.calls,
      largestBatch: engine.largestBatch,
    }),
    close() {
      if (closed) return closed;
      closing = true;
      closed = (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await inFlight.idle(graceMs);
        // Past the grace: what is left is cancelled and answers 503.
        batcher.cancel();
        await Promise.race([batcher.idle(), new Promise((r) => setTimeout(r, 2000).unref())]);
        await inFlight.idle(500);
        server.closeAllConnections();
        await stopped;
        await engine.close();
      })();
      return closed;
    },
  };
}
