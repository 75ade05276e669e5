"""Batched sampling with a KV cache. Prompts are left-padded (with explicit position ids) so
every row continues at its own position; each request draws its uniforms from its own
torch.Generator seeded with its `seed`, so its sample depends on its own prompt, fields and
seed only, not on the batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .sampling import SamplingParams, sample_row


@dataclass
class Sample:
    tokens: list[int]
    logprobs: list[float]
    text: str
    finish: str


def generate(
    model: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    stop_ids: list[int],
    prompts: list[list[int]],
    params: list[SamplingParams],
) -> list[Sample]:
    b = len(prompts)
    if b == 0:
        return []
    gens = [torch.Generator().manual_seed(p.seed) for p in params]
    out_tokens: list[list[int]] = [[] for _ in range(b)]
    out_lp: list[list[float]] = [[] for _ in range(b)]
    finish = ["length"] * b
    done = [p.max_new_tokens == 0 or len(prompts[i]) == 0 for i, p in enumerate(params)]
    stops = set(stop_ids)
    width = max(len(q) for q in prompts) or 1
    ids = torch.zeros((b, width), dtype=torch.long)
    att = torch.zeros((b, width), dtype=torch.long)
    for r, q in enumerate(prompts):
        if q:
            ids[r, width - len(q) :] = torch.tensor(q, dtype=torch.long)
            att[r, width - len(q) :] = 1
    ids, att = ids.to(device), att.to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    model.eval()
    past: Any = None
    steps = max(p.max_new_tokens for p in params)
    with torch.no_grad():
        for _ in range(steps):
            if all(done):
                break
            out = model(
                input_ids=ids, attention_mask=att, position_ids=pos, past_key_values=past, use_cache=True, logits_to_keep=1
            )
            past = out.past_key_values
            last = out.logits[:, -1, :].float().cpu().numpy()
            nxt = torch.zeros((b, 1), dtype=torch.long)
            for r in range(b):
                if done[r]:
                    continue
                u = float(torch.rand((), generator=gens[r], dtype=torch.float64))
                tok, lp = sample_row(last[r], params[r], u)
                out_tokens[r].append(tok)
                out_lp[r].append(lp)
                nxt[r, 0] = tok
                if tok in stops:
                    finish[r], done[r] = "stop", True
                elif params[r].stop and _hit_stop(tokenizer, out_tokens[r], params[r].stop):
                    finish[r], done[r] = "stop", True
                elif len(out_tokens[r]) >= params[r].max_new_tokens:
                    done[r] = True
            ids = nxt.to(device)
            att = torch.cat([att, torch.ones((b, 1), dtype=att.dtype, device=device)], dim=1)
            pos = pos[:, -1:] + 1
    samples: list[Sample] = []
    for r in range(b):
        toks = out_tokens[r]
        body = toks[:-1] if toks and toks[-1] in stops else toks
        text = tokenizer.decode(body, skip_special_tokens=False) if body else ""
        samples.append(Sample(toks, out_lp[r], text, finish[r]))
    return samples


def _hit_stop(tokenizer: Any, toks: list[int], stop: tuple[str, ...]) -> bool:
    window = 4 * max(len(s) for s in stop) + 8
    tail = tokenizer.decode(toks[-window:], skip_special_tokens=False)
    return any(s in tail for s in stop)
