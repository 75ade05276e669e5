"""Saved LoRA adapters sampled on the one loaded base model (league snapshots, docs/design.md).

`save_adapter` writes the policy's adapter alone (no optimizer, no RNG state) in peft's layout.
`generate` with an `adapter` path samples with that adapter's weights: they are copied into the
live adapter's tensors in place for the call and the policy's own copied back after it. In place,
because every sampler reads the live tensors where they are: the Hugging Face forward, the lean
decoder, and the CUDA graphs the lean decoder captured (a graph replays the addresses it saw, so
peft's `set_adapter` to a second adapter would be ignored there). It also leaves the trained
parameters, their optimizer state and what `save` writes untouched, which peft's multi-adapter
support does not (`set_adapter` flips `requires_grad`, `save_pretrained` writes every adapter).

Adapters read from disk stay in memory, at most `cap` of them; the least recently used leaves and
is read again when asked for."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .errors import usage
from .folders import replace_dir
from .model import LoraSpec

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
FIELD = "model.torch.lora"


def live_adapter(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's adapter parameters under the names peft saves them with (adapter name dropped)."""
    return {n.replace(".default.", "."): p for n, p in model.named_parameters() if "lora_" in n}


def save_adapter(model: torch.nn.Module, path: Path) -> dict[str, Any]:
    """Writes the live adapter into `path` (replaced atomically): peft's adapter files, loadable
    by `PeftModel.from_pretrained` on the base model and by `generate`'s `adapter`."""
    from safetensors.torch import save_file

    t0 = time.perf_counter()
    tensors = {k: t.detach().contiguous() for k, t in live_adapter(model).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{path.name}.tmp-", dir=path.parent))
    try:
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt"})
        model.peft_config["default"].save_pretrained(str(tmp))  # type: ignore[index, union-attr]
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    return {"path": str(path), "format": "peft-adapter", "tensors": len(tensors), "bytes": nbytes, "ms": (time.perf_counter() - t0) * 1000}


def read_adapter(path: Path, live: dict[str, torch.Tensor], lora: LoraSpec) -> dict[str, torch.Tensor]:
    """The adapter saved in `path`, on the live adapter's device and dtype; a usage error unless it
    is an adapter of the loaded model's shape (same rank, alpha, modules and layers)."""
    from safetensors.torch import load_file

    if not (path / WEIGHTS).is_file() or not (path / CONFIG).is_file():
        raise usage(f"adapter {path}: no {WEIGHTS} and {CONFIG} (not a saved LoRA adapter)", "adapter")
    conf = json.loads((path / CONFIG).read_text())
    if conf.get("r") != lora.rank or float(conf.get("lora_alpha", -1)) != lora.alpha:
        raise usage(
            f"adapter {path} has rank {conf.get('r')} and alpha {conf.get('lora_alpha')}, the loaded model's LoRA {lora.rank} and {lora.alpha}",
            FIELD,
        )
    saved = load_file(str(path / WEIGHTS), device="cpu")
    if set(saved) != set(live) or any(saved[k].shape != live[k].shape for k in live):
        odd = sorted(set(saved) ^ set(live))[:3] or [k for k in live if saved[k].shape != live[k].shape][:3]
        raise usage(f"adapter {path} does not fit the loaded model's LoRA modules and layers (e.g. {odd})", FIELD)
    return {k: saved[k].to(device=t.device, dtype=t.dtype) for k, t in live.items()}


@contextlib.contextmanager
def swapped_in(live: dict[str, torch.Tensor], weights: dict[str, torch.Tensor]) -> Iterator[None]:
    """Inside, the live adapter tensors hold `weights`; afterwards exactly what they held before."""
    with torch.no_grad():
        own = {k: t.detach().clone() for k, t in live.items()}
        for k, t in live.items():
            t.copy_(weights[k])
    try:
        yield
    finally:
        with torch.no_grad():
            for k, t in live.items():
                t.copy_(own[k])


@dataclass
class AdapterCache:
    """Adapters read from disk, by path, the most recently used last; at most `cap`."""

    cap: int
    held: OrderedDict[str, dict[str, torch.Tensor]] = field(default_factory=OrderedDict)
    loads: int = 0
    evictions: int = 0

    def get(self, path: str, live: dict[str, torch.Tensor], lora: LoraSpec) -> tuple[dict[str, torch.Tensor], list[str]]:
        """The adapter in `path` (read on a miss) and the paths evicted to make room for it."""
        if path in self.held:
            self.held.move_to_end(path)
            return self.held[path], []
        weights = read_adapter(Path(path), live, lora)
        self.held[path] = weights
        self.loads += 1
        evicted = []
        while len(self.held) > self.cap:
            evicted.append(self.held.popitem(last=False)[0])
            self.evictions += 1
        return weights, evicted

    def forget(self, path: str) -> bool:
        """Drops the adapter read from `path`, if held (its files are being rewritten)."""
        return self.held.pop(path, None) is not None

    def report(self) -> dict[str, int]:
        return {"held": len(self.held), "cap": self.cap, "loads": self.loads, "evictions": self.evictions}


def adapter_cap(req: dict[str, Any]) -> int:
    """`load`'s `maxAdapters`: saved adapters `generate` keeps in memory (default 8)."""
    cap = req.get("maxAdapters", 8)
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise usage(f"maxAdapters must be an integer ≥ 1, got {cap!r}", "population.league.maxSnapshots")
    return cap
