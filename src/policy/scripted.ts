/**
 * A scripted `Policy` for tests: the reply is a plain function of the request's messages
 * (and a random stream keyed by the request's own seed, so results do not depend on batching).
 *
 * With a tokenizer, generations look like the embedded policy's: `tokenIds` are the reply's
 * ids followed by `<|end|>` (which is not in `text`), cut at `maxTokens` ("length", no end
 * token) or after the first stop string ("stop", the string kept); `logprobs` are 0 (the
 * script is deterministic); `promptTokens` counts the chat-template prompt. Without one,
 * `tokenIds` and `logprobs` are empty and `promptTokens` is 0.
 */
import { Rng } from "../core/rng.js";
import { renderChatIds } from "../model/chat-template.js";
import type { Tokenizer } from "../model/tokenizer.js";
import type { ChatMessage, GenerateRequest, Generation, Policy } from "./types.js";

export interface ScriptContext {
  /** A stream of this request's own (keyed by its seed). */
  rng: Rng;
  /** Index of the request within its `generate` call. */
  index: number;
  /** How many `generate` calls this policy answered before this one. */
  call: number;
}

export type Script = (messages: readonly ChatMessage[], ctx: ScriptContext) => string;

export class ScriptedPolicy implements Policy {
  readonly name: string;
  /** Every request seen, in order (for assertions in tests). */
  readonly requests: GenerateRequest[] = [];
  private calls = 0;

  constructor(
    private readonly script: Script,
    private readonly tokenizer?: Tokenizer,
    name = "scripted",
  ) {
    this.name = name;
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    const call = this.calls++;
    return requests.map((req, index) => {
      this.requests.push(req);
      const rng = Rng.seeded(req.seed >>> 0).derive("scripted-policy");
      let text = this.script(req.messages, { rng, index, call });
      let finishReason: Generation["finishReason"] = "stop";
      let cut = -1;
      for (const s of req.sampling.stop) {
        const at = s.length > 0 ? text.indexOf(s) : -1;
        if (at >= 0 && (cut < 0 || at + s.length < cut)) cut = at + s.length;
      }
      if (cut >= 0) text = text.slice(0, cut);
      const tok = this.tokenizer;
      if (!tok) return { text, tokenIds: [], logprobs: [], finishReason, promptTokens: 0 };
      let ids = tok.encode(text);
      // A stop string ends the reply without <|end|>; otherwise the model would close with it.
      if (cut < 0) ids.push(tok.endId);
      if (ids.length > req.sampling.maxTokens) {
        ids = ids.slice(0, req.sampling.maxTokens);
        text = tok.decode(ids);
        finishReason = "length";
      }
      return {
        text,
        tokenIds: ids,
        logprobs: ids.map(() => 0),
        finishReason,
        promptTokens: renderChatIds(tok, req.messages, { addGenerationPrompt: true }).length,
      };
    });
  }
}
