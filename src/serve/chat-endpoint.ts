/** POST /v1/chat/completions: messages → the backend's chat template → sample. */
import type { ServerResponse } from "node:http";
import {
  type ChatRequest,
  chatLogprobEntries,
  type GenJob,
  parseChatRequest,
  resolveMaxTokens,
  type TokenView,
  tokenView,
} from "./protocol.js";
import { answer, type ChoiceFormat } from "./reply.js";
import type { ServeContext } from "./serve-context.js";

export async function handleChat(
  ctx: ServeContext,
  body: unknown,
  res: ServerResponse,
  aborted: () => boolean,
): Promise<number> {
  const r: ChatRequest = parseChatRequest(body, ctx.limits, ctx.engine.vocabSize);
  ctx.checkModel(r.model);
  const view: TokenView | null = r.logprobs
    ? tokenView(ctx.tokenizerFor("logprobs", "logprobs are"), r.tokensAsIds)
    : null;
  // The prompt may render in another process (the PyTorch worker): the batch waits for it.
  const promptIds = await ctx.engine.chatPrompt(r.messages).finally(ctx.batcher.expect());
  const maxTokens = resolveMaxTokens(
    promptIds.length,
    r.maxTokens,
    ctx.limits,
    body && (body as Record<string, unknown>).max_completion_tokens != null
      ? "max_completion_tokens"
      : "max_tokens",
  );
  const base = ctx.seedFor(r.seed);
  const stopIds = [...ctx.engine.chatStopIds];
  const jobs: GenJob[] = Array.from({ length: r.n }, (_, i) => ({
    promptIds,
    sampling: { ...r.sampling, maxTokens },
    seed: (base + i) >>> 0,
    stopIds,
    topLogprobs: r.logprobs ? r.topLogprobs : 0,
  }));
  const id = ctx.newId("chatcmpl");
  return answer(ctx, res, aborted, {
    id,
    jobs,
    promptTokens: promptIds.length,
    stream: r.stream,
    includeUsage: r.includeUsage,
    stopStrings: r.sampling.stop ?? [],
    stopIds,
    format: chatFormat(ctx, view),
  });
}

function chatFormat(ctx: ServeContext, view: TokenView | null): ChoiceFormat {
  return {
    object: "chat.completion",
    chunkHead: (id, created) => ctx.responseHead(id, "chat.completion.chunk", created),
    opening: (index) => ({
      index,
      delta: { role: "assistant", content: "" },
      logprobs: null,
      finish_reason: null,
    }),
    content: (text) => ({ delta: text === null ? {} : { content: text } }),
    whole: (content) => ({ message: { role: "assistant", content } }),
    logprobs: view ? (r, from, to) => ({ content: chatLogprobEntries(r, view, from, to) }) : null,
  };
}
