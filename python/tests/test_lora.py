"""LoRA: only the adapter's parameters change; the saved adapter loads with peft into a fresh base
and reproduces the worker's log-probs; the reference is the base (adapter disabled); resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import Failed, batch, call, loaded_worker, random_rows, weights
from test_update import LOSS, ppo_batch

from mage_learner.batch import split_sequences
from mage_learner.learner import score

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj", "down_proj"]}


def test_lora_trains_the_adapter_only_and_saves_a_peft_adapter(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir, lora=LORA)
    rows, prompt = random_rows(4, 300, 7)
    probe = batch(rows, prompt)
    _, base_lp = call(w, "logprobs", probe)
    before = weights(w)
    for seed in (10, 11):
        h, _ = call(w, "update", ppo_batch(w, seed), loss=LOSS, lr=5e-2)
        assert h["skipped"] is False
    after = weights(w)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert {k for k in before if "lora_B" in k} <= changed  # B starts at zero and must move
    _, lp = call(w, "logprobs", probe)
    assert np.abs(lp["logp"] - base_lp["logp"]).max() > 1e-4  # the adapter changed the policy
    _, ref = call(w, "logprobs", probe, model="reference")
    np.testing.assert_allclose(ref["logp"], base_lp["logp"], rtol=0, atol=1e-6)  # adapter disabled

    h, _ = call(w, "save", path=str(tmp_path / "adapter"))
    assert h["format"] == "peft-adapter"
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(llama_dir), local_files_only=True, dtype=torch.float32)
    fresh = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        got, _ = score(fresh, split_sequences(probe), torch.device("cpu"))
    np.testing.assert_allclose(got.double().numpy(), lp["logp"], rtol=0, atol=1e-5)

    # Resume: a fresh worker that restores the adapter continues exactly.
    nxt = ppo_batch(w, 12)
    call(w, "update", nxt, loss=LOSS, lr=5e-2)
    r = loaded_worker(llama_dir, lora=LORA, seed=99)  # a different adapter init, overwritten by restore
    assert call(r, "restore", path=str(tmp_path / "adapter"))[0]["step"] == 2
    call(r, "update", nxt, loss=LOSS, lr=5e-2)
    wa, wb = weights(w), weights(r)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_lora_layers_puts_adapters_on_those_layers_only(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir, lora={**LORA, "layers": [1]})
    assert w.loaded is not None
    names = [n for n, p in w.loaded.model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    everywhere = loaded_worker(llama_dir, lora=LORA)
    assert everywhere.loaded is not None
    assert any(".layers.0." in n for n, p in everywhere.loaded.model.named_parameters() if p.requires_grad)
    with pytest.raises(Failed) as e:
        loaded_worker(llama_dir, lora={**LORA, "layers": [2]})  # the tiny Llama has layers 0-1
    assert e.value.error["field"] == "model.torch.lora.layers"
    with pytest.raises(Failed) as e:
        loaded_worker(llama_dir, lora={**LORA, "layers": []})
    assert e.value.error["field"] == "model.torch.lora.layers"
