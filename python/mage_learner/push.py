"""`push_weights`: the policy's weights as one safetensors file for a vLLM server to reload
(`model.torch.vllm.push: merged`, and full fine-tuning under `rollout: vllm`).

With LoRA each adapted Linear's weight is written as W + ΔW (peft's `get_delta_weight`, in float32
from the float32 base a CPU bf16 run keeps aside, `frozen_bf16`), so the server samples the policy
with no adapter active; without LoRA the weights are written as they are. Names are the base
model's checkpoint names (what `save_pretrained` writes, what vLLM's loaders read); a tensor shared
by two names (a tied output head) is written once, under its first name. Written in the dtype the
server computes in (vLLM converts on load anyway; bfloat16 halves the file), into a new directory
that replaces `path` atomically. The worker's own model is not changed and nothing is copied whole:
one merged tensor at a time.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .errors import usage
from .folders import replace_dir
from .frozen_bf16 import ORIGINAL

if TYPE_CHECKING:
    from .learner import Learner

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ADAPTER = "default"


def file_dtype(name: Any, model: torch.nn.Module) -> torch.dtype:
    """The dtype to write: the server's `--dtype`; auto is the model config's dtype (what vLLM's
    auto picks), float32 where the config names none."""
    if name == "auto":
        cfg = getattr(model, "config", None)
        declared = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None)
        if isinstance(declared, str):
            declared = DTYPES.get(declared)
        return declared if isinstance(declared, torch.dtype) and declared in DTYPES.values() else torch.float32
    if not isinstance(name, str) or name not in DTYPES:
        raise usage(f"push_weights: dtype must be one of float32, bfloat16, float16, auto; got {name!r}", "dtype")
    return DTYPES[name]


def _base_weight(layer: torch.nn.Module) -> torch.Tensor:
    """A LoRA layer's base weight in float32 (the original a CPU bf16 run set aside, if any)."""
    base = getattr(layer, "base_layer", layer)
    original = getattr(base, ORIGINAL, None)
    w = original if isinstance(original, torch.Tensor) else base.weight
    assert isinstance(w, torch.Tensor)
    return w.detach().to(torch.float32)


def served_state(model: torch.nn.Module, lora: bool, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The policy's weights under the base model's checkpoint names, LoRA merged, in `dtype`, on
    the CPU, each storage once."""
    base = model.get_base_model() if lora else model  # type: ignore[operator]
    assert isinstance(base, torch.nn.Module)
    adapted: dict[str, Any] = {}  # peft's LoraLayer modules by name
    if lora:
        from peft.tuners.lora import LoraLayer

        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and ADAPTER in getattr(module, "lora_A", {}):
                if getattr(module, "merged", False):
                    raise RuntimeError(f"push_weights: {name} has its adapter merged already")
                adapted[name] = module
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    with torch.no_grad():
        for key, tensor in base.state_dict(keep_vars=False).items():
            if "lora_" in key:
                continue
            ptr = tensor.untyped_storage().data_ptr()
            if ptr in seen and tensor.numel() > 0:
                continue  # a tied head: the same storage as the embeddings
            seen.add(ptr)
            name = key.replace(".base_layer.", ".")
            prefix, _, leaf = name.rpartition(".")
            layer = adapted.get(prefix)
            if layer is not None and leaf == "weight":
                delta = layer.get_delta_weight(ADAPTER)
                merged = _base_weight(layer) + delta.detach().to(torch.float32)
                out[name] = merged.to(device="cpu", dtype=dtype).contiguous()
            elif torch.is_floating_point(tensor):
                original = getattr(base.get_submodule(prefix), ORIGINAL, None) if prefix and leaf == "weight" else None
                src = original if isinstance(original, torch.Tensor) else tensor
                out[name] = src.detach().to(device="cpu", dtype=dtype).contiguous()
            else:
                out[name] = tensor.detach().to("cpu").contiguous()
    return out


def push_weights(learner: Learner, req: dict[str, Any]) -> dict[str, Any]:
    path = req.get("path")
    if not isinstance(path, str) or not path:
        raise usage("push_weights needs a `path`", "path")
    if learner.dist.active:
        raise usage(
            "push_weights runs in one process only (model.torch.processes: 1); under FSDP push LoRA adapters (model.torch.vllm.push: lora)",
            "model.torch.processes",
        )
    t0 = time.perf_counter()
    model = learner.loaded.model
    dtype = file_dtype(req.get("dtype", "float32"), model)
    state = served_state(model, learner.loaded.lora is not None, dtype)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        from safetensors.torch import save_file

        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "path": str(target),
        "merged": learner.loaded.lora is not None,
        "dtype": str(dtype).removeprefix("torch."),
        "tensors": len(state),
        "bytes": sum(t.numel() * t.element_size() for t in state.values()),
        "ms": (time.perf_counter() - t0) * 1000,
    }
