"""The torch PPO loss against a direct re-implementation of src/algo/ppo-loss.ts's formulas
(value, metrics and the per-token gradients it hands back) on hand-picked cases."""

from __future__ import annotations

import math

import pytest
import torch

from mage_learner.loss import PpoOptions, ppo_loss_sum


def ts_reference(logp: list[float], ent: list[float], old: list[float], adv: list[float], ref: list[float] | None, o: PpoOptions) -> tuple[float, list[float], list[float], dict[str, float]]:
    """ppo-loss.ts, transcribed line by line: loss, dLogp, dEntropy, metrics."""
    n = len(logp)
    inv = 1 / n
    pg = kl = entropy = approx = ratio_dev = 0.0
    clipped_count = 0
    d_logp: list[float] = []
    for t in range(n):
        ratio = math.exp(logp[t] - old[t])
        unclipped = -adv[t] * ratio
        cr = min(max(ratio, 1 - o.clip_low), 1 + o.clip_high)
        cl = -adv[t] * cr
        if unclipped >= cl:
            value, g, clipped = unclipped, -adv[t] * ratio, False
        else:
            value, g, clipped = cl, 0.0, True
        if adv[t] < 0 and o.dual_clip > 1:
            cap = -adv[t] * o.dual_clip
            if value > cap:
                value, g, clipped = cap, 0.0, True
        pg += value
        clipped_count += clipped
        if o.kl_coef != 0 and ref is not None:
            x = ref[t] - logp[t]
            raw = math.exp(x) - x - 1
            if raw > o.kl_clamp:
                kv, kd = o.kl_clamp, 0.0
            elif raw < -o.kl_clamp:
                kv, kd = -o.kl_clamp, 0.0
            else:
                kv, kd = raw, 1 - math.exp(x)
            kl += kv
            g += o.kl_coef * kd
        d_logp.append(g * inv)
        entropy += ent[t]
        approx += old[t] - logp[t]
        ratio_dev += abs(math.exp(logp[t] - old[t]) - 1)
    loss = (pg + o.kl_coef * kl - o.entropy_coef * entropy) * inv
    metrics = {"pg_loss": pg * inv, "clipfrac": clipped_count * inv, "kl": kl * inv, "entropy": entropy * inv, "ppo_kl": approx * inv, "ratio_dev": ratio_dev * inv}
    return loss, d_logp, [-o.entropy_coef * inv] * n, metrics


# Tokens chosen to hit every branch: inside the clip range, clipped above (A>0, ratio>1+ε),
# clipped below (A<0, ratio<1-ε), dual-clipped (A<0, ratio > c), and a KL beyond its clamp.
CASES = {
    "unclipped": ([-1.0, -2.0], [0.5, 1.0], [-1.05, -1.9], [1.0, -0.5], None, PpoOptions()),
    "clipped-high": ([-0.5], [1.0], [-1.0], [2.0], None, PpoOptions()),
    "clipped-low": ([-3.0], [1.0], [-1.0], [-1.0], None, PpoOptions(dual_clip=0)),
    "dual-clipped": ([0.0, -0.2], [2.0, 2.0], [-2.0, -0.3], [-1.0, -1.0], None, PpoOptions(dual_clip=3)),
    "kl": ([-1.0, -0.5, -2.0], [1.0, 0.7, 0.3], [-1.1, -0.5, -2.2], [0.3, -0.2, 0.0], [-1.5, -0.4, -2.0], PpoOptions(kl_coef=0.5)),
    "kl-clamped": ([-0.1, -1.0], [1.0, 1.0], [-0.1, -1.0], [0.5, 0.5], [-20.0, -1.2], PpoOptions(kl_coef=0.3, kl_clamp=2.0)),
    "entropy": ([-0.7, -1.3, -0.2], [3.0, 0.1, 1.7], [-0.7, -1.3, -0.2], [1.0, 1.0, -1.0], None, PpoOptions(entropy_coef=0.05)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_loss_value_metrics_and_gradients_match_the_ts_formulas(name: str) -> None:
    lp, en, old, adv, ref, o = CASES[name]
    want_loss, want_dlogp, want_dent, want_metrics = ts_reference(lp, en, old, adv, ref, o)
    logp = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    ent = torch.tensor(en, dtype=torch.float64, requires_grad=True)
    refs = torch.tensor(ref, dtype=torch.float64) if ref is not None else None
    loss, sums = ppo_loss_sum(logp, ent, torch.tensor(old, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64), refs, o, len(lp))
    torch.autograd.backward(loss)
    assert float(loss.detach()) == pytest.approx(want_loss, rel=1e-12, abs=1e-15)
    assert logp.grad is not None and ent.grad is not None
    assert logp.grad.tolist() == pytest.approx(want_dlogp, rel=1e-12, abs=1e-15)
    assert ent.grad.tolist() == pytest.approx(want_dent, rel=1e-12, abs=1e-15)
    got = sums.metrics(len(lp))
    for k, v in want_metrics.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k


def test_the_cases_exercise_every_branch() -> None:
    # Guard the hand-picked cases: each branch they are meant to hit is hit.
    assert ts_reference(*CASES["clipped-high"])[3]["clipfrac"] == 1.0
    assert ts_reference(*CASES["dual-clipped"])[1][0] == 0.0  # dual-clipped: no gradient
    assert ts_reference(*CASES["kl-clamped"])[3]["kl"] == pytest.approx((2.0 + (math.exp(-0.2) + 0.2 - 1)) / 2)


def f64(x: list[float]) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def test_token_mean_over_micro_batches_is_the_whole_mean() -> None:
    lp, en, old, adv, ref, o = CASES["kl"]
    whole = ts_reference(lp, en, old, adv, ref, o)[0]
    parts = 0.0
    for a, b in ((0, 1), (1, 3)):
        loss, _ = ppo_loss_sum(
            f64(lp[a:b]), f64(en[a:b]), f64(old[a:b]), f64(adv[a:b]), f64(ref[a:b]) if ref else None, o, len(lp),
        )
        parts += float(loss)
    assert parts == pytest.approx(whole, rel=1e-12)
