"""League snapshots of a LoRA policy: `save_adapter` writes the adapter alone, `generate` with
`adapter` samples exactly as the policy did when it was saved, leaves the policy (weights, the
next update) untouched, keeps prefix-store entries per adapter, and holds at most `maxAdapters`
adapters (the least recently used read again from disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import Failed, call, loaded_worker, weights
from test_generate import P1, P2, prompts, req
from test_lora import LORA
from test_update import LOSS, ppo_batch

from mage_learner.worker import Worker

Sample = tuple[list[int], np.ndarray[Any, Any]]

LONG = [1, *range(40, 72)]  # long enough for the prefix store (MIN_REUSE tokens)


def sample(w: Worker, rows: list[list[int]], adapter: str | None = None, seed: int = 5) -> tuple[list[Sample], dict[str, Any]]:
    reqs = [req(seed + i, n=10) for i in range(len(rows))]
    extra = {} if adapter is None else {"adapter": adapter}
    h, a = call(w, "generate", prompts(rows), requests=reqs, **extra)
    out, at = [], 0
    for n in a["token_lengths"].tolist():
        out.append((a["tokens"][at : at + n].tolist(), a["logprobs"][at : at + n]))
        at += n
    return out, h


def same(a: list[Sample], b: list[Sample], atol: float = 1e-6) -> bool:
    return all(x[0] == y[0] and np.allclose(x[1], y[1], rtol=0, atol=atol) for x, y in zip(a, b))


def train(w: Worker, seeds: range) -> None:
    for s in seeds:
        call(w, "update", ppo_batch(w, s), loss=LOSS, lr=5e-2)


@pytest.fixture()
def lora_worker(llama_dir: Path) -> Worker:
    return loaded_worker(llama_dir, lora=LORA, prefixCacheMB=0, maxAdapters=2)


def test_a_snapshot_samples_as_the_policy_did_when_saved(lora_worker: Worker, tmp_path: Path) -> None:
    w = lora_worker
    train(w, range(10, 12))
    then, _ = sample(w, [P1, P2])
    h, _ = call(w, "save_adapter", path=str(tmp_path / "s1"))
    assert h["format"] == "peft-adapter" and h["bytes"] > 0
    assert sorted(p.name for p in (tmp_path / "s1").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    train(w, range(12, 14))
    now, _ = sample(w, [P1, P2])
    assert not same(now, then)  # the policy moved on
    snap, h = sample(w, [P1, P2], str(tmp_path / "s1"))
    assert same(snap, then)
    assert h["adapters"] == {"held": 1, "cap": 2, "loads": 1, "evictions": 0}


def test_sampling_a_snapshot_leaves_the_policy_and_its_next_update_untouched(llama_dir: Path, tmp_path: Path) -> None:
    a, b = (loaded_worker(llama_dir, lora=LORA, prefixCacheMB=0) for _ in range(2))
    for w in (a, b):
        train(w, range(10, 12))
    call(a, "save_adapter", path=str(tmp_path / "s"))
    train(a, range(12, 13))
    train(b, range(12, 13))
    before = weights(a)
    sample(a, [P1, P2], str(tmp_path / "s"))
    after = weights(a)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    train(a, range(13, 14))
    train(b, range(13, 14))  # b never sampled the snapshot: the same optimizer step follows
    wa, wb = weights(a), weights(b)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_at_most_max_adapters_are_held_and_an_evicted_one_is_read_again(lora_worker: Worker, tmp_path: Path) -> None:
    w = lora_worker
    paths = []
    for k in range(3):
        train(w, range(20 + k, 21 + k))
        paths.append(str(tmp_path / f"s{k}"))
        call(w, "save_adapter", path=paths[-1])
    first, _ = sample(w, [P1], paths[0])
    for p in paths[1:]:
        sample(w, [P1], p)
    again, h = sample(w, [P1], paths[0])  # s0 was the least recently used: evicted, read again
    assert h["adapters"] == {"held": 2, "cap": 2, "loads": 4, "evictions": 2}
    assert same(again, first, atol=0)
    _, h = sample(w, [P1], paths[2])  # still held
    assert h["adapters"]["loads"] == 4


def test_prefix_entries_belong_to_the_weights_that_computed_them(llama_dir: Path, tmp_path: Path) -> None:
    cached = loaded_worker(llama_dir, lora=LORA, prefixCacheMB=64)
    plain = loaded_worker(llama_dir, lora=LORA, prefixCacheMB=0)
    for w in (cached, plain):
        train(w, range(30, 32))
        call(w, "save_adapter", path=str(tmp_path / ("c" if w is cached else "p")))
        train(w, range(32, 34))
    sample(cached, [LONG])  # the policy's keys and values of LONG go to the store
    grown = [*LONG, 90, 91, 92]
    snap, h = sample(cached, [grown], str(tmp_path / "c"))
    assert h["prefix"]["reusedTokens"] == 0  # the policy's entry is not the snapshot's
    want, _ = sample(plain, [grown], str(tmp_path / "p"))
    assert same(snap, want, atol=1e-5)
    again, h = sample(cached, [[*grown, 93]], str(tmp_path / "c"))
    assert h["prefix"]["reusedTokens"] > 0  # the snapshot's own entry is
    own, h2 = sample(cached, [[*LONG, 94]])
    assert h2["prefix"]["reusedTokens"] > h["prefix"]["reusedTokens"]  # and the policy's is still there


def test_adapters_refuse_what_does_not_fit(llama_dir: Path, lora_worker: Worker, tmp_path: Path) -> None:
    full = loaded_worker(llama_dir)
    for op, fields in (("save_adapter", {"path": str(tmp_path / "x")}), ("generate", {"adapter": str(tmp_path / "x")})):
        with pytest.raises(Failed) as e:
            call(full, op, prompts([P1]) if op == "generate" else None, requests=[req(1)], **fields)
        assert e.value.error["kind"] == "usage" and e.value.error["field"] == "model.torch.lora"
    with pytest.raises(Failed) as e:
        sample(lora_worker, [P1], str(tmp_path / "missing"))
    assert "not a saved LoRA adapter" in e.value.error["message"]
    other = loaded_worker(llama_dir, lora={**LORA, "rank": 8, "alpha": 16})
    call(other, "save_adapter", path=str(tmp_path / "r8"))
    with pytest.raises(Failed) as e:
        sample(lora_worker, [P1], str(tmp_path / "r8"))
    assert e.value.error["field"] == "model.torch.lora" and "rank 8" in e.value.error["message"]
    with pytest.raises(Failed) as e:
        loaded_worker(llama_dir, lora=LORA, maxAdapters=0)
    assert e.value.error["kind"] == "usage"


def test_a_saved_snapshot_loads_in_peft_on_the_base(llama_dir: Path, lora_worker: Worker, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mage_learner.batch import split_sequences
    from mage_learner.learner import score
    from helpers import batch, random_rows

    w = lora_worker
    train(w, range(40, 42))
    call(w, "save_adapter", path=str(tmp_path / "s"))
    rows, prompt = random_rows(3, 300, 7)
    probe = batch(rows, prompt)
    _, lp = call(w, "logprobs", probe)
    base = AutoModelForCausalLM.from_pretrained(str(llama_dir), local_files_only=True, dtype=torch.float32)
    fresh = PeftModel.from_pretrained(base, str(tmp_path / "s")).eval()
    with torch.no_grad():
        got, _ = score(fresh, split_sequences(probe), torch.device("cpu"))
    np.testing.assert_allclose(got.double().numpy(), lp["logp"], rtol=0, atol=1e-5)
