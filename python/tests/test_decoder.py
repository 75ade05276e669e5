"""The lean decoder (decoder.py, lean.py, runners.py): logits equal to the Hugging Face forward's
for ragged rows, multi-turn appends and padding; live LoRA weights; draws with sampling.py's
conventions from a counter-based generator; batch-independent samples; and a step that
torch.compile captures as one graph (the CPU's proxy for "no host sync inside the step")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import call, loaded_worker

from mage_learner.decoder import Decoder, Draw, KVCache, draw, step, uniforms, unsupported_reason
from mage_learner.lean import generate_lean
from mage_learner.prefix_cache import PrefixStore
from mage_learner.runners import EagerRunner
from mage_learner.sampling import SamplingParams, sample_row

TOL = 1e-5


def load(path: Path, lora: bool = False) -> Any:
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    if lora:
        from peft import LoraConfig, get_peft_model

        conf = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
        model = get_peft_model(model, conf)
        torch.manual_seed(1)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.5)
    return model.eval()


def hf_last_logits(model: Any, row: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([row])).logits[0, -1].float()  # type: ignore[no-any-return]


def greedy_draw(b: int) -> Draw:
    z = torch.zeros(b, dtype=torch.int64)
    return Draw(torch.zeros(b, dtype=torch.float64), z, torch.ones(b, dtype=torch.float64), z, z, z)


def feed(dec: Decoder, cache: KVCache, rows: list[list[int]], starts: list[int], slots: list[int]) -> torch.Tensor:
    """Feeds rows[i][starts[i]:] into cache slot slots[i] (right-padded to the scratch slot);
    returns each row's last-token logits."""
    width = max(len(r) - s for r, s in zip(rows, starts))
    b = len(rows)
    ids = torch.zeros((b, width), dtype=torch.int64)
    pos = torch.zeros((b, width), dtype=torch.int64)
    write = torch.full((b, width), cache.length - 1, dtype=torch.int64)
    last = torch.zeros(b, dtype=torch.int64)
    for i, (r, s) in enumerate(zip(rows, starts)):
        n = len(r) - s
        ids[i, :n] = torch.tensor(r[s:])
        pos[i, :n] = torch.arange(s, len(r))
        write[i, :n] = pos[i, :n]
        last[i] = n - 1
    with torch.no_grad():
        return dec.logits(cache, ids, pos, write, torch.tensor(slots), last)


ROWS = [[5, 9, 13, 40, 41, 42, 77, 80, 81], [7, 8], [100, 3, 4, 5, 6, 200]]


@pytest.mark.parametrize("arch,lora", [("llama", False), ("llama", True), ("qwen3", False), ("qwen3", True)])
def test_logits_equal_hf_for_ragged_rows_appends_and_padding(llama_dir: Path, qwen3_dir: Path, arch: str, lora: bool) -> None:
    model = load(llama_dir if arch == "llama" else qwen3_dir, lora)
    dec = Decoder(model)
    cache = dec.new_cache(4, 64)  # slot 3 stays padding throughout
    got = feed(dec, cache, ROWS, [0, 0, 0], [0, 1, 2])
    for i, r in enumerate(ROWS):
        torch.testing.assert_close(got[i], hf_last_logits(model, r), rtol=0, atol=TOL)
    # Three more turns: each appends tokens of different counts to each row.
    rows = [list(r) for r in ROWS]
    for turn, extra in enumerate(([11, 12, 13], [14], [15, 16])):
        starts = [len(r) for r in rows]
        rows = [r + extra[: 1 + (i + turn) % len(extra)] for i, r in enumerate(rows)]
        got = feed(dec, cache, rows, starts, [0, 1, 2])
        for i, r in enumerate(rows):
            torch.testing.assert_close(got[i], hf_last_logits(model, r), rtol=0, atol=TOL)
    # A padding row's garbage (token 0 at position 0 into the scratch slot) changes no real row.
    with_pad = feed(dec, cache, [*rows, [0]], [len(r) - 1 for r in rows] + [0], [0, 1, 2, 3])
    torch.testing.assert_close(with_pad[:3], got, rtol=0, atol=TOL)


def test_in_place_lora_update_shows_in_the_next_step(llama_dir: Path) -> None:
    model = load(llama_dir, lora=True)
    dec = Decoder(model)
    cache = dec.new_cache(1, 32)
    before = feed(dec, cache, [ROWS[0]], [0], [0])[0]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.25)  # in place, as AdamW's step
    # The same decoder and cache, fed again (keys cached before an update belong to the old weights).
    after = feed(dec, cache, [ROWS[0] + [3]], [0], [0])[0]
    assert not torch.allclose(after, hf_last_logits(load(llama_dir, lora=True), ROWS[0] + [3]), atol=1e-3)
    torch.testing.assert_close(after, hf_last_logits(model, ROWS[0] + [3]), rtol=0, atol=TOL)
    assert not torch.allclose(before, hf_last_logits(model, ROWS[0]), atol=1e-3)


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    reason = unsupported_reason(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16)))
    assert reason is not None and "gpt2" in reason


