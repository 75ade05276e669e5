"""Append-only chat rendering with the tokenizer's own chat template.

A conversation is rendered one message at a time: the text the template adds for message k
(the difference between rendering messages[..k] and messages[..k-1]) is tokenized on its own and
appended, so the ids of the first k messages are always a prefix of the ids of the first k+1.
An assistant message with `tokenIds` contributes the template's header for it (the generation
prompt), then exactly those ids, then the end-of-turn token when they do not end with it, then
whatever the template writes after the end-of-turn token (e.g. a newline). Earlier turns are never
re-rendered; a template that rewrites history (Qwen3 drops the <think> blocks of earlier turns)
is detected (the earlier rendering is no longer a prefix) and the new message is then rendered
in a minimal context (the system message, if any, and the message itself) instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import usage
from .frames import Array


@dataclass
class Rendered:
    ids: list[int]
    spans: list[tuple[int, int]]


def _plain(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "tokenIds"}


class ChatRenderer:
    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        if getattr(tokenizer, "chat_template", None) is None:
            raise usage("the model's tokenizer has no chat template (tokenizer_config.json chat_template)", "model.torch.path")
        eot = tokenizer.eos_token_id
        if not isinstance(eot, int):
            raise usage("the model's tokenizer has no eos (end-of-turn) token", "model.torch.path")
        self.eot: int = eot
        self.eot_text: str = tokenizer.convert_ids_to_tokens(eot)

    def text(self, messages: list[dict[str, Any]], gen: bool) -> str:
        if not messages:
            return ""
        out = self.tok.apply_chat_template([_plain(m) for m in messages], tokenize=False, add_generation_prompt=gen)
        assert isinstance(out, str)
        return out

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self.tok.encode(text, add_special_tokens=False))

    def _context(self, messages: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
        """The messages before k that message k is rendered after."""
        return list(messages[:k])

    def _delta(self, messages: list[dict[str, Any]], k: int) -> tuple[list[dict[str, Any]], str, str]:
        """(context, prev, full): message k's text is full[len(prev):], full = render(context + [k])."""
        ctx = self._context(messages, k)
        prev = self.text(ctx, False)
        full = self.text(ctx + [messages[k]], False)
        if full.startswith(prev):
            return ctx, prev, full
        # The template rewrote an earlier turn: render message k in a minimal context instead.
        ctx = [messages[0]] if k > 0 and messages[0].get("role") == "system" else []
        prev = self.text(ctx, False)
        full = self.text(ctx + [messages[k]], False)
        if not full.startswith(prev):
            raise usage(f"the chat template does not render message {k} as an append to the ones before it", "model.torch.path")
        return ctx, prev, full

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> Rendered:
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        for k, m in enumerate(messages):
            ctx, prev, full = self._delta(messages, k)
            delta = full[len(prev) :]
            if m.get("role") != "assistant":
                ids += self.encode(delta)
                continue
            # The assistant header is the generation prompt after the actual earlier messages
            # (adding a generation prompt never rewrites history).
            before = self.text(messages[:k], False)
            header = self.text(messages[:k], True)[len(before) :] if k > 0 else ""
            if not delta.startswith(header):
                raise usage(f"message {k}: the chat template's assistant turn does not start with its generation prompt", "model.torch.path")
            ids += self.encode(header)
            start = len(ids)
            body = delta[len(header) :]
            cut = body.rfind(self.eot_text)
            tail = body[cut + len(self.eot_text) :] if cut >= 0 else ""
            token_ids = m.get("tokenIds")
            if token_ids is not None:
                if not isinstance(token_ids, list) or not all(isinstance(t, int) for t in token_ids):
                    raise usage(f"message {k}: tokenIds must be a list of integers", "tokenIds")
                ids += token_ids
                if not token_ids or token_ids[-1] != self.eot:
                    ids.append(self.eot)
            else:
                ids += self.encode(body[: cut + len(self.eot_text)] if cut >= 0 else body)
            spans.append((start, len(ids)))
            ids += self.encode(tail)
        if add_generation_prompt and messages:
            ctx = list(messages)
            ids += self.encode(self.text(ctx, True)[len(self.text(ctx, False)) :])
        return Rendered(ids, spans)


def render_request(renderer: ChatRenderer, req: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Array]]:
    convs = req.get("conversations")
    if not isinstance(convs, list):
        raise usage("render needs `conversations`: a list of {messages, addGenerationPrompt}", "conversations")
    all_ids: list[int] = []
    lengths: list[int] = []
    spans: list[list[list[int]]] = []
    for c in convs:
        msgs = c.get("messages") if isinstance(c, dict) else None
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m for m in msgs):
            raise usage("each conversation needs `messages`: a list of {role, content, tokenIds?}", "conversations")
        r = renderer.render(msgs, bool(c.get("addGenerationPrompt", False)))
        all_ids += r.ids
        lengths.append(len(r.ids))
        spans.append([[a, b] for a, b in r.spans])
    return {"assistantSpans": spans}, {
        "ids": np.asarray(all_ids, np.int32),
        "lengths": np.asarray(lengths, np.int32),
    }
