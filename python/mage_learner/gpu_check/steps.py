"""The GPU check's in-process steps, each run in a child process: env, logprobs, lora."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import FULL, LOGP_BOUND, LORA_RANK, OPTIONAL_PACKAGES, QUICK, Sizes, free_memory, kuhn_prompts, kuhn_sequences, linear_module_names, make_learner, peak_gib, reset_peak, timed
from .decoder_step import step_decoder


# ----- in-process steps (run in a child process) -------------------------------------------------


def step_env(args: argparse.Namespace) -> dict[str, Any]:
    """Versions, the GPU, and the installed versions that differ from python/requirements.txt."""
    import peft
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    d: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,  # type: ignore[no-untyped-call]
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "cuda_available": cuda,
        "gpu": None,
    }
    if cuda:
        p = torch.cuda.get_device_properties(0)
        d["gpu"] = p.name
        d["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        d["capability"] = f"{p.major}.{p.minor}"
        d["gpu_count"] = torch.cuda.device_count()
        d["driver"] = nvidia_driver()
    installed = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__, "peft": peft.__version__}
    d["pin_mismatches"] = pin_mismatches(Path(args.root) / "python" / "requirements.txt", installed)
    d["optional_packages"] = {pkg: has_module(pkg) for pkg in OPTIONAL_PACKAGES.values()}
    status, reason = "ok", None
    if args.device.startswith("cuda") and not cuda:
        status, reason = "failed", f"--device {args.device}, but this torch ({torch.__version__}) sees no CUDA device"
    gpu = f"{d['gpu']} ({d.get('gpu_memory_gib')} GiB)" if cuda else "no CUDA device"
    headline = f"{gpu}; torch {d['torch']} (CUDA {d['cuda']}), transformers {d['transformers']}, peft {d['peft']}"
    return {"status": status, "reason": reason, "headline": headline, "details": d}


def nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def pin_mismatches(requirements: Path, installed: dict[str, str]) -> list[str]:
    pins: dict[str, str] = {}
    if requirements.is_file():
        for line in requirements.read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==")
                pins[name.strip().lower()] = version.strip()
    return [f"{n} {v} installed, {pins[n]} pinned" for n, v in installed.items() if n in pins and pins[n] != v]


def has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def step_logprobs(args: argparse.Namespace) -> dict[str, Any]:
    """float32 log-probs of chat-rendered Kuhn answers on the device and on the CPU."""
    import torch

    from ..learner import score
    from ..model import load

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    per_device: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    seqs: list[Any] = []
    for dev in (args.device, "cpu"):
        loaded = load({"model": args.model, "dtype": "float32", "device": dev})
        seqs = seqs or kuhn_sequences(loaded.tokenizer)
        with torch.no_grad():
            (lp, _), seconds[dev] = timed(dev, lambda: score(loaded.model, seqs, loaded.device))
        per_device[dev] = lp.double().cpu()
        del loaded
        free_memory(dev)
    delta = (per_device[args.device] - per_device["cpu"]).abs()
    worst = float(delta.max())
    d = {
        "tokens": int(delta.numel()),
        "sequences": len(seqs),
        "max_abs_delta": worst,
        "mean_abs_delta": float(delta.mean()),
        "bound": LOGP_BOUND,
        "tf32": False,
        "score_seconds": {k: round(v, 3) for k, v in seconds.items()},
        "mean_logp": float(per_device["cpu"].mean()),
    }
    ok = worst <= LOGP_BOUND
    headline = f"max |Δ logp| {args.device} vs cpu = {worst:.2e} (bound {LOGP_BOUND:.0e}, float32, TF32 off) over {d['tokens']} tokens"
    return {"status": "ok" if ok else "failed", "reason": None if ok else f"max |Δ logp| {worst:.3e} > {LOGP_BOUND:.0e}", "headline": headline, "details": d}


def train_dtype(device: str) -> str:
    """bfloat16 on CUDA; float32 on the CPU (a dry run, where the float32 figures are the reference)."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def step_lora(args: argparse.Namespace) -> dict[str, Any]:
    """LoRA (rank 16, every linear layer), bf16 on CUDA: generate tokens/s per batch size, update tokens/s."""
    from ..model import load

    sizes = QUICK if args.quick else FULL
    targets = linear_module_names(Path(args.model))
    lora = {"rank": LORA_RANK, "alpha": 2 * LORA_RANK, "dropout": 0.0, "targetModules": targets}
    dtype = train_dtype(args.device)
    (loaded, load_s) = timed(args.device, lambda: load({"model": args.model, "dtype": dtype, "device": args.device, "lora": lora, "seed": 0}))
    learner = make_learner(loaded)
    gen = measure_generate(loaded, args.device, sizes)
    upd = measure_update(learner, args.device, sizes)
    d = {
        "lora": lora,
        "dtype": dtype,
        "trainable_parameters": sum(p.numel() for p in loaded.model.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "load_s": round(load_s, 2),
        "generate": gen,
        "update": upd,
    }
    peaks = [x["peak_gib"] for x in [*gen, upd] if x["peak_gib"] is not None]
    d["max_memory_allocated_gib"] = max(peaks) if peaks else None
    rates = ", ".join(f"{g['sequences']}→{g['tokens_per_s']:.0f}" for g in gen)
    mem = "" if d["max_memory_allocated_gib"] is None else f"; max_memory_allocated {d['max_memory_allocated_gib']:.2f} GiB"
    headline = (
        f"{dtype} LoRA r{LORA_RANK}, generate tok/s (seqs→tok/s, {sizes.new_tokens} new): {rates}; "
        f"update {upd['rows']}×{upd['length']}: {upd['tokens_per_s']:.0f} tok/s{mem}"
    )
    return {"status": "ok", "reason": None, "headline": headline, "details": d}


def measure_generate(loaded: Any, device: str, sizes: Sizes) -> list[dict[str, Any]]:
    from ..generate import generate
    from ..sampling import SamplingParams

    prompts = kuhn_prompts(loaded.tokenizer)

    def run(n: int, new: int) -> float:
        batch = [prompts[i % len(prompts)] for i in range(n)]
        params = [SamplingParams(max_new_tokens=new, temperature=1.0, seed=i) for i in range(n)]
        # No stop ids: every row samples exactly `new` tokens, so tokens/s counts a fixed amount.
        _, s = timed(device, lambda: generate(loaded.model, loaded.tokenizer, loaded.device, [], batch, params))
        return s

    run(2, 4)  # warm-up: kernels, allocator
    out: list[dict[str, Any]] = []
    for n in sizes.generate_batches:
        reset_peak(device)
        s = run(n, sizes.new_tokens)
        toks = n * sizes.new_tokens
        out.append({"sequences": n, "new_tokens": sizes.new_tokens, "seconds": round(s, 3), "tokens_per_s": round(toks / s, 1), "peak_gib": peak_gib(device)})
    return out


def update_arrays(vocab: int, rows: int, length: int, seed: int = 0) -> dict[str, Any]:
    """Random token rows; the first eighth of each row is the unscored prompt."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab, size=(rows, length)).astype(np.int32)
    mask = np.zeros((rows, length), np.uint8)
    mask[:, max(1, length // 8) :] = 1
    return {"ids": ids.reshape(-1), "lengths": np.full(rows, length, np.int32), "loss_mask": mask.reshape(-1)}


def measure_update(learner: Any, device: str, sizes: Sizes) -> dict[str, Any]:
    import numpy as np

    arrays = update_arrays(learner.loaded.vocab_size, sizes.update_rows, sizes.update_len)
    _, lp = learner.logprobs({}, arrays)
    scored = int(arrays["loss_mask"].sum())
    batch = {**arrays, "old_logp": lp["logp"], "advantages": np.random.default_rng(1).normal(0, 1, scored)}
    times: list[float] = []
    reply: dict[str, Any] = {}
    reset_peak(device)
    for _ in range(sizes.update_repeats + 1):  # the first is a warm-up
        (reply, _), s = timed(device, lambda: learner.update({"loss": {}, "lr": 1e-5}, batch))
        times.append(s)
    med = statistics.median(times[1:])
    tokens = sizes.update_rows * sizes.update_len
    return {
        "rows": sizes.update_rows,
        "length": sizes.update_len,
        "tokens": tokens,
        "scored": scored,
        "first_s": round(times[0], 3),
        "median_s": round(med, 3),
        "tokens_per_s": round(tokens / med, 1),
        "loss_finite": bool(np.isfinite(reply.get("loss", float("nan")))),
        "skipped": reply.get("skipped"),
        "peak_gib": peak_gib(device),
    }


CHILD_STEPS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "env": step_env,
    "decoder": step_decoder,
    "logprobs": step_logprobs,
    "lora": step_lora,
}


def run_child(args: argparse.Namespace) -> int:
    result = CHILD_STEPS[args.step](args)
    Path(args.result).write_text(json.dumps(result, default=str))
    return 0
