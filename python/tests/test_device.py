"""Every op on the test device and dtype (`--device cuda` → CUDA bfloat16; CPU float32 by default;
MAGE_TEST_DTYPE=bfloat16 on CPU exercises the bf16 path): full fine-tuning and LoRA updates,
sampling, scoring, save and restore; tolerances are those of the dtype."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import call, loaded_worker, weights
from test_generate import P1, P2, prompts, req
from test_update import LOSS, ppo_batch

from mage_learner.worker import Worker


def tol(dtype: str) -> float:
    return 1e-5 if dtype == "float32" else 5e-2


@pytest.mark.parametrize("lora", [False, True])
def test_every_op_on_the_device(qwen3_dir: Path, tmp_path: Path, device: str, dtype: str, lora: bool) -> None:
    spec = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]} if lora else None
    w: Worker = loaded_worker(qwen3_dir, device, dtype, lora=spec)
    assert w.loaded is not None and str(w.loaded.device).startswith(device.split(":")[0])
    h, a = call(w, "generate", prompts([P1, P2]), requests=[req(1, n=8), req(2, n=8)])
    assert a["token_lengths"].tolist() == [8, 8] and np.isfinite(a["logprobs"]).all()
    rows = [P1 + a["tokens"][:8].tolist(), P2 + a["tokens"][8:].tolist()]
    mask = np.concatenate([np.r_[np.zeros(len(P1), np.uint8), np.ones(8, np.uint8)], np.r_[np.zeros(len(P2), np.uint8), np.ones(8, np.uint8)]])
    _, lp = call(w, "logprobs", {**prompts(rows), "loss_mask": mask})
    np.testing.assert_allclose(lp["logp"], a["logprobs"], rtol=0, atol=tol(dtype))
    before = weights(w)
    b = ppo_batch(w, 30)
    h, _ = call(w, "update", b, loss=LOSS, lr=1e-2, microBatchTokens=16)
    assert h["skipped"] is False and np.isfinite(h["loss"])
    after = weights(w)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and (not lora or all("lora_" in k for k in changed))
    call(w, "save", path=str(tmp_path / "ck"))
    h1, _ = call(w, "update", b, loss=LOSS, lr=1e-2)
    r = loaded_worker(qwen3_dir, device, dtype, lora=spec)
    call(r, "restore", path=str(tmp_path / "ck"))
    h2, _ = call(r, "update", b, loss=LOSS, lr=1e-2)
    assert h2["loss"] == pytest.approx(h1["loss"], rel=tol(dtype))
