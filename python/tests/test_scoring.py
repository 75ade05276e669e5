"""Chunked scoring: the output head over the scored positions only, in chunks, gives the log-probs,
entropies and gradients of the full-logits computation (Llama, Qwen3, LoRA with a wrapped head);
an architecture that changes its logits after the head is refused; `logprobs` takes micro-batches;
replies report the worker's peak resident memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import Failed, batch, call, loaded_worker, random_rows

from mage_learner import batch as B
from mage_learner.learner import score

CPU = torch.device("cpu")


def full_logits_score(model: torch.nn.Module, seqs: list[B.Sequence]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: logits of every position of the padded batch, then the scored ones."""
    p = B.pad(seqs, CPU)
    out = model(input_ids=p.ids, attention_mask=p.attention, use_cache=False)
    lsm = torch.log_softmax(out.logits[:, :-1][p.scored].float(), dim=-1)
    targets = p.ids[:, 1:][p.scored]
    return lsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(lsm.exp() * lsm).sum(-1)


def load_model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    assert isinstance(model, torch.nn.Module)
    return model


def with_lora(model: torch.nn.Module) -> torch.nn.Module:
    """LoRA on attention, MLP and the output head, its B matrices moved off zero so it matters."""
    from peft import LoraConfig, get_peft_model

    conf = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj", "lm_head"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, conf)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    assert isinstance(peft_model, torch.nn.Module)
    return peft_model


def probe_sequences() -> list[B.Sequence]:
    rows, prompt = random_rows(5, 300, 21, lo=8, hi=30)  # uneven lengths: right padding in the batch
    return B.split_sequences(batch(rows, prompt))


def loss_and_grads(model: torch.nn.Module, logp: torch.Tensor, entropy: torch.Tensor) -> dict[str, torch.Tensor]:
    weights = torch.linspace(-1, 1, logp.numel())
    loss = (logp * weights).sum() + 0.1 * entropy.sum()
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    grads = torch.autograd.grad(loss, list(params.values()))
    return dict(zip(params, grads))


