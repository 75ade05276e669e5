/**
 * Opponent moves of `mage env-serve` that can take long (kinds with `work` in the opponent
 * registry: MCTS, CFR) run on a small pool of worker threads, so the event loop that answers every
 * session stays free. A move is a job with a deadline (the request's time budget): a job still
 * queued at its deadline is dropped, a job still running has its worker terminated (a synchronous
 * search cannot be interrupted otherwise) and a fresh worker takes the slot's next job. Either way
 * the move's promise rejects with `OpponentTimeoutError` and the session is left as it was.
 * A job goes to a worker only once the worker says it is ready: a job that expired while the
 * worker was still starting would otherwise terminate it, and where start-up takes longer than
 * the budget (a loaded machine, or tsx compiling from source) no worker would ever start.
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import type { Rng, RngState } from "../core/rng.js";
import type { Opponent } from "../opponents/types.js";
import type { MoveJob, WorkerMessage } from "./opponent-worker.js";

/** The move did not come within the request's time budget (queued or thinking). */
export class OpponentTimeoutError extends Error {
  constructor(readonly budgetMs: number) {
    super(`the opponent's move did not finish within the server's time budget of ${budgetMs} ms`);
    this.name = "OpponentTimeoutError";
  }
}

/** The pool was closed (the server is shutting down) before the move finished. */
export class PoolClosedError extends Error {
  constructor() {
    super("the server is shutting down");
    this.name = "PoolClosedError";
  }
}

/** Default pool size: the cores, at most 4, leaving one to the event loop where there are more than 2. */
export function defaultPoolSize(): number {
  const cores = availableParallelism();
  return Math.max(1, Math.min(4, cores > 2 ? cores - 1 : cores));
}

interface Job {
  message: MoveJob;
  deadline: number;
  budgetMs: number;
  timer: NodeJS.Timeout;
  resolve: (r: { move: unknown; rng: RngState }) => void;
  reject: (e: Error) => void;
}

interface Slot {
  worker: Worker | undefined;
  /** The worker has said it takes moves. */
  ready: boolean;
  job: Job | undefined;
}

/** A worker running the TypeScript source (tests, tsx) registers tsx first; the build runs the .js. */
function spawnMoveWorker(): Worker {
  const fromSource = import.meta.url.endsWith(".ts");
  const url = new URL(`./opponent-worker.${fromSource ? "ts" : "js"}`, import.meta.url);
  if (!fromSource) return new Worker(url);
  const tsx = import.meta.resolve("tsx/esm/api");
  const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(boot, { eval: true });
}

export class OpponentPool {
  private readonly slots: Slot[];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;
  /** Moves played, moves cut off by their deadline, and worker threads started (for tests and logs). */
  readonly counts = { played: 0, timedOut: 0, started: 0 };

