"""Loading a local Hugging Face causal LM (and its tokenizer) for the worker: dtype, device,
full fine-tuning or LoRA (peft), gradient checkpointing, and the frozen reference policy."""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import usage
from .frozen_bf16 import store_frozen_in_bf16

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_CHOICES = (*DTYPES, "auto")
FIELD = "model.torch"
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class Precision:
    """What a `dtype` request means on a device. On the CPU, bfloat16 keeps float32 weights and
    runs matrix products in bfloat16 under autocast (docs/design.md, "bf16 on the CPU"): bf16
    weights there measured slower and four times further from float32's log-probs."""

    weights: torch.dtype
    autocast: torch.dtype | None
    note: str


def cpu_bf16_flags() -> list[str]:
    """The CPU's native bfloat16 instruction sets (Linux /proc/cpuinfo; none elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [f for f in CPU_BF16_FLAGS if f in flags]


def resolve_precision(name: Any, device: torch.device) -> Precision:
    if name not in DTYPE_CHOICES:
        raise usage(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {name!r}", f"{FIELD}.dtype")
    if device.type == "cuda":
        if name == "auto":
            name = "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
        return Precision(DTYPES[name], None, f"{name} weights")
    if name == "auto":
        flags = cpu_bf16_flags()
        if not flags:
            return Precision(torch.float32, None, "float32 (auto: the CPU has no native bfloat16)")
        return Precision(torch.float32, torch.bfloat16, f"float32 weights, bfloat16 matrix products (auto: the CPU has {', '.join(flags)})")
    if name == "float32":
        return Precision(torch.float32, None, "float32")
    return Precision(torch.float32, DTYPES[name], f"float32 weights, {name} matrix products (autocast)")


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    dropout: float
    target_modules: list[str]
    layers: list[int] | None = None  # decoder layers that get adapters; None: every layer

    @staticmethod
    def from_json(o: Any) -> LoraSpec | None:
        if o is None:
            return None
        if not isinstance(o, dict):
            raise usage("lora must be null or {rank, alpha, dropout, targetModules}", f"{FIELD}.lora")
        rank = o.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
            raise usage(f"lora.rank must be a positive integer, got {rank!r}", f"{FIELD}.lora.rank")
        alpha = o.get("alpha", 2 * rank)
        dropout = o.get("dropout", 0.0)
        targets = o.get("targetModules", ["q_proj", "k_proj", "v_proj", "o_proj"])
        if not isinstance(alpha, (int, float)) or alpha <= 0:
            raise usage(f"lora.alpha must be a positive number, got {alpha!r}", f"{FIELD}.lora.alpha")
        if not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise usage(f"lora.dropout must be in [0, 1), got {dropout!r}", f"{FIELD}.lora.dropout")
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
            raise usage("lora.targetModules must be a non-empty list of module names", f"{FIELD}.lora.targetModules")
        layers = o.get("layers")
        if layers is not None and not (
            isinstance(layers, list) and layers and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)
        ):
            raise usage(f"lora.layers must be null or a non-empty list of layer indices ≥ 0, got {layers!r}", f"{FIELD}.lora.layers")
        return LoraSpec(rank, float(alpha), float(dropout), list(targets), sorted(set(layers)) if layers else None)


@dataclass
class Loaded:
    model: torch.nn.Module
    tokenizer: Any
    reference: torch.nn.Module | None
    lora: LoraSpec | None
    device: torch.device
    dtype: torch.dtype
    architecture: str
    eos_ids: list[int]
    context_length: int
    vocab_size: int
    precision: Precision | None = None

    def compute(self) -> contextlib.AbstractContextManager[Any]:
        """The context every forward and backward of this model runs in (autocast or nothing)."""
        p = self.precision
        if p is None or p.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=p.autocast)


def resolve_device(name: Any) -> torch.device:
    if not isinstance(name, str) or not (name == "cpu" or name == "cuda" or name.startswith("cuda:")):
        raise usage(f"device must be cpu, cuda or cuda:N, got {name!r}", f"{FIELD}.device")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise usage(f"device {name} asked for, but this torch sees no CUDA device; use cpu", f"{FIELD}.device")
        dev = torch.device(name)
        local = os.environ.get("LOCAL_RANK")
        if local is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dev = torch.device("cuda", int(local))  # under torchrun each rank uses its own GPU
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise usage(f"device {name}: only {torch.cuda.device_count()} CUDA devices", f"{FIELD}.device")
        return dev
    return torch.device("cpu")


def check_model_dir(path: Any) -> Path:
    field = f"{FIELD}.path"
    if not isinstance(path, str) or not path:
        raise usage("model path must be a non-empty string (a local Hugging Face model directory)", field)
    p = Path(path)
    if not p.is_dir():
        raise usage(f"model directory {path} does not exist (a local Hugging Face model directory is expected)", field)
    cfg = p / "config.json"
    if not cfg.is_file():
        raise usage(f"{path} has no config.json: not a Hugging Face model directory", field)
    try:
        json.loads(cfg.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise usage(f"{cfg} is not valid JSON ({e})", field) from None
    return p


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - every failure here is the user's directory
        raise usage(f"cannot load the tokenizer of {path}: {e}", f"{FIELD}.path") from None


def load_base(path: Path, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    field = f"{FIELD}.path"
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # noqa: BLE001
        raise usage(f"unsupported or unreadable model config in {path}: {e}", field) from None
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype, config=config)
    except ValueError as e:
        raise usage(f"{path}: architecture {getattr(config, 'model_type', '?')!r} is not a supported causal LM ({e})", field) from None
    except OSError as e:
        raise usage(f"cannot load the weights in {path}: {e}", field) from None
    assert isinstance(model, torch.nn.Module)
    return model


def eos_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        for i in src if isinstance(src, list) else [src]:
            if isinstance(i, int) and i not in ids:
                ids.append(i)
    return ids


def load(req: dict[str, Any]) -> Loaded:
    path = check_model_dir(req.get("model"))
    device = resolve_device(req.get("device", "cpu"))
    precision = resolve_precision(req.get("dtype", "float32"), device)
    dtype = precision.weights
    lora = LoraSpec.from_json(req.get("lora"))
    seed = req.get("seed", 0)
    if not isinstance(seed, int):
        raise usage(f"seed must be an integer, got {seed!r}", "seed")
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(path)
    base = load_base(path, dtype)
    architecture = type(base).__name__
    cfg = base.config
    vocab = int(base.get_input_embeddings().weight.shape[0])  # type: ignore[operator]
    context = int(getattr(cfg, "max_position_embeddings", 0) or 0)
    eos = eos_ids(base, tokenizer)
    reference: torch.nn.Module | None = None
    if req.get("reference", False) and lora is None:
        reference = copy.deepcopy(base).to(device).eval()
        for p in reference.parameters():
            p.requires_grad_(False)
    model: torch.nn.Module = base
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        names = {n.split(".")[-1] for n, _ in base.named_modules()}
        missing = [t for t in lora.target_modules if t not in names]
        if missing:
            raise usage(
                f"lora.targetModules {missing} are not modules of {architecture} (it has e.g. {sorted(names)[:12]})",
                f"{FIELD}.lora.targetModules",
            )
        depth = int(getattr(base.config, "num_hidden_layers", 0) or 0)
        if lora.layers is not None and depth and max(lora.layers) >= depth:
            raise usage(f"lora.layers {lora.layers}: {architecture} has layers 0-{depth - 1}", f"{FIELD}.lora.layers")
        conf = LoraConfig(
            layers_to_transform=lora.layers,
            r=lora.rank,
            lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft accepts a float scale
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base, conf)
    model.to(device)
    if lora is not None and precision.autocast is not None and device.type == "cpu":
        store_frozen_in_bf16(model)
    if req.get("gradientCheckpointing", False):
        enable_checkpointing(model)
    model.eval()
    return Loaded(model, tokenizer, reference, lora, device, dtype, architecture, eos, context, vocab, precision)


def enable_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing, non-reentrant. transformers renamed the method: the
    pinned 5.23 has `activation_checkpointing_enable`, the 5.17 of a GPU machine's image only
    `gradient_checkpointing_enable` (with a differently named keyword)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@contextlib.contextmanager
def reference_policy(loaded: Loaded) -> Iterator[torch.nn.Module]:
    """The starting weights: the frozen copy, or with LoRA the model with its adapter disabled."""
    if loaded.lora is not None:
        with loaded.model.disable_adapter():  # type: ignore[operator]
            yield loaded.model
    elif loaded.reference is not None:
        yield loaded.reference
    else:
        raise usage("logprobs with model=reference needs load with reference: true", "reference")
