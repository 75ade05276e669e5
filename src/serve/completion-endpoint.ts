/**
 * POST /v1/completions: prompt text (special-token text such as `<|user|>` is read as those
 * tokens; no BOS is added; backends with a tokenizer only) or token ids → sample.
 */
import type { ServerResponse } from "node:http";
import type { Tokenizer } from "../model/tokenizer.js";
import {
  type CompletionRequest,
  completionLogprobs,
  encodeWithSpecials,
  type GenJob,
  parseCompletionRequest,
  resolveMaxTokens,
  type TokenView,
  tokenView,
} from "./protocol.js";
import { answer, type ChoiceFormat } from "./reply.js";
import type { ServeContext } from "./serve-context.js";

/** What completion log-probs need: how many top entries, the tokenizer (texts, offsets) and a view. */
interface LogprobTools {
  k: number;
  tok: Tokenizer;
  view: TokenView;
}

export async function handleCompletion(
  ctx: ServeContext,
  body: unknown,
  res: ServerResponse,
  aborted: () => boolean,
): Promise<number> {
  const r: CompletionRequest = parseCompletionRequest(body, ctx.limits, ctx.engine.vocabSize);
  ctx.checkModel(r.model);
  const lp = r.logprobs !== null ? logprobTools(ctx, r.logprobs, r.tokensAsIds) : null;
  const stopIds = [...ctx.engine.completionStopIds];
  const base = ctx.seedFor(r.seed);
  const jobs: GenJob[] = [];
  let promptTokens = 0;
  for (const p of r.prompts) {
    const promptIds =
      typeof p === "string" ? encodeWithSpecials(ctx.tokenizerFor("prompt", "text prompts are"), p) : [...p];
    const maxTokens = resolveMaxTokens(promptIds.length, r.maxTokens, ctx.limits);
    promptTokens += promptIds.length;
    for (let i = 0; i < r.n; i++)
      jobs.push({
        promptIds,
        sampling: { ...r.sampling, maxTokens },
        seed: (base + jobs.length) >>> 0,
        stopIds,
        topLogprobs: r.logprobs ?? 0,
      });
  }
  const id = ctx.newId("cmpl");
  return answer(ctx, res, aborted, {
    id,
    jobs,
    promptTokens,
    stream: r.stream,
    includeUsage: r.includeUsage,
    stopStrings: r.sampling.stop ?? [],
    stopIds,
    format: completionFormat(ctx, lp),
  });
}

function logprobTools(ctx: ServeContext, k: number, asIds: boolean): LogprobTools {
  const tok = ctx.tokenizerFor("logprobs", "logprobs are");
  return { k, tok, view: tokenView(tok, asIds) };
}

function completionFormat(ctx: ServeContext, lp: LogprobTools | null): ChoiceFormat {
  return {
    object: "text_completion",
    chunkHead: (id, created) => ({ id, object: "text_completion", created, model: ctx.modelName }),
    opening: () => null,
    content: (text) => ({ text: text ?? "" }),
    whole: (content) => ({ text: content }),
    logprobs: lp
      ? (r, from, to, offset) => completionLogprobs(r, lp.view, lp.tok, lp.k, from, to, offset)
      : null,
  };
}
