"""update: micro-batch accumulation equals one pass, the global grad-norm clip, a skipped step on a
non-finite gradient, and save → restore → update equal to an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import Failed, batch, call, loaded_worker, random_rows, weights

from mage_learner.frames import Array
from mage_learner.worker import Worker

LOSS = {"clipLow": 0.2, "clipHigh": 0.28, "dualClip": 3, "entropyCoef": 0.01, "klCoef": 0.1, "klClamp": 10}


def ppo_batch(w: Worker, seed: int, n: int = 4, perturb: float = 0.3) -> dict[str, Array]:
    rows, prompt = random_rows(n, 300, seed)
    b = batch(rows, prompt)
    _, lp = call(w, "logprobs", b)
    _, rf = call(w, "logprobs", b, model="reference")
    rng = np.random.default_rng(seed + 1)
    k = lp["logp"].size
    return {
        **b,
        "old_logp": lp["logp"] + rng.normal(0, perturb, k),  # off-policy: some tokens clip
        "advantages": rng.normal(0, 1, k),
        "ref_logp": rf["logp"] + rng.normal(0, 0.2, k),
    }


def max_rel(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max(float(np.abs(a[k] - b[k]).max() / max(np.abs(b[k]).max(), 1e-12)) for k in a)


def capture_grads(w: Worker) -> list[dict[str, np.ndarray[Any, Any]]]:
    """Records the gradients the optimizer steps with (clipped, accumulated) at each step."""
    assert w.learner is not None and w.loaded is not None
    opt = w.learner.optimizer
    names = {id(p): n for n, p in w.loaded.model.named_parameters()}
    seen: list[dict[str, np.ndarray[Any, Any]]] = []
    step = opt.step

    def recording(*args: Any, **kw: Any) -> Any:
        seen.append({names[id(p)]: p.grad.double().numpy().copy() for g in opt.param_groups for p in g["params"] if p.grad is not None})
        return step(*args, **kw)

    opt.step = recording  # type: ignore[method-assign]
    return seen


def test_micro_batches_accumulate_to_one_pass(llama_dir: Path) -> None:
    one = loaded_worker(llama_dir)
    split = loaded_worker(llama_dir)
    g1, g2 = capture_grads(one), capture_grads(split)
    b = ppo_batch(one, 0, n=6)
    before = weights(one)
    h1, _ = call(one, "update", b, loss=LOSS, lr=1e-2)
    h2, _ = call(split, "update", b, loss=LOSS, lr=1e-2, microBatchTokens=12)
    assert h1["metrics"]["clipfrac"] > 0  # the batch does exercise clipping
    assert h2["loss"] == pytest.approx(h1["loss"], rel=1e-6)
    # The metrics are means of float32 log-probs (ppo_kl: old − new, ≈ 0.006 here): micro-batches
    # pad and multiply in other shapes, so they agree to float32's resolution at |logp| ≈ 10
    # (≈ 1e-6 absolute), not to 1e-6 relative (an AMD EPYC machine read 2.3e-6 relative on ppo_kl).
    for k in h1["metrics"]:
        assert h2["metrics"][k] == pytest.approx(h1["metrics"][k], rel=1e-6, abs=1e-6)
    assert h2["gradNorm"] == pytest.approx(h1["gradNorm"], rel=1e-6)
    assert len(g1) == len(g2) == 1
    assert max_rel(g2[0], g1[0]) < 1e-6  # the accumulated gradient, relative to its largest entry
    w1, w2 = weights(one), weights(split)
    assert max(float(np.abs(w1[k] - before[k]).max()) for k in w1) > 1e-4  # it moved
    # Adam's first step is ≈ lr·sign(g): entries with |g| ~ eps amplify float noise, so the
    # weights agree to lr·2e-2 rather than 1e-6 (the gradients themselves agree to ~1e-6 relative).
    assert max(float(np.abs(w1[k] - w2[k]).max()) for k in w1) < 2e-4


def test_grad_clip_scales_the_gradient_like_the_ts_learner(llama_dir: Path) -> None:
    # With ratio 1 everywhere (old = current log-probs) and no KL, the gradient is linear in the
    # advantages and the entropy coefficient: clipping to c must equal scaling both by c/(norm+1e-6).
    probe = loaded_worker(llama_dir)
    b = ppo_batch(probe, 1, perturb=0.0)
    b.pop("ref_logp")
    loss = {**LOSS, "klCoef": 0}
    clipped = loaded_worker(llama_dir, optimizer={"lr": 1e-2, "weightDecay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "gradClip": 1e-3})
    gc = capture_grads(clipped)
    h, _ = call(clipped, "update", b, loss=loss, lr=1e-2)
    assert h["clipped"] is True and h["gradNorm"] > 1e-3
    s = 1e-3 / (h["gradNorm"] + 1e-6)
    scaled = loaded_worker(llama_dir, optimizer={"lr": 1e-2, "weightDecay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "gradClip": None})
    gs = capture_grads(scaled)
    b2 = {**b, "advantages": b["advantages"] * s}
    h2, _ = call(scaled, "update", b2, loss={**loss, "entropyCoef": loss["entropyCoef"] * s}, lr=1e-2)
    assert h2["clipped"] is False
    assert h2["gradNorm"] == pytest.approx(1e-3, rel=1e-4)
    assert max_rel(gc[0], gs[0]) < 1e-5  # the clipped gradient is the scaled one
    total = np.sqrt(sum(float((g**2).sum()) for g in gc[0].values()))
    assert total == pytest.approx(1e-3 * h["gradNorm"] / (h["gradNorm"] + 1e-6), rel=1e-6)


def test_non_finite_gradient_skips_the_step(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    b = ppo_batch(w, 2)
    before = weights(w)
    b["advantages"] = b["advantages"].copy()
    b["advantages"][0] = np.nan
    h, _ = call(w, "update", b, loss=LOSS, lr=1e-2)
    assert h["skipped"] is True and h["step"] == 0 and h["gradNorm"] is None
    after = weights(w)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    b["advantages"][0] = 0.5
    h, _ = call(w, "update", b, loss=LOSS, lr=1e-2)
    assert h["skipped"] is False and h["step"] == 1


def test_misaligned_per_token_arrays_are_rejected(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    b = ppo_batch(w, 3)
    b["old_logp"] = b["old_logp"][:-1]
    with pytest.raises(Failed) as e:
        call(w, "update", b, loss=LOSS, lr=1e-2)
    assert e.value.error["kind"] == "protocol" and "old_logp" in e.value.error["message"]


def test_save_restore_update_equals_uninterrupted(llama_dir: Path, tmp_path: Path) -> None:
    a = loaded_worker(llama_dir)
    b1, b2 = ppo_batch(a, 4), ppo_batch(a, 5)
    call(a, "update", b1, loss=LOSS, lr=1e-2)
    h, _ = call(a, "save", path=str(tmp_path / "ck"))
    assert h["format"] == "hf" and not list(tmp_path.glob("ck.tmp-*"))
    call(a, "update", b2, loss=LOSS, lr=1e-2)
    torch.manual_seed(1234)  # restore must bring back the RNG, whatever happened since
    b = loaded_worker(llama_dir)
    h, _ = call(b, "restore", path=str(tmp_path / "ck"))
    assert h["step"] == 1
    h2, _ = call(b, "update", b2, loss=LOSS, lr=1e-2)
    assert h2["step"] == 2
    wa, wb = weights(a), weights(b)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)  # bitwise on CPU float32
    oa = a.learner.optimizer.state_dict()["state"]  # type: ignore[union-attr]
    ob = b.learner.optimizer.state_dict()["state"]  # type: ignore[union-attr]
    assert all(torch.equal(oa[i]["exp_avg_sq"], ob[i]["exp_avg_sq"]) for i in oa)


def test_save_replaces_an_existing_checkpoint_atomically(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir)
    call(w, "save", path=str(tmp_path / "ck"))
    call(w, "update", ppo_batch(w, 6), loss=LOSS, lr=1e-2)
    call(w, "save", path=str(tmp_path / "ck"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert '"step": 1' in (tmp_path / "ck" / "mage-learner.json").read_text()


def checkpointing_on(model: Any) -> bool:
    """transformers 5.23's flag, else the older name (5.17 on the GPU machine's image)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(model.is_gradient_checkpointing if flag is None else flag)


