"""Batched sampling with the lean decoder (decoder.py): the same requests, stop rules, prefix
store and replies as generate.py's Hugging Face path, over a static cache.

A call picks a cache length that fits every row's prompt and answer, gives each row a batch slot,
prefills the prompts' new tokens (in windows, so that a long prompt never builds a huge score
matrix), then steps until every row is done. A finished row's keys and values go to the prefix
store and its slot becomes padding; the batch is compacted when the runner says so (every time
on the CPU, where a padding row costs as much as a real one; when half the slots are free on a
GPU, whose captured graphs exist per power-of-two batch)."""

from __future__ import annotations

import numpy as np
import torch

from .decoder import Decoder, Draw, KVCache, step
from .generate import Row, Sample, finish_sample, record
from .prefix_cache import PrefixStore
from .runners import Runner
from .sampling import SamplingParams

# Prompt tokens fed per row in one prefill window, and rows × window tokens per prefill call.
WINDOW = 256
PREFILL_TOKENS = 2048


def generate_lean(
    runner: Runner,
    tokenizer: object,
    stop_ids: list[int],
    prompts: list[list[int]],
    params: list[SamplingParams],
    store: PrefixStore | None = None,
) -> list[Sample]:
    rows = [Row(i, p, torch.Generator(), list(q)) for i, (q, p) in enumerate(zip(prompts, params))]
    live = [r for r in rows if r.params.max_new_tokens > 0 and r.fed]
    stops = set(stop_ids)
    runner.dec.base.eval()
    with torch.no_grad():
        if live:
            run_rows(runner, live, stops, tokenizer, store)
    return [finish_sample(r, stops, tokenizer) for r in rows]


def run_rows(runner: Runner, live: list[Row], stops: set[int], tokenizer: object, store: PrefixStore | None) -> None:
    # A row feeds at most prompt + max_new - 1 tokens; one more slot is the scratch slot.
    length = runner.length_bucket(max(len(r.fed) + r.params.max_new_tokens for r in live))
    cache = runner.cache(runner.batch_bucket(len(live)), length)
    slots: list[Row | None] = [*live, *([None] * (cache.batch - len(live)))]
    truncate = any(truncates(r.params) for r in live)
    first = prefill(runner.dec, cache, live, store, truncate)
    slots = after_draws(slots, first, cache, stops, tokenizer, store)
    while any(s is not None for s in slots):
        cache, slots = runner.compact(cache, slots)
        ids, pos, write, d = decode_inputs(slots, length, runner.dec.device)
        tok, lp, finite = runner.decode(cache, ids, pos, write, d, truncate)
        draws = checked_draws(tok, lp, finite, slots)
        slots = after_draws(slots, draws, cache, stops, tokenizer, store)


def truncates(p: SamplingParams) -> bool:
    return p.temperature > 0 and (p.top_k > 0 or p.top_p < 1)


def after_draws(
    slots: list[Row | None],
    draws: dict[int, tuple[int, float]],
    cache: KVCache,
    stops: set[int],
    tokenizer: object,
    store: PrefixStore | None,
) -> list[Row | None]:
    """Records each slot's draw; a finished row is stored and its slot freed, the others will feed
    their new token next step."""
    out = list(slots)
    for s, (tok, lp) in draws.items():
        r = slots[s]
        assert r is not None
        if record(r, tok, lp, stops, tokenizer):
            if store is not None:
                save_slot(store, cache, s, r)
            out[s] = None
        else:
            r.fed.append(tok)
    return out


def checked_draws(tok: torch.Tensor, lp: torch.Tensor, finite: torch.Tensor, slots: list[Row | None]) -> dict[int, tuple[int, float]]:
    toks, lps, ok = tok.tolist(), lp.tolist(), finite.tolist()
    live = [s for s, r in enumerate(slots) if r is not None]
    if not all(ok[s] for s in live):
        raise ValueError("sampling: logits are not finite")
    return {s: (int(toks[s]), float(lps[s])) for s in live}


