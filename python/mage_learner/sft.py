"""Supervised fine-tuning and export, for `mage pretrain --backend torch` (the warm start of a real
model; ops `sft` and `export` in docs/learner-protocol.md).

`sft` is one optimizer step on a weighted cross-entropy: Σ w·(−log p) / Σ w over the scored tokens
of the whole request, accumulated over micro-batches (each micro-batch's share is divided by the
request's total weight, so the accumulated gradient is the whole request's), then the same global
clip, non-finite skip and AdamW step as `Learner.update`. With `unlikelihood` α > 0 and unlikely
tokens (tokens that must not be written at a scored position, e.g. the digit of a taken TicTacToe
cell), α · Σ −log(1 − q) / Σ w is added, q the probability of each unlikely token there.

`export` writes the current policy as a plain Hugging Face directory that `model.torch.path`
accepts: with LoRA, the adapter merged into a float32 copy of the base (the worker's own model,
adapter and optimizer are untouched, so it can go on training and sampling); atomic."""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import batch as B
from .errors import protocol, usage
from .folders import replace_dir
from .frames import Array
from .learner import Learner, score, score_alternatives
from .frozen_bf16 import restore_float32

Reply = tuple[dict[str, Any], dict[str, Array]]


def token_weights(arrays: dict[str, Array], n_scored: int) -> Array:
    """The per-scored-token loss weights (`weights`, f32; all 1 when absent), as float64."""
    if "weights" not in arrays:
        return np.ones(n_scored, np.float64)
    w = B.need(arrays, "weights", "f32").astype(np.float64)
    if w.size != n_scored:
        raise protocol(f"`weights` has {w.size} values for {n_scored} scored tokens")
    if not (np.isfinite(w).all() and (w >= 0).all()):
        raise usage("sft weights must be finite and ≥ 0", "weights")
    return w


# q is clamped below 1 so that −log(1 − q) stays finite (at most ≈ 13.8).
MAX_UNLIKELY_PROB = 1 - 1e-6


def unlikely_tokens(req: dict[str, Any], arrays: dict[str, Array], n_scored: int) -> tuple[float, Array | None]:
    """The unlikelihood weight α (`unlikelihood`, default 0) and the unlikely tokens as an
    (n_scored, K) int64 table, −1 padded, from `unlikely_index` (i32, the scored token's index in
    request order) and `unlikely_token` (i32); None when α is 0 or no token is given."""
    alpha = req.get("unlikelihood", 0)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not (np.isfinite(alpha) and alpha >= 0):
        raise usage(f"unlikelihood must be a number ≥ 0, got {alpha!r}", "unlikelihood")
    has = "unlikely_index" in arrays or "unlikely_token" in arrays
    if not has or alpha == 0:
        return float(alpha), None
    index = B.need(arrays, "unlikely_index", "i32").astype(np.int64)
    token = B.need(arrays, "unlikely_token", "i32").astype(np.int64)
    if index.size != token.size:
        raise protocol(f"`unlikely_index` has {index.size} values but `unlikely_token` {token.size}")
    if index.size == 0:
        return float(alpha), None
    if index.min() < 0 or index.max() >= n_scored or token.min() < 0:
        raise protocol(f"unlikely tokens must name scored tokens 0..{n_scored - 1} and token ids ≥ 0")
    counts = np.bincount(index, minlength=n_scored)
    table = np.full((n_scored, int(counts.max())), -1, np.int64)
    slot = np.zeros(n_scored, np.int64)
    for i, t in zip(index.tolist(), token.tolist(), strict=True):
        table[i, slot[i]] = t
        slot[i] += 1
    return float(alpha), table


def learning_rate(req: dict[str, Any], default: float) -> float:
    lr = req.get("lr", default)
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr >= 0:
        raise usage(f"lr must be a number ≥ 0, got {lr!r}", "lr")
    return float(lr)


def apply_gradients(learner: Learner, lr: float) -> tuple[float, bool, bool]:
    """Clip the accumulated gradient to the global norm `gradClip` and take one AdamW step at `lr`;
    a non-finite norm skips the step and drops the gradient. Returns (norm, clipped, skipped).
    The same rule as the tail of `Learner.update`."""
    norm = learner.grad_norm()
    if not np.isfinite(norm):
        learner.optimizer.zero_grad(set_to_none=True)
        return norm, False, True
    clip = learner.spec.grad_clip
    clipped = clip is not None and norm > clip
    if clipped:
        assert clip is not None
        scale = clip / (norm + 1e-6)
        for p in learner.params():
            if p.grad is not None:
                p.grad.mul_(scale)
    for group in learner.optimizer.param_groups:
        group["lr"] = lr
    learner.optimizer.step()
    learner.optimizer.zero_grad(set_to_none=True)
    learner.step += 1
    return norm, clipped, False


