"""The HTTP server every adapter shares (mage_envs/server.py), driven through a test adapter whose
engine stalls on demand (sleepy_adapter.py): the time budget, a stalled engine beside a responsive
/info, the bounded engine threads, the session cap, keys, the body limit and SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from envhelp import Client, running
from sleepy_adapter import SleepyEnv

from mage_envs.protocol import EnvError, EnvService, ServiceLimits
from mage_envs.server import MAX_BODY_BYTES, argument_parser, running_in_thread

PYTHON_DIR = Path(__file__).resolve().parents[1]


@contextmanager
def adapter_process(*args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """sleepy_adapter.py in its own process (its own GIL, as a user runs an adapter)."""
    proc = subprocess.Popen(
        [sys.executable, str(PYTHON_DIR / "tests" / "sleepy_adapter.py"), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(PYTHON_DIR), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on http://" in line, line + (proc.stderr.read() if proc.stderr else "")
        yield proc, line.split("listening on ")[1].split()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def timed(client: Client, path: str, body: dict[str, Any] | None = None) -> tuple[float, int, dict[str, Any]]:
    t0 = time.perf_counter()
    status, reply = client.call(path, body)
    return (time.perf_counter() - t0) * 1000, status, reply


def raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict[str, Any]]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())
    finally:
        conn.close()


def test_a_stalled_step_answers_503_in_budget_while_info_answers_at_once() -> None:
    with adapter_process("--time-budget-ms", "300", "--engine-threads", "2") as (_, url):
        c = Client(url)
        sid = c.ok("/create", {"env": "sleepy", "seed": 1, "config": {"stepSleepMs": 3000}})["session"]
        result: dict[str, Any] = {}

        def stalled_step() -> None:
            result["ms"], result["status"], result["reply"] = timed(
                c, "/step", {"session": sid, "seq": 1, "action": "<action>count</action>"}
            )

        t = threading.Thread(target=stalled_step)
        t0 = time.perf_counter()
        t.start()
        probes: list[float] = []
        while time.perf_counter() - t0 < 2.5:  # the engine sleeps 3 s
            ms, status, _ = timed(c, "/info")
            assert status == 200
            probes.append(ms)
            time.sleep(0.01)
        t.join()
        print(f"\n/info during a 3 s stalled step: {len(probes)} probes, median {statistics.median(probes):.1f} ms, "
              f"max {max(probes):.1f} ms; the step answered {result['status']} after {result['ms']:.0f} ms")
        assert result["status"] == 503 and result["reply"]["error"]["kind"] == "engine_timeout"
        assert result["ms"] < 2500, "answered at the budget, not when the engine returned"
        # A loop held by the engine would hold a probe for the whole 3 s sleep; a free one answers
        # in milliseconds (the figure above; a loaded machine stretches single probes).
        assert statistics.median(probes) < 100 and max(probes) < 1000, probes
        # Another session is served while the first one's engine call still runs.
        other = c.ok("/create", {"env": "sleepy", "seed": 2})["session"]
        assert c.ok("/step", {"session": other, "seq": 1, "action": "x"})["observation"] == "count 1"
        # Out of order while seq 1 is still being applied; the retry of seq 1 waits for its reply.
        status, err = c.call("/step", {"session": sid, "seq": 2, "action": "x"})
        assert status == 409 and err["error"]["kind"] == "out_of_order"
        deadline = time.perf_counter() + 10
        while True:
            status, reply = c.call("/step", {"session": sid, "seq": 1, "action": "x"})
            if status == 200 or time.perf_counter() > deadline:
                break
            assert status == 503
        assert status == 200 and reply["observation"] == "count 1", "applied once"
        assert c.ok("/step", {"session": sid, "seq": 1, "action": "x"})["observation"] == "count 1"


def test_a_call_queued_past_the_budget_is_dropped_without_being_applied() -> None:
    with running([SleepyEnv()], time_budget_ms=300, engine_threads=1) as c:
        slow = c.ok("/create", {"env": "sleepy", "seed": 1, "config": {"stepSleepMs": 1200}})["session"]
        fast = c.ok("/create", {"env": "sleepy", "seed": 2})["session"]
        done: list[int] = []
        t = threading.Thread(target=lambda: done.append(c.call("/step", {"session": slow, "seq": 1, "action": "x"})[0]))
        t.start()
        time.sleep(0.1)  # the slow step holds the only engine thread
        status, err = c.call("/step", {"session": fast, "seq": 1, "action": "x"})
        assert status == 503 and "nothing was applied" in err["error"]["message"], err
        t.join()
        time.sleep(1.3)
        # seq 1 was not used up: it applies now, once.
        assert c.ok("/step", {"session": fast, "seq": 1, "action": "x"})["observation"] == "count 1"


def test_the_session_cap_answers_503_with_retry_after_and_expired_sessions_free_places() -> None:
    service = EnvService([SleepyEnv()], "test", ServiceLimits(max_sessions=3, ttl_seconds=1, time_budget_ms=200))
    with running_in_thread(service) as r:
        c = Client(r.url)
        replies = [raw(r.url, "POST", "/create", json.dumps({"env": "sleepy", "seed": i}).encode()) for i in range(5)]
        assert [s for s, _, _ in replies] == [200, 200, 200, 503, 503]
        _, headers, body = replies[3]
        assert body["error"]["kind"] == "too_many_sessions" and int(headers["retry-after"]) >= 1
        time.sleep(1.2)
        # A create over its budget keeps its place until its engine call returns.
        status, err = c.call("/create", {"env": "sleepy", "seed": 9, "config": {"createSleepMs": 600}})
        assert status == 503 and err["error"]["kind"] == "engine_timeout"
        assert len(service.table) == 0
        for i in range(2):
            c.ok("/create", {"env": "sleepy", "seed": i})
        status, _ = c.call("/create", {"env": "sleepy", "seed": 3})
        assert status == 503, "the late create still holds the third place"
        time.sleep(0.6)
        c.ok("/create", {"env": "sleepy", "seed": 3})
        assert len(service.table) == 3, "the late session was dropped, its place freed"


def test_with_a_key_every_endpoint_but_health_answers_401() -> None:
    service = EnvService([SleepyEnv()], "test")
    with running_in_thread(service, api_key="k-123") as r:
        assert raw(r.url, "GET", "/health")[0] == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "k-123"}):
            for method, path in (("GET", "/info"), ("POST", "/create"), ("POST", "/step"), ("POST", "/nowhere")):
                status, h, body = raw(r.url, method, path, b"{}", headers)
                assert status == 401 and body["error"]["kind"] == "unauthorized", (method, path, headers)
                assert h["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer k-123"}
        assert raw(r.url, "GET", "/info", None, good)[0] == 200
        assert raw(r.url, "POST", "/create", b'{"env": "sleepy", "seed": 1}', good)[0] == 200


def test_an_oversize_body_answers_413_declared_or_chunked() -> None:
    service = EnvService([SleepyEnv()], "test")
    with running_in_thread(service) as r:
        big = b"x" * (MAX_BODY_BYTES + 1)
        status, _, body = raw(r.url, "POST", "/create", big, {"Content-Type": "application/json"})
        assert status == 413 and "over 1048576 bytes" in body["error"]["message"]
        host, port = r.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/create", body=iter([b"x" * 65536] * 20), encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 413
        conn.close()
        assert raw(r.url, "GET", "/info")[0] == 200


def test_a_body_nested_100000_deep_answers_400_not_500() -> None:
    service = EnvService([SleepyEnv()], "test")
    with running_in_thread(service) as r:
        n = 100_000
        bodies = [
            b"[" * n + b"]" * n,
            b'{"env": "sleepy", "seed": 1, "config": ' + b'{"a": ' * n + b"1" + b"}" * n + b"}",
            b'{"env": "sleepy", "seed": 1, "x": ' + b"[" * n,  # unclosed as well
        ]
        for body in bodies:
            status, _, reply = raw(r.url, "POST", "/create", body, {"Content-Type": "application/json"})
            assert status == 400 and reply["error"]["kind"] == "bad_request", reply
            assert "nests arrays and objects more than 64 deep" in reply["error"]["message"]
        # Brackets inside strings are not nesting; a deep body under the limit is still judged as usual.
        shallow = json.dumps({"env": "sleepy", "seed": 1, "x": "[" * n}).encode()
        assert raw(r.url, "POST", "/create", shallow)[0] == 200
        status, _, reply = raw(r.url, "POST", "/create", b'{"env": "sleepy", "seed": 1, "config": ' + b"[" * 60 + b"]" * 60 + b"}")
        assert status == 400 and reply["error"]["kind"] == "bad_request" and "config must be an object" in reply["error"]["message"]


def test_a_dropped_session_is_closed_once_and_only_after_its_engine_call() -> None:
    env = SleepyEnv()
    service = EnvService([env], "test", ServiceLimits(ttl_seconds=1, time_budget_ms=5000))
    with running_in_thread(service) as r:
        c = Client(r.url)
        sid = c.ok("/create", {"env": "sleepy", "seed": 1})["session"]
        c.ok("/close", {"session": sid})
        assert env.closed == [1]
        # Closed while a step runs: the close waits for the step.
        slow = c.ok("/create", {"env": "sleepy", "seed": 2, "config": {"stepSleepMs": 800}})["session"]
        stepped: dict[str, Any] = {}
        t = threading.Thread(target=lambda: stepped.update(r=c.call("/step", {"session": slow, "seq": 1, "action": "x"})))
        t.start()
        time.sleep(0.3)
        c.ok("/close", {"session": slow})
        assert env.closed == [1], "closed while its step still ran"
        t.join()
        assert stepped["r"][0] == 200
        time.sleep(0.05)
        assert env.closed == [1, 2]
        # Expired: closed when the table drops it.
        idle = c.ok("/create", {"env": "sleepy", "seed": 3})["session"]
        time.sleep(1.2)
        status, reply = c.call("/step", {"session": idle, "seq": 1, "action": "x"})
        assert status == 404 and reply["error"]["kind"] == "unknown_session"
        assert env.closed == [1, 2, 3]
        # A create whose reply came too late: the session it built is closed when it returns.
        fast = EnvService([env], "test", ServiceLimits(time_budget_ms=200))
    with running_in_thread(fast) as r2:
        status, _ = Client(r2.url).call("/create", {"env": "sleepy", "seed": 4, "config": {"createSleepMs": 500}})
        assert status == 503
        time.sleep(0.6)
        assert env.closed == [1, 2, 3, 4]


def test_the_help_tells_the_defaults_an_adapter_sets() -> None:
    ap = argument_parser("x", "x", default_port=0)
    ap.set_defaults(time_budget_ms=60_000, max_sessions=777)
    text = ap.format_help()
    assert "(default 60000)" in " ".join(text.split()) and "(default 777)" in " ".join(text.split())
    assert "(default 5000)" not in " ".join(text.split())


def test_a_missing_java_runtime_is_a_setup_error_not_a_retried_500(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from mage_envs import jvm

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(EnvError) as e:
        jvm.Jvm("engine.jar", ".").jvm
    assert e.value.kind == "server_setup" and e.value.status == 422
    assert "no `java` on the PATH" in e.value.message


@pytest.mark.parametrize("adapter", ["alfworld_server", "scienceworld_server"])
def test_the_adapters_that_wait_longer_say_so_in_their_help(adapter: str) -> None:
    out = subprocess.run([sys.executable, "-m", f"mage_envs.{adapter}", "--help"], cwd=PYTHON_DIR,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if out.returncode != 0 and "ModuleNotFoundError" in out.stderr:
        pytest.skip(f"{adapter}'s engine is not installed")
    text = " ".join(out.stdout.split())
    assert out.returncode == 0 and "engine_timeout (default 60000)" in text, out.stdout + out.stderr


def test_sigterm_lets_a_short_request_finish_and_cuts_a_stalled_one_at_the_grace() -> None:
    with adapter_process("--time-budget-ms", "60000") as (proc, url):
        c = Client(url)
        short = c.ok("/create", {"env": "sleepy", "seed": 1, "config": {"stepSleepMs": 800}})["session"]
        stalled = c.ok("/create", {"env": "sleepy", "seed": 2, "config": {"stepSleepMs": 30000}})["session"]
        replies: dict[str, tuple[int, dict[str, Any]]] = {}
        threads = [
            threading.Thread(target=lambda s=s: replies.__setitem__(s, c.call("/step", {"session": s, "seq": 1, "action": "x"})))
            for s in (short, stalled)
        ]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        exit_s = time.perf_counter() - t0
        for t in threads:
            t.join()
        assert proc.stderr is not None
        err = proc.stderr.read()
        print(f"\nSIGTERM during a 30 s stalled step: exit {code} after {exit_s:.2f} s")
        assert code == 0, err
        assert exit_s < 6, "the grace (2 s) bounds the exit"
        assert "SIGTERM, shutting down" in err
        assert replies[short][0] == 200 and replies[short][1]["observation"] == "count 1"
        assert replies[stalled][0] == 503 and replies[stalled][1]["error"]["kind"] == "shutting_down"


def test_warns_when_listening_beyond_loopback_without_a_key_and_refuses_an_unset_key_variable() -> None:
    with adapter_process("--host", "0.0.0.0") as (proc, _):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None and "WARNING listening on 0.0.0.0 without --api-key-env" in proc.stderr.read()
    r = subprocess.run(
        [sys.executable, str(PYTHON_DIR / "tests" / "sleepy_adapter.py"), "--api-key-env", "MAGE_TEST_UNSET_KEY"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(PYTHON_DIR)}, timeout=60,
    )
    assert r.returncode != 0 and "MAGE_TEST_UNSET_KEY is not set or empty" in r.stderr


def test_replies_go_out_without_waiting_for_an_ack() -> None:
    # Nagle's algorithm held every keep-alive reply for a delayed ACK (about 40 ms a request):
    # asyncio turns it off only on sockets whose proto says TCP.
    service = EnvService([SleepyEnv()], "test")
    with running_in_thread(service) as r:
        host, port = r.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/info")
        conn.getresponse().read()
        sockets = [c.transport.get_extra_info("socket") for c in r.server.server_state.connections]
        assert sockets and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets)
        conn.close()
