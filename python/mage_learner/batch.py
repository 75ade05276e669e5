"""Batches on the wire (`ids` + `lengths` + `loss_mask`, per-token arrays in sequence order) into
per-sequence pieces, micro-batches of at most N tokens, and padded tensors for a forward pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import protocol
from .frames import Array


@dataclass
class Sequence:
    index: int
    ids: Array  # int32
    mask: Array  # uint8, same length; mask[0] is 0
    # Offset of this sequence's first scored token in the request's per-token arrays.
    token_offset: int

    @property
    def scored(self) -> int:
        return int(self.mask.sum())


def need(arrays: dict[str, Array], name: str, dtype: str) -> Array:
    a = arrays.get(name)
    if a is None:
        raise protocol(f"the request has no `{name}` array")
    kinds = {"i32": np.int32, "u8": np.uint8, "f64": np.float64, "f32": np.float32}
    if a.dtype != np.dtype(kinds[dtype]).newbyteorder("<") and a.dtype != kinds[dtype]:
        raise protocol(f"array `{name}` must be {dtype}, got {a.dtype}")
    return a.reshape(-1)


def split_sequences(arrays: dict[str, Array], with_mask: bool = True) -> list[Sequence]:
    ids = need(arrays, "ids", "i32")
    lengths = need(arrays, "lengths", "i32")
    if int(lengths.sum()) != ids.size or (lengths < 0).any():
        raise protocol(f"`lengths` sum to {int(lengths.sum())} but `ids` has {ids.size} tokens")
    mask = need(arrays, "loss_mask", "u8") if with_mask else np.zeros(ids.size, np.uint8)
    if mask.size != ids.size:
        raise protocol(f"`loss_mask` has {mask.size} entries for {ids.size} tokens")
    out: list[Sequence] = []
    at = 0
    tok = 0
    for i, n in enumerate(lengths.tolist()):
        m = mask[at : at + n]
        if n > 0 and m[0] != 0:
            raise protocol(f"sequence {i}: loss_mask[0] is 1, but the first token has no prediction to score")
        s = Sequence(i, ids[at : at + n], m, tok)
        out.append(s)
        tok += s.scored
        at += n
    return out


def micro_batches(seqs: list[Sequence], budget: int | None) -> list[list[Sequence]]:
    """Consecutive groups of at most `budget` tokens (a longer sequence goes alone)."""
    if budget is None:
        return [seqs] if seqs else []
    groups: list[list[Sequence]] = []
    cur: list[Sequence] = []
    size = 0
    for s in seqs:
        if cur and size + len(s.ids) > budget:
            groups.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += len(s.ids)
    if cur:
        groups.append(cur)
    return groups


@dataclass
class Padded:
    ids: torch.Tensor  # (B, T) int64, right-padded with 0
    attention: torch.Tensor  # (B, T) int64
    # (B, T-1) bool: position t scores ids[t+1] from logits[t]
    scored: torch.Tensor


def pad(seqs: list[Sequence], device: torch.device) -> Padded:
    width = max(max(len(s.ids) for s in seqs), 2)
    b = len(seqs)
    ids = np.zeros((b, width), np.int64)
    att = np.zeros((b, width), np.int64)
    sc = np.zeros((b, width), np.bool_)
    for r, s in enumerate(seqs):
        n = len(s.ids)
        ids[r, :n] = s.ids
        att[r, :n] = 1
        sc[r, :n] = s.mask.astype(np.bool_)
    return Padded(
        torch.from_numpy(ids).to(device),
        torch.from_numpy(att).to(device),
        torch.from_numpy(sc[:, 1:]).to(device),
    )


def gather_tokens(values: Array, seqs: list[Sequence]) -> Array:
    """The per-token entries of `seqs` (in their order) out of a request-wide per-token array."""
    parts = [values[s.token_offset : s.token_offset + s.scored] for s in seqs]
    return np.concatenate(parts) if parts else np.zeros(0, values.dtype)


def as_int(v: Any, name: str, minimum: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise protocol(f"`{name}` must be an integer ≥ {minimum}, got {v!r}")
    return v
