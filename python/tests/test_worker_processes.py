"""`worker_processes.ProcessEnvironment` on the sleepy test adapter (no game engine): calls on
sessions of two workers run at once, a close sent while the worker is busy reaches it after the
call, a worker that cannot build its environment stops the start with why."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from envhelp import Client
from sleepy_adapter import SleepyEnv

from mage_envs.protocol import CreateArgs, EnvService, Environment, ServiceLimits
from mage_envs.server import running_in_thread
from mage_envs.worker_processes import ProcessEnvironment, RemoteSession


def broken_env() -> Environment:
    raise OSError("no engine here")


class ProbeEnv(SleepyEnv):
    def stats(self) -> dict[str, str | None]:
        return {"probe": os.environ.get("MAGE_TEST_WORKER_ENV")}


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessEnvironment]:
    p = ProcessEnvironment(SleepyEnv(), SleepyEnv, (), 2)
    try:
        yield p
    finally:
        p.close()


def _args(seed: int, step_ms: int) -> CreateArgs:
    return CreateArgs(config={"stepSleepMs": step_ms, "createSleepMs": 0}, seed=seed, opponent_seed=0, opponent=None,
                      seat=None)


def test_two_workers_step_at_once(pool: ProcessEnvironment) -> None:
    a, b = pool.create(_args(1, 1000)), pool.create(_args(2, 1000))
    assert isinstance(a, RemoteSession) and isinstance(b, RemoteSession) and a.worker is not b.worker
    t0 = time.perf_counter()
    threads = [threading.Thread(target=s.step, args=("<action>count</action>",)) for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.perf_counter() - t0 < 1.9  # two 1 s steps at once, not one after the other
    assert a.state()["observation"] == "count 1" and b.state()["observation"] == "count 1"
    a.close()
    b.close()


def test_a_close_sent_while_the_worker_is_busy_reaches_it_after_the_call(pool: ProcessEnvironment) -> None:
    busy = pool.create(_args(3, 1500))
    extra = [pool.create(_args(4 + i, 0)) for i in range(3)]  # spread: at least one beside `busy`
    assert isinstance(busy, RemoteSession) and all(isinstance(s, RemoteSession) for s in extra)
    other = next(s for s in extra if isinstance(s, RemoteSession) and s.worker is busy.worker)
    held = next(s["sessions"] for s in pool.stats() if s["pid"] == busy.worker.pid)
    stepping = threading.Thread(target=busy.step, args=("<action>count</action>",))
    stepping.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    other.close()  # the worker is busy: this does not wait for it
    assert time.perf_counter() - t0 < 0.2
    stepping.join()
    assert next(s["sessions"] for s in pool.stats() if s["pid"] == busy.worker.pid) == held - 1
    for s in [busy, *extra]:
        s.close()


def test_the_server_answers_through_the_workers(pool: ProcessEnvironment) -> None:
    service = EnvService([pool], "test", ServiceLimits(time_budget_ms=5000))
    with running_in_thread(service) as r:
        c = Client(r.url)
        created = c.ok("/create", {"env": "sleepy", "seed": 7})
        assert created["observation"] == "count 0" and created["legalActions"] == ["count"]
        first = c.ok("/step", {"session": created["session"], "seq": 1, "action": "<action>count</action>"})
        assert c.ok("/step", {"session": created["session"], "seq": 1, "action": "x"}) == first  # the stored reply
        assert c.ok("/expert", {"session": created["session"], "memory": ["m"]})["facts"] == ["step 1 counted.", "remembered: m"]
        assert c.ok("/restart", {"session": created["session"], "seq": 2})["observation"] == "count 0"
        status, err = c.call("/create", {"env": "sleepy", "seed": 7, "config": {"stepSleepMs": -1}})
        assert status == 400 and err["error"]["field"] == "config.stepSleepMs"
        assert c.ok("/close", {"session": created["session"]}) == {"closed": True}


def test_a_worker_that_cannot_build_its_environment_stops_the_start() -> None:
    with pytest.raises(RuntimeError, match="could not build its environment: OSError: no engine here"):
        ProcessEnvironment(SleepyEnv(), broken_env, (), 1)


def test_a_worker_sees_the_servers_environment_as_it_is_when_the_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGE_TEST_WORKER_ENV", "first")
    p = ProcessEnvironment(SleepyEnv(), ProbeEnv, (), 1)
    try:
        assert p.stats()[0]["probe"] == "first"
    finally:
        p.close()
    monkeypatch.setenv("MAGE_TEST_WORKER_ENV", "second")  # the fork server, already running, kept "first"
    p = ProcessEnvironment(SleepyEnv(), ProbeEnv, (), 1)
    try:
        assert p.stats()[0]["probe"] == "second"
    finally:
        p.close()
