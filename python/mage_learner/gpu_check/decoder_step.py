"""The GPU check's decoder step: the lean decoder with its steps captured as CUDA graphs, checked
against the same buckets run eagerly (greedy tokens identical, sampled tokens and log-probs
identical) and against the learner's teacher-forced log-probs (within a stated bf16 bound), then
timed at 1 / 16 / 64 sequences beside the Hugging Face sampler. On a CPU (the dry run) the
"captured" runner runs eagerly too, so the comparison is trivially equal there."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import kuhn_prompts, linear_module_names, peak_gib, reset_peak, timed

LORA_RANK = 16
# Mean |Δ log-prob| of sampled tokens, sampler vs teacher-forced scoring, in bfloat16: both run the
# same weights through different kernels (a one-token step vs a whole-row forward), so they
# differ by bf16 rounding of the logits; float32 (the CPU dry run) stays far below it.
BF16_MEAN_BOUND = 0.05
CHECK_ROWS = 16
CHECK_TOKENS = 48


def step_decoder(args: argparse.Namespace) -> dict[str, Any]:
    from ..decoder import Decoder
    from ..runners import GraphRunner

    quick = bool(args.quick)
    loaded = load_lora_model(args)
    dec = Decoder(loaded.model)
    captured = GraphRunner(dec, capture=args.device.startswith("cuda"))
    eager = GraphRunner(dec, capture=False)
    prompts = kuhn_prompts(loaded.tokenizer)
    rows, tokens = (4, 8) if quick else (CHECK_ROWS, CHECK_TOKENS)
    exact = compare_runners(loaded, captured, eager, prompts, rows, tokens)
    scored = compare_teacher_forced(loaded, captured, prompts, rows, tokens)
    speed = measure_speed(loaded, captured, prompts, (1, 4) if quick else (1, 16, 64), 8 if quick else 128, args.device)
    ok = exact["greedy_identical"] and exact["sampled_identical"] and scored["mean_abs_delta"] <= BF16_MEAN_BOUND
    rates = ", ".join(f"{s['sequences']}→{s['lean_tokens_per_s']:.0f} (hf {s['hf_tokens_per_s']:.0f})" for s in speed)
    headline = (
        f"captured vs eager: greedy {'identical' if exact['greedy_identical'] else 'DIFFERENT'}, sampled "
        f"{'identical' if exact['sampled_identical'] else 'DIFFERENT'} (max |Δ logp| {exact['max_abs_logp_delta']:.1e}); "
        f"sampler vs teacher-forced mean |Δ logp| {scored['mean_abs_delta']:.3f} (bound {BF16_MEAN_BOUND}); "
        f"tok/s seqs→lean (hf): {rates}; {captured.captures} graphs captured"
    )
    details = {"dtype": str(loaded.dtype), "exact": exact, "teacher_forced": scored, "speed": speed, "captures": captured.captures}
    reason = None if ok else "the captured decoder disagrees with the eager one or with the learner (see details)"
    return {"status": "ok" if ok else "failed", "reason": reason, "headline": headline, "details": details}


def load_lora_model(args: argparse.Namespace) -> Any:
    """The model as training loads it (LoRA on every linear layer), with the adapters' B matrices
    set to small random values so that the LoRA path changes the logits."""
    import torch

    from ..model import load

    dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    lora = {"rank": LORA_RANK, "alpha": 2 * LORA_RANK, "dropout": 0.0, "targetModules": linear_module_names(Path(args.model))}
    loaded = load({"model": args.model, "dtype": dtype, "device": args.device, "lora": lora, "seed": 0})
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for name, p in loaded.model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=gen) * 0.01).to(p.dtype))
    return loaded


def batch_of(prompts: list[list[int]], n: int) -> list[list[int]]:
    return [prompts[i % len(prompts)] for i in range(n)]


def params_of(n: int, new: int, temperature: float) -> list[Any]:
    from ..sampling import SamplingParams

    return [SamplingParams(max_new_tokens=new, temperature=temperature, seed=1000 + i) for i in range(n)]


def compare_runners(loaded: Any, captured: Any, eager: Any, prompts: list[list[int]], rows: int, tokens: int) -> dict[str, Any]:
    from ..lean import generate_lean

    batch = batch_of(prompts, rows)
    out: dict[str, Any] = {"rows": rows, "new_tokens": tokens}
    for name, temp in (("greedy", 0.0), ("sampled", 1.0)):
        a = generate_lean(captured, loaded.tokenizer, [], batch, params_of(rows, tokens, temp))
        b = generate_lean(eager, loaded.tokenizer, [], batch, params_of(rows, tokens, temp))
        out[f"{name}_identical"] = all(x.tokens == y.tokens for x, y in zip(a, b))
        if name == "sampled":
            deltas = [abs(p - q) for x, y in zip(a, b) for p, q in zip(x.logprobs, y.logprobs)]
            out["max_abs_logp_delta"] = max(deltas) if deltas else 0.0
    return out


def compare_teacher_forced(loaded: Any, runner: Any, prompts: list[list[int]], rows: int, tokens: int) -> dict[str, Any]:
    """The sampler's log-probs of its own tokens against the learner's scoring of the same rows,
    for the lean decoder and, as the yardstick, for the Hugging Face sampler."""
    import numpy as np
    import torch

    from ..batch import Sequence
    from ..generate import Sample, generate
    from ..lean import generate_lean
    from ..learner import score

    batch = batch_of(prompts, rows)
    params = params_of(rows, tokens, 1.0)
    out: dict[str, Any] = {"bound": BF16_MEAN_BOUND}
    samplers: dict[str, Callable[[], list[Sample]]] = {
        "lean": lambda: generate_lean(runner, loaded.tokenizer, [], batch, params),
        "hf": lambda: generate(loaded.model, loaded.tokenizer, loaded.device, [], batch, params),
    }
    for name, sample in samplers.items():
        samples = sample()
        seqs, offset = [], 0
        for i, (p, s) in enumerate(zip(batch, samples)):
            mask = np.r_[np.zeros(len(p), np.uint8), np.ones(len(s.tokens), np.uint8)]
            seqs.append(Sequence(i, np.asarray(p + s.tokens, np.int32), mask, offset))
            offset += len(s.tokens)
        with torch.no_grad():
            lp, _ = score(loaded.model, seqs, loaded.device)
        got = np.asarray([x for s in samples for x in s.logprobs])
        delta = np.abs(got - lp.double().cpu().numpy())
        prefix = "" if name == "lean" else "hf_"
        out[f"{prefix}mean_abs_delta"] = float(delta.mean())
        out[f"{prefix}max_abs_delta"] = float(delta.max())
    return out


def measure_speed(loaded: Any, runner: Any, prompts: list[list[int]], sizes: tuple[int, ...], new: int, device: str) -> list[dict[str, Any]]:
    """tokens/s with no stop ids (every row samples exactly `new` tokens), the first call of each
    size a warm-up (it captures that size's graphs) and the median of the next two."""
    from ..generate import generate
    from ..lean import generate_lean

    out = []
    for n in sizes:
        batch, params = batch_of(prompts, n), params_of(n, new, 1.0)
        reset_peak(device)
        lean = [timed(device, lambda: generate_lean(runner, loaded.tokenizer, [], batch, params))[1] for _ in range(3)]
        hf = [timed(device, lambda: generate(loaded.model, loaded.tokenizer, loaded.device, [], batch, params))[1] for _ in range(2)]
        lean_s, hf_s = statistics.median(lean[1:]), hf[-1]
        out.append({
            "sequences": n,
            "new_tokens": new,
            "lean_first_s": round(lean[0], 3),
            "lean_s": round(lean_s, 3),
            "lean_tokens_per_s": round(n * new / lean_s, 1),
            "lean_ms_per_step": round(1000 * lean_s / new, 2),
            "hf_s": round(hf_s, 3),
            "hf_tokens_per_s": round(n * new / hf_s, 1),
            "speedup": round(hf_s / lean_s, 2),
            "peak_gib": peak_gib(device),
        })
    return out
