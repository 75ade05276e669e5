/**
 * `mage env-serve`: mage's own engines (TicTacToe, Kuhn, Sokoban, MineSweeper) and their
 * opponents served over the environment protocol `mage-env/1` (docs/env-protocol.md), so the
 * protocol is exercised from both ends and other programs can play mage's tasks.
 *
 * A session is one in-process `TextTask`; the wire seeds become `Rng.seeded(seed)` and
 * `Rng.seeded(opponentSeed)` (`wireRngs` in src/tasks/remote.ts maps the runner's streams the same
 * way, which is what makes in-process and served play identical). Written on `node:http` because
 * the protocol is four small JSON endpoints; a framework would add a dependency and nothing else.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { type InfoReply, PROTOCOL_VERSION } from "../env/protocol.js";
import { bearerCheck } from "./auth.js";
import { describeEnvironments } from "./env-catalog.js";
import { EnvSessions } from "./env-sessions.js";
import { fail, HttpError, isObj, shuttingDown } from "./env-wire.js";
import { BodyTooLargeError, readLimitedBody, STALL_LIMITS } from "./http-body.js";
import { InFlight } from "./in-flight.js";
import { defaultPoolSize, type OpponentPool } from "./opponent-pool.js";
import { type OpponentLimits, opponentLimits } from "./served-opponents.js";

export interface EnvServerOptions {
  host?: string;
  port?: number;
  /** Idle sessions older than this are dropped (default 600 s). */
  sessionTtlSeconds?: number;
  /** Live sessions at most; a /create past it gets 503 `too_many_sessions` (default 20 000). */
  maxSessions?: number;
  /** Largest request body (default 1 MiB). */
  maxBodyBytes?: number;
  /** Largest argument per opponent kind ("mcts", "cfr", …); kinds left out keep the registry's limit. */
  opponentLimits?: Readonly<Record<string, number>>;
  /** Worker threads that play the heavy opponents' moves (default: the cores, at most 4). */
  opponentThreads?: number;
  /** Time one /create, /step or /restart may spend on opponent moves, queued or thinking (default 5000 ms). */
  timeBudgetMs?: number;
  /** When set, every endpoint but GET /health needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string | null;
  /** On close, how long requests in flight may take to finish before their moves are cancelled (default 2000 ms). */
  shutdownGraceMs?: number;
  log?: (line: string) => void;
}

export const ENV_SERVER_DEFAULTS = {
  sessionTtlSeconds: 600,
  // A big run's concurrency: kuhn-mage's final evaluation (8 cells × 2,000 trials) holds 16,000
  // sessions at once; about 5 KB each, so the cap is about 100 MB.
  maxSessions: 20_000,
  maxBodyBytes: 1 << 20,
  timeBudgetMs: 5000,
  shutdownGraceMs: 2000,
} as const;

export interface EnvServerHandle {
  readonly url: string;
  readonly server: Server;
  /** Sessions open now. */
  readonly sessions: number;
  /** The opponent limits in force. */
  readonly limits: OpponentLimits;
  readonly pool: OpponentPool;
  /**
   * Stops accepting connections, lets requests in flight finish for up to `shutdownGraceMs`,
   * then cancels the opponent moves still running (their requests answer 503 `shutting_down`),
   * drops every session and closes every connection.
   */
  close(): Promise<void>;
}

type Body = Record<string, unknown>;

/** How requests reach the sessions: the endpoints, the key check, the body limit and /info's text. */
interface Routes {
  endpoints: Record<string, (b: Body) => Promise<string> | string>;
  authorized: (req: IncomingMessage) => boolean;
  closing: () => boolean;
  maxBody: number;
  infoText: string;
}

