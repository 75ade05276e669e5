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
    assert all(p.dtype == torch.float32 for p in bf.loaded.model.parameters() if p.requires_grad)
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


def frozen_linear_dtypes(w: object) -> dict[str, torch.dtype]:
    loaded = w.loaded  # type: ignore[attr-defined]
    return {n: m.weight.dtype for n, m in loaded.model.named_modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad}


def test_lora_keeps_frozen_weights_in_bf16_with_autocasts_numbers(qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]}
    stored = loaded_worker(qwen3_dir, "cpu", "bfloat16", lora=lora)
    dtypes = frozen_linear_dtypes(stored)
    assert {n for n, d in dtypes.items() if d == torch.bfloat16} >= {n for n in dtypes if n.endswith("base_layer")}
    assert stored.loaded is not None
    tied = stored.loaded.model.get_input_embeddings().weight  # type: ignore[operator]
    assert tied.dtype == torch.float32
    # Without the stored copies autocast casts the float32 weights at every call: same numbers.
    monkeypatch.setattr(model_mod, "store_frozen_in_bf16", lambda m: 0)
    cast = loaded_worker(qwen3_dir, "cpu", "bfloat16", lora=lora)
    assert all(d == torch.float32 for d in frozen_linear_dtypes(cast).values())
    batch, _ = sampled_rows(cast)
    _, a = call(stored, "logprobs", batch)
    _, b = call(cast, "logprobs", batch)
    np.testing.assert_array_equal(a["logp"], b["logp"])


def test_an_export_of_a_bf16_lora_run_merges_into_the_float32_base(qwen3_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]}
    w = loaded_worker(qwen3_dir, "cpu", "bfloat16", lora=lora)  # peft starts B at 0: merged = base
    call(w, "export", path=str(tmp_path / "out"))
    base = load_file(str(qwen3_dir / "model.safetensors"))
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"):
        assert out[name].dtype == torch.float32
        assert torch.equal(out[name], base[name]), name