def test_checkpointing_uses_the_older_method_where_the_new_one_is_missing() -> None:
    from mage_learner.model import enable_checkpointing

    class Older:  # transformers before the rename: only gradient_checkpointing_enable
        def __init__(self) -> None:
            self.kwargs: dict[str, Any] | None = None

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any]) -> None:
            self.kwargs = gradient_checkpointing_kwargs

    class Newer(Older):
        def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict[str, Any]) -> None:
            self.kwargs = {"new": True, **activation_checkpointing_kwargs}

    older, newer = Older(), Newer()
    enable_checkpointing(older)
    enable_checkpointing(newer)
    assert older.kwargs == {"use_reentrant": False}
    assert newer.kwargs == {"new": True, "use_reentrant": False}


def test_gradient_checkpointing_gives_the_same_update(llama_dir: Path) -> None:
    plain = loaded_worker(llama_dir)
    ckpt = loaded_worker(llama_dir, gradientCheckpointing=True)
    assert ckpt.loaded is not None and checkpointing_on(ckpt.loaded.model)
    assert plain.loaded is not None and not checkpointing_on(plain.loaded.model)
    g1, g2 = capture_grads(plain), capture_grads(ckpt)
    b = ppo_batch(plain, 8)
    h1, _ = call(plain, "update", b, loss=LOSS, lr=1e-2)
    h2, _ = call(ckpt, "update", b, loss=LOSS, lr=1e-2)
    assert h2["loss"] == pytest.approx(h1["loss"], rel=1e-6)
    assert max_rel(g2[0], g1[0]) < 1e-6
