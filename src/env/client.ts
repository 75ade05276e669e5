/**
 * The HTTP client of the environment protocol (docs/env-protocol.md): one per served
 * environment URL, shared by every remote task of a run.
 *
 * Each request has a timeout (`timeoutMs`). A timeout, a refused or dropped connection and a 5xx
 * reply are retried up to `retries` more times with exponential backoff (full jitter from a keyed
 * Rng, `100 ms × 2^k` capped at 2 s); a 4xx reply is never retried. `/step` and `/restart` carry
 * the session's sequence number, so a retried request is not applied twice. At most
 * `concurrency` requests are in flight at once. A 503 with `Retry-After` (a server at its session
 * cap) waits what the server asks, up to `maxRetryAfterMs`, instead of the jittered delay. With
 * `apiKey` every request carries `Authorization: Bearer <apiKey>`. A reply that is not JSON or lacks a field the
 * protocol requires is a `ProtocolError`; the user's mistakes the server reports (unknown
 * environment, bad config, seed or opponent) are `UsageError`s listing the server's choices.
 */
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { ExternalFailure, UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import {
  backoffDelayMs,
  ConcurrencyLimiter,
  parseRetryAfterMs,
  realSleep,
  type Sleep,
} from "../policy/retry.js";
import {
  type CreateReply,
  type CreateRequest,
  type ErrorBody,
  type ExpertReply,
  type InfoReply,
  PROTOCOL_VERSION,
  ProtocolError,
  parseCreateReply,
  parseErrorBody,
  parseExpertReply,
  parseInfoReply,
  parseRestartReply,
  parseStepReply,
  type StateReply,
  type StepReply,
  USAGE_ERROR_KINDS,
} from "./protocol.js";

export interface EnvClientOptions {
  /** Per-request timeout (default 10 000 ms). */
  timeoutMs?: number;
  /** More tries after a retryable failure (default 3). */
  retries?: number;
  /** Requests in flight at once (default 16). */
  concurrency?: number;
  /** First backoff ceiling (default 100 ms) and cap (default 2000 ms). */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Longest wait a server's Retry-After may ask for (default 30 000 ms). */
  maxRetryAfterMs?: number;
  /** Sent as `Authorization: Bearer <apiKey>` (never logged). */
  apiKey?: string;
  sleep?: Sleep;
}

export const ENV_CLIENT_DEFAULTS = { timeoutMs: 10_000, retries: 3, concurrency: 16 } as const;

/** The server failed for good: retries used up, or it answered with a non-usage error. */
export class EnvServerError extends ExternalFailure {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly kind: string | undefined,
  ) {
    super(message);
    this.name = "EnvServerError";
  }
}

/** The session is gone on the server (closed, expired, or the server restarted). */
export class SessionVanishedError extends EnvServerError {
  constructor(url: string, session: string, message: string) {
    super(`environment server ${url}: session ${session} vanished (${message})`, 404, "unknown_session");
    this.name = "SessionVanishedError";
  }
}

/**
 * Protocol time of every client in this process: requests sent and the wall time during which at
 * least one request was waiting for its reply (overlapping requests count once). Benchmarks read
 * it to tell the protocol's share of a training iteration.
 */
export const ENV_CLIENT_TOTALS = { requests: 0, busyMs: 0 };
let inFlightAll = 0;
let busySince = 0;

function requestStarted(): void {
  if (inFlightAll++ === 0) busySince = performance.now();
  ENV_CLIENT_TOTALS.requests++;
}

function requestEnded(): void {
  if (--inFlightAll === 0) ENV_CLIENT_TOTALS.busyMs += performance.now() - busySince;
}

type Outcome =
  | { ok: true; body: unknown }
  | {
      ok: false;
      retryable: boolean;
      status?: number;
      error?: ErrorBody["error"];
      cause: string;
      retryAfterMs?: number;
    };

/** Where a run or an evaluation chooses its seeds, for a server that refused one (e.g. another split's). */
const SEED_HINT =
  "; choose the seeds with env.seeds or eval.env.seeds in a config, or --env-seeds MIN-MAX in mage eval";

