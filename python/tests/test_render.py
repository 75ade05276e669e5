"""render: append-only, token-exact chat rendering with the tokenizer's own template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import call, loaded_worker

from mage_learner.worker import Worker

CONV: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Play tic-tac-toe: mark X at row 1 column 2."},
    {"role": "assistant", "content": "I play the centre square."},
    {"role": "user", "content": "reflect on the previous attempt and try again"},
    {"role": "assistant", "content": "The quick brown fox jumps over the lazy dog!"},
]


def render(w: Worker, messages: list[dict[str, Any]], gen: bool = False) -> tuple[list[int], list[list[int]]]:
    h, a = call(w, "render", conversations=[{"messages": messages, "addGenerationPrompt": gen}])
    return a["ids"].tolist(), h["assistantSpans"][0]


def full(w: Worker, messages: list[dict[str, Any]], gen: bool = False) -> list[int]:
    tok = w.loaded.tokenizer  # type: ignore[union-attr]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    return list(tok.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def chatml(llama_dir: Path) -> Worker:
    return loaded_worker(llama_dir)


@pytest.fixture(scope="module")
def qwen(qwen3_dir: Path) -> Worker:
    return loaded_worker(qwen3_dir)


def test_incremental_rendering_equals_the_full_template(chatml: Worker) -> None:
    for k in range(1, len(CONV) + 1):
        for gen in (False, True):
            ids, _ = render(chatml, CONV[:k], gen)
            assert ids == full(chatml, CONV[:k], gen), (k, gen)


def test_append_only_and_assistant_spans(chatml: Worker) -> None:
    tok = chatml.loaded.tokenizer  # type: ignore[union-attr]
    prev: list[int] = []
    for k in range(1, len(CONV) + 1):
        ids, spans = render(chatml, CONV[:k])
        assert ids[: len(prev)] == prev
        if CONV[k - 1]["role"] == "assistant":  # the generation prompt is a prefix of the reply
            prompt, _ = render(chatml, CONV[: k - 1], gen=True)
            assert ids[: len(prompt)] == prompt
        prev = ids
    ids, spans = render(chatml, CONV)
    assert len(spans) == 2
    for (a, b), m in zip(spans, [CONV[2], CONV[4]]):
        assert ids[b - 1] == tok.eos_token_id
        assert tok.decode(ids[a : b - 1]) == m["content"]


def test_sampled_token_ids_are_spliced_verbatim(chatml: Worker) -> None:
    tok = chatml.loaded.tokenizer  # type: ignore[union-attr]
    # An unusual tokenization of the text (one byte-level token per character) stays as sampled.
    odd = [t for c in "I play" for t in tok.encode(c, add_special_tokens=False)]
    assert odd != tok.encode("I play", add_special_tokens=False)
    msgs = CONV[:2] + [{"role": "assistant", "content": "I play", "tokenIds": odd}]
    ids, spans = render(chatml, msgs)
    a, b = spans[0]
    assert ids[a:b] == odd + [tok.eos_token_id]
    # Ending with the end-of-turn token: no second one is added; the template's tail ("\n") follows.
    ids2, spans2 = render(chatml, msgs[:2] + [{**msgs[2], "tokenIds": odd + [tok.eos_token_id]}] + [CONV[3]])
    assert ids2[: len(ids)] == ids
    assert ids2[spans2[0][0] : spans2[0][1]] == odd + [tok.eos_token_id]
    # Token ids equal to the template's own tokenization give exactly the full rendering.
    same = tok.encode("I play", add_special_tokens=False)
    ids3, _ = render(chatml, CONV[:2] + [{"role": "assistant", "content": "I play", "tokenIds": same}, CONV[3]])
    assert ids3 == full(chatml, CONV[:2] + [{"role": "assistant", "content": "I play"}, CONV[3]])


def test_a_template_that_drops_earlier_think_blocks_cannot_change_what_was_sampled(qwen: Worker) -> None:
    tok = qwen.loaded.tokenizer  # type: ignore[union-attr]
    answer = "<think>I should take the centre.</think> I play the centre square."
    sampled = tok.encode(answer, add_special_tokens=False)
    msgs = [
        {"role": "user", "content": "Play tic-tac-toe: mark X at row 1 column 2."},
        {"role": "assistant", "content": answer, "tokenIds": sampled},
        {"role": "user", "content": "reflect on the previous attempt and try again"},
        {"role": "assistant", "content": "I play the centre square."},
    ]
    # The template itself rewrites history: rendered in full, the earlier <think> block is gone.
    text = tok.apply_chat_template([{k: v for k, v in m.items() if k != "tokenIds"} for m in msgs], tokenize=False)
    assert "<think>" not in text
    prev: list[int] = []
    for k in range(1, len(msgs) + 1):
        ids, spans = render(qwen, msgs[:k])
        assert ids[: len(prev)] == prev  # append-only across the rewrite
        prev = ids
    a, b = spans[0]
    assert ids[a:b] == sampled + [tok.eos_token_id]  # the earlier turn stays as sampled
    assert "<think>I should take the centre.</think>" in tok.decode(ids)
    # Up to the rewrite, the rendering is the template's own.
    assert render(qwen, msgs[:2])[0] == full(qwen, [{k: v for k, v in m.items() if k != "tokenIds"} for m in msgs[:2]])
