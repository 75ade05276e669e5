"""The recorded protocol session (tests/data/session-v2.json, written by
`python -m mage_learner.session record`) replayed against the worker: the same replies, floats
within 1e-5 on CPU float32; on CUDA (`--device cuda`) the same structure."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mage_learner.session import compare, replay

RECORDING = Path(__file__).parent / "data" / "session-v2.json"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(RECORDING.read_text())  # type: ignore[no-any-return]


def test_the_recording_covers_every_op(doc: dict[str, Any]) -> None:
    ops = {e["request"]["header"]["op"] for e in doc["exchanges"]}
    assert ops == {"hello", "load", "render", "generate", "logprobs", "update", "save", "restore", "save_adapter", "shutdown"}
    kinds = {e["reply"]["header"]["error"]["kind"] for e in doc["exchanges"] if not e["reply"]["header"]["ok"]}
    assert kinds == {"usage", "protocol"}


def test_replay_matches_the_recording(doc: dict[str, Any], device: str) -> None:
    diffs = replay(doc, device, in_process=True)
    assert diffs == []


def test_replay_comparison_notices_a_change(doc: dict[str, Any]) -> None:
    upd = next(e for e in doc["exchanges"] if e["request"]["header"]["op"] == "update")["reply"]["header"]
    changed = copy.deepcopy(upd)
    changed["metrics"]["kl"] += 1e-3
    assert compare(upd, upd, "u", 1e-5, False) == []
    assert compare(upd, changed, "u", 1e-5, False) != []
    changed = copy.deepcopy(upd)
    changed["skipped"] = True
    assert compare(upd, changed, "u", 1e-5, True) != []  # even the loose (CUDA) comparison
