"""The lean decoder: one forward step of a Llama-family model over a static key/value cache, with
the next token drawn inside the step.

Why not the Hugging Face forward: at 16 sequences its per-step overhead (a growing cache
concatenated every step, masks rebuilt, padding bookkeeping) bounds sampling on a CPU, and on a
GPU the hundreds of small kernel launches of a step cost more than the arithmetic. Here a batch
slot owns one row of a preallocated cache whose index is the token's position, so a step writes
each row's new keys and values at its own position, attends to every slot at or below it, and
needs no host synchronisation: on CUDA a step is captured once per (batch, cache length) bucket
as a CUDA graph and replayed (`graphs.py`).

Conventions the step relies on:
- slot index = position; a row's slots above its position hold stale data and are masked out;
- the last slot of every row (`length - 1`) is scratch: padding tokens write there and no real
  position reaches it, so padding cannot affect a real row;
- the projections are the model's own modules (peft's LoRA layers included), so an in-place
  optimizer update of the LoRA weights shows in the next step;
- draws come from a counter-based generator: a request's uniform for its n-th token is a hash of
  (seed, n), whatever the batch it shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# Architectures whose decoder layer is Llama's shape (pre-norm attention and gated MLP, rotary
# positions, optional q/k norms as in Qwen3, optional projection biases as in Qwen2).
SUPPORTED = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def base_of(model: torch.nn.Module) -> Any:
    """The transformers model under a peft wrapper (or the model itself)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why the lean decoder cannot run this model, or None when it can."""
    cfg = getattr(base_of(model), "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED:
        return f"architecture {kind!r} is not one of {sorted(SUPPORTED)}"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", kind == "mistral"):
        return "sliding-window attention is not implemented"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {getattr(cfg, 'hidden_act', None)!r} is not silu"
    return None


@dataclass
class KVCache:
    """Per layer, keys and values of shape [batch, kv_heads, length, head_dim]."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def batch(self) -> int:
        return self.keys[0].shape[0]

    @property
    def length(self) -> int:
        return self.keys[0].shape[2]

    def select(self, rows: torch.Tensor) -> KVCache:
        return KVCache([k.index_select(0, rows) for k in self.keys], [v.index_select(0, rows) for v in self.values])

    def copy_rows_into(self, other: KVCache, rows: torch.Tensor) -> None:
        """Writes rows `rows` of this cache into other's first len(rows) rows (same length)."""
        n = rows.shape[0]
        for a, b in zip(self.keys + self.values, other.keys + other.values):
            b[:n].copy_(a.index_select(0, rows))


@dataclass(frozen=True)
class Draw:
    """Per-row sampling inputs of a step, as tensors on the model's device."""

    temperature: torch.Tensor  # float64 [b]; 0 = greedy
    top_k: torch.Tensor  # int64 [b]; ≤ 0 or ≥ vocab = none
    top_p: torch.Tensor  # float64 [b]; 1 = none
    seed_lo: torch.Tensor  # int64 [b], the seed's low 32 bits
    seed_hi: torch.Tensor  # int64 [b], its high 32 bits
    counter: torch.Tensor  # int64 [b], tokens the request drew before this one