export class EnvClient {
  readonly url: string;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly limiter: ConcurrencyLimiter;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly maxRetryAfterMs: number;
  private readonly apiKey: string | undefined;
  private readonly sleep: Sleep;
  private readonly jitter = Rng.seeded("env-client-backoff");
  private infoCache: Promise<InfoReply> | undefined;
  private readonly agent: HttpAgent;
  private readonly httpsAgent: HttpsAgent;
  /** Requests sent, retries included (for tests and benchmarks). */
  requests = 0;

  constructor(url: string, options: EnvClientOptions = {}) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new UsageError(`env.url "${url}" is not a URL (e.g. http://127.0.0.1:8765)`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new UsageError(`env.url "${url}" must start with http:// or https://`);
    }
    this.url = url.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? ENV_CLIENT_DEFAULTS.timeoutMs;
    this.retries = options.retries ?? ENV_CLIENT_DEFAULTS.retries;
    this.limiter = new ConcurrencyLimiter(options.concurrency ?? ENV_CLIENT_DEFAULTS.concurrency);
    this.baseDelayMs = options.baseDelayMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 2000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;
    this.apiKey = options.apiKey;
    this.sleep = options.sleep ?? realSleep;
    // Idle keep-alive sockets do not hold the process open (a CLI run ends when its work does).
    this.agent = new HttpAgent({ keepAlive: true, maxSockets: this.limiter.limit });
    this.httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: this.limiter.limit });
    if (!(this.timeoutMs > 0)) throw new UsageError(`env.timeoutMs must be > 0, got ${this.timeoutMs}`);
    if (!Number.isInteger(this.retries) || this.retries < 0)
      throw new UsageError(`env.retries must be a non-negative integer, got ${this.retries}`);
  }

  /** The server's /info (read once; checked for the protocol version). */
  info(): Promise<InfoReply> {
    this.infoCache ??= this.request("GET", "/info").then((body) => {
      const info = this.parsed(parseInfoReply, body);
      if (info.protocol !== PROTOCOL_VERSION) {
        throw new UsageError(
          `environment server ${this.url} speaks protocol "${info.protocol}"; mage speaks "${PROTOCOL_VERSION}"`,
        );
      }
      return info;
    });
    this.infoCache.catch(() => {
      this.infoCache = undefined;
    });
    return this.infoCache;
  }

  async create(req: CreateRequest): Promise<CreateReply> {
    return this.parsed(parseCreateReply, await this.request("POST", "/create", req));
  }

  async step(session: string, seq: number, action: string): Promise<StepReply> {
    return this.parsed(
      parseStepReply,
      await this.request("POST", "/step", { session, seq, action }, session),
    );
  }

  async restart(session: string, seq: number): Promise<StateReply> {
    return this.parsed(parseRestartReply, await this.request("POST", "/restart", { session, seq }, session));
  }

  /**
   * The environment expert's next action at the session's state and the attempt's facts
   * (`POST /expert`, read-only: no sequence number). `memory`: facts of earlier attempts the
   * expert may use. An environment without an expert is a UsageError (`no_expert`).
   */
  async expert(session: string, memory: readonly string[] = []): Promise<ExpertReply> {
    return this.parsed(
      parseExpertReply,
      await this.request("POST", "/expert", { session, memory: [...memory] }, session),
    );
  }

  /** Checks a reply against the protocol; a ProtocolError names this server. */
  private parsed<T>(parse: (body: unknown) => T, body: unknown): T {
    try {
      return parse(body);
    } catch (err) {
      if (err instanceof ProtocolError) {
        throw new ProtocolError(`environment server ${this.url} broke the protocol: ${err.message}`);
      }
      throw err;
    }
  }

  /** Closes a session; a session the server no longer knows counts as closed. */
  async close(session: string): Promise<void> {
    try {
      await this.request("POST", "/close", { session }, session);
    } catch (err) {
      if (!(err instanceof SessionVanishedError)) throw err;
    }
  }

  private async request(
    method: "GET" | "POST",
    path: string,
    body?: unknown,
    session?: string,
  ): Promise<unknown> {
    const where = `${method} ${path}`;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let last: Extract<Outcome, { ok: false }> | undefined;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt > 0) {
        const asked = last?.retryAfterMs;
        await this.sleep(
          asked !== undefined
            ? Math.min(asked, this.maxRetryAfterMs)
            : backoffDelayMs(attempt - 1, this.baseDelayMs, this.maxDelayMs, this.jitter),
        );
      }
      const outcome = await this.limiter.run(() => this.once(method, path, payload));
      if (outcome.ok) return outcome.body;
      last = outcome;
      if (!outcome.retryable) break;
    }
    const f = last!;
    if (f.error) {
      if (f.error.kind === "unknown_session" && session !== undefined) {
        throw new SessionVanishedError(this.url, session, f.error.message);
      }
      if ((USAGE_ERROR_KINDS as readonly string[]).includes(f.error.kind)) {
        const choices = f.error.choices?.length
          ? `; valid choices (from ${this.url}/info): ${f.error.choices.join(", ")}`
          : "";
        const already = f.error.choices?.length && f.error.message.includes("valid") ? "" : choices;
        const hint = f.error.kind === "bad_seed" ? SEED_HINT : "";
        throw new UsageError(`environment server ${this.url}: ${f.error.message}${already}${hint}`);
      }
    }
    const tries = f.retryable ? `gave up after ${this.retries + 1} tries` : "failed";
    const status = f.status === undefined ? "no HTTP response" : `HTTP ${f.status}`;
    throw new EnvServerError(
      `environment server ${this.url} ${where} ${tries}; last: ${status}: ${f.cause}`,
      f.status,
      f.error?.kind,
    );
  }

  /**
   * One HTTP exchange. node:http with a keep-alive agent rather than fetch: on loopback it is
   * about three times faster per request (1.6 ms against 5.1 ms on the shared 2-core machine),
   * and the protocol's requests are small and many.
   */
  private once(method: string, path: string, payload: string | undefined): Promise<Outcome> {
    this.requests++;
    requestStarted();
    return new Promise<Outcome>((resolve) => {
      let settled = false;
      const done = (o: Outcome) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        requestEnded();
        resolve(o);
      };
      const url = new URL(this.url + path);
      const headers: Record<string, string | number> = {};
      if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
      if (payload !== undefined) {
        headers["content-type"] = "application/json";
        headers["content-length"] = Buffer.byteLength(payload);
      }
      const req = (url.protocol === "https:" ? httpsRequest : httpRequest)(
        url,
        { method, headers, agent: url.protocol === "https:" ? this.httpsAgent : this.agent },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", (err) => done(this.connectionFailure(err)));
          res.on("end", () => {
            const o = this.outcome(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"));
            const wait = parseRetryAfterMs(res.headers["retry-after"], Date.now());
            done(!o.ok && o.retryable && wait !== undefined ? { ...o, retryAfterMs: wait } : o);
          });
        },
      );
      const timer = setTimeout(() => {
        done({ ok: false, retryable: true, cause: `timed out after ${this.timeoutMs} ms` });
        req.destroy();
      }, this.timeoutMs);
      req.on("error", (err) => done(this.connectionFailure(err)));
      req.end(payload);
    });
  }

  private connectionFailure(err: Error & { code?: string }): Outcome {
    return {
      ok: false,
      retryable: true,
      cause: `connection failed (${err.code ?? err.message}); is the server running?`,
    };
  }

  private outcome(status: number, text: string): Outcome {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      // Nonsense is retried like a 5xx (the sequence numbers make that safe), then reported.
      const shown = JSON.stringify(text.slice(0, 80));
      return { ok: false, retryable: true, status, cause: `the reply is not JSON: ${shown}` };
    }
    if (status === 200) return { ok: true, body: json };
    const error = parseErrorBody(json) ?? undefined;
    const cause = error ? `${error.kind}: ${error.message}` : `body ${JSON.stringify(text.slice(0, 80))}`;
    return { ok: false, retryable: status >= 500, status, ...(error ? { error } : {}), cause };
  }

  /** Closes the keep-alive connections (a client that is done; a new request opens new ones). */
  destroy(): void {
    this.agent.destroy();
    this.httpsAgent.destroy();
  }
}
