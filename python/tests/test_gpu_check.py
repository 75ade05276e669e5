"""The GPU check's pieces on CPU with the tiny Llama: its scored Kuhn turns, the log-prob and LoRA
steps at quick sizes, and the bookkeeping (pytest's report, iteration times, pins, paths)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from mage_learner import gpu_check as G
from mage_learner.model import load_tokenizer


def step_args(model: Path, tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(model=str(model), device="cpu", quick=True, root=str(tmp_path))


def context(tmp_path: Path, quick: bool = True) -> G.Context:
    return G.Context(tmp_path, "python3", "cpu", quick, G.QUICK, tmp_path / "logs", tmp_path / "work", deadline=0.0)


def test_kuhn_sequences_score_the_assistant_answers_only(llama_dir: Path) -> None:
    tok = load_tokenizer(llama_dir)
    seqs = G.kuhn_sequences(tok)
    assert len(seqs) == len(G.KUHN_HANDS)
    offset = 0
    for s, (_, answer) in zip(seqs, G.KUHN_HANDS, strict=True):
        assert s.mask[0] == 0 and s.scored > 0 and s.token_offset == offset
        scored = tok.decode(s.ids[s.mask.astype(bool)].tolist())
        assert scored.startswith(answer)
        offset += s.scored


def test_logprob_step_on_cpu_agrees_with_itself(llama_dir: Path, tmp_path: Path) -> None:
    out = G.step_logprobs(step_args(llama_dir, tmp_path))
    assert out["status"] == "ok" and out["details"]["max_abs_delta"] == 0.0
    assert np.isfinite(out["details"]["mean_logp"]) and out["details"]["tokens"] > 0


def test_lora_step_targets_every_linear_layer_and_measures(llama_dir: Path, tmp_path: Path) -> None:
    out = G.step_lora(step_args(llama_dir, tmp_path))
    d = out["details"]
    assert out["status"] == "ok"
    assert d["lora"]["targetModules"] == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    assert [g["sequences"] for g in d["generate"]] == list(G.QUICK.generate_batches)
    assert all(g["tokens_per_s"] > 0 for g in d["generate"])
    assert d["update"]["loss_finite"] and d["update"]["skipped"] is False
    assert 0 < d["trainable_parameters"] < d["parameters"]


def test_iteration_seconds_from_cumulative_wall_time() -> None:
    assert G.iteration_seconds([{"wall_s": 3.0}, {"wall_s": 5.5}, {"other": 1}, {"wall_s": 9.0}]) == [3.0, 2.5, 3.5]
    assert G.iteration_seconds([]) == []


def test_junit_counts(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite tests="7" failures="1" errors="0" skipped="2"/></testsuites>')
    assert G.junit_counts(xml) == {"passed": 4, "failed": 1, "errors": 0, "skipped": 2}
    assert G.junit_counts(tmp_path / "missing.xml") is None


def test_pin_mismatches(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("# pins\ntorch==2.15.0\npeft==0.21.2  # adapters\n")
    assert G.pin_mismatches(req, {"torch": "2.15.0", "peft": "0.20.0", "transformers": "5.0"}) == ["peft 0.20.0 installed, 0.21.2 pinned"]


def test_pytest_command_leaves_out_what_cannot_run(tmp_path: Path) -> None:
    env = {"optional_packages": {"pyspiel": False, "textarena": True, "wandb": False}, "pin_mismatches": ["torch 2.9 installed, 2.15.0 pinned"]}
    cmd, notes = G.pytest_command(context(tmp_path, quick=False), env)
    tests = tmp_path / "python" / "tests"
    ignored = {cmd[i + 1] for i, c in enumerate(cmd) if c == "--ignore"}
    # The pin check imports wandb at collection: with other versions (or no wandb) it must not be collected at all.
    assert ignored == {str(tests / f) for f in ("test_environment.py", "test_openspiel_server.py", "test_wandb_sidecar.py")}
    assert len(notes) == 3
    cmd, notes = G.pytest_command(context(tmp_path, quick=False), {"optional_packages": {"pyspiel": True, "textarena": True, "wandb": True}})
    assert cmd[cmd.index("-k") + 1] == "not openspiel and not textarena" and "--ignore" not in cmd and notes == []


def test_summary_json_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OUT", raising=False)
    assert G.json_path_of(G.parse_args([])) == tmp_path / "gpu-check.json"
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert G.json_path_of(G.parse_args([])) == tmp_path / "out" / "gpu-check.json"
    assert G.json_path_of(G.parse_args(["--out", "x.json"])) == tmp_path / "x.json"


def test_a_missing_model_skips_the_model_steps(tmp_path: Path) -> None:
    ctx = context(tmp_path, quick=False)
    G.resolve_model(ctx, str(tmp_path / "no-such-model"))
    assert ctx.model is None
    for name in ("logprobs", "lora"):
        r = G.model_step(ctx, name, 60)
        assert r.status == "skipped" and r.reason is not None and "absent" in r.reason
    assert G.run_train(ctx, 60).status == "skipped"
