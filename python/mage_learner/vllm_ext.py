"""Runs inside vLLM's worker processes, not in mage's worker: the managed vLLM server is started
with `--worker-extension-cls mage_learner.vllm_ext.MageWorkerExtension` (and this directory on
PYTHONPATH), which adds `mage_reload_weights` to vLLM's worker, called over HTTP through the
development endpoint `POST /collective_rpc {"method": "mage_reload_weights", "args": [DIR]}`
(the server needs VLLM_SERVER_DEV_MODE=1). Standard library and torch only: the vLLM environment
has neither transformers' pinned version nor peft.

Why not vLLM's own `reload_weights` alone: in vllm 0.32.0 it reloads every layer from DIR's
safetensors in place, but a model whose output head is tied to its input embeddings (SmolLM2,
`tie_word_embeddings: true`) gets only the embeddings: the checkpoint has no `lm_head.weight`, so
the head keeps the OLD tensor (the log says "ParallelLMHead: Failed to load weights") and the two
come apart. Measured: embeddings perturbed and reloaded, vLLM's greedy reply matched a Hugging Face
model with the new input embeddings and the old head, not the tied model. A LoRA merge leaves the
embeddings alone, full fine-tuning does not. So after the reload the head is tied to the new
embeddings again and its CPU matrix-product kernel (which packs its own copy of the weight at load)
is made anew.
"""

from __future__ import annotations

import time
from typing import Any

import torch


def tied_head(model: torch.nn.Module, config: Any) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """The (output head, input embeddings) of a model whose head is tied to its embeddings, or
    None (untied, or a layout this does not know: the head is then reloaded with the rest)."""
    text_config = getattr(config, "get_text_config", None)
    cfg = text_config() if callable(text_config) else config
    if not getattr(cfg, "tie_word_embeddings", False):
        return None
    head = getattr(model, "lm_head", None)
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None) if inner is not None else None
    if not isinstance(head, torch.nn.Module) or not isinstance(embed, torch.nn.Module):
        return None
    if not isinstance(getattr(embed, "weight", None), torch.nn.Parameter):
        return None
    return head, embed


def retie(head: torch.nn.Module, embed: torch.nn.Module) -> None:
    """Points the head at the embeddings' (new) weight and redoes what vLLM does to it after a
    load (on a CPU: the packed copy its GEMM reads)."""
    head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    process = getattr(method, "process_weights_after_loading", None)
    if callable(process):
        process(head)


class MageWorkerExtension:
    """Mixed into vLLM's worker class (which provides `reload_weights`, `model_runner` and
    `vllm_config`)."""

    def mage_reload_weights(self, weights_path: str) -> dict[str, Any]:
        """Reloads every weight from the safetensors in `weights_path`, then ties the output head
        to the new embeddings again where the model ties them."""
        t0 = time.perf_counter()
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        config = self.vllm_config.model_config.hf_config  # type: ignore[attr-defined]
        pair = tied_head(model, config)
        if pair is not None:
            retie(*pair)
        return {"seconds": time.perf_counter() - t0, "retied": pair is not None}