def draw_inputs(rows: list[Row | None], device: torch.device) -> Draw:
    """Padding slots draw greedily with zeros."""
    params = [r.params if r is not None else None for r in rows]
    seeds = [(p.seed if p else 0) & 0xFFFFFFFFFFFFFFFF for p in params]

    def t(values: list[float] | list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

    return Draw(
        temperature=t([p.temperature if p else 0.0 for p in params], torch.float64),
        top_k=t([p.top_k if p else 0 for p in params], torch.int64),
        top_p=t([p.top_p if p else 1.0 for p in params], torch.float64),
        seed_lo=t([s & 0xFFFFFFFF for s in seeds], torch.int64),
        seed_hi=t([s >> 32 for s in seeds], torch.int64),
        counter=t([len(r.tokens) if r is not None else 0 for r in rows], torch.int64),
    )


def decode_inputs(slots: list[Row | None], length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Draw]:
    """ids, positions and write slots [B, 1] of one decode step: each row's newest token at its
    position; padding slots feed token 0 at position 0 into the scratch slot."""
    ids = [r.fed[-1] if r is not None else 0 for r in slots]
    pos = [len(r.fed) - 1 if r is not None else 0 for r in slots]
    write = [len(r.fed) - 1 if r is not None else length - 1 for r in slots]

    def col(v: list[int]) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.int64).view(-1, 1).to(device, non_blocking=True)

    return col(ids), col(pos), col(write), draw_inputs(slots, device)


# ----- prefill -----------------------------------------------------------------------------------


def prefill(dec: Decoder, cache: KVCache, live: list[Row], store: PrefixStore | None, truncate: bool) -> dict[int, tuple[int, float]]:
    """Fills each live row's slot (row i of `live` is slot i) with its prompt, reusing stored
    prefixes; returns each slot's first draw."""
    cached = [load_prefix(store, cache, s, r) for s, r in enumerate(live)]
    if store is not None:
        store.reused_tokens += sum(cached)
        store.prefilled_tokens += sum(len(r.fed) - c for r, c in zip(live, cached))
    draws: dict[int, tuple[int, float]] = {}
    group = max(1, PREFILL_TOKENS // WINDOW)
    for g0 in range(0, len(live), group):
        slots = list(range(g0, min(g0 + group, len(live))))
        draws.update(prefill_group(dec, cache, slots, [live[s] for s in slots], [cached[s] for s in slots], truncate))
    return draws


def prefill_group(
    dec: Decoder, cache: KVCache, slots: list[int], rows: list[Row], cached: list[int], truncate: bool
) -> dict[int, tuple[int, float]]:
    device = dec.device
    suffix = [len(r.fed) - c for r, c in zip(rows, cached)]
    out: dict[int, tuple[int, float]] = {}
    d = draw_inputs(list(rows), device)
    index = torch.tensor(slots, dtype=torch.int64, device=device)
    for w0 in range(0, max(suffix), WINDOW):
        width = min(WINDOW, max(suffix) - w0)
        ids = torch.zeros((len(rows), width), dtype=torch.int64)
        pos = torch.zeros((len(rows), width), dtype=torch.int64)
        write = torch.full((len(rows), width), cache.length - 1, dtype=torch.int64)
        last = torch.zeros(len(rows), dtype=torch.int64)
        ending = []
        for i, (r, c, n) in enumerate(zip(rows, cached, suffix)):
            take = r.fed[c + w0 : c + min(n, w0 + width)]
            if not take:
                continue
            ids[i, : len(take)] = torch.tensor(take, dtype=torch.int64)
            pos[i, : len(take)] = torch.arange(c + w0, c + w0 + len(take))
            write[i, : len(take)] = pos[i, : len(take)]
            if w0 + width >= n:
                last[i] = len(take) - 1
                ending.append(i)
        tok, lp, finite = step(dec, cache, ids.to(device), pos.to(device), write.to(device), index, last.to(device), d, truncate)
        toks, lps, ok = tok.tolist(), lp.tolist(), finite.tolist()
        for i in ending:
            if not ok[i]:
                raise ValueError("sampling: logits are not finite")
            out[slots[i]] = (int(toks[i]), float(lps[i]))
    return out


def load_prefix(store: PrefixStore | None, cache: KVCache, slot: int, r: Row) -> int:
    """Copies the longest stored prefix of the row's prompt into its slot; its length (0 if none)."""
    hit = store.lookup(np.asarray(r.fed, np.int64)) if store is not None else None
    if hit is None:
        return 0
    n = hit.length
    for li, (k, v) in enumerate(hit.entry.layers):
        cache.keys[li][slot, :, :n].copy_(k[:, :n])
        cache.values[li][slot, :, :n].copy_(v[:, :n])
    return n


def save_slot(store: PrefixStore, cache: KVCache, slot: int, r: Row) -> None:
    n = len(r.fed)
    layers = [
        (k[slot, :, :n].to("cpu", copy=True), v[slot, :, :n].to("cpu", copy=True))
        for k, v in zip(cache.keys, cache.values)
    ]
    store.add(np.asarray(r.fed, np.int64), layers)
