"""Batched sampling with a KV cache. Each row's tokens are left-padded within the batch and carry
explicit position ids, so every row continues at its own position; each request draws its
uniforms from its own torch.Generator seeded with its `seed`, so its sample depends on its own
prompt, fields and seed, not on the batch (up to float rounding).

Two things keep the forward passes small: a row that finishes leaves the batch at once (its
keys and values go to the prefix store), and a prompt that starts with tokens an earlier sample
already fed (the same conversation one turn later, or another trial of the same task) prefills
only its new tokens, on top of the stored keys and values (prefix_cache.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .prefix_cache import Hit, PrefixStore
from .sampling import SamplingParams, sample_row


@dataclass
class Sample:
    tokens: list[int]
    logprobs: list[float]
    text: str
    finish: str


@dataclass
class Row:
    """One request while it samples: what it has fed the model so far and what it has drawn."""

    index: int
    params: SamplingParams
    gen: torch.Generator
    fed: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = "length"


@dataclass
class Batch:
    """The rows still sampling, their next input tokens and the batched cache they share."""

    rows: list[Row]
    cache: Any
    att: torch.Tensor  # [B, cached + input] 1 where a real token is
    ids: torch.Tensor  # [B, input] this step's input tokens (left-padded)
    pos: torch.Tensor  # [B, input] their positions


def generate(
    model: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    stop_ids: list[int],
    prompts: list[list[int]],
    params: list[SamplingParams],
    store: PrefixStore | None = None,
) -> list[Sample]:
    rows = [
        Row(i, p, torch.Generator().manual_seed(p.seed), list(q))
        for i, (q, p) in enumerate(zip(prompts, params))
    ]
    live = [r for r in rows if r.params.max_new_tokens > 0 and r.fed]
    model.eval()
    stops = set(stop_ids)
    with torch.no_grad():
        if live:
            batch = prefill_batch(live, device, store)
            while batch.rows:
                out = model(
                    input_ids=batch.ids,
                    attention_mask=batch.att,
                    position_ids=batch.pos,
                    past_key_values=batch.cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                batch.cache = out.past_key_values
                draws = draw(out.logits[:, -1, :], batch.rows)
                finished = [record(r, tok, lp, stops, tokenizer) for r, (tok, lp) in zip(batch.rows, draws)]
                batch = advance(batch, draws, finished, store, device)
    return [finish_sample(r, stops, tokenizer) for r in rows]


def finish_sample(r: Row, stops: set[int], tokenizer: Any) -> Sample:
    toks = r.tokens
    body = toks[:-1] if toks and toks[-1] in stops else toks
    text = tokenizer.decode(body, skip_special_tokens=False) if body else ""
    return Sample(toks, r.logprobs, text, r.finish)


def record(r: Row, tok: int, lp: float, stops: set[int], tokenizer: Any) -> bool:
    """Appends a drawn token; True when the row is done."""
    r.tokens.append(tok)
    r.logprobs.append(lp)
    if tok in stops or (r.params.stop and _hit_stop(tokenizer, r.tokens, r.params.stop)):
        r.finish = "stop"
        return True
    return len(r.tokens) >= r.params.max_new_tokens


# ----- drawing ---------------------------------------------------------------------------------


def draw(logits: torch.Tensor, rows: list[Row]) -> list[tuple[int, float]]:
    """One token per row: the plain temperature rows together on the logits' device (a GPU sends
    back two numbers per row, not the vocabulary), truncated ones row by row on the CPU."""
    u = [float(torch.rand((), generator=r.gen, dtype=torch.float64)) for r in rows]
    out: list[tuple[int, float] | None] = [None] * len(rows)
    plain = [i for i, r in enumerate(rows) if is_plain(r.params)]
    if plain:
        x = logits.detach() if len(plain) == len(rows) else logits.detach()[plain]
        temps = [rows[i].params.temperature for i in plain]
        for i, d in zip(plain, draw_plain(x.to(torch.float64), temps, [u[i] for i in plain])):
            out[i] = d
    rest = [i for i, d in enumerate(out) if d is None]
    if rest:
        xr = logits.detach()[rest].to(torch.float64).cpu()
        for j, i in enumerate(rest):
            out[i] = sample_row(xr[j].numpy(), rows[i].params, u[i])
    return [d for d in out if d is not None]


def is_plain(p: SamplingParams) -> bool:
    return p.temperature > 0 and p.top_k <= 0 and p.top_p >= 1


def draw_plain(x: torch.Tensor, temperatures: list[float], u: list[float]) -> list[tuple[int, float] | None]:
    """Inverse-CDF draws in token order from softmax(x / T), float64, as sample_row's untruncated case;
    None for a row whose draw rounding pushed past the last token (sample_row handles it)."""
    inv_t = torch.tensor([1.0 / t for t in temperatures], dtype=torch.float64, device=x.device).unsqueeze(1)
    mx = x.max(dim=1, keepdim=True).values
    if not bool(torch.isfinite(mx).all()):
        raise ValueError("sampling: logits are not finite")
    scaled = (x - mx) * inv_t
    cdf = torch.cumsum(torch.exp(scaled), dim=1)
    total = cdf[:, -1:]
    target = torch.tensor(u, dtype=torch.float64, device=x.device).unsqueeze(1) * total
    idx = torch.searchsorted(cdf, target, right=True)
    vocab = x.shape[1]
    lp = scaled.gather(1, idx.clamp(max=vocab - 1)) - torch.log(total)
    return [
        None if i >= vocab else (i, v)
        for i, v in zip(idx.squeeze(1).tolist(), lp.squeeze(1).tolist())
    ]


def _hit_stop(tokenizer: Any, toks: list[int], stop: tuple[str, ...]) -> bool:
    window = 4 * max(len(s) for s in stop) + 8
    tail = tokenizer.decode(toks[-window:], skip_special_tokens=False)
    return any(s in tail for s in stop)


# ----- the batch and its cache -----------------------------------------------------------------


def prefill_batch(rows: list[Row], device: torch.device, store: PrefixStore | None) -> Batch:
    """The first step's batch: each row's stored prefix (if any) as cache, the rest as input."""
    hits = [store.lookup(np.asarray(r.fed, np.int64)) if store is not None else None for r in rows]
    cached = [h.length if h else 0 for h in hits]
    if store is not None:
        store.reused_tokens += sum(cached)
        store.prefilled_tokens += sum(len(r.fed) - c for r, c in zip(rows, cached))
    suffixes = [r.fed[c:] for r, c in zip(rows, cached)]
    width_c, width_s = max(cached), max(len(s) for s in suffixes)
    b = len(rows)
    ids = torch.zeros((b, width_s), dtype=torch.long)
    att = torch.zeros((b, width_c + width_s), dtype=torch.long)
    pos = torch.zeros((b, width_s), dtype=torch.long)
    for i, (c, s) in enumerate(zip(cached, suffixes)):
        ids[i, width_s - len(s) :] = torch.tensor(s, dtype=torch.long)
        att[i, width_c - c : width_c] = 1
        att[i, width_c + width_s - len(s) :] = 1
        pos[i, width_s - len(s) :] = torch.arange(c, c + len(s))
    cache = stacked_cache(hits, width_c, device) if width_c > 0 else None
    return Batch(rows, cache, att.to(device), ids.to(device), pos.to(device))


def stacked_cache(hits: list[Hit | None], width: int, device: torch.device) -> Any:
    """A DynamicCache of the rows' stored prefixes, each left-padded to `width` (rows without one: zeros)."""
    from transformers import DynamicCache

    ref = next(h for h in hits if h is not None).entry.layers
    layers: list[tuple[torch.Tensor, torch.Tensor]] = []
    for li, (k0, v0) in enumerate(ref):
        keys = k0.new_zeros((len(hits), k0.shape[0], width, k0.shape[2]))
        values = v0.new_zeros((len(hits), v0.shape[0], width, v0.shape[2]))
        for i, h in enumerate(hits):
            if h is not None:
                k, v = h.entry.layers[li]
                keys[i, :, width - h.length :] = k[:, : h.length]
                values[i, :, width - h.length :] = v[:, : h.length]
        layers.append((keys.to(device), values.to(device)))
    return DynamicCache(ddp_cache_data=layers)