export async function startEnvServer(options: EnvServerOptions = {}): Promise<EnvServerHandle> {
  const ttlMs = (options.sessionTtlSeconds ?? ENV_SERVER_DEFAULTS.sessionTtlSeconds) * 1000;
  const graceMs = options.shutdownGraceMs ?? ENV_SERVER_DEFAULTS.shutdownGraceMs;
  const log = options.log ?? (() => {});
  const limits = opponentLimits(options.opponentLimits);
  const environments = await describeEnvironments(limits);
  const info: InfoReply = {
    protocol: PROTOCOL_VERSION,
    server: "mage env-serve",
    sessionTtlSeconds: ttlMs / 1000,
    environments,
  };
  const sessions = new EnvSessions(
    environments,
    limits,
    options.opponentThreads ?? defaultPoolSize(),
    options.maxSessions ?? ENV_SERVER_DEFAULTS.maxSessions,
    ttlMs,
    options.timeBudgetMs ?? ENV_SERVER_DEFAULTS.timeBudgetMs,
  );
  let closing = false;
  const routes: Routes = {
    endpoints: {
      "/create": (b) => sessions.create(b),
      "/step": (b) => sessions.step(b),
      "/restart": (b) => sessions.restart(b),
      "/close": (b) => sessions.close(b),
    },
    authorized: bearerCheck(options.apiKey),
    closing: () => closing,
    maxBody: options.maxBodyBytes ?? ENV_SERVER_DEFAULTS.maxBodyBytes,
    infoText: JSON.stringify(info),
  };
  const inFlight = new InFlight();
  const server = createServer(STALL_LIMITS, (req, res) => {
    inFlight.enter();
    res.once("close", () => inFlight.leave());
    route(routes, req).then(
      (text) => send(res, 200, text),
      (err: unknown) => sendFailure(res, err, log),
    );
  });
  server.keepAliveTimeout = 30_000;
  const sockets = new Set<Socket>();
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  const sweep = setInterval(() => sessions.sweep(), Math.min(60_000, Math.max(1000, ttlMs / 2)));
  sweep.unref();
  await listen(server, options);
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;

  let closed: Promise<void> | undefined;
  return {
    url: `http://${shownHost}:${addr.port}`,
    server,
    limits,
    pool: sessions.pool,
    get sessions() {
      return sessions.size;
    },
    close() {
      closed ??= (async () => {
        closing = true;
        clearInterval(sweep);
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await inFlight.idle(graceMs);
        // Moves still thinking are cancelled; their requests answer 503 shutting_down.
        await sessions.pool.close();
        await inFlight.idle(500);
        sessions.clear();
        for (const s of sockets) s.destroy();
        await stopped;
      })();
      return closed;
    },
  };
}

async function listen(server: Server, options: EnvServerOptions): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/** The reply text of one request, or the `HttpError` it fails with. */
async function route(routes: Routes, req: IncomingMessage): Promise<string> {
  const path = (req.url ?? "/").split("?")[0];
  if (req.method === "GET" && path === "/health") return JSON.stringify({ status: "ok" });
  if (!routes.authorized(req))
    throw fail(
      401,
      "unauthorized",
      "missing or wrong API key: send 'Authorization: Bearer KEY' (a game: remote config names the variable that holds it in env.apiKeyEnv)",
      {},
      { "www-authenticate": "Bearer" },
    );
  if (routes.closing()) throw shuttingDown();
  if (req.method === "GET" && path === "/info") return routes.infoText;
  const handler = routes.endpoints[path];
  if (!handler || req.method !== "POST") {
    throw fail(
      404,
      "not_found",
      `no endpoint ${req.method} ${path}; endpoints: GET /info, GET /health, POST ${Object.keys(routes.endpoints).join(", ")}`,
    );
  }
  return handler(await readObjectBody(req, routes.maxBody));
}

/** The request body, which must be a JSON object of at most `maxBody` bytes. */
async function readObjectBody(req: IncomingMessage, maxBody: number): Promise<Body> {
  let text: string;
  try {
    text = (await readLimitedBody(req, maxBody)).toString("utf8");
  } catch (err) {
    if (err instanceof BodyTooLargeError)
      throw fail(413, "bad_request", `request body over ${maxBody} bytes`);
    throw err;
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw fail(400, "bad_request", "the request body is not JSON");
  }
  if (!isObj(body)) throw fail(400, "bad_request", "the request body must be a JSON object");
  return body;
}

function send(res: ServerResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function sendFailure(res: ServerResponse, err: unknown, log: (line: string) => void): void {
  if (err instanceof HttpError) {
    send(res, err.status, JSON.stringify({ error: err.body }), err.headers);
    return;
  }
  log(`env-serve: internal error: ${(err as Error).stack ?? String(err)}`);
  send(res, 500, JSON.stringify({ error: { kind: "internal", message: (err as Error).message } }));
}
