"""How lean decode steps run: eagerly (the CPU), or as CUDA graphs captured once per (batch,
cache length, truncation) bucket and replayed (a GPU, where a step's ~400 small kernels cost
more to launch than to run).

A captured graph reads and writes fixed addresses: its cache is allocated once per bucket and
kept, its inputs are copied into fixed buffers before each replay, and the weights it reads are
the model's own parameters, so an optimizer step that updates them in place is seen by the next
replay. Anything that replaces parameter tensors (a restore, a reload) must call `reset()`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import torch

from .decoder import Decoder, Draw, KVCache, step
from .generate import Row


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class Runner(Protocol):
    dec: Decoder

    def length_bucket(self, need: int) -> int: ...
    def batch_bucket(self, rows: int) -> int: ...
    def cache(self, batch: int, length: int) -> KVCache: ...
    def compact(self, cache: KVCache, slots: list[Row | None]) -> tuple[KVCache, list[Row | None]]: ...
    def decode(
        self, cache: KVCache, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, d: Draw, truncate: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
    def reset(self) -> None: ...


def eager_decode(
    dec: Decoder, cache: KVCache, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, d: Draw, truncate: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decode step over every row of the cache, run as it is called."""
    b = ids.shape[0]
    rows, last = torch.arange(b, device=ids.device), torch.zeros(b, dtype=torch.int64, device=ids.device)
    return step(dec, cache, ids, pos, write, rows, last, d, truncate)


def live_index(slots: list[Row | None]) -> list[int]:
    return [s for s, r in enumerate(slots) if r is not None]


class EagerRunner:
    """Exact batches (a padding row costs a real row's arithmetic on a CPU); cache lengths in
    steps of 64 tokens."""

    def __init__(self, dec: Decoder) -> None:
        self.dec = dec

    def length_bucket(self, need: int) -> int:
        return -(-need // 64) * 64

    def batch_bucket(self, rows: int) -> int:
        return rows

    def cache(self, batch: int, length: int) -> KVCache:
        return self.dec.new_cache(batch, length)

    def compact(self, cache: KVCache, slots: list[Row | None]) -> tuple[KVCache, list[Row | None]]:
        keep = live_index(slots)
        if len(keep) == len(slots):
            return cache, slots
        return cache.select(torch.tensor(keep, device=self.dec.device)), [slots[s] for s in keep]

    def decode(
        self, cache: KVCache, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, d: Draw, truncate: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return eager_decode(self.dec, cache, ids, pos, write, d, truncate)

    def reset(self) -> None:
        pass


@dataclass
class Captured:
    graph: torch.cuda.CUDAGraph
    ids: torch.Tensor
    pos: torch.Tensor
    write: torch.Tensor
    draw: Draw
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    # Read by the graph too: held here so that their memory is never reused while it lives.
    rows: torch.Tensor
    last: torch.Tensor


class GraphRunner:
    """Power-of-two batches and cache lengths (from 256 tokens), each bucket's cache kept and its
    step captured on first use. With capture=False the same buckets run eagerly: the reference a
    captured run is checked against, and how the bucket logic is tested on a CPU."""

    def __init__(self, dec: Decoder, min_length: int = 256, capture: bool = True) -> None:
        self.dec = dec
        self.min_length = min_length
        self.caches: dict[tuple[int, int], KVCache] = {}
        self.graphs: dict[tuple[int, int, bool], Captured] = {}
        self.capturing = capture
        self.captures = 0

    def length_bucket(self, need: int) -> int:
        return max(self.min_length, pow2(need))

    def batch_bucket(self, rows: int) -> int:
        return pow2(rows)

    def cache(self, batch: int, length: int) -> KVCache:
        key = (batch, length)
        if key not in self.caches:
            self.caches[key] = self.dec.new_cache(batch, length)
        return self.caches[key]

    def compact(self, cache: KVCache, slots: list[Row | None]) -> tuple[KVCache, list[Row | None]]:
        keep = live_index(slots)
        if not keep or len(keep) > cache.batch // 2:
            return cache, slots
        smaller = self.cache(pow2(len(keep)), cache.length)
        cache.copy_rows_into(smaller, torch.tensor(keep, device=self.dec.device))
        return smaller, [*(slots[s] for s in keep), *([None] * (smaller.batch - len(keep)))]

    def decode(
        self, cache: KVCache, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, d: Draw, truncate: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not self.capturing:
            return eager_decode(self.dec, cache, ids, pos, write, d, truncate)
        key = (cache.batch, cache.length, truncate)
        cap = self.graphs.get(key) or self.capture(cache, ids, pos, write, d, truncate)
        cap.ids.copy_(ids)
        cap.pos.copy_(pos)
        cap.write.copy_(write)
        for f in fields(Draw):
            getattr(cap.draw, f.name).copy_(getattr(d, f.name))
        cap.graph.replay()
        return cap.out

    def capture(
        self, cache: KVCache, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, d: Draw, truncate: bool
    ) -> Captured:
        assert cache is self.caches[(cache.batch, cache.length)], "graphs run on the runner's own caches"
        b = cache.batch
        ids, pos, d = ids.clone(), pos.clone(), Draw(**{f.name: getattr(d, f.name).clone() for f in fields(Draw)})
        # Warm-up replays write the scratch slot only, so the cache's real rows are untouched.
        write = torch.full_like(write, cache.length - 1)
        rows = torch.arange(b, device=ids.device)
        last = torch.zeros(b, dtype=torch.int64, device=ids.device)

        def run() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return step(self.dec, cache, ids, pos, write, rows, last, d, truncate)

        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # a private pool: buckets replay in any order
            out = run()
        cap = Captured(graph, ids, pos, write, d, out, rows, last)
        self.graphs[(b, cache.length, truncate)] = cap
        self.captures += 1
        return cap

    def reset(self) -> None:
        self.graphs.clear()
        self.caches.clear()


def make_runner(dec: Decoder, graphs: bool) -> Runner:
    return GraphRunner(dec) if graphs and dec.device.type == "cuda" else EagerRunner(dec)
