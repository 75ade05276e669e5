"""The GPU check's `paper` step: the experiment it derives from the committed config, and a dry run
on the CPU with the tiny Llama (a warm start, MAGE and GRPO one iteration each, `mage report`)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from mage_learner.gpu_check import orchestrator as O
from mage_learner.gpu_check import paper as P
from mage_learner.gpu_check.common import FULL, QUICK, Context

ROOT = Path(__file__).resolve().parents[2]


def context(tmp_path: Path, quick: bool, device: str = "cpu") -> Context:
    logs = tmp_path / "out" / "gpu-check-logs"
    logs.mkdir(parents=True)
    ctx = Context(ROOT, sys.executable, device, quick, QUICK if quick else FULL, logs, tmp_path / "work", deadline=time.perf_counter() + 600)
    ctx.model = tmp_path / "model"
    return ctx


def template() -> dict:  # type: ignore[type-arg]
    loaded: dict = yaml.safe_load((ROOT / P.PAPER_CONFIG).read_text())  # type: ignore[type-arg]
    return loaded


def test_the_full_spec_keeps_the_paper_sizes_and_boxes_each_method(tmp_path: Path) -> None:
    ctx = context(tmp_path, quick=False, device="cuda")
    spec = P.paper_spec(ctx, template(), tmp_path / "results", limit=480)
    assert spec["warmStart"]["device"] == "cuda" and spec["warmStart"]["dtype"] == "bfloat16"
    assert f"model.torch.path={ctx.model}" in spec["set"] and "model.torch.device=cuda" in spec["set"]
    assert "rollout.tasksPerIteration=16" in spec["set"]  # × groupSize 4 (MAGE): 64 trials
    boxes = [s for s in spec["set"] if s.startswith("train.maxMinutes=")]
    assert boxes == [f"train.maxMinutes={(480 - P.WARM_START_S - 2 * P.PER_METHOD_S) / 2 / 60:.2f}".rstrip("0")]
    assert spec["runsDir"].startswith(str(ctx.work)) and spec["resultsDir"] == str(tmp_path / "results")
    assert not any(s.startswith("rollout.groupSize") for s in spec["methods"][0]["set"][1:])


def test_a_short_limit_still_gives_each_method_a_floor() -> None:
    assert P.minutes_per_method(10, 2) == 0.25


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")
def test_the_quick_dry_run_writes_summaries_and_a_report(tmp_path: Path) -> None:
    from transformers.utils import logging as hf_logging

    from mage_learner.tiny import build_model

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    ctx = context(tmp_path, quick=True)
    ctx.model = build_model(tmp_path / "tiny", "llama")
    ctx.work.mkdir()
    r = O.paper_step(ctx, 600)
    assert r.status == "ok", (r.reason, r.tail)
    runs = {d["run"]: d for d in r.details["runs"]}
    assert set(runs) == {"mage-s0", "grpo-s0"}
    assert all(d["iterations"] == 1 and set(d["cfr"]) == {"cfr/second", "cfr/first"} for d in runs.values())
    out = tmp_path / "out" / "paper"
    assert (out / "results.md").read_text().startswith("# mage results")
    summary = json.loads((out / "experiments" / "kuhn-gpu-paper" / "mage-s0.json").read_text())
    assert summary["config"]["train"]["maxMinutes"] > 0
