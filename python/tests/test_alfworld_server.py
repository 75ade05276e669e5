"""The ALFWorld adapter: the same text, reward, done and won as ALFWorld's own `AlfredTWEnv` under the
expert's actions (one game of each task type) and along random walks of admissible and inadmissible
commands in ALFWorld's evaluation mode (one game; whole splits are run by `python -m
mage_envs.alfworld_crosscheck`, docs/environments.md), a restart that is the identical state and takes
well under 50 ms, invalid answers that never reach the game, config errors that name the field, and
setup errors (planner, data folder) that say what to fix at start and answer 422, never a retried 500."""

from __future__ import annotations

import io
import json
import random
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
from mage_envs import alfworld_server
from mage_envs.alfworld_crosscheck import check, plan
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
    summary = check("valid_seen", [1, 2, 3, 4, 5, 6], max_steps=50, per_type=1, out=out, walks=0, noisy=0)
    paths = [p for x in out.getvalue().splitlines() for p in json.loads(x)["paths"]]
    assert summary["kept"] == 140 and summary["checked"] == 6 and summary["equal"] == 6, summary
    assert [p["difference"] for p in paths] == [None] * 6 and summary["mismatches"] == {}
    assert summary["expertWon"] == 6  # the hand-coded expert wins each of these there, and here
    assert all(p["gameSteps"] >= 5 for p in paths)


def test_random_walks_with_inadmissible_commands_and_restarts_read_as_alfworlds_evaluation(cache: Path) -> None:
    """The wider cross-check on one game, in seconds: ALFWorld's evaluation-mode environment and the
    adapter in lockstep along a random walk of admissible and inadmissible commands to the step
    limit and an expert-led one to the win, each replayed after restarts; reward, done and won too."""
    out = io.StringIO()
    summary = check("valid_unseen", [1, 2, 3, 4, 5, 6], max_steps=12, per_type=None, out=out, only="pick_and_place",
                    sample=1, seed=3, expert=False, walks=1, noisy=1, inadmissible=0.4)
    assert summary["checked"] == 1 and summary["equal"] == 1 and summary["mismatches"] == {}, out.getvalue()
    assert summary["atStepLimit"] == {"random": 1, "noisy": 0} and summary["won"] == {"random": 0, "noisy": 1}
    assert {"typo", "wrongObject", "stale", "unknownVerb", "variant", "admissible", "advice"} <= set(summary["commands"])
    assert summary["restartMs"]["count"] == 4 and summary["steps"]["replayed"] > summary["steps"]["random"]