def assert_same_scores(model: torch.nn.Module) -> None:
    seqs = probe_sequences()
    vocab = int(model.get_output_embeddings().weight.shape[0])  # type: ignore[operator]
    model.train()
    want_lp, want_ent = full_logits_score(model, seqs)
    want_grads = loss_and_grads(model, want_lp, want_ent)
    got_lp, got_ent = score(model, seqs, CPU, chunk_logits=7 * vocab)  # 7 positions a chunk: several chunks
    assert got_lp.dtype == torch.float32 and got_ent.dtype == torch.float32
    assert got_lp.numel() > 3 * 7
    got_grads = loss_and_grads(model, got_lp, got_ent)
    np.testing.assert_allclose(got_lp.detach().numpy(), want_lp.detach().numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(got_ent.detach().numpy(), want_ent.detach().numpy(), rtol=0, atol=1e-5)
    for name, want in want_grads.items():
        scale = float(want.abs().max())
        assert scale > 0, name
        assert float((got_grads[name] - want).abs().max()) <= 1e-5 * scale, name


def test_chunked_scores_equal_full_logits_llama(llama_dir: Path) -> None:
    assert_same_scores(load_model(llama_dir))


def test_chunked_scores_equal_full_logits_qwen3(qwen3_dir: Path) -> None:
    assert_same_scores(load_model(qwen3_dir))


def test_chunked_scores_equal_full_logits_with_lora(llama_dir: Path) -> None:
    model = with_lora(load_model(llama_dir))
    assert_same_scores(model)
    seqs = probe_sequences()
    with torch.no_grad():
        active, _ = score(model, seqs, CPU)
        with model.disable_adapter():  # type: ignore[operator]
            disabled, _ = score(model, seqs, CPU)
    assert float((active - disabled).abs().max()) > 1e-3  # the adapter (head included) was applied


def test_scoring_refuses_logits_changed_after_the_head(llama_dir: Path) -> None:
    model = load_model(llama_dir)

    def logit_scale(module: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> Any:
        out.logits = 0.25 * out.logits  # as Cohere's `logit_scale`
        return out

    model.register_forward_hook(logit_scale, with_kwargs=True)
    from mage_learner.errors import WorkerError

    with pytest.raises(WorkerError, match="transforms them after the head"), torch.no_grad():
        score(model, probe_sequences(), CPU)


def test_logprobs_micro_batches_equal_one_pass_and_report_peak_rss(llama_dir: Path) -> None:
    w = loaded_worker(llama_dir)
    rows, prompt = random_rows(7, 300, 5)
    b = batch(rows, prompt)
    h1, one = call(w, "logprobs", b)
    h2, split = call(w, "logprobs", b, microBatchTokens=20)
    assert len(B.micro_batches(B.split_sequences(b), 20)) > 2
    # Other padding blocks the float32 matmuls differently: a few ulps apart (2.4e-6 on an entropy of
    # 5.76 on an AVX2 EPYC), where a misplaced token would move a value by ~0.1.
    np.testing.assert_allclose(split["logp"], one["logp"], rtol=4e-6, atol=1e-6)
    np.testing.assert_allclose(split["entropy"], one["entropy"], rtol=4e-6, atol=1e-6)
    _, ref = call(w, "logprobs", b, model="reference", microBatchTokens=20)
    np.testing.assert_allclose(ref["logp"], one["logp"], rtol=4e-6, atol=1e-6)
    with pytest.raises(Failed) as e:
        call(w, "logprobs", b, microBatchTokens=0)
    assert e.value.error["kind"] == "protocol"
    gen, _ = call(w, "generate", {"ids": np.asarray([1, 5, 6], np.int32), "lengths": np.asarray([3], np.int32)},
                  requests=[{"maxNewTokens": 2, "temperature": 1.0, "topP": 1.0, "topK": 0, "seed": 1}])
    upd, _ = call(w, "update", {**b, "old_logp": one["logp"], "advantages": np.ones_like(one["logp"])},
                  loss={"klCoef": 0}, lr=1e-3, microBatchTokens=20)
    for h in (h1, h2, gen, upd):
        assert isinstance(h["peakRssBytes"], int) and 50 << 20 < h["peakRssBytes"] < 1 << 40


# A real vocabulary (SmolLM2's) on a small backbone, and a batch whose full logits would take
# 16 × 1024 × 49,152 float32 = 3.2 GB: scoring must stay far below that.
# Measured as growth over the resident memory after loading, which depends on torch's build: this
# run peaks at 1.05 GiB with the pinned torch (0.77 GiB of it loaded before scoring) and peaked at
# 2.0 GiB under the H100 image's torch 2.11, where an absolute 1.5 GiB bound failed. One
# micro-batch's full logits alone (4 × 1024 × 49,152 float32) would add 0.8 GB.
REAL_VOCAB = 49_152
GROWTH_BOUND = 3 << 28  # 768 MiB over the loaded worker
RSS_BOUND = 4 << 30  # the watchdog's: kill the child before it can exhaust the machine

CHILD = """
import json, sys
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(2)
from helpers import batch, call, loaded_worker
w = loaded_worker(Path(sys.argv[1]), reference=False)
from mage_learner.worker import peak_rss_bytes
loaded = peak_rss_bytes()
rng = np.random.default_rng(0)
rows = [rng.integers(3, %(vocab)d, size=1024).tolist() for _ in range(16)]
b = batch(rows, [1024 - 64] * len(rows))  # the last 64 tokens of each row scored
lp_head, lp = call(w, "logprobs", b, microBatchTokens=4096)
n = lp["logp"].size
up, _ = call(w, "update", {**b, "old_logp": lp["logp"], "advantages": rng.normal(0, 1, n)},
             loss={"klCoef": 0}, lr=1e-3, microBatchTokens=4096)
print(json.dumps({"scored": n, "loadedPeak": loaded, "logprobsPeak": lp_head["peakRssBytes"], "updatePeak": up["peakRssBytes"],
                  "finite": bool(np.isfinite(lp["logp"]).all()), "skipped": up["skipped"]}))
""" % {"vocab": REAL_VOCAB}


def build_real_vocab_model(out: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    from mage_learner.tiny import build_tokenizer

    tok = build_tokenizer(out)
    config = LlamaConfig(
        vocab_size=REAL_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=None, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(out))
    return out


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def run_watched(cmd: list[str], env: dict[str, str], log: Path, bound: int) -> tuple[int | None, str]:
    """Runs `cmd`, killing it as soon as its resident memory passes `bound` (so that a regression
    fails the test instead of exhausting the machine); its exit code (None when killed) and stdout."""
    import subprocess
    import time

    with log.open("w") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        while proc.poll() is None:
            try:
                if resident_bytes(proc.pid) > bound:
                    proc.kill()
                    proc.wait()
                    return None, ""
            except OSError:
                pass
            time.sleep(0.02)
        assert proc.stdout is not None
        return proc.returncode, proc.stdout.read()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
def test_real_vocabulary_scoring_stays_small(tmp_path: Path) -> None:
    import json
    import os
    import sys

    model = build_real_vocab_model(tmp_path / "model")
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    code, out = run_watched([sys.executable, "-c", CHILD, str(model)], env, tmp_path / "stderr.txt", RSS_BOUND)
    assert code is not None, f"the worker's resident memory passed {RSS_BOUND >> 20} MiB"
    assert code == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    print(f"real vocabulary: peak RSS {got['loadedPeak'] >> 20} MiB loaded, {got['logprobsPeak'] >> 20} MiB after logprobs, {got['updatePeak'] >> 20} MiB after update")
    assert got["scored"] == 16 * 64 and got["finite"] and not got["skipped"]
    assert got["updatePeak"] - got["loadedPeak"] < GROWTH_BOUND
