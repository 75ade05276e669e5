"""The GPU check's sizes, results and helpers shared by its steps and its orchestrator."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar


T = TypeVar("T")

DEFAULT_MODEL = "models/smollm2-135m-instruct"
TINY = "tiny"  # --model tiny: a random 2-layer Llama from mage_learner.tiny (plumbing only)
LOGP_BOUND = 1e-3  # float32 with TF32 off: CUDA and CPU kernels differ only in summation order
LORA_RANK = 16
TRAIN_CONFIG = "configs/kuhn-mage.yaml"
# Test modules that need a package a GPU machine's own Python may lack (the adapters, the W&B sidecar).
OPTIONAL_PACKAGES = {"test_openspiel_server.py": "pyspiel", "test_textarena_server.py": "textarena", "test_wandb_sidecar.py": "wandb"}
PIN_MODULE = "test_environment.py"  # the pin check: it imports every pinned package, wandb too

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


@dataclass(frozen=True)
class Sizes:
    """Workload sizes: the real ones on the GPU, tiny ones for a quick dry run."""

    generate_batches: tuple[int, ...]
    new_tokens: int
    update_rows: int
    update_len: int
    update_repeats: int
    train_iterations: int
    train_sets: tuple[str, ...]


# On an H200 the Hugging Face sampler is launch-bound (50-75 ms a decode step at any batch up to
# 64; kuhn-mage's 128 trials took 151 s an iteration); the decoder step times it beside the lean
# decoder at 1 / 16 / 64 sequences, so the lora step times generate at 16 only. Training samples
# with the lean decoder (decoder: auto): 5 iterations of 16 compact trials.
FULL = Sizes(
    (16,),
    64,
    16,
    512,
    3,
    5,
    ("rollout.tasksPerIteration=4", "rollout.groupSize=4", "task.promptStyle=compact", "model.torch.decoder=auto"),
)
QUICK = Sizes(
    (1, 4),
    8,
    4,
    64,
    1,
    1,
    ("rollout.tasksPerIteration=2", "rollout.groupSize=2", "rollout.maxResponseTokens=8"),
)


@dataclass
class StepResult:
    name: str
    status: str  # ok | failed | skipped
    seconds: float = 0.0
    headline: str = ""
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    tail: list[str] | None = None


@dataclass
class Context:
    root: Path
    python: str
    device: str
    quick: bool
    sizes: Sizes
    logs: Path
    work: Path
    deadline: float
    model: Path | None = None
    model_note: str = ""
    skip: frozenset[str] = frozenset()

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()


# ----- shared helpers ----------------------------------------------------------------------------


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

    from ..batch import Sequence
    from ..render import ChatRenderer

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
    from ..render import ChatRenderer

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


def make_learner(loaded: Any) -> Any:
    from ..learner import Learner, OptimizerSpec, decay_names, make_optimizer

    spec = OptimizerSpec(lr=1e-5)
    return Learner(loaded, loaded.model, make_optimizer(loaded.model, spec, decay_names(loaded.model)), spec)
