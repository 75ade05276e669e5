"""push_weights: the file a vLLM server reloads. With LoRA the adapter is merged (the same weights
as `export`'s merged float32 copy, which reloads to the worker's log-probs), without LoRA the
weights as they are; in the asked dtype; a tied head written once; atomic; the worker unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import Failed, batch, call, loaded_worker, random_rows, weights
from safetensors.torch import load_file
from test_sft import sft_batch

from mage_learner.push import served_state

TARGETS = ["q_proj", "v_proj", "down_proj"]
LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": TARGETS}


def test_a_lora_push_writes_the_merged_weights_export_writes(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir, lora=LORA)
    for seed in (5, 6):
        call(w, "sft", sft_batch(seed), lr=5e-2)
    before = weights(w)
    h, _ = call(w, "push_weights", path=str(tmp_path / "push"), dtype="float32")
    assert h["merged"] is True and h["dtype"] == "float32" and h["path"] == str(tmp_path / "push")
    assert sorted(p.name for p in (tmp_path / "push").iterdir()) == ["model.safetensors"]
    pushed = load_file(str(tmp_path / "push" / "model.safetensors"))
    call(w, "export", path=str(tmp_path / "export"))
    exported = load_file(str(tmp_path / "export" / "model.safetensors"))
    assert set(pushed) == set(exported)
    base = load_file(str(llama_dir / "model.safetensors"))
    moved = [k for k in pushed if not torch.equal(pushed[k], base[k])]
    # The adapted modules' weights moved, nothing else did.
    assert moved and all(any(t in k for t in TARGETS) for k in moved), moved
    for k in pushed:
        torch.testing.assert_close(pushed[k], exported[k], rtol=0, atol=1e-6)
    assert h["bytes"] == sum(t.numel() * 4 for t in pushed.values())
    # The worker's model is untouched (nothing merged into it).
    after = weights(w)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_the_merged_push_in_bfloat16_reloads_to_the_policy(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir, lora=LORA)
    call(w, "sft", sft_batch(7), lr=5e-2)
    h, _ = call(w, "push_weights", path=str(tmp_path / "push"), dtype="bfloat16")
    pushed = load_file(str(tmp_path / "push" / "model.safetensors"))
    assert h["dtype"] == "bfloat16" and all(t.dtype == torch.bfloat16 for t in pushed.values())
    # A plain model with the pushed weights (the base directory's config) scores as the policy,
    # within bfloat16's rounding of the weights.
    served = tmp_path / "served"
    served.mkdir()
    for f in llama_dir.iterdir():
        if f.name != "model.safetensors":
            (served / f.name).write_bytes(f.read_bytes())
    from safetensors.torch import save_file

    save_file({k: v.to(torch.float32) for k, v in pushed.items()}, str(served / "model.safetensors"))
    probe = batch(*random_rows(4, 300, 8))
    _, policy = call(w, "logprobs", probe)
    _, again = call(loaded_worker(served), "logprobs", probe)
    _, base = call(loaded_worker(llama_dir), "logprobs", probe)
    gap = np.abs(again["logp"] - policy["logp"]).max()
    assert gap < 0.02 and gap < np.abs(base["logp"] - policy["logp"]).max() / 5


def test_a_full_fine_tuning_push_writes_the_trained_weights(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir)
    call(w, "sft", sft_batch(10), lr=1e-2)
    h, _ = call(w, "push_weights", path=str(tmp_path / "full"), dtype="float32")
    assert h["merged"] is False
    pushed = load_file(str(tmp_path / "full" / "model.safetensors"))
    assert w.loaded is not None
    state = w.loaded.model.state_dict()
    assert set(pushed) == set(state)
    for k, v in state.items():
        assert torch.equal(pushed[k], v), k
    # Pushed again: the directory is replaced, no temporary left behind.
    call(w, "sft", sft_batch(11), lr=1e-2)
    call(w, "push_weights", path=str(tmp_path / "full"), dtype="float32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]
    again = load_file(str(tmp_path / "full" / "model.safetensors"))
    assert not all(torch.equal(again[k], pushed[k]) for k in pushed)


def test_a_tied_head_is_written_once_under_the_embeddings_name() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    state = served_state(model, False, torch.bfloat16)
    assert "model.embed_tokens.weight" in state and "lm_head.weight" not in state
    assert state["model.embed_tokens.weight"].dtype == torch.bfloat16


def test_bad_requests_name_the_field(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir)
    with pytest.raises(Failed) as e:
        call(w, "push_weights")
    assert e.value.error["field"] == "path"
    with pytest.raises(Failed) as e:
        call(w, "push_weights", path=str(tmp_path / "x"), dtype="int8")
    assert e.value.error["field"] == "dtype"
    h, _ = call(w, "push_weights", path=str(tmp_path / "auto"), dtype="auto")
    assert h["dtype"] == "float32"  # the tiny model's config says float32


def test_a_bf16_lora_run_pushes_from_its_float32_base(qwen3_dir: Path, tmp_path: Path) -> None:
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]}
    w = loaded_worker(qwen3_dir, "cpu", "bfloat16", lora=lora)  # peft starts B at 0: merged = base
    call(w, "push_weights", path=str(tmp_path / "push"), dtype="float32")
    base = load_file(str(qwen3_dir / "model.safetensors"))
    pushed = load_file(str(tmp_path / "push" / "model.safetensors"))
    # q_proj is adapted, up_proj is not: both kept in bf16 by the worker, both written from float32.
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"):
        assert torch.equal(pushed[name], base[name]), name


class _Method:
    def __init__(self) -> None:
        self.processed: list[torch.nn.Module] = []

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        self.processed.append(layer)


def test_the_vllm_extension_ties_the_head_to_the_reloaded_embeddings_again() -> None:
    from types import SimpleNamespace

    from mage_learner.vllm_ext import MageWorkerExtension, tied_head

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Module()
            self.model.embed_tokens = torch.nn.Embedding(8, 4)
            head: Any = torch.nn.Module()
            head.weight = self.model.embed_tokens.weight
            head.quant_method = _Method()
            self.lm_head = head

    model: Any = Model()
    method = model.lm_head.quant_method

    class Worker(MageWorkerExtension):
        def __init__(self, tie: bool) -> None:
            self.model_runner = SimpleNamespace(get_model=lambda: model)
            self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace(tie_word_embeddings=tie)))
            self.reloaded: list[str] = []

        def reload_weights(self, weights_path: str) -> None:
            # As vLLM 0.32 does: the embeddings get a new tensor, the head keeps the old one.
            self.reloaded.append(weights_path)
            model.model.embed_tokens.weight = torch.nn.Parameter(torch.randn(8, 4))

    out = Worker(True).mage_reload_weights("/x")
    assert out["retied"] is True
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert method.processed == [model.lm_head]
    # Untied models are left as the reload left them.
    old = model.lm_head.weight
    untied = Worker(False)
    assert untied.mage_reload_weights("/y")["retied"] is False and untied.reloaded == ["/y"]
    assert model.lm_head.weight is old and model.model.embed_tokens.weight is not old
    assert tied_head(torch.nn.Linear(2, 2), SimpleNamespace(tie_word_embeddings=True)) is None