class Decoder:
    """The model's modules, called in the lean step's order."""

    def __init__(self, model: torch.nn.Module) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"lean decoder: {reason}")
        self.base = base_of(model)
        cfg = self.base.config
        self.inner = self.base.model
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.layers = len(self.inner.layers)
        self.vocab = int(self.base.lm_head.weight.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        dtype: torch.dtype = self.inner.embed_tokens.weight.dtype
        return dtype

    @property
    def device(self) -> torch.device:
        device: torch.device = self.inner.embed_tokens.weight.device
        return device

    def new_cache(self, batch: int, length: int) -> KVCache:
        shape = (batch, self.kv_heads, length, self.head_dim)
        def z() -> torch.Tensor:
            return torch.zeros(shape, dtype=self.dtype, device=self.device)
        return KVCache([z() for _ in range(self.layers)], [z() for _ in range(self.layers)])

    def logits(
        self,
        cache: KVCache,
        ids: torch.Tensor,
        pos: torch.Tensor,
        write: torch.Tensor,
        rows: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """Feeds ids [b, T] at positions pos [b, T] into cache rows `rows` [b] (slots `write`
        [b, T]); returns float32 logits [b, vocab] at each row's token `last` [b]."""
        h = self.inner.embed_tokens(ids)
        cos, sin = self.inner.rotary_emb(h, pos)
        slots = torch.arange(cache.length, device=ids.device)
        visible = (slots.view(1, 1, -1) <= pos.unsqueeze(-1)).unsqueeze(1)  # [b, 1, T, L]
        where = (rows.unsqueeze(1).expand_as(write), write)
        for li, layer in enumerate(self.inner.layers):
            x = layer.input_layernorm(h)
            h = h + self.attend(layer.self_attn, x, cos, sin, visible, cache.keys[li], cache.values[li], where, rows)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        h = h[torch.arange(h.shape[0], device=h.device), last]
        logits: torch.Tensor = self.base.lm_head(self.inner.norm(h))
        return logits.float()

    def attend(
        self,
        attn: Any,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        visible: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        where: tuple[torch.Tensor, torch.Tensor],
        rows: torch.Tensor,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        d, g = self.head_dim, self.heads // self.kv_heads
        q = attn.q_proj(x).view(b, t, self.heads, d)
        k = attn.k_proj(x).view(b, t, self.kv_heads, d)
        v = attn.v_proj(x).view(b, t, self.kv_heads, d)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = rotate(q.transpose(1, 2), cos, sin)
        k = rotate(k.transpose(1, 2), cos, sin)
        keys[where[0], :, where[1]] = k.transpose(1, 2).to(keys.dtype)
        values[where[0], :, where[1]] = v.to(values.dtype)
        if rows.shape[0] != keys.shape[0]:
            keys, values = keys.index_select(0, rows), values.index_select(0, rows)
        # Query head h reads key head h // g: group the queries by key head.
        qg = q.reshape(b, self.kv_heads, g * t, d)
        scores = torch.matmul(qg, keys.transpose(-1, -2)) * float(getattr(attn, "scaling", d**-0.5))
        mask = visible.unsqueeze(2).expand(b, 1, g, t, visible.shape[-1]).reshape(b, 1, g * t, -1)
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, values).view(b, self.heads, t, d).transpose(1, 2).reshape(b, t, self.heads * d)
        return attn.o_proj(out)  # type: ignore[no-any-return]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x [b, heads, T, d] by cos/sin [b, T, d] (Llama's half split)."""
    cos, sin = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


# ----- drawing inside the step -------------------------------------------------------------------

MASK32 = 0xFFFFFFFF


def mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for 0 ≤ x < 2**32 in int64 without overflow (16-bit halves)."""
    high = (((x >> 16) * c) & 0xFFFF) << 16
    return (high + (x & 0xFFFF) * c) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (xor-shift / multiply, 'lowbias32' constants)."""
    x = x ^ (x >> 16)
    x = mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniforms(seed_lo: torch.Tensor, seed_hi: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    """float64 in [0, 1) with 53 random bits, a function of (seed, counter) alone."""
    key = mix32(mix32(mix32((counter & MASK32) ^ 0x9E3779B9) ^ seed_lo) ^ seed_hi)
    a = mix32(key ^ 0x68E31DA4) >> 6
    b = mix32(key ^ 0xB5297A4D) >> 5
    return (a * (1 << 27) + b).to(torch.float64) / float(1 << 53)


def draw(logits: torch.Tensor, d: Draw, truncate: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token int64 [b], its log-prob float64 [b], finite bool [b]) from logits [b, V] with
    sampling.py's conventions: temperature, top-k, top-p, an inverse-CDF draw; greedy at
    temperature 0 (lowest id on ties, log-prob 0). `truncate` adds the sorted path that top-k /
    top-p rows need (a row draws the same token whichever path its batch takes)."""
    x = logits.to(torch.float64)
    mx = x.max(dim=1, keepdim=True).values
    finite = torch.isfinite(mx).squeeze(1)
    greedy = d.temperature <= 0
    inv_t = torch.where(greedy, torch.ones_like(d.temperature), 1.0 / d.temperature.clamp_min(1e-300)).unsqueeze(1)
    scaled = (x - mx) * inv_t
    u = uniforms(d.seed_lo, d.seed_hi, d.counter).unsqueeze(1)
    tok, lp = draw_plain(scaled, u)
    if truncate:  # rows that truncate draw in rank order; the others keep the token-order draw
        cut = (d.top_p < 1) | ((d.top_k > 0) & (d.top_k < x.shape[1]))
        tok_t, lp_t = draw_truncated(scaled, d, u)
        tok, lp = torch.where(cut, tok_t, tok), torch.where(cut, lp_t, lp)
    best = torch.argmax(x, dim=1)
    tok = torch.where(greedy, best, tok)
    lp = torch.where(greedy, torch.zeros_like(lp), lp)
    return tok, lp, finite


def draw_plain(scaled: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cdf = torch.cumsum(torch.exp(scaled), dim=1)
    total = cdf[:, -1:]
    idx = torch.searchsorted(cdf, u * total, right=True).clamp(max=scaled.shape[1] - 1)
    return idx.squeeze(1), (scaled.gather(1, idx) - torch.log(total)).squeeze(1)


def draw_truncated(scaled: torch.Tensor, d: Draw, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    vocab = scaled.shape[1]
    vals, order = torch.sort(scaled, dim=1, descending=True, stable=True)
    w = torch.exp(vals)
    rank = torch.arange(vocab, device=scaled.device).unsqueeze(0)
    k = torch.where((d.top_k > 0) & (d.top_k < vocab), d.top_k, torch.full_like(d.top_k, vocab)).unsqueeze(1)
    w = w * (rank < k)
    cdf = torch.cumsum(w, dim=1)
    # top-p keeps the best tokens up to and including the first whose cumulative weight reaches p.
    keep = (cdf - w) < d.top_p.unsqueeze(1) * cdf[:, -1:]
    w = w * keep
    cdf = torch.cumsum(w, dim=1)
    total = cdf[:, -1:]
    kept = (keep & (rank < k)).sum(dim=1, keepdim=True)
    j = torch.minimum(torch.searchsorted(cdf, u * total, right=True), kept - 1)
    return order.gather(1, j).squeeze(1), (vals.gather(1, j) - torch.log(total)).squeeze(1)


def step(
    dec: Decoder,
    cache: KVCache,
    ids: torch.Tensor,
    pos: torch.Tensor,
    write: torch.Tensor,
    rows: torch.Tensor,
    last: torch.Tensor,
    d: Draw,
    truncate: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step: feed, then draw every row's next token."""
    return draw(dec.logits(cache, ids, pos, write, rows, last), d, truncate)
