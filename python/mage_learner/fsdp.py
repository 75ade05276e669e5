"""PyTorch FSDP (FULL_SHARD) around the policy under torchrun, and the full (unsharded) state
that save writes and restore reads, with or without FSDP."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .learner import Learner


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


def full_state(learner: Learner) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    model = learner.model
    if not is_fsdp(model):
        return model.state_dict(), learner.optimizer.state_dict()
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.state_dict_type(
        model,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
        FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
    ):
        sd = model.state_dict()
        osd = FSDP.optim_state_dict(model, learner.optimizer)
    return sd, osd


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
        learner.optimizer.load_state_dict(osd)
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.summon_full_params(model, writeback=True, rank0_only=False):
        _load_into(learner, model.module, weights)  # type: ignore[arg-type]
    learner.optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, learner.optimizer, osd))
