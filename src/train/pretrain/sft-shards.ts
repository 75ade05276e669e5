/**
 * Data-parallel SFT on worker threads. Each batch is split into shards of about equal token counts;
 * the main thread computes the first shard's gradient while each worker computes one more, reading
 * the parameters from a SharedArrayBuffer and writing its gradient into its own. The main thread
 * adds the gradients in a fixed order and takes the optimizer step, so a run depends on the shard
 * count but not on thread timing. The model is small, so sharding the batch keeps both cores busy
 * where a multi-threaded GEMM (OpenBLAS threads) would spend its time synchronizing.
 */
import { Worker } from "node:worker_threads";
import { type ModelConfig, parameterCount } from "../../model/config.js";
import type { Kernels } from "../../model/kernels/types.js";
import type { AccumulateResult, Learner, UpdateMetrics } from "../../model/learner.js";
import type { Batch } from "../../model/transformer.js";
import { batchWeight, sftLossFor } from "./sft.js";
import type { ShardReply, ShardRequest, ShardWorkerData } from "./sft-shard-worker.js";

/**
 * Splits `batch` into at most `n` non-empty shards of nearly equal token counts: sequences go,
 * longest first, to the shard with the fewest tokens so far (ties to the lower index); each shard
 * keeps the batch's order.
 */
export function shardBatch(batch: Batch, n: number): Batch[] {
  if (!(Number.isInteger(n) && n >= 1))
    throw new RangeError(`shard count must be a positive integer, got ${n}`);
  const order = batch.sequences
    .map((_, i) => i)
    .sort((a, b) => batch.sequences[b].length - batch.sequences[a].length || a - b);
  const load = new Array<number>(n).fill(0);
  const owner = new Array<number>(batch.sequences.length);
  for (const i of order) {
    let best = 0;
    for (let k = 1; k < n; k++) if (load[k] < load[best]) best = k;
    owner[i] = best;
    load[best] += batch.sequences[i].length;
  }
  const shards: Batch[] = Array.from({ length: n }, () => ({ sequences: [], lossMask: [] }));
  batch.sequences.forEach((seq, i) => {
    shards[owner[i]].sequences.push(seq);
    shards[owner[i]].lossMask.push(batch.lossMask[i]);
  });
  return shards.filter((s) => s.sequences.length > 0);
}

/** A worker running the TypeScript source goes through tsx (tests and `tsx` runs); the build runs the .js. */
function spawnWorker(data: ShardWorkerData): Worker {
  const fromSource = import.meta.url.endsWith(".ts");
  const url = new URL(`./sft-shard-worker.${fromSource ? "ts" : "js"}`, import.meta.url);
  if (!fromSource) return new Worker(url, { workerData: data });
  const tsx = import.meta.resolve("tsx/esm/api");
  const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(boot, { eval: true, workerData: data });
}

interface Waiter {
  resolve: (r: ShardReply & { ok: true }) => void;
  reject: (e: Error) => void;
}

class ShardWorker {
  private readonly waiting: Waiter[] = [];
  private failure: Error | null = null;
  readonly ready: Promise<unknown>;

  constructor(
    private readonly worker: Worker,
    readonly grads: Float32Array,
  ) {
    worker.on("message", (r: ShardReply) => {
      const w = this.waiting.shift();
      if (!w) return;
      if (r.ok) w.resolve(r);
      else w.reject(new Error(`SFT shard worker failed: ${r.error}`));
    });
    const fail = (e: Error) => {
      this.failure = e;
      for (const w of this.waiting.splice(0)) w.reject(e);
    };
    worker.on("error", (e) => fail(new Error(`SFT shard worker crashed: ${e.message}`)));
    worker.on("exit", (code) => fail(new Error(`SFT shard worker exited (code ${code})`)));
    this.ready = this.next();
  }

  private next(): Promise<ShardReply & { ok: true }> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  run(req: ShardRequest): Promise<ShardReply & { ok: true }> {
    const reply = this.next();
    this.worker.postMessage(req);
    return reply;
  }

  async close(): Promise<void> {
    this.worker.removeAllListeners("exit");
    await this.worker.terminate();
  }
}

export class SftShardPool {
  private constructor(
    private readonly workers: ShardWorker[],
    private readonly sharedParams: Float32Array,
  ) {}

  /** Starts `shards − 1` workers for a model of `config` using `kernels` (by name, in each worker). */
  static async start(config: ModelConfig, kernels: Kernels, shards: number): Promise<SftShardPool> {
    if (!(Number.isInteger(shards) && shards >= 1))
      throw new RangeError(`shards must be a positive integer, got ${shards}`);
    const paramCount = parameterCount(config);
    const params = new SharedArrayBuffer(4 * paramCount);
    const workers: ShardWorker[] = [];
    for (let k = 1; k < shards; k++) {
      const grads = new SharedArrayBuffer(4 * paramCount);
      const worker = spawnWorker({ config, kernels: kernels.name, params, grads });
      workers.push(new ShardWorker(worker, new Float32Array(grads)));
    }
    const pool = new SftShardPool(workers, new Float32Array(params));
    try {
      await Promise.all(workers.map((w) => w.ready));
    } catch (e) {
      await pool.close();
      throw e;
    }
    return pool;
  }

  /** Shards per batch: the main thread's and one per worker. */
  get shards(): number {
    return this.workers.length + 1;
  }

  /** One optimizer step of `learner` on the SFT loss of `batch`, its gradient computed shard by shard in parallel. */
  async update(learner: Learner, batch: Batch): Promise<UpdateMetrics> {
    const t0 = performance.now();
    const acc = await this.accumulate(learner, batch);
    const st = learner.step();
    return { ...st, ...acc, ms: performance.now() - t0 };
  }

  /** Adds the gradient of the SFT loss of `batch` (`sftLossFor`) into `learner.grads`. */
  async accumulate(learner: Learner, batch: Batch): Promise<AccumulateResult> {
    const parts = shardBatch(batch, this.shards);
    const totalWeight = batchWeight(batch);
    this.sharedParams.set(learner.params.flat);
    const remote = parts
      .slice(1)
      .map((p, k) => this.workers[k].run({ sequences: p.sequences, lossMask: p.lossMask, totalWeight }));
    // Unhandled-rejection guard: a worker failure surfaces through Promise.all below.
    for (const r of remote) r.catch(() => {});
    const own = learner.accumulate(parts[0], sftLossFor(parts[0], totalWeight));
    const replies = await Promise.all(remote);
    const g = learner.grads.flat;
    let loss = own.loss;
    let scored = own.scored;
    let tokens = own.tokens;
    replies.forEach((r, k) => {
      const wg = this.workers[k].grads;
      for (let i = 0; i < g.length; i++) g[i] += wg[i];
      loss += r.loss;
      scored += r.scored;
      tokens += r.tokens;
    });
    return { loss, metrics: { scored }, scored, tokens };
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.close()));
  }
}
