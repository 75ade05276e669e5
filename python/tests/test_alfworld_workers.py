"""ALFWorld's sessions in worker processes (`worker_processes.py`) and sessions that pay only for what
they use: two workers serve at once (one stopped, the other still answers), a worker that dies takes
only its own sessions (410, then replaced), the same seeds give the same games, steps and advice with
one worker or two, and a session never asked for the expert builds none."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import alfworld.agents.environment  # noqa: F401
    import fast_downward  # noqa: F401
    import textworld  # noqa: F401
except ImportError as e:  # pragma: no cover - the pinned environment has them
    pytest.skip(f"ALFWorld's engine is not installed ({e}); `node scripts/python-env.mjs` installs it",
                allow_module_level=True)

from envhelp import Client

from mage_envs import alfworld_data as data
from mage_envs import alfworld_server
from mage_envs.alfworld_expert import AlfworldExpert
from mage_envs.alfworld_server import AlfworldEnv, AlfworldSession, worker_env
from mage_envs.protocol import CreateArgs, EnvService, ServiceLimits
from mage_envs.server import running_in_thread
from mage_envs.worker_processes import ProcessEnvironment, RemoteSession

PRELOAD = ["mage_envs.alfworld_server"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("alfworld-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(data.CACHE_ENV, str(folder))
        yield folder


def serve(pool: ProcessEnvironment) -> Any:
    service = EnvService([pool], "test", ServiceLimits(time_budget_ms=60_000))
    return service, running_in_thread(service)


@pytest.fixture(scope="module")
def two(cache: Path) -> Iterator[tuple[ProcessEnvironment, EnvService, Client]]:
    pool = ProcessEnvironment(AlfworldEnv(), worker_env, (None,), 2, preload=PRELOAD)
    service, server = serve(pool)
    try:
        with server as r:
            yield pool, service, Client(r.url)
    finally:
        pool.close()


def _create(c: Client, seed: int) -> dict[str, Any]:
    return c.ok("/create", {"env": "alfworld", "seed": seed, "config": {"split": "valid_seen", "maxSteps": 30}})


def _worker(service: EnvService, sid: str) -> Any:
    live = service.table.use(sid)
    assert live is not None and isinstance(live.session, RemoteSession)
    return live.session.worker


def _play(c: Client, created: dict[str, Any], n: int, expert: bool) -> list[dict[str, Any]]:
    """n steps along the first `go to`s, with the expert's advice after each when asked."""
    moves = [m for m in created["legalActions"] if m.startswith("go to ")]
    out = []
    for i in range(n):
        out.append(c.ok("/step", {"session": created["session"], "seq": i + 1, "action": f"<action>{moves[i]}</action>"}))
        if expert:
            out.append(c.ok("/expert", {"session": created["session"], "memory": []}))
    return out


def _without_id(reply: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if k != "session"}


def test_sessions_spread_over_the_workers_and_a_stopped_worker_holds_up_only_its_own(
    two: tuple[ProcessEnvironment, EnvService, Client],
) -> None:
    pool, service, c = two
    a, b = _create(c, 3), _create(c, 4)
    wa, wb = _worker(service, a["session"]), _worker(service, b["session"])
    assert wa is not wb and {wa.pid, wb.pid} == {w.pid for w in pool.workers}
    os.kill(wa.pid, signal.SIGSTOP)
    budget = service.engine.budget
    try:
        service.engine.budget = 2.0
        t0 = time.perf_counter()
        status, err = c.call("/step", {"session": a["session"], "seq": 1, "action": "<action>look</action>"})
        assert status == 503 and err["error"]["kind"] == "engine_timeout", err  # its worker is stopped
        # ... while the other worker serves its session at once: one lock no longer holds every call
        r = c.ok("/step", {"session": b["session"], "seq": 1, "action": "<action>look</action>"})
        assert r["valid"] and time.perf_counter() - t0 < 30
    finally:
        service.engine.budget = budget
        os.kill(wa.pid, signal.SIGCONT)
    r = c.ok("/step", {"session": a["session"], "seq": 1, "action": "<action>look</action>"})  # the same seq: its reply
    assert r["valid"] and r["info"]["steps"] == 1


