"""The ALFWorld adapter: the same text as ALFWorld's own `AlfredTWEnv` under the expert's actions (one
game of each task type here; the whole valid_seen split is run by `python -m
mage_envs.alfworld_crosscheck`, docs/environments.md), a restart that is the identical state and takes
well under 50 ms, invalid answers that never reach the game, and config errors that name the field."""

from __future__ import annotations

import io
import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import alfworld.agents.environment  # noqa: F401
    import fast_downward  # noqa: F401
    import textworld  # noqa: F401
except ImportError as e:  # pragma: no cover - the pinned environment has them
    pytest.skip(f"ALFWorld's engine is not installed ({e}); `node scripts/python-env.mjs` installs it",
                allow_module_level=True)

from envhelp import Client, running

from mage_envs import alfworld_data as data
from mage_envs.alfworld_crosscheck import check
from mage_envs.alfworld_server import AlfworldEnv


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("alfworld-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(data.CACHE_ENV, str(folder))
        yield folder


@pytest.fixture(scope="module")
def client(cache: Path) -> Iterator[Client]:
    with running([AlfworldEnv()], time_budget_ms=60_000) as c:  # the adapter's own default: creates queue on one lock
        yield c


def test_one_game_of_each_task_type_reads_as_alfworlds_own_environment(cache: Path) -> None:
    out = io.StringIO()
    summary = check("valid_seen", [1, 2, 3, 4, 5, 6], max_steps=50, per_type=1, out=out)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert summary["kept"] == 140 and summary["checked"] == 6, summary
    assert [x["difference"] for x in lines] == [None] * 6
    assert summary["expertWon"] == 6  # the hand-coded expert wins each of these there, and here
    assert all(x["steps"] >= 5 for x in lines)


def _create(client: Client, seed: int, **config: object) -> dict[str, object]:
    return client.ok("/create", {"env": "alfworld", "seed": seed, "config": config})


def test_a_session_plays_restarts_identically_and_quickly(client: Client) -> None:
    created = _create(client, 3, split="valid_unseen", taskTypes="1-4", maxSteps=30)
    sid = created["session"]
    legal = created["legalActions"]
    assert isinstance(legal, list) and "help" not in legal and "look" in legal
    assert "Your task is to:" in str(created["observation"])
    assert created["category"] in [f"valid_unseen/{data.TASK_TYPES[t]}" for t in (1, 2, 3, 4)]
    assert created["prompt"]["history"]["turns"] == 15  # type: ignore[index]
    assert "Your task is to:" in created["prompt"]["rules"]  # type: ignore[index]
    moves = [c for c in legal if c.startswith("go to")][:3]
    seq = 0
    first = []
    for m in moves:
        seq += 1
        first.append(client.ok("/step", {"session": sid, "seq": seq, "action": f"I will look there. <action>{m}</action>"}))
    assert all(r["valid"] and r["action"] == m for r, m in zip(first, moves))
    assert first[0]["observation"].startswith("You arrive at")
    times = []
    for _ in range(5):
        seq += 1
        t0 = time.perf_counter()
        restarted = client.ok("/restart", {"session": sid, "seq": seq})
        times.append(time.perf_counter() - t0)
        for key in ("fingerprint", "observation", "legalActions", "done"):
            assert restarted[key] == created[key], key
    assert statistics.median(times) < 0.05, times  # the target, over HTTP
    again = []
    for m in moves:
        seq += 1
        again.append(client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{m}</action>"}))
    assert again == first


def test_invalid_answers_spend_the_turn_without_reaching_the_game(client: Client) -> None:
    created = _create(client, 0)
    sid = created["session"]
    for seq, answer in enumerate(["<action>fly to the moon</action>", "go to bed 1", "<action>go to bed 99</action>"], 1):
        r = client.ok("/step", {"session": sid, "seq": seq, "action": answer})
        assert not r["valid"] and r["reward"] == 0 and not r["done"], r
        assert r["observation"] == created["observation"] and r["legalActions"] == created["legalActions"]
    r = client.ok("/step", {"session": sid, "seq": 4, "action": "<action>  GO TO   Bed 1 </action>"})
    assert r["valid"] and r["action"] == "go to bed 1"
    # `help` is admissible in ALFWorld and played (the reference sends it), only not listed
    r = client.ok("/step", {"session": sid, "seq": 5, "action": "<action>help</action>"})
    assert r["valid"] and "Available commands" in r["observation"] and "help" not in r["legalActions"]


def test_the_step_limit_ends_the_attempt_unfinished(client: Client) -> None:
    created = _create(client, 0, maxSteps=2)
    sid = created["session"]
    r1 = client.ok("/step", {"session": sid, "seq": 1, "action": "<action>look</action>"})
    r2 = client.ok("/step", {"session": sid, "seq": 2, "action": "<action>look</action>"})
    assert not r1["done"] and r2["done"] and not r2["won"] and r2["legalActions"] == []
    assert created["category"] == f"valid_seen/{r2['info']['taskType']}" and r2["info"]["split"] == "valid_seen"
    status, err = client.call("/step", {"session": sid, "seq": 3, "action": "<action>look</action>"})
    assert status == 409 and err["error"]["kind"] == "game_over"


def test_the_seed_picks_a_game_of_the_selected_types(client: Client) -> None:
    kept = data.games("valid_seen", [5, 6], None)
    a = _create(client, 1, taskTypes="5,6")
    b = _create(client, 1 + len(kept), taskTypes="5,6")
    assert a["fingerprint"] == b["fingerprint"]
    assert a["category"] == f"valid_seen/{kept[1].task_type}"


@pytest.mark.parametrize(
    ("config", "field", "fragment"),
    [
        ({"taskTypes": "7"}, "config.taskTypes", "task type 1-6"),
        ({"split": "train"}, "config.split", "valid_seen"),
        ({"maxSteps": 0}, "config.maxSteps", "[1, 200]"),
        ({"level": 3}, "config.level", "valid fields"),
    ],
)
def test_bad_config_names_the_field(client: Client, config: dict[str, object], field: str, fragment: str) -> None:
    status, err = client.call("/create", {"env": "alfworld", "seed": 0, "config": config})
    assert status == 400 and err["error"]["kind"] == "bad_config", err
    assert err["error"]["field"] == field and fragment in err["error"]["message"]


def test_concurrent_sessions_are_served(client: Client) -> None:
    """TextWorld is not thread-safe; the server's threads take turns on it."""
    replies: list[tuple[int, dict[str, object]]] = []

    def create(seed: int) -> None:
        replies.append(client.call("/create", {"env": "alfworld", "seed": seed, "config": {"split": "valid_train"}}))

    threads = [threading.Thread(target=create, args=(s % 2,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [status for status, _ in replies] == [200] * 4, replies
    assert len({str(r["fingerprint"]) for _, r in replies}) == 2
