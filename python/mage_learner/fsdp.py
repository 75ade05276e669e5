"""PyTorch FSDP (FULL_SHARD) around the policy under torchrun, and the full (unsharded) state
that save writes and restore reads, with or without FSDP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from .model import Loaded


class Learner(Protocol):
    """What this module needs of learner.Learner (which imports this module, not the reverse)."""

    loaded: Loaded
    model: torch.nn.Module
    optimizer: torch.optim.AdamW


def clean_name(name: str) -> str:
    """A parameter's name without the prefixes FSDP and activation checkpointing wrap it in."""
    return name.replace("_fsdp_wrapped_module.", "").replace("_checkpoint_wrapped_module.", "")


def is_fsdp(model: torch.nn.Module) -> bool:
    return type(model).__name__ == "FullyShardedDataParallel"


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """FULL_SHARD, one FSDP unit per decoder layer (transformers' `_no_split_modules`)."""
    import functools

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    names = set(getattr(_base(model), "_no_split_modules", None) or [])
    layer_types = {type(m) for m in model.modules() if type(m).__name__ in names}
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_types) if layer_types else None
    return FSDP(
        model,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        auto_wrap_policy=policy,
        device_id=device,  # an explicit CPU device is what lets FSDP run on CPU with gloo
        use_orig_params=True,
        sync_module_states=False,
    )


def _base(model: torch.nn.Module) -> torch.nn.Module:
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def offload_to_cpu(model: torch.nn.Module) -> bool:
    """Whether FSDP's full state dict should be copied to the CPU: only when the parameters live
    elsewhere. On the CPU the copy buys nothing, and under torch 2.11 (gloo ranks on the CPU) a full
    state dict taken with offload_to_cpu=True crashed with SIGSEGV in FSDP's own clone hook."""
    return next(model.parameters()).device.type != "cpu"


def _ordered_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of the optimizer's parameters in its own numbering (groups in order, then their
    parameters), cleaned of wrapper prefixes as FSDP's full optimizer state dict names them."""
    names = {id(p): clean_name(n) for n, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def _rekeyed(osd: dict[str, Any], key: Callable[[Any], Any]) -> dict[str, Any]:
    """An optimizer state with each parameter's key (in `state` and in the groups) mapped by `key`."""
    return {
        "state": {key(k): v for k, v in osd["state"].items()},
        "param_groups": [{**g, "params": [key(k) for k in g["params"]]} for g in osd["param_groups"]],
    }


def named_optim_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """One process's optimizer state keyed by parameter name, the layout of FSDP's full optimizer
    state dict, so that a checkpoint restores under any number of ranks."""
    return _rekeyed(optimizer.state_dict(), _ordered_names(model, optimizer).__getitem__)


def indexed_optim_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, osd: dict[str, Any]) -> dict[str, Any]:
    """A name-keyed optimizer state back in one process's numbering. A state already numbered
    (written by one process before states were named) is returned as it is."""
    keys = [*osd["state"].keys(), *(k for g in osd["param_groups"] for k in g["params"])]
    if all(isinstance(k, int) for k in keys):
        return osd
    index = {n: i for i, n in enumerate(_ordered_names(model, optimizer))}
    missing = [k for k in keys if k not in index]
    if missing:
        raise ValueError(f"restore: the optimizer state names parameters this model lacks: {missing[:3]}")
    return _rekeyed(osd, index.__getitem__)


def full_state(learner: Learner) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    model = learner.model
    if not is_fsdp(model):
        return model.state_dict(), named_optim_state(model, learner.optimizer)
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    offload = offload_to_cpu(model)
    with FSDP.state_dict_type(
        model,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=offload, rank0_only=True),
        FullOptimStateDictConfig(offload_to_cpu=offload, rank0_only=True),
    ):
        sd = model.state_dict()
        osd = FSDP.optim_state_dict(model, learner.optimizer)
    return sd, osd


def save_adapter(peft_model: torch.nn.Module, full: dict[str, torch.Tensor], out: Path) -> None:
    """The adapter from FSDP's full state dict, in peft's layout. (peft's own save_pretrained
    finds no adapter keys under FSDP: it matches them against the wrapped module's names.)"""
    from safetensors.torch import save_file

    adapter = {k.replace(".default.", "."): v.contiguous() for k, v in full.items() if "lora_" in k}
    if not adapter:
        raise ValueError("save: the LoRA model has no adapter tensors")
    save_file(adapter, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    peft_model.peft_config["default"].save_pretrained(str(out))  # type: ignore[index, union-attr]


def _saved_weights(learner: Learner, path: Path) -> dict[str, torch.Tensor]:
    """The saved policy as a state dict of the module save_pretrained was called on."""
    if learner.loaded.lora is not None:
        from peft.utils import load_peft_weights

        return load_peft_weights(str(path), device="cpu")
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=learner.loaded.dtype)
    return saved.state_dict()


def _load_into(learner: Learner, module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    if learner.loaded.lora is not None:
        from peft import set_peft_model_state_dict

        res = set_peft_model_state_dict(module, weights)
        unexpected = getattr(res, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"restore: adapter keys not in the model: {unexpected[:5]}")
    else:
        with torch.no_grad():
            module.load_state_dict(weights, strict=True)


def load_full_state(learner: Learner, path: Path) -> None:
    weights = _saved_weights(learner, path)
    osd = torch.load(path / "optimizer.pt", weights_only=False, map_location="cpu")
    model = learner.model
    if not is_fsdp(model):
        _load_into(learner, model, weights)
        learner.optimizer.load_state_dict(indexed_optim_state(model, learner.optimizer, osd))
        return
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if all(isinstance(k, int) for k in osd["state"]):
        # Written by one process before optimizer states were named: name them in this optimizer's order.
        osd = _rekeyed(osd, _ordered_names(model, learner.optimizer).__getitem__)
    # Through FSDP's full state dict (clean names, every rank): the saved tensors replace the
    # model's, adapter keys mapped back to their adapter name ("…lora_A.weight" → "…lora_A.default.weight").
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=offload_to_cpu(model), rank0_only=False)):
        full = model.state_dict()
        for k in full:
            src = k
            if learner.loaded.lora is not None:
                if "lora_" not in k:
                    continue
                src = k.replace(".default.", ".")
            if src not in weights:
                raise ValueError(f"restore: {path} has no tensor for {k}")
            full[k] = weights[src].to(full[k].dtype)
        model.load_state_dict(full)
    learner.optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, learner.optimizer, osd))
