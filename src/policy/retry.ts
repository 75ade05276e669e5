/**
 * Retry building blocks for remote policies: the backoff schedule (exponential with full
 * jitter drawn from a keyed `Rng`), `Retry-After` parsing, which HTTP statuses are worth
 * retrying, an injectable sleep, a concurrency limiter, and the error thrown when a backend
 * gives up. Nothing here knows about the OpenAI wire format.
 */
import type { Rng } from "../core/rng.js";

/**
 * A remote backend failed for good: a non-retryable answer (a 4xx other than 408/429), or
 * every retry used up. The message names the URL (never with credentials), the last HTTP
 * status if there was one, the number of attempts, and the last cause.
 */
export class PolicyBackendError extends Error {
  readonly url: string;
  /** The last HTTP status received, or undefined when the last attempt got no response. */
  readonly status: number | undefined;
  readonly attempts: number;
  /** Whether the last failure was of a retryable kind (true means the retries ran out). */
  readonly retryable: boolean;
  readonly lastCause: string;

  constructor(init: {
    url: string;
    status: number | undefined;
    attempts: number;
    retryable: boolean;
    lastCause: string;
    hint?: string;
  }) {
    const why = init.retryable
      ? `gave up after ${init.attempts} attempt${init.attempts === 1 ? "" : "s"}`
      : `failed (not retryable) after ${init.attempts} attempt${init.attempts === 1 ? "" : "s"}`;
    const status = init.status === undefined ? "no HTTP response" : `HTTP ${init.status}`;
    super(
      `policy backend ${init.url} ${why}; last: ${status}: ${init.lastCause}${init.hint ? ` (${init.hint})` : ""}`,
    );
    this.name = "PolicyBackendError";
    this.url = init.url;
    this.status = init.status;
    this.attempts = init.attempts;
    this.retryable = init.retryable;
    this.lastCause = init.lastCause;
  }
}

/** HTTP statuses that are retried: 408, 429 and every 5xx. Other 4xx are the caller's mistake. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status <= 599);
}

/**
 * The `k`-th retry's delay (k = 0 for the first retry) with "full jitter":
 * uniform in [0, min(maxDelayMs, baseDelayMs * 2^k)), drawn from `rng`.
 */
export function backoffDelayMs(k: number, baseDelayMs: number, maxDelayMs: number, rng: Rng): number {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(k, 52));
  return rng.float() * ceiling;
}

/**
 * Parses a `Retry-After` value: delta-seconds (decimals tolerated) or an HTTP date.
 * Returns milliseconds from `nowMs` (never negative), or undefined when absent or unreadable.
 */
export function parseRetryAfterMs(value: string | null | undefined, nowMs: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (text === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000;
  // Only date-like text: Date.parse accepts odd inputs such as "1" or "-5".
  if (!/[a-z]/i.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

/** Sleeps `ms` milliseconds; resolves early (does not reject) when `signal` aborts. */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

export const realSleep: Sleep = (ms, signal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });

/** Raised inside a batch when a sibling request failed and the rest were cancelled. */
export class CancelledError extends Error {
  constructor() {
    super("cancelled because another request of the batch failed");
    this.name = "CancelledError";
  }
}

/** At most `limit` tasks run at once; the rest wait in FIFO order. */
export class ConcurrencyLimiter {
  private active = 0;
  private readonly waiting: Array<{ start: () => void; cancel: () => void }> = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`ConcurrencyLimiter: limit must be a positive integer, got ${limit}`);
    }
  }

  /** Tasks running now. */
  get inFlight(): number {
    return this.active;
  }

  /** Runs `task` once a slot is free. Rejects with CancelledError if `signal` aborts while waiting. */
  async run<T>(task: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    await this.acquire(signal);
    try {
      return await task();
    } finally {
      this.release();
    }
  }

  private acquire(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(new CancelledError());
    if (this.active < this.limit) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const entry = {
        start: () => {
          signal?.removeEventListener("abort", onAbort);
          this.active++;
          resolve();
        },
        cancel: () => reject(new CancelledError()),
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(entry);
        if (i >= 0) this.waiting.splice(i, 1);
        entry.cancel();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  private release(): void {
    this.active--;
    const next = this.waiting.shift();
    if (next) next.start();
  }
}

/**
 * Replaces every occurrence of `secret` in `text` with "[redacted]". Secrets shorter than
 * 4 characters are not searched for (they would garble ordinary words).
 */
export function redact(text: string, secret: string | undefined): string {
  if (!secret || secret.length < 4) return text;
  return text.split(secret).join("[redacted]");
}
