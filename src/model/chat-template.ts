/**
 * Chat template of the embedded model.
 *
 *   <|bos|> ( <|role|> content <|end|> )* [ <|assistant|> ]
 *
 * Each message's content is tokenized on its own (never across message boundaries), so the
 * rendering is append-only: the ids of messages[0..k] are a prefix of those of messages[0..k+1],
 * and a prompt rendered with the generation prompt is a prefix of the transcript that contains
 * the reply. Assistant messages carrying `tokenIds` (the ids the policy sampled) are used
 * verbatim, followed by `<|end|>` unless the ids already end with it. The stop token is `<|end|>`.
 */
import type { ChatMessage, ChatRole } from "../policy/types.js";
import type { SpecialToken, Tokenizer } from "./tokenizer.js";

export interface ChatRenderOptions {
  /** End with `<|assistant|>` so the model writes the next assistant message. Default false. */
  addGenerationPrompt?: boolean;
  /** Start with `<|bos|>`. Default true. */
  bos?: boolean;
}

/** Where one assistant message's tokens lie in a rendered transcript. */
export interface AssistantSpan {
  /** Index of the message in the input list. */
  messageIndex: number;
  /** First token of the message body (just after `<|assistant|>`). */
  start: number;
  /** Position of the closing `<|end|>` (body is [start, contentEnd)). */
  contentEnd: number;
  /** One past the closing `<|end|>`: the agent's tokens including its stop token are [start, end). */
  end: number;
  /** True when the body came verbatim from `message.tokenIds`. */
  fromTokenIds: boolean;
  /** True when the closing `<|end|>` was part of `tokenIds` (sampled), false when the template added it. */
  endSampled: boolean;
}

export interface RenderedChat {
  ids: number[];
  assistantSpans: AssistantSpan[];
}

const ROLE_TOKEN: Record<ChatRole, SpecialToken> = {
  system: "<|system|>",
  user: "<|user|>",
  assistant: "<|assistant|>",
};

export function roleTokenId(tok: Tokenizer, role: ChatRole): number {
  const name = ROLE_TOKEN[role];
  if (!name) throw new RangeError(`unknown chat role "${role}"; valid roles: system, user, assistant`);
  return tok.specialId(name);
}

/** The token that ends every message; generation stops when the model emits it. */
export function stopTokenId(tok: Tokenizer): number {
  return tok.endId;
}

/** Renders messages to token ids, with the positions of every assistant message. */
export function renderChat(
  tok: Tokenizer,
  messages: readonly ChatMessage[],
  opts: ChatRenderOptions = {},
): RenderedChat {
  const ids: number[] = [];
  const assistantSpans: AssistantSpan[] = [];
  const end = tok.endId;
  if (opts.bos ?? true) ids.push(tok.bosId);
  messages.forEach((m, messageIndex) => {
    ids.push(roleTokenId(tok, m.role));
    const start = ids.length;
    let endSampled = false;
    const fromTokenIds = m.role === "assistant" && m.tokenIds !== undefined;
    if (fromTokenIds) {
      const t = m.tokenIds!;
      for (const id of t) {
        if (!Number.isInteger(id) || id < 0 || id >= tok.vocabSize)
          throw new RangeError(
            `message ${messageIndex}: token id ${id} outside the vocabulary (size ${tok.vocabSize})`,
          );
        ids.push(id);
      }
      endSampled = t.length > 0 && t[t.length - 1] === end;
    } else {
      for (const id of tok.encode(m.content)) ids.push(id);
    }
    if (!endSampled) ids.push(end);
    if (m.role === "assistant") {
      assistantSpans.push({
        messageIndex,
        start,
        contentEnd: ids.length - 1,
        end: ids.length,
        fromTokenIds,
        endSampled,
      });
    }
  });
  if (opts.addGenerationPrompt) ids.push(roleTokenId(tok, "assistant"));
  return { ids, assistantSpans };
}

/** Just the ids of `renderChat`. */
export function renderChatIds(
  tok: Tokenizer,
  messages: readonly ChatMessage[],
  opts: ChatRenderOptions = {},
): number[] {
  return renderChat(tok, messages, opts).ids;
}

/**
 * Per-position owner of a rendered transcript: the assistant message index for the tokens of
 * each span [start, end) (its `<|end|>` included), -1 elsewhere. Loss masks and row mapping
 * for training read this.
 */
export function assistantOwners(rendered: RenderedChat): Int32Array {
  const owner = new Int32Array(rendered.ids.length).fill(-1);
  for (const s of rendered.assistantSpans) owner.fill(s.messageIndex, s.start, s.end);
  return owner;
}

/**
 * The same conversation as text (special tokens written literally). Tokenizers that split
 * special tokens out first (HF, llama.cpp with special parsing) give the ids of `renderChat`
 * for messages without `tokenIds`, as long as no content contains special-token text.
 */
export function renderChatText(messages: readonly ChatMessage[], opts: ChatRenderOptions = {}): string {
  let s = (opts.bos ?? true) ? "<|bos|>" : "";
  for (const m of messages) s += `${ROLE_TOKEN[m.role]}${m.content}<|end|>`;
  if (opts.addGenerationPrompt) s += "<|assistant|>";
  return s;
}

/** The template as Jinja, for `tokenizer_config.json` and GGUF `tokenizer.chat_template`. */
export const CHAT_TEMPLATE_JINJA =
  "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";

/** A Hugging Face `tokenizer_config.json` object matching the tokenizer and chat template. */
export function tokenizerConfigJson(contextLength: number): Record<string, unknown> {
  return {
    tokenizer_class: "PreTrainedTokenizerFast",
    bos_token: "<|bos|>",
    // Document end; a chat turn ends with <|end|> (the stop token), as in GGUF's eot_token_id.
    eos_token: "<|eos|>",
    pad_token: "<|pad|>",
    unk_token: null,
    add_bos_token: false,
    add_eos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: contextLength,
    chat_template: CHAT_TEMPLATE_JINJA,
  };
}
