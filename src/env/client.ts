/**
 * The HTTP client of the environment protocol (docs/env-protocol.md): one per served
 * environment URL, shared by every remote task of a run.
 *
 * Each request has a timeout (`timeoutMs`). A timeout, a refused or dropped connection and a 5xx
 * reply are retried up to `retries` more times with exponential backoff (full jitter from a keyed
 * Rng, `100 ms × 2^k` capped at 2 s); a 4xx reply is never retried. `/step` and `/restart` carry
 * the session's sequence number, so a retried request is not applied twice. At most
 * `concurrency` requests are in flight at once. A reply that is not JSON or lacks a field the
 * protocol requires is a `ProtocolError`; the user's mistakes the server reports (unknown
 * environment, bad config, seed or opponent) are `UsageError`s listing the server's choices.
 */
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import { backoffDelayMs, ConcurrencyLimiter, realSleep, type Sleep } from "../policy/retry.js";
import {
  type CreateReply,
  type CreateRequest,
  type ErrorBody,
  type InfoReply,
  PROTOCOL_VERSION,
  ProtocolError,
  parseCreateReply,
  parseErrorBody,
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
  sleep?: Sleep;
}

export const ENV_CLIENT_DEFAULTS = { timeoutMs: 10_000, retries: 3, concurrency: 16 } as const;

/** The server failed for good: retries used up, or it answered with a non-usage error. */
export class EnvServerError extends Error {
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

type Outcome =
  | { ok: true; body: unknown }
  | { ok: false; retryable: boolean; status?: number; error?: ErrorBody["error"]; cause: string };

export class EnvClient {
  readonly url: string;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly limiter: ConcurrencyLimiter;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly sleep: Sleep;
  private readonly jitter = Rng.seeded("env-client-backoff");
  private infoCache: Promise<InfoReply> | undefined;
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
    this.sleep = options.sleep ?? realSleep;
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
      if (attempt > 0)
        await this.sleep(backoffDelayMs(attempt - 1, this.baseDelayMs, this.maxDelayMs, this.jitter));
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
        throw new UsageError(`environment server ${this.url}: ${f.error.message}${already}`);
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

  private async once(method: string, path: string, payload: string | undefined): Promise<Outcome> {
    this.requests++;
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), this.timeoutMs);
    try {
      const res = await fetch(this.url + path, {
        method,
        signal: ctrl.signal,
        ...(payload !== undefined ? { body: payload, headers: { "content-type": "application/json" } } : {}),
      });
      const text = await res.text();
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        // Nonsense is retried like a 5xx (the sequence numbers make that safe), then reported.
        const shown = JSON.stringify(text.slice(0, 80));
        return { ok: false, retryable: true, status: res.status, cause: `the reply is not JSON: ${shown}` };
      }
      if (res.status === 200) return { ok: true, body: json };
      const error = parseErrorBody(json) ?? undefined;
      const cause = error ? `${error.kind}: ${error.message}` : `body ${JSON.stringify(text.slice(0, 80))}`;
      return {
        ok: false,
        retryable: res.status >= 500,
        status: res.status,
        ...(error ? { error } : {}),
        cause,
      };
    } catch (err) {
      if (ctrl.signal.aborted)
        return { ok: false, retryable: true, cause: `timed out after ${this.timeoutMs} ms` };
      const e = err as Error & { cause?: { code?: string; message?: string } };
      const detail = e.cause?.code ?? e.cause?.message ?? e.message;
      return { ok: false, retryable: true, cause: `connection failed (${detail}); is the server running?` };
    } finally {
      clearTimeout(timer);
    }
  }
}
