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
 *
 * This module routes and guards requests; the endpoints are chat-endpoint.ts and
 * completion-endpoint.ts, which share sampling and answering (reply.ts) and the server's state
 * (serve-context.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Rng } from "../core/rng.js";
import { bearerCheck } from "./auth.js";
import type { ServeBackend } from "./backend.js";
import { Batcher, ShutdownError } from "./batcher.js";
import { handleChat } from "./chat-endpoint.js";
import { handleCompletion } from "./completion-endpoint.js";
import { STALL_LIMITS } from "./http-body.js";
import { InFlight } from "./in-flight.js";
import { ApiError } from "./protocol.js";
import { readJsonBody, sendError, sendJson } from "./respond.js";
import { ServeContext } from "./serve-context.js";

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

/** What a request may do once it has passed the key check, and how the server counts it. */
interface Gate {
  authorized: (req: IncomingMessage) => boolean;
  maxConcurrent: number;
  maxBodyBytes: number;
  inFlight: InFlight;
  closing: () => boolean;
}

const shuttingDown = () =>
  new ApiError(503, "the server is shutting down", "server_error", null, "shutting_down");

export async function startServer(options: ServeOptions): Promise<ServeHandle> {
  const engine = options.engine;
  const batcher = new Batcher(engine, {
    windowMs: options.batchWindowMs ?? SERVE_DEFAULTS.batchWindowMs,
    maxWaitMs: options.batchMaxWaitMs ?? SERVE_DEFAULTS.batchMaxWaitMs,
    maxBatch: options.maxBatch ?? SERVE_DEFAULTS.maxBatch,
  });
  const seed = options.seed ?? Date.now();
  const ctx = new ServeContext(
    engine,
    options.modelName,
    { contextLength: engine.contextLength, maxTokens: options.maxTokens ?? SERVE_DEFAULTS.maxTokens },
    batcher,
    Rng.seeded(seed).derive("serve-seeds"),
    Rng.seeded(seed).derive("serve-ids"),
  );
  let closing = false;
  const gate: Gate = {
    authorized: bearerCheck(options.apiKey),
    maxConcurrent: options.maxConcurrent ?? SERVE_DEFAULTS.maxConcurrent,
    maxBodyBytes: options.maxBodyBytes ?? SERVE_DEFAULTS.maxBodyBytes,
    inFlight: new InFlight(),
    closing: () => closing,
  };
  const log = options.log ?? (() => {});
  const server = await listen(options, (req, res) => handle(ctx, gate, log, req, res));
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  const urlBase = `http://${shownHost}:${addr.port}`;
  const graceMs = options.shutdownGraceMs ?? SERVE_DEFAULTS.shutdownGraceMs;
  let closed: Promise<void> | null = null;
  return {
    url: urlBase,
    baseUrl: `${urlBase}/v1`,
    host: addr.address,
    port: addr.port,
    server,
    stats: () => ({
      ...ctx.counts,
      inFlight: gate.inFlight.count,
      samplerCalls: engine.calls,
      largestBatch: engine.largestBatch,
    }),
    close() {
      if (closed) return closed;
      closing = true;
      closed = shutDown(server, gate.inFlight, batcher, engine, graceMs);
      return closed;
    },
  };
}

/** Starts listening; stalled clients must send headers within 10 s, the whole request within 60 s. */
async function listen(
  options: ServeOptions,
  handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>,
): Promise<Server> {
  const server = createServer(STALL_LIMITS, (req, res) => {
    handler(req, res).catch((err) => {
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
    server.listen(options.port ?? SERVE_DEFAULTS.port, options.host ?? SERVE_DEFAULTS.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return server;
}

/**
 * Lets requests in flight finish for up to `graceMs`, then cancels the rest (they answer 503),
 * closes every connection and then the backend.
 */
async function shutDown(
  server: Server,
  inFlight: InFlight,
  batcher: Batcher,
  engine: ServeBackend,
  graceMs: number,
): Promise<void> {
  const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  await inFlight.idle(graceMs);
  batcher.cancel();
  await Promise.race([batcher.idle(), new Promise((r) => setTimeout(r, 2000).unref())]);
  await inFlight.idle(500);
  server.closeAllConnections();
  await stopped;
  await engine.close();
}

/** Answers one request, turns what it throws into an OpenAI-style error and logs it. */
async function handle(
  ctx: ServeContext,
  gate: Gate,
  log: (line: string) => void,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const t0 = performance.now();
  const path = new URL(req.url ?? "/", "http://localhost").pathname.replace(/\/+$/, "") || "/";
  const outcome = { generation: false, tokens: 0 };
  ctx.counts.requests++;
  try {
    await route(ctx, gate, req, res, path, outcome);
  } catch (caught) {
    const err = caught instanceof ShutdownError ? shuttingDown() : caught;
    if (err instanceof ApiError) {
      sendError(res, err, err.status === 429 ? { "retry-after": "1" } : {});
    } else {
      const message = err instanceof Error ? err.message : String(err);
      sendError(res, new ApiError(500, `internal error: ${message}`, "server_error"));
    }
  } finally {
    if (outcome.generation) gate.inFlight.leave();
    log(
      `${req.method} ${path} ${res.statusCode} ${(performance.now() - t0).toFixed(1)}ms` +
        (outcome.generation ? ` tokens=${outcome.tokens}` : ""),
    );
  }
}

async function route(
  ctx: ServeContext,
  gate: Gate,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  outcome: { generation: boolean; tokens: number },
): Promise<void> {
  // The health check needs no key (load balancers, supervisors); it names the model only to key holders.
  if (path === "/health" && req.method === "GET") {
    sendJson(res, 200, { status: "ok", ...(gate.authorized(req) ? { model: ctx.modelName } : {}) });
    return;
  }
  if (!gate.authorized(req))
    throw new ApiError(
      401,
      "missing or incorrect API key (send it as 'Authorization: Bearer KEY')",
      "invalid_request_error",
      null,
      "invalid_api_key",
    );
  if (path === "/v1/models" && req.method === "GET") {
    sendJson(res, 200, { object: "list", data: [ctx.modelCard()] });
    return;
  }
  if (path.startsWith("/v1/models/") && req.method === "GET") {
    ctx.checkModel(decodeURIComponent(path.slice("/v1/models/".length)));
    sendJson(res, 200, ctx.modelCard());
    return;
  }
  const handler =
    path === "/v1/chat/completions" ? handleChat : path === "/v1/completions" ? handleCompletion : null;
  if (!handler) {
    const known = path === "/v1/models" || path === "/health";
    throw new ApiError(
      known ? 405 : 404,
      known ? `${req.method} is not allowed on ${path}` : `no route ${req.method} ${path}`,
      "invalid_request_error",
    );
  }
  if (req.method !== "POST") throw new ApiError(405, `${path} takes POST`, "invalid_request_error");
  if (gate.closing()) throw shuttingDown();
  if (gate.inFlight.count >= gate.maxConcurrent)
    throw new ApiError(
      429,
      `too many concurrent requests (the limit is ${gate.maxConcurrent}); retry shortly`,
      "rate_limit_error",
      null,
      "rate_limit_exceeded",
    );
  outcome.generation = true;
  gate.inFlight.enter();
  const body = await readJsonBody(req, gate.maxBodyBytes);
  let gone = false;
  res.on("close", () => {
    if (!res.writableFinished) gone = true;
  });
  outcome.tokens = await handler(ctx, body, res, () => gone);
}
