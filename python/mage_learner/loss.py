"""The PPO actor loss of src/algo/ppo-loss.ts in torch: dual clip, clamped k3 KL, entropy bonus.

`ppo_loss_sum` returns the *sum* over the given tokens of each token's loss divided by `n_total`,
the number of scored tokens of the whole request, so that summing it over micro-batches (and
ranks) gives exactly the token-mean over the request, with the same gradient."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class PpoOptions:
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 3.0
    entropy_coef: float = 0.001
    kl_coef: float = 0.0
    kl_clamp: float = 10.0

    @staticmethod
    def from_json(o: dict[str, Any] | None) -> PpoOptions:
        o = o or {}
        d = PpoOptions()
        return PpoOptions(
            clip_low=float(o.get("clipLow", d.clip_low)),
            clip_high=float(o.get("clipHigh", d.clip_high)),
            dual_clip=float(o.get("dualClip", d.dual_clip)),
            entropy_coef=float(o.get("entropyCoef", d.entropy_coef)),
            kl_coef=float(o.get("klCoef", d.kl_coef)),
            kl_clamp=float(o.get("klClamp", d.kl_clamp)),
        )


@dataclass
class LossSums:
    """Per-token sums (not yet divided by the token count) of the metrics of ppo-loss.ts."""

    pg: float = 0.0
    clipped: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    ppo_kl: float = 0.0
    ratio_dev: float = 0.0

    def add(self, o: LossSums) -> None:
        self.pg += o.pg
        self.clipped += o.clipped
        self.kl += o.kl
        self.entropy += o.entropy
        self.ppo_kl += o.ppo_kl
        self.ratio_dev += o.ratio_dev

    def metrics(self, n: int) -> dict[str, float]:
        inv = 1.0 / n if n > 0 else 0.0
        return {
            "pg_loss": self.pg * inv,
            "clipfrac": self.clipped * inv,
            "kl": self.kl * inv,
            "entropy": self.entropy * inv,
            "ppo_kl": self.ppo_kl * inv,
            "ratio_dev": self.ratio_dev * inv,
        }


def clipped_policy_term(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, o: PpoOptions
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token value of the dual-clipped ratio term (gradient only where ppo-loss.ts has one)
    and whether the token counts as clipped."""
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped_loss = (-adv * torch.clamp(ratio, 1 - o.clip_low, 1 + o.clip_high)).detach()
    use_unclipped = unclipped.detach() >= clipped_loss
    value = torch.where(use_unclipped, unclipped, clipped_loss)
    clipped = ~use_unclipped
    if o.dual_clip > 1:
        cap = (-adv * o.dual_clip).detach()
        over = (adv < 0) & (value.detach() > cap)
        value = torch.where(over, cap, value)
        clipped = clipped | over
    return value, clipped


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, clamp: float) -> torch.Tensor:
    """Clamped k3 estimator of KL(π‖π_ref); zero gradient where the clamp is active."""
    x = ref_logp - logp
    raw = torch.exp(x) - x - 1
    lo = torch.full_like(raw, -clamp)
    hi = torch.full_like(raw, clamp)
    return torch.where(raw > clamp, hi, torch.where(raw < -clamp, lo, raw))


def ppo_loss_sum(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    ref_logp: torch.Tensor | None,
    o: PpoOptions,
    n_total: int,
) -> tuple[torch.Tensor, LossSums]:
    """Σ_t loss_t / n_total over these tokens (float64), and the metric sums."""
    logp = logp.double()
    entropy = entropy.double()
    old_logp = old_logp.double()
    adv = adv.double()
    value, clipped = clipped_policy_term(logp, old_logp, adv, o)
    total = value.sum()
    kl_sum = torch.zeros((), dtype=torch.float64)
    if o.kl_coef != 0:
        if ref_logp is None:
            raise ValueError("PPO loss: klCoef is set but reference log-probs are missing")
        kl = k3_kl(logp, ref_logp.double(), o.kl_clamp)
        kl_sum = kl.sum()
        total = total + o.kl_coef * kl_sum
    total = total - o.entropy_coef * entropy.sum()
    inv = 1.0 / n_total if n_total > 0 else 0.0
    sums = LossSums(
        pg=float(value.detach().sum()),
        clipped=float(clipped.sum()),
        kl=float(kl_sum.detach()),
        entropy=float(entropy.detach().sum()),
        ppo_kl=float((old_logp - logp.detach()).sum()),
        ratio_dev=float((torch.exp(logp.detach() - old_logp) - 1).abs().sum()),
    )
    return total * inv, sums
