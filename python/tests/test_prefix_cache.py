"""generate's prefix store: a prompt that extends an earlier sample prefills only its new tokens,
and samples exactly what a fresh prefill samples; the store empties when the weights change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from helpers import batch, call, loaded_worker
from test_generate import gen, prompts, req

from mage_learner.worker import Worker

LONG = [1, *range(40, 70)]  # 31 tokens, past the store's minimum reuse


def turn_two(w: Worker, first: list[int]) -> list[int]:
    return LONG + first + [5, 6, 7, 8]


def test_a_later_turn_reuses_the_earlier_sample_and_samples_the_same(llama_dir: Path) -> None:
    cold = loaded_worker(llama_dir, prefixCacheMB=0)
    warm = loaded_worker(llama_dir)
    first_cold = gen(cold, [LONG, LONG[:12]], [req(3, n=10), req(4, n=3)])
    first_warm = gen(warm, [LONG, LONG[:12]], [req(3, n=10), req(4, n=3)])
    assert [o[0] for o in first_warm] == [o[0] for o in first_cold]
    assert warm.prefixes.entries and warm.prefixes.reused_tokens == 0
    prompt = turn_two(warm, first_warm[0][0])
    before = warm.prefixes.reused_tokens
    second_warm = gen(warm, [prompt, [9, 10]], [req(7, n=12), req(8, n=4)])
    second_cold = gen(cold, [prompt, [9, 10]], [req(7, n=12), req(8, n=4)])
    # The sample fed LONG and all but its last token: at least that much is reused.
    assert warm.prefixes.reused_tokens - before >= len(LONG) + len(first_warm[0][0]) - 1
    assert cold.prefixes.reused_tokens == 0
    for a, b in zip(second_warm, second_cold):
        assert a[0] == b[0]
        np.testing.assert_allclose(a[1], b[1], rtol=0, atol=1e-5)


def test_an_update_empties_the_store(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    gen(w, [LONG], [req(1, n=6)])
    assert w.prefixes.entries
    rows = [LONG + [3, 4, 5]]
    b: dict[str, Any] = batch(rows, [len(LONG)])
    n = int(b["loss_mask"].sum())
    call(w, "update", {**b, "old_logp": np.full(n, -1.0), "advantages": np.ones(n)}, loss={}, lr=1e-3)
    assert not w.prefixes.entries


def test_the_budget_bounds_what_is_kept(llama_dir: Path) -> None:
    probe = loaded_worker(llama_dir)
    gen(probe, [LONG], [req(1, n=4)])
    one = probe.prefixes.bytes
    w = loaded_worker(llama_dir, prefixCacheMB=1.5 * one / 2**20)
    gen(w, [LONG, [2, *range(80, 110)]], [req(1, n=4), req(2, n=4)])
    assert 0 < w.prefixes.bytes <= w.prefixes.budget
    assert len(w.prefixes.entries) == 1


def test_generate_reports_what_it_reused_and_prefilled(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    h1, _ = call(w, "generate", prompts([LONG]), requests=[req(3, n=6)])
    first = h1["prefix"]
    assert first["reusedTokens"] == 0 and first["prefilledTokens"] == len(LONG)
    assert first["entries"] == 1 and 0 < first["bytes"] <= first["budgetBytes"]
    sampled = gen(w, [LONG], [req(3, n=6)])[0][0]
    h2, _ = call(w, "generate", prompts([LONG + sampled + [5, 6]]), requests=[req(4, n=2)])
    second = h2["prefix"]
    reused = second["reusedTokens"] - first["reusedTokens"]
    assert reused >= len(LONG) and reused + second["prefilledTokens"] - first["prefilledTokens"] > len(LONG)
    cold = loaded_worker(llama_dir, prefixCacheMB=0)
    h3, _ = call(cold, "generate", prompts([LONG, [2, 3]]), requests=[req(1, n=2), req(2, n=2)])
    assert h3["prefix"]["reusedTokens"] == 0 and h3["prefix"]["prefilledTokens"] == len(LONG) + 2
