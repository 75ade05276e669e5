"""Teacher-forced scoring, the PPO update (micro-batches, gradient accumulation, clip, AdamW) and
checkpoints of the policy, for one process or one rank of an FSDP group."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from . import batch as B
from .dist import Dist
from .errors import protocol, usage
from .folders import replace_dir
from .fsdp import clean_name
from .frames import Array
from .loss import LossSums, PpoOptions, ppo_loss_sum
from .model import Loaded, reference_policy


@dataclass(frozen=True)
class OptimizerSpec:
    lr: float = 1e-5
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float | None = 1.0

    @staticmethod
    def from_json(o: dict[str, Any] | None) -> OptimizerSpec:
        o = o or {}
        d = OptimizerSpec()
        betas = o.get("betas", list(d.betas))
        if not (isinstance(betas, list) and len(betas) == 2 and all(0 <= float(b) < 1 for b in betas)):
            raise usage(f"optimizer.betas must be two numbers in [0, 1), got {betas!r}", "optimizer.betas")
        eps = float(o.get("eps", d.eps))
        if not eps > 0:
            raise usage(f"optimizer.eps must be > 0, got {eps}", "optimizer.eps")
        wd = float(o.get("weightDecay", d.weight_decay))
        if not wd >= 0:
            raise usage(f"optimizer.weightDecay must be ≥ 0, got {wd}", "optimizer.weightDecay")
        clip = o.get("gradClip", d.grad_clip)
        return OptimizerSpec(
            lr=float(o.get("lr", d.lr)),
            weight_decay=wd,
            betas=(float(betas[0]), float(betas[1])),
            eps=eps,
            grad_clip=None if clip is None or float(clip) <= 0 else float(clip),
        )


def decay_names(model: torch.nn.Module) -> set[str]:
    """Names of the trainable parameters that get weight decay, as src/model/adamw.ts's `decays`:
    matrices decay, except the token embedding (and an output head tied to it); vectors (norm
    gains, biases) do not. Taken before any FSDP wrapping (which flattens the parameters)."""
    get_emb = getattr(model, "get_input_embeddings", None)
    emb = get_emb().weight if callable(get_emb) else None
    return {n for n, p in model.named_parameters() if p.requires_grad and p.dim() == 2 and p is not emb}


def make_optimizer(model: torch.nn.Module, spec: OptimizerSpec, decaying: set[str]) -> torch.optim.AdamW:
    decay: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for n, p in model.named_parameters():  # named_parameters() yields a tied parameter once
        if p.requires_grad:
            (decay if clean_name(n) in decaying else rest).append(p)
    groups: list[dict[str, Any]] = []
    if decay:
        groups.append({"params": decay, "weight_decay": spec.weight_decay})
    if rest:
        groups.append({"params": rest, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps, foreach=False)


# Floats of logits the output head produces at once (64 MiB in float32): scoring applies the head
# to the scored positions in chunks of this many logits, whatever the vocabulary, instead of to
# every position of the batch at once (B×T×V floats, tens of GB with a real vocabulary).
HEAD_CHUNK_LOGITS = 1 << 24


def score(
    model: torch.nn.Module, seqs: list[B.Sequence], device: torch.device, *, chunk_logits: int = HEAD_CHUNK_LOGITS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob and entropy (float32, differentiable) of every scored token of `seqs`, in order.
    Never materializes the logits of every position: during the model's own forward, its output
    head is replaced by `ChunkedScoring`, which receives the final (post-norm) hidden states and
    returns the scores instead of logits. Inside the forward, so that FSDP has the head's weights
    unsharded and re-unshards them for the backward (the scores are the root's output)."""
    rows = scored_rows(model, seqs, device, None, chunk_logits)
    return rows[0], rows[1]


