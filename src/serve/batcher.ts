/**
 * `mage serve`'s batcher: collects the generation jobs arriving within a short window (or until a
 * batch is full) and runs them as ONE `ServeBackend.runAsync` call.
 */
import type { ServeBackend } from "./backend.js";
import type { GenJob, GenResult } from "./protocol.js";

export interface BatcherOptions {
  /**
   * A batch is sampled once no new job has arrived for `windowMs` (default 5), or `maxWaitMs`
   * after its first job (default 50), or as soon as `maxBatch` jobs wait.
   */
  windowMs?: number;
  /** Longest wait of a batch's first job before sampling starts, in ms (default 50). */
  maxWaitMs?: number;
  /** Most sequences per sampler call (default 64). */
  maxBatch?: number;
}

/** A queued job whose client went away before its batch ran; it is dropped, not sampled. */
export class CancelledJobError extends Error {
  constructor() {
    super("the client closed the connection before sampling started");
    this.name = "CancelledJobError";
  }
}

/** The server is shutting down: the job was dropped, or its sampling was cut short. */
export class ShutdownError extends Error {
  constructor() {
    super("the server is shutting down");
    this.name = "ShutdownError";
  }
}

interface Pending {
  job: GenJob;
  resolve: (r: GenResult) => void;
  reject: (e: unknown) => void;
  cancelled: () => boolean;
}

/**
 * Collects jobs while they keep arriving — until none has come for `windowMs`, the first has
 * waited `maxWaitMs`, or `maxBatch` are waiting — then runs them in one `backend.runAsync`. While a
 * batch runs, new requests queue and form the next batch (the sampler yields between decode
 * steps, so the server keeps accepting requests and streaming tokens). Requests announced with
 * `expect` (their prompts still render in another process) hold the batch back for them, up to
 * `maxWaitMs` after its first job.
 */
export class Batcher {
  readonly windowMs: number;
  readonly maxWaitMs: number;
  readonly maxBatch: number;
  /** Sizes of the batches run so far (the last 1,000). */
  readonly batchSizes: number[] = [];
  private queue: Pending[] = [];
  private timer: NodeJS.Timeout | null = null;
  private firstAt = 0;
  private running = false;
  private cancelled = false;
  private idleWaiters: (() => void)[] = [];
  /** Requests announced by `expect` whose jobs are not submitted yet. */
  private expected = 0;

  constructor(
    private readonly backend: Pick<ServeBackend, "runAsync">,
    options: BatcherOptions = {},
  ) {
    this.windowMs = options.windowMs ?? 5;
    this.maxWaitMs = Math.max(this.windowMs, options.maxWaitMs ?? 50);
    this.maxBatch = options.maxBatch ?? 64;
  }

  /** Jobs waiting for a batch. */
  get queued(): number {
    return this.queue.length;
  }

  /**
   * Announces a request whose jobs are still being prepared: until the returned function is called
   * (once its prompt is ready, just before it submits, or when it fails) the next batch waits for
   * it, at most `maxWaitMs` after its first job.
   */
  expect(): () => void {
    this.expected++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.expected--;
      if (this.queue.length > 0) this.schedule();
    };
  }

  submit(job: GenJob, cancelled: () => boolean = () => false): Promise<GenResult> {
    if (this.cancelled) return Promise.reject(new ShutdownError());
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject, cancelled });
      this.schedule();
    });
  }

  /** Submits several jobs that must share one batch (the choices of one request). */
  submitAll(jobs: readonly GenJob[], cancelled: () => boolean = () => false): Promise<GenResult[]> {
    return Promise.all(jobs.map((j) => this.submit(j, cancelled)));
  }

  private schedule(): void {
    if (this.running) return;
    if (this.queue.length >= this.maxBatch) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
      setImmediate(() => void this.flush());
      this.running = true;
      return;
    }
    // Restart the quiet-gap timer on every arrival, but never past maxWaitMs after the first job;
    // while announced requests are still preparing, wait for them up to that bound.
    const now = performance.now();
    if (!this.timer) this.firstAt = now;
    else clearTimeout(this.timer);
    const gap = this.expected > 0 ? this.maxWaitMs : this.windowMs;
    const delay = Math.max(0, Math.min(gap, this.firstAt + this.maxWaitMs - now));
    this.timer = setTimeout(() => void this.flush(), delay);
  }

  private async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.running = true;
    try {
      const live: Pending[] = [];
      for (const p of this.queue) {
        if (this.cancelled) p.reject(new ShutdownError());
        else if (p.cancelled()) p.reject(new CancelledJobError());
        else live.push(p);
      }
      const batch = live.slice(0, this.maxBatch);
      this.queue = live.slice(this.maxBatch);
      if (batch.length === 0) return;
      this.batchSizes.push(batch.length);
      if (this.batchSizes.length > 1000) this.batchSizes.shift();
      let results: GenResult[];
      try {
        results = await this.backend.runAsync(
          batch.map((p) => p.job),
          this.maxBatch,
          () => this.cancelled,
        );
      } catch (err) {
        for (const p of batch) p.reject(err);
        return;
      }
      if (this.cancelled) {
        for (const p of batch) p.reject(new ShutdownError());
        return;
      }
      for (const [i, p] of batch.entries()) p.resolve(results[i]);
    } finally {
      this.running = false;
      if (this.queue.length > 0) this.schedule();
      else for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  /**
   * Shutting down: queued jobs and later submissions reject with `ShutdownError`, and the batch
   * being sampled stops at its next decode step and rejects the same way.
   */
  cancel(): void {
    this.cancelled = true;
    if (!this.running && this.queue.length > 0) void this.flush();
  }

  /** Resolves once no job is queued or running. */
  idle(): Promise<void> {
    if (this.queue.length === 0 && !this.running) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
