"""bfloat16 on the CPU: float32 weights, bf16 matrix products under autocast, for every op that
runs the model, so that the sampler's and the learner's log-probs agree (issue 46)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import Failed, call, loaded_worker
from test_generate import P1, P2, prompts, req

from mage_learner import model as model_mod
from mage_learner.errors import WorkerError
from mage_learner.model import resolve_precision

CPU = torch.device("cpu")


def test_cpu_bfloat16_keeps_float32_weights_and_autocasts() -> None:
    p = resolve_precision("bfloat16", CPU)
    assert p.weights == torch.float32 and p.autocast == torch.bfloat16
    assert resolve_precision("float32", CPU).autocast is None


def test_auto_follows_the_cpus_bf16_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_mod, "cpu_bf16_flags", lambda: [])
    p = resolve_precision("auto", CPU)
    assert p.autocast is None and "no native bfloat16" in p.note
    monkeypatch.setattr(model_mod, "cpu_bf16_flags", lambda: ["avx512_bf16"])
    p = resolve_precision("auto", CPU)
    assert p.autocast == torch.bfloat16 and "avx512_bf16" in p.note


def test_a_bad_dtype_names_the_field() -> None:
    with pytest.raises(WorkerError) as e:
        resolve_precision("bf16", CPU)
    assert e.value.to_json().get("field") == "model.torch.dtype"


def sampled_rows(w: object, n: int = 8) -> tuple[dict[str, np.ndarray], np.ndarray]:
    _, a = call(w, "generate", prompts([P1, P2]), requests=[req(1, n=n), req(2, n=n)])  # type: ignore[arg-type]
    rows = [P1 + a["tokens"][:n].tolist(), P2 + a["tokens"][n:].tolist()]
    mask = np.concatenate([np.r_[np.zeros(len(p), np.uint8), np.ones(n, np.uint8)] for p in (P1, P2)])
    return {**prompts(rows), "loss_mask": mask}, a["logprobs"]


def test_bf16_sampler_and_learner_agree_and_differ_from_float32(qwen3_dir: Path) -> None:
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]}
    bf = loaded_worker(qwen3_dir, "cpu", "bfloat16", lora=lora)
    assert bf.loaded is not None
    assert all(p.dtype == torch.float32 for p in bf.loaded.model.parameters())
    batch, sampled = sampled_rows(bf)
    _, lp_bf = call(bf, "logprobs", batch)
    # The sampler (incremental KV cache) and the learner (one full forward) both compute in bf16.
    np.testing.assert_allclose(lp_bf["logp"], sampled, rtol=0, atol=5e-2)
    f32 = loaded_worker(qwen3_dir, "cpu", "float32", lora=lora)
    _, lp_32 = call(f32, "logprobs", batch)
    gap = np.abs(lp_bf["logp"] - lp_32["logp"])
    assert gap.max() > 1e-4, "bf16 autocast must change the arithmetic (is it on?)"
    assert gap.mean() < 5e-2


def test_the_load_reply_says_what_it_computes_in(qwen3_dir: Path) -> None:
    w = loaded_worker(qwen3_dir, "cpu", "float32")
    assert w.loaded is not None and w.loaded.precision is not None and w.loaded.precision.note == "float32"
    with pytest.raises(Failed) as e:
        loaded_worker(qwen3_dir, "cpu", "half")
    assert e.value.error["field"] == "model.torch.dtype"