def score_alternatives(
    model: torch.nn.Module, seqs: list[B.Sequence], device: torch.device, alternatives: torch.Tensor, *, chunk_logits: int = HEAD_CHUNK_LOGITS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`score`, plus the log-prob of other tokens at the same positions: `alternatives` is (N, K)
    token ids, one row per scored token (−1: none); the third result is (N, K), 0 where −1."""
    rows = scored_rows(model, seqs, device, alternatives, chunk_logits)
    return rows[0], rows[1], rows[2:].T


def scored_rows(
    model: torch.nn.Module, seqs: list[B.Sequence], device: torch.device, alternatives: torch.Tensor | None, chunk_logits: int
) -> torch.Tensor:
    p = B.pad(seqs, device)
    head = output_head(model)
    scoring = ChunkedScoring(head.forward, p.scored, p.ids[:, 1:][p.scored], chunk_logits, alternatives)
    with forward_replaced(head, scoring):
        out = model(input_ids=p.ids, attention_mask=p.attention, use_cache=False)
    if scoring.result is None or out.logits is not scoring.result:
        name = type(unwrap(model)).__name__
        raise usage(f"{name} does not return its output head's output as its logits (it transforms them after the head), which the worker's scoring cannot reproduce", "model.torch.path")
    result: torch.Tensor = out.logits
    return result


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM's output head module (under FSDP and peft too; a LoRA-wrapped head stays wrapped)."""
    inner = unwrap(model)
    get_base = getattr(inner, "get_base_model", None)
    base = get_base() if callable(get_base) else inner
    get_head = getattr(base, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, torch.nn.Module):
        raise usage(f"{type(base).__name__} has no output head", "model.torch.path")
    return head


@contextlib.contextmanager
def forward_replaced(module: torch.nn.Module, forward: Callable[..., Any]) -> Iterator[None]:
    """`module` runs `forward` instead of its own while inside."""
    own = module.__dict__.get("forward")  # an instance-level forward (e.g. an offloading hook) comes back after
    module.forward = forward
    try:
        yield
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


class ChunkedScoring:
    """Stands in for an output head for one forward: from the hidden states (B, T, H) it returns
    the log-prob of each scored token and the entropy at its position, stacked (2, N) in float32,
    applying the real head to `chunk_logits` logits' worth of scored positions at a time. With
    `alternatives` (N, K), K more rows: the log-prob of those tokens at the same positions."""

    def __init__(
        self,
        head: Callable[[torch.Tensor], torch.Tensor],
        scored: torch.Tensor,
        targets: torch.Tensor,
        chunk_logits: int,
        alternatives: torch.Tensor | None = None,
    ) -> None:
        self.head = head
        self.scored = scored  # (B, T-1): position t predicts token t+1
        self.targets = targets
        self.chunk_logits = chunk_logits
        if alternatives is not None and alternatives.shape[0] != targets.shape[0]:
            raise protocol(f"{alternatives.shape[0]} rows of alternative tokens for {targets.shape[0]} scored tokens")
        self.alternatives = alternatives
        self.result: torch.Tensor | None = None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.result is not None or hidden.shape[:2] != (self.scored.shape[0], self.scored.shape[1] + 1):
            raise usage("the model calls its output head other than once over every position; scoring cannot replace it", "model.torch.path")
        picked = hidden[:, :-1][self.scored]
        rows = max(1, self.chunk_logits // self._vocab_size(picked))
        k = 0 if self.alternatives is None else self.alternatives.shape[1]
        parts = [
            chunk_scores(self.head, picked[i : i + rows], self.targets[i : i + rows], None if self.alternatives is None else self.alternatives[i : i + rows])
            for i in range(0, len(self.targets), rows)
        ]
        if not parts:
            self.result = torch.zeros((2 + k, 0), dtype=torch.float32, device=hidden.device)
        else:
            main = torch.stack([torch.cat([lp for lp, _, _ in parts]), torch.cat([ent for _, ent, _ in parts])])
            alts = [alt for _, _, alt in parts if alt is not None]
            self.result = main if k == 0 else torch.cat([main, torch.cat(alts).T])
        return self.result

    def _vocab_size(self, picked: torch.Tensor) -> int:
        if len(picked) == 0:
            return 1
        with torch.no_grad():
            return int(self.head(picked[:1]).shape[-1])


def chunk_scores(
    head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor, alternatives: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`head_scores` of one chunk; under autograd recomputed in the backward pass, so that only one
    chunk's logits (and their gradient) exist at a time instead of every chunk's."""
    if not torch.is_grad_enabled():
        return head_scores(head, hidden, targets, alternatives)
    out = checkpoint(head_scores, head, hidden, targets, alternatives, use_reentrant=False)
    return out[0], out[1], out[2]


def head_scores(
    head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor, alternatives: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target and entropy of each row's next-token distribution, in float32; with
    `alternatives` (rows, K), the log-prob of those tokens too (0 where the id is −1)."""
    lsm = torch.log_softmax(head(hidden).float(), dim=-1)
    logp = lsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(lsm.exp() * lsm).sum(-1)
    if alternatives is None:
        return logp, entropy, None
    alt = lsm.gather(-1, alternatives.clamp(min=0)).masked_fill(alternatives < 0, 0.0)
    return logp, entropy, alt


@dataclass
class Learner:
    loaded: Loaded
    model: torch.nn.Module  # the module to run forward/backward on (FSDP-wrapped on >1 rank)
    optimizer: torch.optim.AdamW
    spec: OptimizerSpec
    dist: Dist = field(default_factory=Dist)
    step: int = 0

    @property
    def device(self) -> torch.device:
        return self.loaded.device

    # ----- logprobs -------------------------------------------------------------------------

    def logprobs(self, req: dict[str, Any], arrays: dict[str, Array]) -> tuple[dict[str, Any], dict[str, Array]]:
        seqs = B.split_sequences(arrays)
        which = req.get("model", "policy")
        if which not in ("policy", "reference"):
            raise usage(f"logprobs model must be policy or reference, got {which!r}", "model")
        budget = micro_batch_tokens(req)
        local = seqs[self.dist.rank :: self.dist.world]
        groups = B.micro_batches(local, budget)
        rounds = self.dist.max_int(len(groups))
        self.model.eval()
        with torch.no_grad():
            if which == "reference":
                with reference_policy(self.loaded) as ref:
                    mod = self.model if self.loaded.lora is not None else ref
                    lp, ent = self._score_local(mod, groups, rounds)
            else:
                lp, ent = self._score_local(self.model, groups, rounds)
        n = sum(s.scored for s in seqs)
        logp = np.zeros(n, np.float64)
        entropy = np.zeros(n, np.float64)
        parts = self.dist.all_gather_object((lp, ent, [(s.token_offset, s.scored) for s in local]))
        for plp, pent, where in parts:
            at = 0
            for off, cnt in where:
                logp[off : off + cnt] = plp[at : at + cnt]
                entropy[off : off + cnt] = pent[at : at + cnt]
                at += cnt
        return {}, {"logp": logp, "entropy": entropy}

    def _score_local(self, model: torch.nn.Module, groups: list[list[B.Sequence]], rounds: int) -> tuple[Array, Array]:
        """This rank's micro-batches scored one at a time, concatenated in order."""
        lps: list[Array] = [np.zeros(0)]
        ents: list[Array] = [np.zeros(0)]
        for i in range(rounds):
            if i >= len(groups):  # FSDP: every rank joins every forward's collectives
                self._dummy_forward(model, backward=False)
                continue
            lp, ent = score(model, groups[i], self.device)
            lps.append(lp.double().cpu().numpy())
            ents.append(ent.double().cpu().numpy())
        return np.concatenate(lps), np.concatenate(ents)

    def _dummy_forward(self, model: torch.nn.Module, backward: bool) -> None:
        ids = torch.zeros((1, 2), dtype=torch.long, device=self.device)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        if backward:
            (out.logits.float().sum() * 0.0).backward()

    # ----- update ---------------------------------------------------------------------------

    def update(self, req: dict[str, Any], arrays: dict[str, Array]) -> tuple[dict[str, Any], dict[str, Array]]:
        t0 = time.perf_counter()
        seqs = B.split_sequences(arrays)
        n_total = sum(s.scored for s in seqs)
        old = B.need(arrays, "old_logp", "f64")
        adv = B.need(arrays, "advantages", "f64")
        ref = B.need(arrays, "ref_logp", "f64") if "ref_logp" in arrays else None
        for name, a in (("old_logp", old), ("advantages", adv), ("ref_logp", ref)):
            if a is not None and a.size != n_total:
                raise protocol(f"`{name}` has {a.size} values for {n_total} scored tokens")
        opts = PpoOptions.from_json(req.get("loss"))
        if opts.kl_coef != 0 and ref is None:
            raise usage("loss.klCoef is set but the request has no ref_logp", "loss.klCoef")
        budget = micro_batch_tokens(req)
        lr = req.get("lr", self.spec.lr)
        if not isinstance(lr, (int, float)) or lr < 0:
            raise usage(f"lr must be a number ≥ 0, got {lr!r}", "lr")

        local = seqs[self.dist.rank :: self.dist.world]
        groups = B.micro_batches(local, budget)
        rounds = self.dist.max_int(len(groups))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = LossSums()
        loss_sum = 0.0
        for i in range(rounds):
            if i >= len(groups):
                self._dummy_forward(self.model, backward=True)
                continue
            g = groups[i]
            if sum(s.scored for s in g) == 0:
                self._dummy_forward(self.model, backward=True)
                continue
            logp, ent = score(self.model, g, self.device)
            dev = logp.device
            loss, s = ppo_loss_sum(
                logp,
                ent,
                torch.from_numpy(B.gather_tokens(old, g)).to(dev),
                torch.from_numpy(B.gather_tokens(adv, g)).to(dev),
                torch.from_numpy(B.gather_tokens(ref, g)).to(dev) if ref is not None else None,
                opts,
                n_total,
            )
            # FSDP averages gradients over ranks; the loss is a sum over ranks, so scale by world.
            torch.autograd.backward(loss * self.dist.world)
            loss_sum += float(loss.detach())
            sums.add(s)
        self.model.eval()
        totals = self.dist.sum_floats([loss_sum, sums.pg, sums.clipped, sums.kl, sums.entropy, sums.ppo_kl, sums.ratio_dev])
        loss_sum = totals[0]
        sums = LossSums(*totals[1:])
        norm = self.grad_norm()
        skipped = not np.isfinite(norm)
        clipped = False
        if skipped:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            clip = self.spec.grad_clip
            if clip is not None and norm > clip:
                clipped = True
                scale = clip / (norm + 1e-6)
                for p in self.params():
                    if p.grad is not None:
                        p.grad.mul_(scale)
            for grp in self.optimizer.param_groups:
                grp["lr"] = float(lr)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
        reply = {
            "loss": loss_sum,
            "metrics": sums.metrics(n_total),
            "gradNorm": norm if np.isfinite(norm) else None,
            "clipped": clipped,
            "skipped": skipped,
            "step": self.step,
            "tokens": n_total,
            "ms": (time.perf_counter() - t0) * 1000,
        }
        return reply, {}

    def params(self) -> list[torch.nn.Parameter]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def grad_norm(self) -> float:
        """Global L2 norm of the accumulated gradient (over all ranks' shards under FSDP)."""
        total: torch.Tensor | None = None
        for p in self.params():  # one tensor at a time: no float64 copy of the whole gradient
            if p.grad is not None:
                n = torch.linalg.vector_norm(p.grad.detach(), dtype=torch.float64) ** 2
                total = n if total is None else total + n
        sq = float(total) if total is not None else 0.0
        if self.dist.active:
            sq = self.dist.sum_floats([sq])[0]
        return float(np.sqrt(sq)) if np.isfinite(sq) else float("nan")

    # ----- save / restore -------------------------------------------------------------------

    def save(self, req: dict[str, Any]) -> dict[str, Any]:
        path = req.get("path")
        if not isinstance(path, str) or not path:
            raise usage("save needs a `path`", "path")
        target = Path(path)
        model_sd, optim_sd = self.full_state()
        fmt = "peft-adapter" if self.loaded.lora is not None else "hf"
        if self.dist.rank == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
            try:
                inner = unwrap(self.model)
                if self.loaded.lora is not None and inner is not self.model:
                    from .fsdp import save_adapter

                    save_adapter(inner, model_sd, tmp)
                else:
                    inner.save_pretrained(str(tmp), state_dict=model_sd)  # type: ignore[operator]
                self.loaded.tokenizer.save_pretrained(str(tmp))
                torch.save(optim_sd, tmp / "optimizer.pt")
                rng: dict[str, Any] = {"torch": torch.get_rng_state()}
                if torch.cuda.is_available():
                    rng["cuda"] = torch.cuda.get_rng_state_all()
                torch.save(rng, tmp / "rng.pt")
                (tmp / "mage-learner.json").write_text(json.dumps({"step": self.step, "format": fmt}) + "\n")
                replace_dir(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        self.dist.barrier()
        return {"path": str(target), "format": fmt}

    def full_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Model state dict as save_pretrained wants it (the adapter only with LoRA) and the
        optimizer state; under FSDP gathered in full on rank 0."""
        from .fsdp import full_state

        return full_state(self)

    def restore(self, req: dict[str, Any]) -> dict[str, Any]:
        path = req.get("path")
        if not isinstance(path, str) or not Path(path).is_dir():
            raise usage(f"restore: {path!r} is not a directory that save wrote", "path")
        p = Path(path)
        meta_file = p / "mage-learner.json"
        if not meta_file.is_file():
            raise usage(f"restore: {path} has no mage-learner.json (not written by the worker's save)", "path")
        meta = json.loads(meta_file.read_text())
        fmt = "peft-adapter" if self.loaded.lora is not None else "hf"
        if meta.get("format") != fmt:
            raise usage(f"restore: {path} holds a {meta.get('format')} checkpoint but the loaded model is {fmt}", "path")
        from .fsdp import load_full_state

        load_full_state(self, p)
        rng = torch.load(p / "rng.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.step = int(meta.get("step", 0))
        return {"step": self.step}


def micro_batch_tokens(req: dict[str, Any]) -> int | None:
    """The request's `microBatchTokens` (at most that many tokens per forward), or None for one pass."""
    budget = req.get("microBatchTokens")
    return None if budget is None else B.as_int(budget, "microBatchTokens", 1)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) and type(model).__name__ == "FullyShardedDataParallel" else model
