/**
 * Answering a generation request once its jobs are built, the same for both endpoints: sampling
 * them in one batch, then one JSON response or a server-sent event stream. Tokens stream as they
 * are sampled unless top log-probs are asked for: those come from a second pass over the finished
 * generation, so such a stream is sent once the batch is done (as is every stream of a backend
 * without a tokenizer in this process). What differs between chat and text completions is the
 * shape of a choice (`ChoiceFormat`).
 */
import type { ServerResponse } from "node:http";
import { type GenJob, type GenResult, StreamText } from "./protocol.js";
import { endSse, sendJson, startSse, writeSse } from "./respond.js";
import type { ServeContext } from "./serve-context.js";

/** How one endpoint's choices look. */
export interface ChoiceFormat {
  /** `object` of a whole response. */
  object: string;
  /** The fields a stream chunk starts with. */
  chunkHead(id: string, created: number): Record<string, unknown>;
  /** A stream's first chunk of a choice, before any text (chat: the assistant's role), or null. */
  opening(index: number): Record<string, unknown> | null;
  /** The fields holding a piece of streamed text; null for a choice's last chunk, which has none. */
  content(text: string | null): Record<string, unknown>;
  /** The fields holding a whole response's text. */
  whole(content: string): Record<string, unknown>;
  /**
   * Log-probs of tokens [from, to) of a generation whose text starts `offset` characters into the
   * reply; null when the request asked for none.
   */
  logprobs: ((r: GenResult, from: number, to: number, offset: number) => unknown) | null;
}

export interface ReplyPlan {
  id: string;
  jobs: GenJob[];
  promptTokens: number;
  stream: boolean;
  /** Send a last chunk with the usage (`stream_options.include_usage`). */
  includeUsage: boolean;
  stopStrings: readonly string[];
  stopIds: readonly number[];
  format: ChoiceFormat;
}

/** A one-token generation, to build the log-probs of one streamed token from. */
function oneToken(tokenId: number, logprob: number): GenResult {
  return {
    tokenIds: [tokenId],
    logprobs: [logprob],
    finishReason: "length",
    stopString: null,
    promptTokens: 0,
    top: null,
  };
}

/** Samples the plan's jobs and answers; returns the completion tokens. */
export async function answer(
  ctx: ServeContext,
  res: ServerResponse,
  aborted: () => boolean,
  plan: ReplyPlan,
): Promise<number> {
  const now = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => {
    if (!aborted()) writeSse(res, { ...plan.format.chunkHead(plan.id, now), choices, ...extra });
  };
  const secondPass = plan.jobs.some((job) => job.topLogprobs > 0);
  const liveTok = plan.stream && !secondPass ? ctx.tok : null;
  const texts = liveTok ? plan.jobs.map(() => new StreamText(liveTok, plan.stopStrings, plan.stopIds)) : null;
  if (texts) {
    startSse(res);
    plan.jobs.forEach((job, index) => {
      streamLive(ctx, plan.format, job, index, texts[index], chunk);
    });
  }
  const results = await ctx.batcher.submitAll(plan.jobs, aborted);
  const completionTokens = results.reduce((s, x) => s + x.tokenIds.length, 0);
  const usage = ctx.recordUsage(plan.promptTokens, completionTokens);
  if (!plan.stream) {
    sendJson(res, 200, wholeResponse(ctx, plan, results, now, usage));
    return completionTokens;
  }
  if (!texts) startSse(res);
  results.forEach((x, index) => {
    const { bodyIds, content } = ctx.contentOf(x, plan.stopIds);
    if (texts) {
      const rest = texts[index].finish(content);
      if (rest) chunk([{ index, ...plan.format.content(rest), logprobs: null, finish_reason: null }]);
    } else {
      streamFinished(ctx, plan.format, x, index, bodyIds, content, chunk);
    }
    chunk([
      {
        index,
        ...plan.format.content(null),
        logprobs: null,
        finish_reason: x.finishReason,
        stop_reason: x.stopString,
        seed: plan.jobs[index].seed,
      },
    ]);
  });
  if (plan.includeUsage) chunk([], { usage });
  endSse(res);
  return completionTokens;
}

type Chunk = (choices: unknown[]) => void;

/** Opens a choice's stream and sends each token's text as the sampler yields it. */
function streamLive(
  ctx: ServeContext,
  format: ChoiceFormat,
  job: GenJob,
  index: number,
  text: StreamText,
  chunk: Chunk,
): void {
  const opening = format.opening(index);
  if (opening) chunk([opening]);
  let offset = 0;
  job.onToken = (tokenId, logprob) => {
    chunk([
      {
        index,
        ...format.content(text.push(tokenId)),
        logprobs: format.logprobs ? format.logprobs(oneToken(tokenId, logprob), 0, 1, offset) : null,
        finish_reason: null,
        token_ids: [tokenId],
      },
    ]);
    if (format.logprobs && ctx.tok) offset += ctx.tok.tokenText(tokenId).length;
  };
}

/** Streams a choice whose generation is already finished, a piece per token where it can. */
function streamFinished(
  ctx: ServeContext,
  format: ChoiceFormat,
  x: GenResult,
  index: number,
  bodyIds: number[],
  content: string,
  chunk: Chunk,
): void {
  const opening = format.opening(index);
  if (opening) chunk([opening]);
  let offset = 0;
  for (const { text, from, to } of ctx.streamSpans(x, bodyIds, content)) {
    chunk([
      {
        index,
        ...format.content(text),
        logprobs: format.logprobs ? format.logprobs(x, from, to, offset) : null,
        finish_reason: null,
        token_ids: x.tokenIds.slice(from, to),
      },
    ]);
    if (format.logprobs && ctx.tok)
      for (const id of x.tokenIds.slice(from, to)) offset += ctx.tok.tokenText(id).length;
  }
}

function wholeResponse(
  ctx: ServeContext,
  plan: ReplyPlan,
  results: GenResult[],
  now: number,
  usage: unknown,
): Record<string, unknown> {
  return {
    ...ctx.responseHead(plan.id, plan.format.object, now),
    choices: results.map((x, index) => ({
      index,
      ...plan.format.whole(ctx.contentOf(x, plan.stopIds).content),
      logprobs: plan.format.logprobs ? plan.format.logprobs(x, 0, x.tokenIds.length, 0) : null,
      finish_reason: x.finishReason,
      stop_reason: x.stopString,
      token_ids: x.tokenIds,
      seed: plan.jobs[index].seed,
    })),
    usage,
  };
}
