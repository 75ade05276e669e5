/**
 * A scripted (not learned) `Policy`: every response is a plain function of the request's
 * messages and a random stream seeded by the request's own seed, so a run is deterministic and
 * does not depend on how the runner batched or ordered its calls. The pretraining corpus
 * (`src/train/pretrain/corpus.ts`) uses it for its unskilled players; tests use it as a stand-in
 * for a model.
 *
 * The phase of a call is read from the prompt: the last user message of a reflect call asks for
 * `<remark>` (both prompt styles do), a play prompt never does (see `isReflectPrompt`).
 */
import { Rng } from "../core/rng.js";
import type { ChatMessage, GenerateRequest, Generation, Policy } from "./types.js";

/** What a scripted player writes. Both get a stream of their own per request. */
export interface ScriptedBehaviour {
  /** The response to a play prompt (e.g. `<action>BET</action>`). */
  play(messages: readonly ChatMessage[], rng: Rng): string;
  /** The response to a reflect prompt (e.g. `<remark>…</remark>`). */
  reflect(messages: readonly ChatMessage[], rng: Rng): string;
}

export interface ScriptedAgentOptions {
  /**
   * Token ids to report for each response (e.g. a tokenizer's `encode`). Without it the
   * generations carry no token ids (`tokenIds: []`), so prompts built from them must be
   * re-tokenized from `content` (drop `tokenIds` first).
   */
  encode?: (text: string) => number[];
}

/** The last user message of a prompt ("" when there is none). */
export function lastUserMessage(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "user") return messages[i].content;
  return "";
}

/** Whether the prompt asks for a reflection (its last user message asks for `<remark>`). */
export function isReflectPrompt(messages: readonly ChatMessage[]): boolean {
  return lastUserMessage(messages).includes("<remark>");
}

export class ScriptedAgent implements Policy {
  readonly name: string;
  private readonly behaviour: ScriptedBehaviour;
  private readonly encode?: (text: string) => number[];

  constructor(name: string, behaviour: ScriptedBehaviour, opts: ScriptedAgentOptions = {}) {
    this.name = name;
    this.behaviour = behaviour;
    this.encode = opts.encode;
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return requests.map((req) => {
      const rng = Rng.seeded(req.seed >>> 0).derive("scripted-agent");
      const text = isReflectPrompt(req.messages)
        ? this.behaviour.reflect(req.messages, rng.derive("reflect"))
        : this.behaviour.play(req.messages, rng.derive("play"));
      const tokenIds = this.encode ? this.encode(text) : [];
      return {
        text,
        tokenIds,
        logprobs: tokenIds.map(() => 0),
        finishReason: "stop" as const,
        promptTokens: 0,
      };
    });
  }
}
