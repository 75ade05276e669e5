"""Frozen weights stored in bfloat16 for LoRA under CPU bf16 autocast.

Autocast casts a float32 weight to bf16 at every call unless the weight requires grad (its cast
cache keeps only those), so a LoRA run's frozen base weights were cast anew at every decode step:
about 0.5 GB read and 0.27 GB written per step for SmolLM2-135M, which made generate slower in bf16
than in float32 at small batches (`npm run bench -- real`). Stored once in bf16 they give the same
numbers (autocast's cast is the same round-to-nearest), and the float32 originals stay aside so
that an export merges the adapter into the exact base weights."""

from __future__ import annotations

import torch

ORIGINAL = "_mage_float32_weight"


def tied_ids(model: torch.nn.Module) -> set[int]:
    """Weights shared with the input embeddings (a tied output head): those stay float32, or the
    residual stream would start in bf16."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    return {id(p) for p in emb.parameters()} if isinstance(emb, torch.nn.Module) else set()


def store_frozen_in_bf16(model: torch.nn.Module) -> int:
    """Converts every frozen, untied Linear weight to bf16, keeping its float32 original; returns
    how many parameters it converted."""
    tied = tied_ids(model)
    converted = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear) or hasattr(module, ORIGINAL):
            continue
        w = module.weight
        if w.requires_grad or w.dtype != torch.float32 or id(w) in tied:
            continue
        setattr(module, ORIGINAL, w.data)
        w.data = w.data.to(torch.bfloat16)
        converted += w.numel()
    return converted


def restore_float32(model: torch.nn.Module) -> None:
    """Puts the float32 originals back (on a copy that is about to be merged and written)."""
    for module in model.modules():
        original = getattr(module, ORIGINAL, None)
        if isinstance(original, torch.Tensor) and isinstance(module, torch.nn.Linear):
            module.weight.data = original
            delattr(module, ORIGINAL)
