"""sft and export: the weighted loss and its gradient equal a direct computation (whole or in
micro-batches), the weights matter, a few steps lower the loss, and an exported directory (LoRA
merged) reloads as a plain model with the same log-probs and the same chat rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import Failed, batch, call, loaded_worker, random_rows, weights
from test_update import capture_grads

from mage_learner.batch import split_sequences
from mage_learner.frames import Array
from mage_learner.learner import score
from mage_learner.worker import Worker

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
NO_CLIP = {"lr": 1e-2, "weightDecay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "gradClip": None}


def sft_batch(seed: int, n: int = 5) -> dict[str, Array]:
    rows, prompt = random_rows(n, 300, seed)
    b = batch(rows, prompt)
    scored = int(b["loss_mask"].sum())
    b["weights"] = np.random.default_rng(seed + 1).uniform(0.5, 4.0, scored).astype(np.float32)
    return b


def direct_loss(w: Worker, b: dict[str, Array]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Σ w·(−log p) / Σ w and its gradient, straight from the model (no worker op)."""
    assert w.loaded is not None
    model = w.loaded.model
    model.zero_grad(set_to_none=True)
    logp, _ = score(model, split_sequences(b), torch.device("cpu"))
    wt = torch.from_numpy(b["weights"].astype(np.float64))
    loss = -(wt * logp.double()).sum() / wt.sum()
    loss.backward()  # type: ignore[no-untyped-call]
    grads = {n: p.grad.detach().double().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def test_loss_and_gradient_equal_a_direct_computation_whole_or_in_micro_batches(llama_dir: Path) -> None:
    b = sft_batch(0, n=6)
    expected, grads = direct_loss(loaded_worker(llama_dir), b)
    for budget in (None, 12):
        w = loaded_worker(llama_dir, optimizer=NO_CLIP)
        seen = capture_grads(w)
        fields: dict[str, Any] = {"lr": 1e-3} if budget is None else {"lr": 1e-3, "microBatchTokens": budget}
        h, _ = call(w, "sft", b, **fields)
        assert h["loss"] == pytest.approx(float(expected), rel=1e-6)
        assert h["tokens"] == int(b["loss_mask"].sum()) and h["step"] == 1 and h["skipped"] is False
        got = seen[0]
        assert set(got) == set(grads)
        scale = max(float(g.abs().max()) for g in grads.values())
        assert max(float(np.abs(got[k] - grads[k].numpy()).max()) for k in got) / scale < 1e-5
        norm = float(np.sqrt(sum(float((g**2).sum()) for g in grads.values())))
        assert h["gradNorm"] == pytest.approx(norm, rel=1e-5)


def test_weights_matter_scale_does_not_and_a_zero_weight_drops_the_token(llama_dir: Path) -> None:
    b = sft_batch(1)
    ones = {k: v for k, v in b.items() if k != "weights"}
    h_w, _ = call(loaded_worker(llama_dir), "sft", b, lr=0.0)
    h_1, _ = call(loaded_worker(llama_dir), "sft", ones, lr=0.0)
    h_2, _ = call(loaded_worker(llama_dir), "sft", {**b, "weights": b["weights"] * 2}, lr=0.0)
    assert abs(h_w["loss"] - h_1["loss"]) > 1e-4  # the weights change the loss
    assert h_2["loss"] == pytest.approx(h_w["loss"], rel=1e-6)  # a normalised weighted mean
    # Weight 0 on the first scored token equals not scoring it at all.
    first = int(np.flatnonzero(b["loss_mask"])[0])
    dropped = {**b, "loss_mask": b["loss_mask"].copy(), "weights": b["weights"][1:].copy()}
    dropped["loss_mask"][first] = 0
    zeroed = {**b, "weights": b["weights"].copy()}
    zeroed["weights"][0] = 0
    a, c = loaded_worker(llama_dir), loaded_worker(llama_dir)
    h_a, _ = call(a, "sft", dropped, lr=1e-2)
    h_c, _ = call(c, "sft", zeroed, lr=1e-2)
    assert h_a["loss"] == pytest.approx(h_c["loss"], rel=1e-6)
    wa, wc = weights(a), weights(c)
    assert max(float(np.abs(wa[k] - wc[k]).max()) for k in wa) < 1e-6


def test_a_few_steps_lower_the_loss(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    b = sft_batch(2)
    losses = [call(w, "sft", b, lr=1e-2)[0]["loss"] for _ in range(6)]
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.8 * losses[0], losses


def test_clip_and_non_finite_skip_as_update(llama_dir: Path) -> None:
    tight = {**NO_CLIP, "gradClip": 1e-4}
    h, _ = call(loaded_worker(llama_dir, optimizer=tight), "sft", sft_batch(3), lr=1e-2)
    assert h["clipped"] is True and h["gradNorm"] > 1e-4
    w = loaded_worker(llama_dir)
    assert w.loaded is not None
    some = next(iter(w.loaded.model.parameters()))
    some.register_hook(lambda g: g * float("nan"))  # type: ignore[no-untyped-call]  # a finite forward, a non-finite gradient
    before = weights(w)
    h, _ = call(w, "sft", sft_batch(3), lr=1e-2)
    assert h["skipped"] is True and h["step"] == 0 and h["gradNorm"] is None
    after = weights(w)
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)


def test_bad_requests_are_named(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    b = sft_batch(4)
    with pytest.raises(Failed) as e:
        call(w, "sft", {**b, "weights": b["weights"][:-1]}, lr=1e-2)
    assert e.value.error["kind"] == "protocol" and "weights" in e.value.error["message"]
    with pytest.raises(Failed) as e:
        call(w, "sft", {**b, "weights": np.zeros_like(b["weights"])}, lr=1e-2)
    assert e.value.error["kind"] == "usage"
    with pytest.raises(Failed) as e:
        call(w, "sft", b, lr=-1)
    assert e.value.error["field"] == "lr"
    with pytest.raises(Failed) as e:
        call(w, "export")
    assert e.value.error["field"] == "path"


def test_export_merges_lora_into_a_plain_float32_directory_that_reloads_exactly(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir, lora=LORA)
    before = weights(w)
    for seed in (5, 6, 7):
        call(w, "sft", sft_batch(seed), lr=5e-2)
    after = weights(w)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)  # LoRA trains the adapter only
    probe = batch(*random_rows(4, 300, 8))
    _, trained = call(w, "logprobs", probe)
    _, base = call(loaded_worker(llama_dir), "logprobs", probe)
    assert np.abs(trained["logp"] - base["logp"]).max() > 1e-3  # the adapter did change the policy

    out = tmp_path / "warm"
    h, _ = call(w, "export", path=str(out))
    assert h["merged"] is True and h["path"] == str(out)
    names = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" in names and "config.json" in names and "generation_config.json" in names
    assert not [n for n in names if n.startswith("adapter_") or n in ("optimizer.pt", "mage-learner.json")]
    assert not list(tmp_path.glob("warm.tmp-*"))
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert keys and not [k for k in keys if "lora" in k or "base_layer" in k]
        assert all(f.get_tensor(k).dtype == torch.float32 for k in keys)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]

    fresh = loaded_worker(out)
    _, again = call(fresh, "logprobs", probe)
    np.testing.assert_allclose(again["logp"], trained["logp"], rtol=0, atol=1e-5)
    messages = [{"role": "system", "content": "Kuhn."}, {"role": "user", "content": "Card: K."}, {"role": "assistant", "content": "<action>BET</action>"}]
    _, r_base = call(w, "render", conversations=[{"messages": messages}])
    _, r_out = call(fresh, "render", conversations=[{"messages": messages}])
    assert np.array_equal(r_base["ids"], r_out["ids"])  # the tokenizer and chat template came along

    # The worker is untouched: same log-probs, and it trains on (export is repeatable, atomic).
    _, still = call(w, "logprobs", probe)
    assert np.array_equal(still["logp"], trained["logp"])
    call(w, "sft", sft_batch(9), lr=5e-2)
    call(w, "export", path=str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warm"]


def test_export_of_full_fine_tuning_reloads_exactly(llama_dir: Path, tmp_path: Path) -> None:
    w = loaded_worker(llama_dir)
    call(w, "sft", sft_batch(10), lr=1e-2)
    probe = batch(*random_rows(3, 300, 11))
    _, trained = call(w, "logprobs", probe)
    h, _ = call(w, "export", path=str(tmp_path / "full"))
    assert h["merged"] is False
    _, again = call(loaded_worker(tmp_path / "full"), "logprobs", probe)
    np.testing.assert_allclose(again["logp"], trained["logp"], rtol=0, atol=1e-5)


def unlikely(b: dict[str, Array], seed: int, per_token: int = 2, every: int = 3) -> tuple[Array, Array]:
    """Unlikely tokens for every `every`-th scored token: `per_token` ids other than the target."""
    scored = int(b["loss_mask"].sum())
    targets = np.concatenate([s.ids[s.mask.astype(bool)] for s in split_sequences(b)])
    rng = np.random.default_rng(seed)
    index: list[int] = []
    token: list[int] = []
    for i in range(0, scored, every):
        picks = [int(t) for t in rng.choice(300, per_token + 1, replace=False) if int(t) != int(targets[i])][:per_token]
        index += [i] * len(picks)
        token += picks
    return np.asarray(index, np.int32), np.asarray(token, np.int32)


def direct_unlikelihood(w: Worker, b: dict[str, Array], index: Array, token: Array, alpha: float) -> tuple[float, dict[str, torch.Tensor], float]:
    """Σ w·(−log p)/Σ w + α Σ −log(1 − q)/Σ w from full log-softmax rows, with its gradient and Σ q."""
    assert w.loaded is not None
    model = w.loaded.model
    model.zero_grad(set_to_none=True)
    seqs = split_sequences(b)
    rows = []
    for s in seqs:
        logits = model(input_ids=torch.from_numpy(s.ids.astype(np.int64))[None]).logits[0, :-1].float()
        rows.append(torch.log_softmax(logits, -1)[torch.from_numpy(s.mask[1:].astype(bool))])
    lsm = torch.cat(rows)
    targets = torch.from_numpy(np.concatenate([s.ids[s.mask.astype(bool)] for s in seqs]).astype(np.int64))
    wt = torch.from_numpy(b["weights"].astype(np.float64))
    nll = -(wt * lsm.gather(-1, targets[:, None])[:, 0].double()).sum() / wt.sum()
    q = lsm[torch.from_numpy(index.astype(np.int64)), torch.from_numpy(token.astype(np.int64))].double().exp()
    loss = nll + alpha * -torch.log1p(-q).sum() / wt.sum()
    loss.backward()  # type: ignore[no-untyped-call]
    grads = {n: p.grad.detach().double().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(nll.detach()), grads, float(q.detach().sum())


def test_unlikelihood_equals_a_direct_computation_and_lowers_the_unlikely_tokens(llama_dir: Path) -> None:
    b = sft_batch(5, n=4)
    index, token = unlikely(b, 7)
    alpha = 2.0
    nll, grads, q = direct_unlikelihood(loaded_worker(llama_dir), b, index, token, alpha)
    arrays = {**b, "unlikely_index": index, "unlikely_token": token}
    for budget in (None, 12):
        w = loaded_worker(llama_dir, optimizer=NO_CLIP)
        seen = capture_grads(w)
        fields: dict[str, Any] = {"lr": 1e-3, "unlikelihood": alpha}
        if budget is not None:
            fields["microBatchTokens"] = budget
        h, _ = call(w, "sft", arrays, **fields)
        assert h["loss"] == pytest.approx(nll, rel=1e-6)  # `loss` stays the weighted NLL
        assert h["unlikelyTokens"] == len(token) and h["unlikelyMass"] == pytest.approx(q, rel=1e-5)
        assert h["unlikelihood"] > 0
        got = seen[0]
        scale = max(float(g.abs().max()) for g in grads.values())
        assert max(float(np.abs(got[k] - grads[k].numpy()).max()) for k in got) / scale < 1e-5
    # α = 0 is plain sft, bit for bit; a few steps with α > 0 push the unlikely tokens down.
    h0, _ = call(loaded_worker(llama_dir), "sft", arrays, lr=0.0, unlikelihood=0)
    assert h0["loss"] == call(loaded_worker(llama_dir), "sft", b, lr=0.0)[0]["loss"] and h0["unlikelyTokens"] == 0
    plain, pushed = loaded_worker(llama_dir, optimizer=NO_CLIP), loaded_worker(llama_dir, optimizer=NO_CLIP)
    for _ in range(3):
        kept = call(plain, "sft", arrays, unlikelihood=1e-9)[0]["unlikelyMass"]
        lowered = call(pushed, "sft", arrays, unlikelihood=300.0)[0]["unlikelyMass"]
    assert lowered < 0.8 * kept, (lowered, kept)  # measured before each step: two steps apart


def i32(xs: list[int]) -> Array:
    return np.asarray(xs, np.int32)


def test_unlikely_tokens_are_checked(llama_dir: Path) -> None:
    b = sft_batch(6, n=2)
    scored = int(b["loss_mask"].sum())
    for bad, match in [
        ({"unlikely_index": i32([0, 1]), "unlikely_token": i32([5])}, "unlikely_index"),
        ({"unlikely_index": i32([scored]), "unlikely_token": i32([5])}, "scored tokens"),
        ({"unlikely_index": i32([0]), "unlikely_token": i32([-2])}, "token ids"),
    ]:
        with pytest.raises(Failed, match=match):
            call(loaded_worker(llama_dir), "sft", {**b, **bad}, lr=0.0, unlikelihood=1.0)
    with pytest.raises(Failed, match="unlikelihood"):
        call(loaded_worker(llama_dir), "sft", b, lr=0.0, unlikelihood=-1)