# ----- drawing -------------------------------------------------------------------------------------


def test_uniforms_depend_on_seed_and_counter_and_look_uniform() -> None:
    n = 20000
    counter = torch.arange(n, dtype=torch.int64)
    lo = torch.full((n,), 12345, dtype=torch.int64)
    u = uniforms(lo, torch.zeros(n, dtype=torch.int64), counter)
    assert float(u.min()) >= 0 and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.01
    hist = torch.histc(u.float(), bins=10, min=0, max=1)
    assert float(hist.min()) > 0.9 * n / 10 and float(hist.max()) < 1.1 * n / 10
    other = uniforms(lo + 1, torch.zeros(n, dtype=torch.int64), counter)
    assert float((u == other).double().mean()) < 0.001
    hi = uniforms(lo, torch.ones(n, dtype=torch.int64), counter)
    assert float((u == hi).double().mean()) < 0.001
    again = uniforms(lo, torch.zeros(n, dtype=torch.int64), counter)
    assert torch.equal(u, again)


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 5, 1.0), (0.8, 0, 0.9), (1.3, 7, 0.5), (0.0, 0, 1.0), (1.0, 0, 0.05)],
)
def test_draw_follows_sample_row_for_the_same_uniform(temperature: float, top_k: int, top_p: float) -> None:
    gen = torch.Generator().manual_seed(3)
    b, vocab = 64, 97
    logits = torch.randn((b, vocab), generator=gen) * 3
    logits[:, 10] = logits[:, 11]  # a tie: the lower id ranks first
    d = Draw(
        torch.full((b,), temperature, dtype=torch.float64),
        torch.full((b,), top_k, dtype=torch.int64),
        torch.full((b,), top_p, dtype=torch.float64),
        torch.arange(b, dtype=torch.int64) * 7919,
        torch.zeros(b, dtype=torch.int64),
        torch.arange(b, dtype=torch.int64),
    )
    truncate = top_k > 0 or top_p < 1
    tok, lp, finite = draw(logits, d, truncate)
    u = uniforms(d.seed_lo, d.seed_hi, d.counter).tolist()
    p = SamplingParams(1, temperature, top_p, top_k, 0)
    for i in range(b):
        want_tok, want_lp = sample_row(logits[i].numpy(), p, u[i])
        assert int(tok[i]) == want_tok
        assert float(lp[i]) == pytest.approx(want_lp, abs=1e-9)
    assert bool(finite.all())
    if not truncate:  # a row that does not truncate draws the same in a batch that takes the sorted path
        assert torch.equal(draw(logits, d, True)[0], tok)


def test_non_finite_logits_are_flagged() -> None:
    logits = torch.randn((2, 11))
    logits[1] = float("nan")
    _, _, finite = draw(logits, greedy_draw(2), False)
    assert finite.tolist() == [True, False]


# ----- generation ----------------------------------------------------------------------------------


def req(seed: int, n: int = 12, **kw: Any) -> SamplingParams:
    return SamplingParams(n, kw.get("temperature", 1.0), kw.get("top_p", 1.0), kw.get("top_k", 0), seed)


P1 = [1, 85, 91, 268, 272]
P2 = [1, 40, 41, 42, 43, 44, 45, 46, 47, 48]
P3 = [7, 8]


def test_a_seeded_request_samples_the_same_alone_and_batched(llama_dir: Path) -> None:
    model = load(llama_dir, lora=True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(llama_dir))
    runner = EagerRunner(Decoder(model))
    alone = generate_lean(runner, tok, [], [P1], [req(5)])[0]
    batched = generate_lean(runner, tok, [], [P2, P1, P3], [req(9, n=4), req(5), req(11, n=20, top_k=5)])[1]
    assert batched.tokens == alone.tokens and len(alone.tokens) == 12
    np.testing.assert_allclose(batched.logprobs, alone.logprobs, rtol=0, atol=1e-5)
    assert generate_lean(runner, tok, [], [P1], [req(6)])[0].tokens != alone.tokens
    trunc = req(5, top_k=5, top_p=0.9, temperature=0.7)
    assert generate_lean(runner, tok, [], [P1], [trunc])[0].tokens == generate_lean(runner, tok, [], [P3, P1], [req(1), trunc])[1].tokens


def test_long_prompts_prefill_in_windows(llama_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mage_learner.lean as lean

    model = load(llama_dir)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(llama_dir))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 300, size=n).tolist() for n in (70, 33, 5)]
    params = [req(s, n=6) for s in (1, 2, 3)]
    whole = generate_lean(EagerRunner(Decoder(model)), tok, [], prompts, params)
    monkeypatch.setattr(lean, "WINDOW", 16)
    monkeypatch.setattr(lean, "PREFILL_TOKENS", 32)
    windowed = generate_lean(EagerRunner(Decoder(model)), tok, [], prompts, params)
    for a, b in zip(whole, windowed):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5)