def advance(
    batch: Batch, draws: list[tuple[int, float]], finished: list[bool], store: PrefixStore | None, device: torch.device
) -> Batch:
    """The next step's batch: finished rows stored and dropped, the others fed their new token."""
    if store is not None and any(finished):
        for i, done in enumerate(finished):
            if done:
                save_row(store, batch, i)
    keep = [i for i, done in enumerate(finished) if not done]
    for i in keep:
        batch.rows[i].fed.append(draws[i][0])
    if not keep:
        return Batch([], None, batch.att, batch.ids, batch.pos)
    if len(keep) < len(finished):
        index = torch.tensor(keep, dtype=torch.long, device=device)
        batch.cache.batch_select_indices(index)
        att, pos = batch.att[index], batch.pos[index]
    else:
        att, pos = batch.att, batch.pos
    rows = [batch.rows[i] for i in keep]
    ids = torch.tensor([[draws[i][0]] for i in keep], dtype=torch.long, device=device)
    att = torch.cat([att, torch.ones((len(keep), 1), dtype=att.dtype, device=device)], dim=1)
    return Batch(rows, batch.cache, att, ids, pos[:, -1:] + 1)


def save_row(store: PrefixStore, batch: Batch, i: int) -> None:
    """Row i's keys and values for every token it fed (its real positions only) into the store."""
    real = torch.nonzero(batch.att[i], as_tuple=False).squeeze(1)
    layers = [(layer.keys[i][:, real].cpu(), layer.values[i][:, real].cpu()) for layer in batch.cache.layers]
    store.add(np.asarray(batch.rows[i].fed, np.int64), layers)
