"""In-process driving of a Worker (no socket) and small batch builders for the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mage_learner.frames import Array, Frame, decode, encode
from mage_learner.worker import Worker


class Failed(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error))
        self.error = error


def call(w: Worker, op: str, arrays: dict[str, Array] | None = None, **fields: Any) -> tuple[dict[str, Any], dict[str, Array]]:
    """One request through the frame codec both ways, as it would travel on the socket."""
    raw = encode({"id": 1, "op": op, **fields}, arrays)
    frame = decode(raw[8 : 8 + int.from_bytes(raw[:4], "little")], raw[8 + int.from_bytes(raw[:4], "little") :])
    header, out = w.handle(Frame(frame.header, frame.arrays))
    back = encode(header, out)
    h = int.from_bytes(back[:4], "little")
    reply = decode(back[8 : 8 + h], back[8 + h :])
    if not reply.header.get("ok"):
        raise Failed(reply.header["error"])
    return reply.header, reply.arrays


def load_fields(path: Path, device: str = "cpu", dtype: str = "float32", **over: Any) -> dict[str, Any]:
    f: dict[str, Any] = {
        "model": str(path),
        "dtype": dtype,
        "device": device,
        "lora": None,
        "gradientCheckpointing": False,
        "optimizer": {"lr": 1e-2, "weightDecay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "gradClip": 1.0},
        "seed": 0,
        "reference": True,
    }
    f.update(over)
    return f


def loaded_worker(path: Path, device: str = "cpu", dtype: str = "float32", **over: Any) -> Worker:
    w = Worker()
    call(w, "load", **load_fields(path, device, dtype, **over))
    return w


def batch(rows: list[list[int]], prompt: list[int]) -> dict[str, Array]:
    """ids/lengths/loss_mask with the first prompt[i] tokens of row i unscored."""
    ids = np.asarray([t for r in rows for t in r], np.int32)
    mask = np.concatenate([np.r_[np.zeros(p, np.uint8), np.ones(len(r) - p, np.uint8)] for r, p in zip(rows, prompt)])
    return {"ids": ids, "lengths": np.asarray([len(r) for r in rows], np.int32), "loss_mask": mask}


def random_rows(n: int, vocab: int, seed: int, lo: int = 6, hi: int = 14) -> tuple[list[list[int]], list[int]]:
    rng = np.random.default_rng(seed)
    rows = [rng.integers(3, vocab, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]
    prompt = [int(rng.integers(1, 4)) for _ in rows]
    return rows, prompt


def weights(w: Worker) -> dict[str, np.ndarray[Any, Any]]:
    assert w.loaded is not None
    return {n: p.detach().float().cpu().numpy().copy() for n, p in w.loaded.model.named_parameters()}
