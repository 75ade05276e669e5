"""The W&B sidecar, fed over a pipe as `mage train` feeds it, with W&B offline (no network): the
run directory it leaves holds every value at its step, the config, the group, the final table and
the summary; a resumed run logs each step once; a W&B failure is one error and the pipe is drained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mage_logging.wandb_records import offline_runs
from mage_logging.wandb_sidecar import Marks, parse_line, read_marks, state_path, take_lock

PYTHON_ROOT = Path(__file__).resolve().parents[1]


def sidecar_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE")}
    env.update(
        PYTHONPATH=str(PYTHON_ROOT),
        HOME=str(home),
        WANDB_CONFIG_DIR=str(home / "config"),
        WANDB_CACHE_DIR=str(home / "cache"),
        WANDB_DATA_DIR=str(home / "data"),
        WANDB_BASE_URL="http://127.0.0.1:9",
        WANDB_INIT_TIMEOUT="10",
        WANDB_SILENT="true",
    )
    return env


def feed(messages: list[dict[str, Any]], home: Path, tail: str = "") -> list[dict[str, Any]]:
    """Runs the sidecar on these lines (plus `tail`, e.g. a torn line) and returns its events."""
    text = "".join(json.dumps(m) + "\n" for m in messages) + tail
    done = subprocess.run(
        [sys.executable, "-m", "mage_logging.wandb_sidecar"],
        input=text,
        capture_output=True,
        text=True,
        env=sidecar_env(home),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def init(run_dir: Path, resume: bool = False, mode: str = "offline") -> dict[str, Any]:
    return {
        "op": "init",
        "project": "mage-test",
        "entity": None,
        "name": "kuhn-s0",
        "group": "kuhn-grid",
        "mode": mode,
        "dir": str(run_dir),
        "resume": resume,
        "config": {"name": "kuhn", "optim": {"lr": 0.0003, "klCoef": 1.0}, "eval": {"cells": [{"opponent": "cfr"}]}},
    }


def train_values(step: int) -> dict[str, float]:
    return {"train/loss": 0.1 * step - 1 / 3, "train/success@2": step / 7, "train/final_score/cfr:10": -step * 1e-9}


def eval_values(step: int) -> dict[str, float]:
    return {"eval/cfr-second/final": -0.5 + step / 11, "eval/cfr-second/success@1": step / 13}


def logs(kind: str, steps: range) -> list[dict[str, Any]]:
    make = train_values if kind == "train" else eval_values
    return [{"op": "log", "kind": kind, "step": s, "values": make(s)} for s in steps]


def triples(runs: list[dict[str, Any]]) -> list[tuple[str, int, float]]:
    out = []
    for run in runs:
        for row in run["history"]:
            out += [(k, row["_step"], v) for k, v in row.items() if not k.startswith(("_", "final_eval/"))]
    return sorted(out)


def expected(train_steps: range, eval_steps: range) -> list[tuple[str, int, float]]:
    out = [(k, s, v) for s in train_steps for k, v in train_values(s).items()]
    out += [(k, s, v) for s in eval_steps for k, v in eval_values(s).items()]
    return sorted(out)


def test_offline_run_holds_every_value_config_group_table_and_summary(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    table = {"key": "final_eval", "columns": ["opponent", "seat", "final"], "rows": [["cfr", "second", -0.25]]}
    summary = {"eval/cfr-second/final": -0.25, "iterations_done": 4}
    messages = [init(run_dir), *logs("eval", range(0, 1)), *logs("train", range(0, 4))]
    messages += [*logs("eval", range(4, 5)), {"op": "final", "table": table, "summary": summary}, {"op": "finish"}]
    events = feed(messages, tmp_path / "home")

    assert [e["event"] for e in events] == ["started"]
    runs = offline_runs(run_dir / "wandb")
    assert len(runs) == 1
    run = runs[0]
    assert events[0]["dir"] == str(Path(run["file"]).parent)
    assert (run["run"]["project"], run["run"]["name"], run["run"]["group"]) == ("mage-test", "kuhn-s0", "kuhn-grid")
    marks = read_marks(state_path(str(run_dir)))
    assert marks is not None and marks.final_logged
    assert run["run"]["id"] == events[0]["id"] == marks.run_id
    assert {k: v for k, v in run["config"].items() if k != "_wandb"} == init(run_dir)["config"]
    assert triples(runs) == sorted(expected(range(0, 4), range(0, 1)) + expected(range(0, 0), range(4, 5)))
    assert [row["_step"] for row in run["history"]] == [0, 1, 2, 3, 4]
    assert run["tables"]["final_eval"] == {"columns": table["columns"], "data": table["rows"]}
    assert run["summary"]["iterations_done"] == 4
    assert run["summary"]["eval/cfr-second/final"] == -0.25


def test_a_resumed_run_logs_each_step_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    home = tmp_path / "home"
    # The first trainer logged steps 0-4 and was killed (end of input, a torn last line, no finish).
    first = [init(run_dir), *logs("eval", range(0, 1)), *logs("train", range(0, 2)), *logs("eval", range(2, 3))]
    first += logs("train", range(2, 5))
    feed(first, home, tail='{"op": "log", "kind": "train", "st')
    marks = read_marks(state_path(str(run_dir)))
    assert marks is not None and marks.last_step == {"eval": 2, "train": 4}
    # Its checkpoint was at 2: the resumed trainer replays 0-1 and the evaluation at 2, then runs 2-7.
    second = [init(run_dir, resume=True), *logs("eval", range(0, 1)), *logs("train", range(0, 2))]
    second += [*logs("eval", range(2, 3)), *logs("train", range(2, 4)), *logs("eval", range(4, 5))]
    second += [*logs("train", range(4, 8)), {"op": "finish"}]
    feed(second, home)

    runs = offline_runs(run_dir / "wandb")
    assert len(runs) == 2
    assert runs[0]["run"]["id"] == runs[1]["run"]["id"]
    assert triples(runs) == sorted(expected(range(0, 8), range(0, 1)) + expected(range(0, 0), range(2, 5, 2)))
    assert [row["_step"] for row in runs[0]["history"]] == [0, 1, 2, 3, 4]
    assert [row["_step"] for row in runs[1]["history"]] == [4, 5, 6, 7]


def test_a_fresh_start_is_a_new_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    feed([init(run_dir), *logs("train", range(0, 2)), {"op": "finish"}], tmp_path / "home")
    feed([init(run_dir, resume=False), *logs("train", range(0, 2)), {"op": "finish"}], tmp_path / "home")
    runs = offline_runs(run_dir / "wandb")
    assert len(runs) == 2 and runs[0]["run"]["id"] != runs[1]["run"]["id"]
    assert [[row["_step"] for row in r["history"]] for r in runs] == [[0, 1], [0, 1]]


def test_a_wandb_failure_is_one_error_and_the_input_is_drained(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # Online without an API key (and no server reachable): W&B refuses at init.
    events = feed([init(run_dir, mode="online"), *logs("train", range(0, 200)), {"op": "finish"}], tmp_path / "home")
    assert len(events) == 1
    assert events[0]["event"] == "error"
    assert "API key" in events[0]["message"]


def test_lines_and_marks() -> None:
    assert parse_line('{"op": "finish"}\n') == {"op": "finish"}
    assert parse_line('{"op": "log", "kind": "tr') is None
    assert parse_line("[1, 2]") is None
    marks = Marks(run_id="abc", last_step={"train": 3})
    assert marks.seen("train", 3) and not marks.seen("train", 4) and not marks.seen("eval", 0)


def test_a_second_sidecar_waits_for_the_first(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = sidecar_env(tmp_path / "home")
    first = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from mage_logging.wandb_sidecar import take_lock; "
         "take_lock(sys.argv[1]); print('locked', flush=True); time.sleep(1.5)", str(run_dir)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    assert first.stdout is not None and first.stdout.readline().strip() == "locked"
    started = time.monotonic()
    os.close(take_lock(str(run_dir)))
    waited = time.monotonic() - started
    first.wait(timeout=30)
    assert waited > 0.5, "the lock was taken while the first holder was alive"
