"""What a warm start does to plain chat: greedy answers of each model directory to a few everyday
prompts, in the model's own chat template (docs/design.md, "General chat").

    python -m mage_learner.chat_check models/smollm2-135m-instruct models/smollm2-kuhn-warm
"""

from __future__ import annotations

import argparse
from typing import Any

PROMPTS = ("What is the capital of France?", "Give me two tips for sleeping better.", "Write a haiku about autumn.")


def answers(model_dir: str, prompts: tuple[str, ...], max_new_tokens: int) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    out: list[str] = []
    for p in prompts:
        ids: Any = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt")
        if not isinstance(ids, torch.Tensor):
            ids = ids["input_ids"]
        with torch.no_grad():
            seq = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        out.append(str(tok.decode(seq[0, ids.shape[1] :], skip_special_tokens=True)).strip())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.chat_check", description=__doc__)
    ap.add_argument("models", nargs="+", help="Hugging Face model directories")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    for d in args.models:
        print(f"== {d}")
        for prompt, answer in zip(PROMPTS, answers(d, PROMPTS, args.max_new_tokens)):
            print(f"-- {prompt}\n{answer}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
