"""The process group under torchrun: rank, world size, and the few collectives the worker needs.
Without torchrun (WORLD_SIZE unset or 1) every helper is the identity."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as tdist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def active(self) -> bool:
        return self.world > 1

    def broadcast_object(self, obj: Any) -> Any:
        if not self.active:
            return obj
        box = [obj]
        tdist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world
        tdist.all_gather_object(out, obj)
        return out

    def sum_floats(self, values: list[float]) -> list[float]:
        if not self.active:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        if tdist.get_backend() == "nccl":
            t = t.cuda()
        tdist.all_reduce(t)
        return [float(x) for x in t.cpu().tolist()]

    def max_int(self, v: int) -> int:
        if not self.active:
            return v
        return int(max(self.all_gather_object(v)))

    def barrier(self) -> None:
        if self.active:
            tdist.barrier()


def init_from_env() -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    rank = int(os.environ["RANK"])
    backend = "nccl" if torch.cuda.is_available() and os.environ.get("MAGE_DIST_BACKEND") != "gloo" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    tdist.init_process_group(backend=backend)
    return Dist(rank, world)
