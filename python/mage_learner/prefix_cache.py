"""Key/value caches of earlier samples, reused by later prompts that start with the same tokens.

A multi-attempt trial asks the model again and again with a prompt that extends the previous one
(append-only chat rendering: the earlier prompt, the sampled answer verbatim, then the game's
next message), and the trials of a group start from the same prompt. Without reuse, every turn
prefills the whole conversation again; with it, a turn prefills only what is new. The store
keeps, per finished row, the tokens it fed and their per-layer keys and values (no batch
dimension, no padding), evicts the least recently used entries beyond a byte budget, and is
emptied whenever the weights change (an entry is only valid for the weights that computed it).
A sample drawn with a saved adapter swapped in (a league snapshot, adapters.py) stores and finds
only entries of that adapter: each entry carries the tag of the weights that computed it."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

# Reusing fewer tokens than this saves less than the bookkeeping costs.
MIN_REUSE = 8


@dataclass
class Entry:
    tokens: np.ndarray  # int64, the tokens whose keys and values are stored
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [heads, len, dim]
    nbytes: int
    tag: str = ""  # the weights that computed it: "" the policy's own, else a swapped-in adapter


@dataclass(frozen=True)
class Hit:
    entry: Entry
    length: int  # tokens of the entry reused (a prefix of both the entry and the prompt)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class PrefixStore:
    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self.bytes = 0
        self._next = 0
        self.reused_tokens = 0
        self.prefilled_tokens = 0
        self.tag = ""

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    @contextlib.contextmanager
    def tagged(self, tag: str) -> Iterator[None]:
        """Inside, lookups and adds see only the entries of the weights `tag` names."""
        outer, self.tag = self.tag, tag
        try:
            yield
        finally:
            self.tag = outer

    def drop_tag(self, tag: str) -> None:
        """Forgets the entries of the weights `tag` names (an adapter no longer held)."""
        for key in [k for k, e in self.entries.items() if e.tag == tag]:
            self.bytes -= self.entries.pop(key).nbytes

    def drop_prefixes_of(self, tokens: np.ndarray) -> None:
        """Entries that `tokens` extends hold nothing the new entry does not."""
        for key in [
            k
            for k, e in self.entries.items()
            if e.tag == self.tag and len(e.tokens) <= len(tokens) and common_prefix(e.tokens, tokens) == len(e.tokens)
        ]:
            self.bytes -= self.entries.pop(key).nbytes

    def lookup(self, prompt: np.ndarray) -> Hit | None:
        """The entry sharing the longest prefix with `prompt`, leaving at least its last token to feed."""
        best: tuple[int, int] | None = None
        limit = len(prompt) - 1
        for key, e in self.entries.items():
            if e.tag != self.tag:
                continue
            n = common_prefix(e.tokens, prompt[:limit])
            if n >= MIN_REUSE and (best is None or n > best[1]):
                best = (key, n)
        if best is None:
            return None
        self.entries.move_to_end(best[0])
        return Hit(self.entries[best[0]], best[1])

    def add(self, tokens: np.ndarray, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if self.budget <= 0 or len(tokens) < MIN_REUSE:
            return
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if nbytes > self.budget:
            return
        self.drop_prefixes_of(tokens)
        self.entries[self._next] = Entry(tokens, layers, nbytes, self.tag)
        self._next += 1
        self.bytes += nbytes
        while self.bytes > self.budget:
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.nbytes
