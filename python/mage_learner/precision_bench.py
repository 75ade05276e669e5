"""Side by side on this machine's CPU: float32, float32 weights under bfloat16 autocast, and
bfloat16 weights (LoRA adapters stay float32, as peft keeps them), for one model with LoRA on
every linear layer: forward and forward+backward tokens/s, and how far each one's log-probs are
from float32's (docs/design.md, "bf16 on the CPU").

    python -m mage_learner.precision_bench --model models/smollm2-135m-instruct --threads 1
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_model(path: str, dtype: torch.dtype) -> Any:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a trained adapter, not peft's zero start: the LoRA path counts
            p.data.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    return model


def token_logp(model: Any, ids: torch.Tensor, autocast: bool) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits
    lsm = torch.log_softmax(logits[:, :-1].float(), -1)
    return lsm.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def best_seconds(fn: Callable[[], None], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.precision_bench", description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ids = torch.randint(100, 40000, (args.rows, args.length))
    f32 = lora_model(args.model, torch.float32)
    with torch.no_grad():
        exact = token_logp(f32, ids, False)
    variants = {"float32": (f32, False), "float32 + bf16 autocast": (f32, True), "bf16 weights": (None, False)}
    print(f"{args.rows} x {args.length} tokens, LoRA r16 on every linear layer, {args.threads} thread(s)")
    for label, (model, autocast) in variants.items():
        m = model if model is not None else lora_model(args.model, torch.bfloat16)
        with torch.no_grad():
            gap = (token_logp(m, ids, autocast) - exact).abs()

        def forward(m: Any = m, autocast: bool = autocast) -> None:
            with torch.no_grad():
                token_logp(m, ids, autocast)

        def forward_backward(m: Any = m, autocast: bool = autocast) -> None:
            m.zero_grad()
            torch.autograd.backward(token_logp(m, ids, autocast)[:, -64:].sum())

        n = ids.numel()
        fw = n / best_seconds(forward, args.reps)
        fb = n / best_seconds(forward_backward, args.reps)
        print(f"  {label:<24} forward {fw:7.0f} tok/s  forward+backward {fb:7.0f} tok/s  |Δ logp| vs float32: mean {gap.mean():.4f}, max {gap.max():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
