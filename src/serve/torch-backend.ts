/**
 * A Hugging Face model sampled by the PyTorch worker, as `mage serve`'s backend. The worker renders
 * chat prompts with the model's own template and samples every sequence with its own seeded
 * generator (`docs/learner-protocol.md`), so a request with a seed gets the same reply whatever
 * else shares its batch (up to float rounding; the tests' float32 Llamas agree exactly).
 *
 * The worker has no tokenizer on this side and answers a `generate` call only when the whole batch
 * is done: replies carry the worker's decoded `text`, streams get each reply as one chunk, and
 * log-probs and text completion prompts are refused by the server (backend.ts).
 *
 * One worker request runs at a time. Conversations that arrive while a batch samples would wait
 * behind it anyway, so they are rendered together in one `render` round trip once it is done, and
 * then share the next batch.
 */
import { UsageError } from "../core/errors.js";
import type { TorchLearner } from "../learner/torch/learner.js";
import { TorchWorkerError } from "../learner/torch/worker.js";
import type { ChatMessage } from "../policy/types.js";
import type { ServeBackend } from "./backend.js";
import { ShutdownError } from "./batcher.js";
import { ApiError, type GenJob, type GenResult } from "./protocol.js";

/** How often a running `generate` call checks whether the server is shutting down, in ms. */
const STOP_POLL_MS = 50;

/** An opened torch model: its learner (the worker's client) and how to release it. */
export interface TorchServeModel {
  learner: TorchLearner;
  close(): Promise<void>;
}

interface WaitingPrompt {
  messages: readonly ChatMessage[];
  resolve: (ids: number[]) => void;
  reject: (err: unknown) => void;
}

type WorkerSample = Awaited<ReturnType<TorchLearner["generate"]>>[number];

/** The stop string that ended a reply: of those given, the one that occurs first in its text. */
export function firstStopString(text: string, stops: readonly string[]): string | null {
  let best: string | null = null;
  let bestAt = Number.POSITIVE_INFINITY;
  for (const s of stops) {
    const at = text.indexOf(s);
    if (at >= 0 && at < bestAt) {
      best = s;
      bestAt = at;
    }
  }
  return best;
}

/** `run`'s outcome, or `ShutdownError` as soon as `stop()` turns true. */
function untilStopped<T>(run: Promise<T>, stop: () => boolean): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setInterval(() => {
      if (!stop()) return;
      clearInterval(timer);
      reject(new ShutdownError());
    }, STOP_POLL_MS);
    run.then(
      (value) => {
        clearInterval(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearInterval(timer);
        reject(err);
      },
    );
  });
}

/**
 * A failed render as the client's mistake (400 naming `messages`) where the worker refused the
 * conversation (its chat template raised, or a usage check failed); a worker that died or timed
 * out stays a server error.
 */
function renderFailure(err: unknown): unknown {
  const refused = err instanceof UsageError || (err instanceof TorchWorkerError && err.kind === "internal");
  if (!refused) return err;
  const reason = (err as Error).message.split("\n")[0];
  return new ApiError(
    400,
    `the model's chat template cannot render these messages: ${reason}`,
    "invalid_request_error",
    "messages",
  );
}

export class TorchServeBackend implements ServeBackend {
  readonly tokenizer = null;
  readonly fingerprint: string;
  readonly contextLength: number;
  readonly vocabSize: number;
  /** The model's end-of-sequence ids: the worker ends every sequence at one of them. */
  readonly chatStopIds: readonly number[];
  readonly completionStopIds: readonly number[];
  calls = 0;
  largestBatch = 0;
  private readonly learner: TorchLearner;
  private waiting: WaitingPrompt[] = [];
  private rendering = false;
  /** Settles when the `generate` call in flight does; null when none is. */
  private generating: Promise<void> | null = null;

  constructor(private readonly model: TorchServeModel) {
    this.learner = model.learner;
    const info = this.learner.info;
    this.fingerprint = `mage-torch-${this.learner.options.torch.device}`;
    this.contextLength = info.contextLength;
    this.vocabSize = info.vocabSize;
    this.chatStopIds = [...info.eosTokenIds];
    this.completionStopIds = this.chatStopIds;
  }

  /** Whether a `generate` call is running in the worker. */
  get sampling(): boolean {
    return this.generating !== null;
  }

  /** The messages in the model's chat template (the worker's `render`), with the generation prompt. */
  chatPrompt(messages: readonly ChatMessage[]): Promise<number[]> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ messages, resolve, reject });
      if (!this.rendering) void this.renderWaiting();
    });
  }

  /** Renders what waits, in one round trip per turn, each turn after the batch in flight. */
  private async renderWaiting(): Promise<void> {
    this.rendering = true;
    try {
      while (this.waiting.length > 0) {
        while (this.generating) await this.generating;
        await this.renderGroup(this.waiting.splice(0));
      }
    } finally {
      this.rendering = false;
    }
  }

  /** One render round trip; when it fails, each conversation again on its own, so one bad one fails alone. */
  private async renderGroup(group: WaitingPrompt[]): Promise<void> {
    try {
      const rendered = await this.learner.renderMany(
        group.map((g) => g.messages),
        true,
      );
      group.forEach((g, i) => {
        g.resolve(rendered[i].ids);
      });
    } catch (err) {
      if (group.length === 1) group[0].reject(renderFailure(err));
      else for (const g of group) await this.renderGroup([g]);
    }
  }

  async runAsync(jobs: readonly GenJob[], _maxBatch: number, stop?: () => boolean): Promise<GenResult[]> {
    if (jobs.length === 0) return [];
    const run = this.learner.generate(
      jobs.map((j) => j.promptIds),
      jobs.map((j) => ({
        maxNewTokens: j.sampling.maxTokens,
        temperature: j.sampling.temperature,
        topP: j.sampling.topP,
        topK: j.sampling.topK,
        seed: j.seed,
        stop: [...j.sampling.stop],
      })),
    );
    const settled = run.then(
      () => {},
      () => {},
    );
    this.generating = settled;
    void settled.then(() => {
      if (this.generating === settled) this.generating = null;
    });
    const samples = await (stop ? untilStopped(run, stop) : run);
    this.calls++;
    this.largestBatch = Math.max(this.largestBatch, jobs.length);
    return samples.map((s, i) => this.resultOf(jobs[i], s));
  }

  private resultOf(job: GenJob, s: WorkerSample): GenResult {
    const last = s.tokens[s.tokens.length - 1];
    const byString = s.finish === "stop" && !this.chatStopIds.includes(last);
    return {
      tokenIds: s.tokens,
      logprobs: s.logprobs,
      finishReason: s.finish,
      stopString: byString ? firstStopString(s.text, job.sampling.stop) : null,
      promptTokens: job.promptIds.length,
      top: null,
      text: s.text,
    };
  }

  /** Stops the worker: at once when a batch nobody waits for any more is still sampling. */
  async close(): Promise<void> {
    if (this.sampling) await this.learner.worker.kill();
    await this.model.close();
  }
}