def group_loss(
    learner: Learner, group: list[B.Sequence], weights: Array, total_weight: float, table: Array | None, alpha: float
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The group's Σ w·(−log p) and, with unlikely tokens, α · Σ −log(1 − q), each divided by the
    request's total weight (one forward for both), and the summed q of its unlikely tokens."""
    if table is None:
        logp, _ = score(learner.model, group, learner.device)
        ul, q_sum = torch.zeros((), dtype=torch.float64, device=logp.device), 0.0
    else:
        rows = torch.from_numpy(B.gather_tokens(table, group)).to(learner.device)
        logp, _, alt = score_alternatives(learner.model, group, learner.device, rows)
        q = alt.double().exp().masked_fill(rows < 0, 0.0)
        ul = -torch.log1p(-q.clamp(max=MAX_UNLIKELY_PROB)).sum() * alpha / total_weight
        q_sum = float(q.detach().sum())
    w = torch.from_numpy(B.gather_tokens(weights, group)).to(logp.device)
    return -(w * logp.double()).sum() / total_weight, ul, q_sum


def sft(learner: Learner, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
    t0 = time.perf_counter()
    seqs = B.split_sequences(arrays)
    n_scored = sum(s.scored for s in seqs)
    weights = token_weights(arrays, n_scored)
    total_weight = float(weights.sum())
    if not total_weight > 0:
        raise usage("sft: the request scores no token with a positive weight", "loss_mask")
    budget = req.get("microBatchTokens")
    if budget is not None:
        budget = B.as_int(budget, "microBatchTokens", 1)
    lr = learning_rate(req, learner.spec.lr)
    alpha, table = unlikely_tokens(req, arrays, n_scored)
    dist = learner.dist
    groups = B.micro_batches(seqs[dist.rank :: dist.world], budget)
    rounds = dist.max_int(len(groups))
    learner.model.train()
    learner.optimizer.zero_grad(set_to_none=True)
    loss_sum = ul_sum = q_sum = 0.0
    for i in range(rounds):
        if i >= len(groups) or sum(s.scored for s in groups[i]) == 0:
            learner._dummy_forward(learner.model, backward=True)  # FSDP: every rank joins every pass
            continue
        loss, ul, q = group_loss(learner, groups[i], weights, total_weight, table, alpha)
        q_sum += q
        # FSDP averages gradients over ranks; the loss is a sum over ranks, so scale by world.
        torch.autograd.backward((loss + ul) * dist.world)
        loss_sum += float(loss.detach())
        ul_sum += float(ul.detach())
    learner.model.eval()
    loss_sum, ul_sum, q_sum = dist.sum_floats([loss_sum, ul_sum, q_sum])
    norm, clipped, skipped = apply_gradients(learner, lr)
    return {
        "loss": loss_sum,
        "unlikelihood": ul_sum,
        "unlikelyTokens": 0 if table is None else int((table >= 0).sum()),
        "unlikelyMass": q_sum,
        "gradNorm": norm if np.isfinite(norm) else None,
        "clipped": clipped,
        "skipped": skipped,
        "tokens": n_scored,
        "step": learner.step,
        "ms": (time.perf_counter() - t0) * 1000,
    }, {}


# ----- export -------------------------------------------------------------------------------


def plain_copy(learner: Learner) -> torch.nn.Module:
    """A float32 CPU copy of the policy as a plain transformers model: with LoRA, the adapter
    merged into the copy's base weights (merged in float32, so a bf16 run loses nothing more)."""
    model = copy.deepcopy(learner.loaded.model)
    restore_float32(model)  # the base weights a CPU bf16 run keeps aside (frozen_bf16)
    model = model.to(device="cpu", dtype=torch.float32)
    if learner.loaded.lora is not None:
        model = model.merge_and_unload()  # type: ignore[operator]
    assert isinstance(model, torch.nn.Module)
    return model.eval()


def export(learner: Learner, req: dict[str, Any]) -> dict[str, Any]:
    path = req.get("path")
    if not isinstance(path, str) or not path:
        raise usage("export needs a `path`", "path")
    if learner.dist.active:
        raise usage("export runs in one process only (model.torch.processes: 1)", "model.torch.processes")
    t0 = time.perf_counter()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    model = plain_copy(learner)
    tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(str(tmp))  # type: ignore[operator]
        learner.loaded.tokenizer.save_pretrained(str(tmp))
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "path": str(target),
        "merged": learner.loaded.lora is not None,
        "parameters": sum(p.numel() for p in model.parameters()),
        "ms": (time.perf_counter() - t0) * 1000,
    }
