"""One next-token draw from one row of logits, with src/model/sampling.ts's conventions:
temperature, then top-k, then top-p, then an inverse-CDF draw from one uniform number u; the
log-prob is the chosen token's under the distribution actually sampled from. Temperature 0 is
greedy (lowest id on ties, log-prob 0); ties in the ranking go to the lower id."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import usage


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: tuple[str, ...] = ()

    @staticmethod
    def from_json(o: Any, where: str) -> SamplingParams:
        if not isinstance(o, dict):
            raise usage(f"{where} must be an object", where)
        mnt = o.get("maxNewTokens")
        if not isinstance(mnt, int) or isinstance(mnt, bool) or mnt < 0:
            raise usage(f"{where}.maxNewTokens must be an integer ≥ 0, got {mnt!r}", f"{where}.maxNewTokens")
        t = o.get("temperature", 1.0)
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise usage(f"{where}.temperature must be a finite number ≥ 0, got {t!r}", f"{where}.temperature")
        p = o.get("topP", 1.0)
        if not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise usage(f"{where}.topP must be in (0, 1], got {p!r}", f"{where}.topP")
        k = o.get("topK", 0)
        if not isinstance(k, int) or isinstance(k, bool):
            raise usage(f"{where}.topK must be an integer, got {k!r}", f"{where}.topK")
        seed = o.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise usage(f"{where}.seed must be an integer, got {seed!r}", f"{where}.seed")
        stop = o.get("stop") or []
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise usage(f"{where}.stop must be a list of non-empty strings", f"{where}.stop")
        return SamplingParams(mnt, float(t), float(p), k, seed, tuple(stop))


def sample_row(logits: npt.NDArray[Any], p: SamplingParams, u: float) -> tuple[int, float]:
    """(token id, its log-prob under the sampled distribution) for one row of logits."""
    x = logits.astype(np.float64)
    if p.temperature == 0:
        return int(np.argmax(x)), 0.0
    mx = float(x.max())
    if not math.isfinite(mx):
        raise ValueError(f"sampling: logits are not finite (max {mx})")
    inv_t = 1.0 / p.temperature
    v = x.size
    use_k = 0 < p.top_k < v
    if not use_k and p.top_p >= 1:
        w = np.exp((x - mx) * inv_t)
        cdf = np.cumsum(w)
        total = float(cdf[-1])
        i = int(np.searchsorted(cdf, u * total, side="right"))
        if i >= v:
            i = int(np.nonzero(w > 0)[0][-1])
        return i, float((x[i] - mx) * inv_t - math.log(total))
    order = top_k_order(x, p.top_k) if use_k else np.argsort(-x, kind="stable")
    n = len(order)
    w = np.exp((x[order] - mx) * inv_t)
    cdf = np.cumsum(w)
    if p.top_p < 1:
        n = int(np.searchsorted(cdf, p.top_p * float(cdf[-1]), side="left")) + 1
        n = min(n, len(order))
        order, w, cdf = order[:n], w[:n], cdf[:n]
    total = float(cdf[-1])
    j = int(np.searchsorted(cdf, u * total, side="right"))
    j = min(j, n - 1)
    chosen = int(order[j])
    return chosen, float((x[chosen] - mx) * inv_t - math.log(total))


def top_k_order(x: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.intp]:
    """The k best ids, best first, ties to the lower id: the first k of a stable descending sort,
    found in O(V) by a partition, then only those k sorted."""
    kth = float(x[np.argpartition(-x, k - 1)[k - 1]])
    above = np.flatnonzero(x > kth)
    tied = np.flatnonzero(x == kth)[: k - len(above)]
    cand = np.concatenate([above, tied])
    return cand[np.lexsort((cand, -x[cand]))]
