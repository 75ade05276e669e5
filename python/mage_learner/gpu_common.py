"""Helpers the GPU check's steps share: device timing and memory, and Kuhn-like chat prompts on
the model's own template."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Kuhn-like chat turns (the compact prompt style of src/tasks/kuhn.ts): (observation, answer).
KUHN_SYSTEM = (
    "You are playing Kuhn poker: cards J < Q < K, ante 1, one bet of 1. "
    "Answer with one action in brackets: [check], [bet], [call] or [fold]."
)
KUHN_HANDS = [
    ("Card: K. You act first.", "[bet]"),
    ("Card: J. Opp: bet.", "[fold]"),
    ("Card: Q. You act first.", "[check]"),
    ("Card: Q. Opp: check.", "I hold the middle card, so I check behind: [check]"),
    ("Card: K. You: check. Opp: bet.", "[call]"),
    ("Card: J. You act first. Last attempt you bet and lost 2 chips.", "This time I check: [check]"),
]


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn: Callable[[], T]) -> tuple[T, float]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 3) if device.startswith("cuda") else None


def free_memory(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def kuhn_conversation(observation: str, answer: str | None) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": KUHN_SYSTEM}, {"role": "user", "content": observation}]
    if answer is not None:
        msgs.append({"role": "assistant", "content": answer})
    return msgs


def kuhn_sequences(tokenizer: Any) -> list[Any]:
    """Chat-rendered Kuhn turns whose assistant answers are the scored tokens."""
    import numpy as np

    from .batch import Sequence
    from .render import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    seqs: list[Sequence] = []
    offset = 0
    for i, (obs, ans) in enumerate(KUHN_HANDS):
        r = renderer.render(kuhn_conversation(obs, ans), add_generation_prompt=False)
        mask = np.zeros(len(r.ids), np.uint8)
        for a, b in r.spans:
            mask[a:b] = 1
        s = Sequence(i, np.asarray(r.ids, np.int32), mask, offset)
        offset += s.scored
        seqs.append(s)
    return seqs


def kuhn_prompts(tokenizer: Any) -> list[list[int]]:
    from .render import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    return [renderer.render(kuhn_conversation(obs, None), add_generation_prompt=True).ids for obs, _ in KUHN_HANDS]


def linear_module_names(path: Path) -> list[str]:
    """Every linear layer's module name but the output head (peft's "all-linear"), read from the
    config on the meta device, without loading weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    names = {n.split(".")[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    names.discard("lm_head")
    return sorted(names)
