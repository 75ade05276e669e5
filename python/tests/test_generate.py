"""generate: per-request seeds independent of the batch, log-probs equal to teacher-forced ones at
temperature 1, stop strings, max new tokens, and the sampling conventions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import call, loaded_worker

from mage_learner.frames import Array
from mage_learner.sampling import SamplingParams, sample_row
from mage_learner.worker import Worker


def prompts(rows: list[list[int]]) -> dict[str, Array]:
    return {"ids": np.asarray([t for r in rows for t in r], np.int32), "lengths": np.asarray([len(r) for r in rows], np.int32)}


def gen(w: Worker, rows: list[list[int]], reqs: list[dict[str, Any]]) -> list[tuple[list[int], list[float], str, str]]:
    h, a = call(w, "generate", prompts(rows), requests=reqs)
    out = []
    at = 0
    for i, n in enumerate(a["token_lengths"].tolist()):
        out.append((a["tokens"][at : at + n].tolist(), a["logprobs"][at : at + n].tolist(), h["texts"][i], h["finish"][i]))
        at += n
    return out


P1 = [1, 85, 91, 268, 272]
P2 = [1, 40, 41, 42, 43, 44, 45, 46, 47, 48]
P3 = [7, 8]


@pytest.fixture(scope="module")
def worker(llama_dir: Path) -> Worker:
    return loaded_worker(llama_dir)


def req(seed: int, n: int = 12, **kw: Any) -> dict[str, Any]:
    return {"maxNewTokens": n, "temperature": 1.0, "topP": 1.0, "topK": 0, "seed": seed, "stop": [], **kw}


def test_same_seed_same_tokens_whatever_the_batch(worker: Worker) -> None:
    alone = gen(worker, [P1], [req(5)])[0]
    batched = gen(worker, [P2, P1, P3], [req(9, n=4), req(5), req(11, n=20, topK=5)])
    assert batched[1][0] == alone[0]
    np.testing.assert_allclose(batched[1][1], alone[1], rtol=0, atol=1e-5)
    other_seed = gen(worker, [P1], [req(6)])[0]
    assert other_seed[0] != alone[0]
    truncated = gen(worker, [P1], [req(5, topK=5, topP=0.9, temperature=0.7)])[0]
    assert truncated[0] == gen(worker, [P3, P1], [req(1), req(5, topK=5, topP=0.9, temperature=0.7)])[1][0]


def test_logprobs_equal_teacher_forced_at_temperature_one(worker: Worker) -> None:
    outs = gen(worker, [P1, P2], [req(3, n=16), req(4, n=16)])
    rows = [P1 + outs[0][0], P2 + outs[1][0]]
    mask = np.concatenate([np.r_[np.zeros(len(P1), np.uint8), np.ones(len(outs[0][0]), np.uint8)], np.r_[np.zeros(len(P2), np.uint8), np.ones(len(outs[1][0]), np.uint8)]])
    b = {**prompts(rows), "loss_mask": mask}
    _, a = call(worker, "logprobs", b)
    np.testing.assert_allclose(a["logp"], outs[0][1] + outs[1][1], rtol=0, atol=1e-5)


def test_max_new_tokens_and_greedy(worker: Worker) -> None:
    out = gen(worker, [P1, P2, P1], [req(1, n=3), req(1, n=0), req(1, n=7, temperature=0.0)])
    assert len(out[0][0]) == 3 and out[0][3] == "length"
    assert out[1][0] == [] and out[1][3] == "length"
    greedy = out[2]
    assert greedy[1] == [0.0] * len(greedy[0])
    assert greedy[0] == gen(worker, [P1], [req(99, n=7, temperature=0.0)])[0][0]


def test_stop_strings_end_the_sample(worker: Worker) -> None:
    tok = worker.loaded.tokenizer  # type: ignore[union-attr]
    free = gen(worker, [P2], [req(8, n=24)])[0]
    # Stop at the text of a later token of the free sample: it must end there, that token kept.
    at = next(
        i
        for i in range(2, len(free[0]))
        if (t := tok.decode(free[0][i : i + 1])).strip() and "\ufffd" not in t and t not in tok.decode(free[0][:i])
    )
    stop = tok.decode(free[0][at : at + 1])
    out = gen(worker, [P2], [req(8, n=24, stop=[stop])])[0]
    assert out[3] == "stop"
    assert out[0] == free[0][: len(out[0])] and len(out[0]) <= at + 1
    assert stop in out[2]


def test_sampling_conventions() -> None:
    logits = np.array([1.0, 3.0, 3.0, -2.0, 0.5], np.float32)
    # top-k 2 keeps the two 3.0s; u near 1 picks the second ranked (id 2), ties → lower id first.
    tok, lp = sample_row(logits, SamplingParams(1, top_k=2), 0.99)
    assert tok == 2 and lp == pytest.approx(np.log(0.5))
    assert sample_row(logits, SamplingParams(1, top_k=2), 0.0)[0] == 1
    # top-p 0.5 keeps just the best: a point mass.
    tok, lp = sample_row(logits, SamplingParams(1, top_p=0.4), 0.7)
    assert tok == 1 and lp == pytest.approx(0.0, abs=1e-12)
    # no truncation: the inverse CDF in token order, log-prob is the log-softmax.
    ls = logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum())
    cdf = np.cumsum(np.exp(ls))
    tok, lp = sample_row(logits, SamplingParams(1), 0.5)
    assert tok == int(np.searchsorted(cdf, 0.5, side="right")) and lp == pytest.approx(ls[tok])
    assert sample_row(logits, SamplingParams(1, temperature=0.0), 0.3) == (1, 0.0)


def test_top_k_order_is_the_stable_sort_prefix() -> None:
    from mage_learner.sampling import top_k_order

    rng = np.random.default_rng(0)
    for trial in range(200):
        v = int(rng.integers(2, 200))
        # Half the rows with many ties (small integers), half with distinct values.
        x = rng.integers(-3, 4, size=v).astype(np.float64) if trial % 2 else rng.normal(size=v)
        k = int(rng.integers(1, v + 1))
        assert top_k_order(x, k).tolist() == np.argsort(-x, kind="stable")[:k].tolist()