def test_the_wider_cross_check_reports_what_differs(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken on purpose, the adapter is caught: a reward off the reference's 10 × won at the win, and
    an inadmissible command played as `look` instead of refused (each path stops at its first)."""
    monkeypatch.setattr(alfworld_server, "REWARD_WON", 1.0)
    step = alfworld_server.AlfworldSession.step

    def lenient(self: alfworld_server.AlfworldSession, response: str) -> dict[str, object]:
        content = response.removeprefix("<action>").removesuffix("</action>")
        if " ".join(content.lower().split()) not in self.game.admissible:
            response = "<action>look</action>"
        return step(self, response)

    monkeypatch.setattr(alfworld_server.AlfworldSession, "step", lenient)
    out = io.StringIO()
    summary = check("valid_unseen", [1, 2, 3, 4, 5, 6], max_steps=12, per_type=None, out=out, only="pick_and_place",
                    sample=1, seed=3, expert=False, walks=1, noisy=0, inadmissible=0.4)
    assert summary["equal"] == 0 and summary["mismatches"] == {"refusal": 1}, summary
    assert "refusal: the adapter played" in out.getvalue()
    monkeypatch.setattr(alfworld_server.AlfworldSession, "step", step)
    summary = check("valid_unseen", [1, 2, 3, 4, 5, 6], max_steps=50, per_type=None, out=out, only="pick_and_place",
                    sample=1, seed=3, walks=0, noisy=0)  # the expert's path, to the win
    assert summary["mismatches"] == {"reward": 1}, summary
    assert "reward: 1.0 (adapter) != 10.0 (ALFWorld)" in out.getvalue()


def test_a_walk_plans_alfworlds_step_limit_to_fall_with_the_adapters() -> None:
    """The adapter's maxSteps counts game steps, ALFWorld's limit every command it is sent: a plan
    ends at its max_steps-th game step, so ALFWorld's limit is the plan's length."""
    for seed in range(20):
        kinds = plan(random.Random(seed), 30, 0.25, None)
        assert sum(k == "admissible" for k in kinds) == 30 and kinds[-1] == "admissible"
        assert set(kinds) <= {"admissible", "inadmissible"}
    led = plan(random.Random(0), 30, 0.2, 0.2)
    assert {"advice", "admissible", "inadmissible"} == set(led) and sum(k != "inadmissible" for k in led) == 30


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


def test_the_create_reply_says_how_many_games_the_config_offers(client: Client) -> None:
    all_types = _create(client, 0)
    first4 = _create(client, 0, taskTypes="1-4", split="valid_unseen")
    assert all_types["instances"] == 140 and first4["instances"] == 24 + 18 + 31 + 23


def test_a_closed_sessions_planner_library_serves_the_next_session() -> None:
    env = AlfworldEnv()
    with running([env], time_budget_ms=60_000) as c:
        first = c.ok("/create", {"env": "alfworld", "seed": 2})
        assert env.planners.loaded == 1
        c.ok("/close", {"session": first["session"]})
        assert env.planners.idle == 1
        again = c.ok("/create", {"env": "alfworld", "seed": 2})
        assert env.planners.loaded == 1 and env.planners.idle == 0, "a second copy of the library was loaded"
        assert again["fingerprint"] == first["fingerprint"] and again["observation"] == first["observation"]
        r = c.ok("/step", {"session": again["session"], "seq": 1, "action": f"<action>{again['legalActions'][0]}</action>"})
        assert r["valid"]


def _no_planner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import fast_downward.interface as fdi

    monkeypatch.setattr(fdi, "DOWNWARD_LIB_PATH", str(tmp_path / "gone" / "libdownward.so"))


def test_a_missing_planner_stops_the_start_and_answers_422_not_a_retried_500(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache: Path
) -> None:
    _no_planner(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as stopped:
        alfworld_server.main(["--port", "0"])
    text = str(stopped.value)
    assert text.startswith("mage_envs.alfworld_server: cannot start: ALFWorld needs TextWorld's PDDL planner fast-downward")
    assert "libdownward.so" in text and "node scripts/python-env.mjs" in text
    with running([AlfworldEnv()], time_budget_ms=60_000) as c:
        status, err = c.call("/create", {"env": "alfworld", "seed": 0})
    assert status == 422 and err["error"]["kind"] == "server_setup", err
    assert "fast-downward" in err["error"]["message"] and "node scripts/python-env.mjs" in err["error"]["message"]


def _unmarked_folder(root: Path) -> Path:
    """A user's folder: valid_seen's games carry no `solvable` key; valid_train's do (pick and place only)."""
    rows = data.compact_rows()
    for split, solvable in (("valid_seen", None), ("valid_train", True)):
        for r in [r for r in rows if r["path"].startswith(split + "/") and r["task_type"] == "pick_and_place_simple"][:2]:
            folder = root / "json_2.1.1" / r["path"]
            folder.mkdir(parents=True)
            (folder / "traj_data.json").write_text(json.dumps({"task_type": r["task_type"], "pddl_params": r["pddl_params"]}))
            domain, grammar = alfworld_server._wheel_logic()
            game = data.rebuild(r["problem"], r["goal"], solvable, domain, grammar)
            (folder / "game.tw-pddl").write_text(json.dumps(game))
    return root


def test_a_split_whose_games_are_not_marked_solvable_is_a_setup_error_not_the_configs(tmp_path: Path, cache: Path) -> None:
    env = AlfworldEnv(_unmarked_folder(tmp_path / "data"))
    lines = env.check_setup()  # valid_train keeps games: the server starts, and tells each split
    assert any("valid_seen" in x and "0 games kept of 2 trials" in x and '2 without a "solvable" key' in x for x in lines)
    assert any("valid_train" in x and "2 games kept of 2 trials" in x for x in lines)
    with running([env], time_budget_ms=60_000) as c:
        status, err = c.call("/create", {"env": "alfworld", "seed": 0, "config": {"split": "valid_seen"}})
        assert status == 422 and err["error"]["kind"] == "server_setup", err
        assert err["error"]["message"].startswith(f"no valid_seen game to play: valid_seen ({tmp_path / 'data' / 'json_2.1.1' / 'valid_seen'})")
        assert 'says "solvable": true' in err["error"]["message"]
        status, err = c.call("/create", {"env": "alfworld", "seed": 0, "config": {"split": "valid_train", "taskTypes": "3"}})
        assert status == 400 and err["error"]["kind"] == "bad_config" and err["error"]["field"] == "config.taskTypes"
        assert err["error"]["message"] == "no valid_train game has task types [3]; its 2 games by task type: 1 pick_and_place_simple 2"
        played = c.ok("/create", {"env": "alfworld", "seed": 1, "config": {"split": "valid_train"}})
        assert played["instances"] == 2 and played["category"] == "valid_train/pick_and_place_simple"


def test_a_folder_with_nothing_to_play_stops_the_start_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _unmarked_folder(root)
    import shutil

    shutil.rmtree(root / "json_2.1.1" / "valid_train")
    with pytest.raises(SystemExit) as stopped:
        alfworld_server.main(["--port", "0", "--data", str(root)])
    text = str(stopped.value)
    assert f"cannot start: ALFWorld data folder {root}: no split keeps a game that ALFWorld would play" in text
    assert '2 without a "solvable" key' in text
    with pytest.raises(SystemExit, match="holds no split folder; expected alfworld-download's layout"):
        alfworld_server.main(["--port", "0", "--data", str(tmp_path)])


def test_the_help_tells_the_real_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        alfworld_server.main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 60000)" in text and "(default 5000)" not in text
    assert f"(default {alfworld_server.default_max_sessions()})" in text


def test_the_default_session_cap_fits_half_the_memory() -> None:
    gib = 1 << 30
    per = alfworld_server.SESSION_BYTES
    assert alfworld_server.default_max_sessions(24 * gib) == 12 * gib // per
    assert alfworld_server.default_max_sessions(1 << 20) == 1
    assert alfworld_server.default_max_sessions(1 << 50) == 20_000