  constructor(readonly size: number = defaultPoolSize()) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`pool size must be >= 1, got ${size}`);
    this.slots = Array.from({ length: size }, () => ({ worker: undefined, ready: false, job: undefined }));
  }

  /** Moves being thought about now. */
  get running(): number {
    return this.slots.filter((s) => s.job !== undefined).length;
  }

  /** Plays one move; `deadline` is a `performance.now()` time, `budgetMs` is named in the timeout error. */
  play(
    job: Omit<MoveJob, "id">,
    deadline: number,
    budgetMs: number,
  ): Promise<{ move: unknown; rng: RngState }> {
    if (this.closed) return Promise.reject(new PoolClosedError());
    return new Promise((resolve, reject) => {
      const entry: Job = {
        message: { ...job, id: this.nextId++ },
        deadline,
        budgetMs,
        resolve,
        reject,
        timer: setTimeout(() => this.expire(entry), Math.max(0, deadline - performance.now())),
      };
      this.queue.push(entry);
      this.dispatch();
    });
  }

  /** Terminates every worker; queued and running moves reject with `PoolClosedError`. */
  async close(): Promise<void> {
    this.closed = true;
    const error = new PoolClosedError();
    for (const job of this.queue.splice(0)) this.settle(job, error);
    const stopping: Promise<number>[] = [];
    for (const slot of this.slots) {
      if (slot.job) this.settle(slot.job, error);
      slot.job = undefined;
      if (slot.worker) stopping.push(slot.worker.terminate());
      slot.worker = undefined;
      slot.ready = false;
    }
    await Promise.all(stopping);
  }

  private settle(job: Job, outcome: Error | { move: unknown; rng: RngState }): void {
    clearTimeout(job.timer);
    if (outcome instanceof Error) job.reject(outcome);
    else job.resolve(outcome);
  }

  private dispatch(): void {
    for (const slot of this.slots) {
      if (this.queue.length === 0) return;
      if (slot.job) continue;
      if (!slot.worker) this.startWorker(slot);
      if (!slot.ready) continue; // it takes a job once it says it is ready
      const job = this.queue.shift()!;
      slot.job = job;
      slot.worker!.postMessage(job.message);
    }
  }

  private startWorker(slot: Slot): void {
    const worker = spawnMoveWorker();
    this.counts.started++;
    const current = () => slot.worker === worker;
    worker.on("message", (reply: WorkerMessage) => {
      if (!current()) return;
      if ("ready" in reply) {
        slot.ready = true;
        this.dispatch();
        return;
      }
      const job = slot.job;
      if (!job || job.message.id !== reply.id) return;
      slot.job = undefined;
      this.counts.played++;
      this.settle(job, reply.ok ? { move: reply.move, rng: reply.rng } : new Error(reply.error));
      this.dispatch();
    });
    const lost = (why: string) => {
      if (!current()) return;
      slot.worker = undefined;
      slot.ready = false;
      const job = slot.job;
      slot.job = undefined;
      if (job) this.settle(job, new Error(`an opponent worker thread failed: ${why}`));
      if (!this.closed) this.dispatch();
    };
    worker.on("error", (err) => lost(err.message));
    worker.on("exit", (code) => lost(`it exited with code ${code}`));
    slot.worker = worker;
    slot.ready = false;
  }

  private expire(job: Job): void {
    const queued = this.queue.indexOf(job);
    if (queued >= 0) {
      this.queue.splice(queued, 1);
    } else {
      const slot = this.slots.find((s) => s.job === job);
      if (!slot) return;
      // A synchronous search cannot be interrupted: the thread goes, a new one takes the slot.
      const worker = slot.worker;
      slot.worker = undefined;
      slot.ready = false;
      slot.job = undefined;
      void worker?.terminate();
      // Its replacement starts now, so its start-up does not eat the next move's budget.
      if (!this.closed) this.startWorker(slot);
      this.dispatch();
    }
    this.counts.timedOut++;
    job.reject(new OpponentTimeoutError(job.budgetMs));
  }
}

/**
 * An opponent whose moves the pool plays. It keeps the opponent's generator state between moves
 * with the restart semantics of `OpponentRng` (continue, or with `replay` rewind to creation), so
 * it plays exactly as the registry's opponent of the same spec plays in-process.
 */
export class PooledOpponent<S, M> implements Opponent<S, M> {
  private readonly start: RngState;
  private current: RngState;

  constructor(
    readonly name: string,
    private readonly game: string,
    private readonly pool: OpponentPool,
    rng: Rng,
    private readonly replay: boolean,
    /** The current request's deadline (`performance.now()` time) and its budget in ms. */
    private readonly budget: () => { deadline: number; budgetMs: number },
  ) {
    this.start = rng.getState();
    this.current = this.start;
  }

  async act(state: S): Promise<M> {
    const { deadline, budgetMs } = this.budget();
    const r = await this.pool.play(
      { game: this.game, spec: this.name, rng: this.current, state },
      deadline,
      budgetMs,
    );
    this.current = r.rng;
    return r.move as M;
  }

  restart(): void {
    if (this.replay) this.current = this.start;
  }
}