def test_prefix_store_is_reused_and_gives_the_same_samples(llama_dir: Path) -> None:
    model = load(llama_dir)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(llama_dir))
    runner = EagerRunner(Decoder(model))
    store = PrefixStore(1 << 24)
    first = generate_lean(runner, tok, [], [P2], [req(1, n=8)], store)[0]
    turn2 = P2 + first.tokens + [60, 61, 62]
    cold = generate_lean(runner, tok, [], [turn2], [req(2, n=8)])[0]
    warm = generate_lean(runner, tok, [], [turn2], [req(2, n=8)], store)[0]
    assert store.reused_tokens >= len(P2) + len(first.tokens) - 1
    assert warm.tokens == cold.tokens
    np.testing.assert_allclose(warm.logprobs, cold.logprobs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("decoder", ["lean", "hf"])
def test_worker_logprobs_equal_teacher_forced(llama_dir: Path, decoder: str) -> None:
    w = loaded_worker(llama_dir, decoder=decoder)
    rows = [P1, P2]
    ids = np.asarray([t for r in rows for t in r], np.int32)
    h, a = call(w, "generate", {"ids": ids, "lengths": np.asarray([len(r) for r in rows], np.int32)},
                requests=[{"maxNewTokens": 10, "temperature": 1.0, "seed": s} for s in (3, 4)])
    assert h["decoder"] == decoder
    n = a["token_lengths"].tolist()
    toks = [a["tokens"][: n[0]].tolist(), a["tokens"][n[0] :].tolist()]
    full = [r + t for r, t in zip(rows, toks)]
    mask = np.concatenate([np.r_[np.zeros(len(r), np.uint8), np.ones(len(t), np.uint8)] for r, t in zip(rows, toks)])
    _, lp = call(w, "logprobs", {"ids": np.asarray([t for r in full for t in r], np.int32),
                                 "lengths": np.asarray([len(r) for r in full], np.int32), "loss_mask": mask})
    np.testing.assert_allclose(a["logprobs"], lp["logp"], rtol=0, atol=1e-5)


def test_step_compiles_as_one_graph(llama_dir: Path) -> None:
    model = load(llama_dir, lora=True)
    dec = Decoder(model)
    cache = dec.new_cache(2, 32)
    feed(dec, cache, ROWS[:2], [0, 0], [0, 1])
    ids = torch.tensor([[3], [4]])
    pos = torch.tensor([[len(ROWS[0])], [len(ROWS[1])]])
    rows, last = torch.arange(2), torch.zeros(2, dtype=torch.int64)
    d = Draw(torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.int64), torch.ones(2, dtype=torch.float64),
             torch.tensor([1, 2]), torch.zeros(2, dtype=torch.int64), torch.tensor([0, 5]))
    with torch.no_grad():
        eager = step(dec, cache, ids, pos, pos, rows, last, d, False)
        torch._dynamo.reset()
        def one_step(c: KVCache, i: torch.Tensor, p: torch.Tensor, r: torch.Tensor, la: torch.Tensor, dr: Draw) -> Any:
            return step(dec, c, i, p, p, r, la, dr, False)

        compiled = torch.compile(one_step, fullgraph=True, dynamic=False)
        got = compiled(cache, ids, pos, rows, last, d)
    assert torch.equal(got[0], eager[0])
    torch.testing.assert_close(got[1], eager[1], rtol=0, atol=1e-5)


def test_bucketed_runner_compacts_and_samples_as_the_exact_one(llama_dir: Path) -> None:
    """GraphRunner's buckets without capture (how a GPU batches): 5 rows in a bucket of 8 that
    halves as rows finish at different lengths, sampling what exact batches sample."""
    from transformers import AutoTokenizer

    from mage_learner.runners import GraphRunner

    model = load(llama_dir, lora=True)
    tok = AutoTokenizer.from_pretrained(str(llama_dir))
    prompts = [P1, P2, P3, P1 + P3, P2 + P1]
    params = [req(s, n=n) for s, n in zip((1, 2, 3, 4, 5), (3, 20, 7, 12, 1))]
    runner = GraphRunner(Decoder(model), min_length=16, capture=False)
    bucketed = generate_lean(runner, tok, [], prompts, params)
    exact = generate_lean(EagerRunner(Decoder(model)), tok, [], prompts, params)
    # 5 rows → 8 slots; 4 live after the first draw (a 1-token row) → 4; then 2; then 1
    assert sorted(runner.caches) == [(1, 32), (2, 32), (4, 32), (8, 32)]
    for a, b in zip(bucketed, exact):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5)


def test_auto_keeps_the_hf_sampler_on_the_cpu_and_an_unknown_decoder_names_the_field(llama_dir: Path, tmp_path: Path) -> None:
    from helpers import Failed

    w = loaded_worker(llama_dir, decoder="auto")
    h, _ = call(w, "generate", {"ids": np.asarray(P1, np.int32), "lengths": np.asarray([len(P1)], np.int32)},
                requests=[{"maxNewTokens": 2, "seed": 1}])
    assert h["decoder"] == "hf"
    with pytest.raises(Failed) as bad:
        loaded_worker(llama_dir, decoder="fast")
    assert bad.value.error["field"] == "model.torch.decoder"