def test_a_worker_that_dies_takes_only_its_sessions_answers_410_and_is_replaced(
    two: tuple[ProcessEnvironment, EnvService, Client],
) -> None:
    pool, service, c = two
    a, b = _create(c, 5), _create(c, 6)
    wa, wb = _worker(service, a["session"]), _worker(service, b["session"])
    assert wa is not wb
    held = len(service.table)
    replaced = pool.replaced
    os.kill(wa.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while pool.replaced == replaced and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.replaced == replaced + 1 and pool.workers[wa.slot].pid != wa.pid
    for seq in (1, 1, 2):  # every call, not only the first, says why
        status, err = c.call("/step", {"session": a["session"], "seq": seq, "action": "<action>look</action>"})
        assert status == 410 and err["error"]["kind"] == "unknown_session", err
        assert f"process {wa.pid}) was killed by SIGKILL" in err["error"]["message"]
        assert "create a new session" in err["error"]["message"]
    status, err = c.call("/expert", {"session": a["session"]})
    assert status == 410
    assert len(service.table) < held  # its place in the session cap is free
    r = c.ok("/step", {"session": b["session"], "seq": 1, "action": "<action>look</action>"})
    assert r["valid"]
    again = _create(c, 5)  # on the fresh worker (fewest sessions), the same game
    assert _worker(service, again["session"]).pid == pool.workers[wa.slot].pid
    assert again["fingerprint"] == a["fingerprint"] and again["observation"] == a["observation"]
    assert c.ok("/close", {"session": again["session"]}) == {"closed": True}


def test_the_same_seeds_play_the_same_with_one_worker_or_two(
    two: tuple[ProcessEnvironment, EnvService, Client], cache: Path,
) -> None:
    _, _, c2 = two
    one = ProcessEnvironment(AlfworldEnv(), worker_env, (None,), 1, preload=PRELOAD)
    try:
        _, server = serve(one)
        with server as r:
            c1 = Client(r.url)
            for seed in (7, 8):
                x, y = _create(c1, seed), _create(c2, seed)
                assert _without_id(x) == _without_id(y)
                assert _play(c1, x, 3, expert=seed == 8) == _play(c2, y, 3, expert=seed == 8)
    finally:
        one.close()


def test_workers_build_the_expert_only_for_a_session_that_asks_and_close_what_the_server_closes(
    two: tuple[ProcessEnvironment, EnvService, Client],
) -> None:
    pool, service, c = two
    before = {s["pid"]: s for s in pool.stats()}
    a = _create(c, 9)
    w = _worker(service, a["session"])
    _play(c, a, 2, expert=False)
    c.ok("/restart", {"session": a["session"], "seq": 3})
    after = {s["pid"]: s for s in pool.stats()}
    assert after[w.pid]["expertsBuilt"] == before.get(w.pid, {"expertsBuilt": 0})["expertsBuilt"]
    assert after[w.pid]["sessions"] == before.get(w.pid, {"sessions": 0})["sessions"] + 1
    c.ok("/expert", {"session": a["session"], "memory": []})
    c.ok("/expert", {"session": a["session"], "memory": []})
    assert {s["pid"]: s for s in pool.stats()}[w.pid]["expertsBuilt"] == after[w.pid]["expertsBuilt"] + 1
    c.ok("/close", {"session": a["session"]})
    assert {s["pid"]: s for s in pool.stats()}[w.pid]["sessions"] == after[w.pid]["sessions"] - 1
    # an adapter's own error, raised in a worker, is the same reply as in-process
    status, err = c.call("/create", {"env": "alfworld", "seed": 0, "config": {"taskTypes": "7"}})
    assert status == 400 and err["error"]["kind"] == "bad_config" and err["error"]["field"] == "config.taskTypes"


def test_an_expert_asked_late_advises_as_one_that_followed_from_the_start(cache: Path) -> None:
    env = AlfworldEnv()
    args = CreateArgs(config={"split": "valid_seen", "taskTypes": "1-4", "maxSteps": 30}, seed=13, opponent_seed=0,
                      opponent=None, seat=None)
    built = AlfworldExpert.built
    early, late = env.create(args), env.create(args)
    assert isinstance(early, AlfworldSession) and isinstance(late, AlfworldSession)
    assert "facts" not in late.game.gs  # TextWorld derives no facts for a step that no expert reads
    advice = []
    for _ in range(4):
        action = early.expert([])["action"]
        advice.append(action)
        early.step(f"<action>{action}</action>")
        late.step(f"<action>{action}</action>")
    assert AlfworldExpert.built == built + 1  # `late` has played 4 steps and built none
    assert "facts" not in late.game.gs
    assert late.expert([]) == early.expert([])  # built now, its steps replayed: the same advice and facts
    assert AlfworldExpert.built == built + 2
    assert late.state() == early.state()
    late.restart()
    early.restart()
    assert late.expert([]) == early.expert([])


def test_the_workers_flag_defaults_to_the_cores_and_raises_the_engine_threads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        alfworld_server.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    cores = len(os.sched_getaffinity(0))
    assert "--workers N worker processes" in text and f"(default {cores}: the cores this process may use)" in text
    assert f"at least {alfworld_server.THREADS_PER_WORKER} per worker" in text
