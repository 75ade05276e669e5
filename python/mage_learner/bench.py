"""A worker-level benchmark (in process, no socket): update time and generate tokens/s on a random
model built from a config, for the GPU machine or a quick CPU check.

    python -m mage_learner.bench --preset qwen3-0.5b --device cuda --dtype bfloat16
    python -m mage_learner.bench --preset tiny   # seconds on CPU
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .frames import Array, encode, read_frame
from .worker import Worker

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 320},
    # Qwen3-0.6B's shape (about 0.6B parameters with tied embeddings), random weights.
    "qwen3-0.5b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True},
}


def build(out: Path, preset: str, seed: int = 0) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from .tiny import build_tokenizer

    tok = build_tokenizer(out)
    cfg = {"max_position_embeddings": 4096, "eos_token_id": tok.eos_token_id, "tie_word_embeddings": False, **PRESETS[preset]}
    torch.manual_seed(seed)
    Qwen3ForCausalLM(Qwen3Config(**cfg)).save_pretrained(str(out))
    return out


def call(w: Worker, op: str, arrays: dict[str, Array] | None = None, **fields: Any) -> tuple[dict[str, Any], dict[str, Array]]:
    frame = read_frame(io.BytesIO(encode({"id": 1, "op": op, **fields}, arrays)))
    assert frame is not None
    h, a = w.handle(frame)
    if not h.get("ok"):
        raise RuntimeError(f"{op}: {h.get('error')}")
    return h, a


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=list(PRESETS), default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batch", type=int, default=8, help="sequences per generate / update")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    ap.add_argument("--new", type=int, default=128, help="new tokens per sequence")
    ap.add_argument("--micro", type=int, default=4096, help="microBatchTokens of the update")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp) / "model", args.preset)
        w = Worker()
        lora = {"rank": args.lora, "alpha": 2 * args.lora, "dropout": 0.0, "targetModules": ["q_proj", "k_proj", "v_proj", "o_proj"]} if args.lora else None
        t0 = time.perf_counter()
        info, _ = call(w, "load", model=str(path), dtype=args.dtype, device=args.device, lora=lora, gradientCheckpointing=args.preset != "tiny", optimizer={"lr": 1e-5}, seed=0, reference=False)
        load_s = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        vocab = int(info["vocabSize"])
        prompts = rng.integers(3, vocab, size=(args.batch, args.prompt)).astype(np.int32)
        g_in = {"ids": prompts.reshape(-1), "lengths": np.full(args.batch, args.prompt, np.int32)}
        reqs = [{"maxNewTokens": args.new, "temperature": 1.0, "topP": 1.0, "topK": 0, "seed": i, "stop": []} for i in range(args.batch)]
        call(w, "generate", g_in, requests=[{**r, "maxNewTokens": 4} for r in reqs])  # warm-up
        gen_s: list[float] = []
        toks = 0
        for _ in range(args.repeat):
            sync(args.device)
            t = time.perf_counter()
            _, a = call(w, "generate", g_in, requests=reqs)
            sync(args.device)
            gen_s.append(time.perf_counter() - t)
            toks = int(a["tokens"].size)
        seq = np.concatenate([prompts, rng.integers(3, vocab, size=(args.batch, args.new)).astype(np.int32)], axis=1)
        mask = np.zeros_like(seq, dtype=np.uint8)
        mask[:, args.prompt :] = 1
        n = int(mask.sum())
        u_in = {"ids": seq.reshape(-1), "lengths": np.full(args.batch, seq.shape[1], np.int32), "loss_mask": mask.reshape(-1)}
        _, lp = call(w, "logprobs", u_in)
        upd = {**u_in, "old_logp": lp["logp"], "advantages": rng.normal(0, 1, n)}
        upd_ms: list[float] = []
        for _ in range(args.repeat + 1):
            sync(args.device)
            t = time.perf_counter()
            call(w, "update", upd, loss={}, lr=1e-5, microBatchTokens=args.micro)
            sync(args.device)
            upd_ms.append((time.perf_counter() - t) * 1000)
        report = {
            "preset": args.preset,
            "device": args.device,
            "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
            "dtype": args.dtype,
            "parameters": info["parameters"],
            "trainableParameters": info["trainableParameters"],
            "load_s": round(load_s, 2),
            "generate": {"batch": args.batch, "prompt": args.prompt, "new": args.new, "tokens": toks, "median_s": round(statistics.median(gen_s), 3), "tokens_per_s": round(toks / statistics.median(gen_s), 1)},
            "update": {"sequences": args.batch, "tokens": int(seq.size), "scored": n, "microBatchTokens": args.micro, "median_ms": round(statistics.median(upd_ms[1:]), 1), "first_ms": round(upd_ms[0], 1)},
            "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if args.device.startswith("cuda") else None,
        }
        print(json.dumps(report, indent=1))
    return 0


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main())
