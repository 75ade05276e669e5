"""An environment's sessions spread over worker processes, each with its own engine.

An engine that is not thread-safe (TextWorld: its parsers share state) can serve one call at a time
per process, however many threads the server has: ALFWorld's adapter held one lock over every
create, step, restart and expert call of every session. `ProcessEnvironment` is the `Environment`
a server sees instead: each `create` goes to the worker process with the fewest live sessions,
which builds the session with its own engine (`factory(*args)`, called once in the worker); the
session stays there (the server's `RemoteSession` holds its worker and its number there) and each of
its calls is one message there and one back over the worker's pipe. A worker serves one call at a
time, in order; workers run at once, up to one core each. The server's engine threads only wait on
the pipes (`--engine-threads`: at least a few per worker, so that calls queued for a busy worker do
not hold every thread).

A worker that dies (killed, out of memory, a crash in native code) takes only its own sessions:
their calls answer 410 `unknown_session` naming the worker and how it ended, and the server drops
them (`Session.gone`); a call in flight on it gets the same answer (a `/create` in flight: 500, so
that the client retries it). The worker is replaced by a fresh one at once, and the other workers'
sessions go on. Workers are forked from a server process that has already imported `preload`
(multiprocessing's forkserver), so a replacement starts in a fraction of a second.

Closing a session does not wait for its worker (the server closes sessions on its event loop): the
close is sent with the worker's next call, or at once when the worker is idle.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from .protocol import CreateArgs, EnvError, Environment, Json, Session

# How long a new worker may take to import and build its engine before the pool gives up on it.
START_SECONDS = 120.0


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------------------------------------
# the worker process


def _closed_quietly(session: Session) -> None:
    try:
        session.close()
    except Exception:  # noqa: BLE001 - a failing close must not stop the worker
        pass


def _answer(env: Environment, sessions: dict[int, Session], counter: list[int], op: str, lid: int, payload: Any) -> Any:
    if op == "create":
        built = env.create(payload)
        counter[0] += 1
        sessions[counter[0]] = built
        return counter[0], {"prompt": built.prompt(), "state": built.state(), "instances": built.instances,
                            "done": built.done}
    if op == "stats":
        stats: Callable[[], Json] | None = getattr(env, "stats", None)
        return {"pid": os.getpid(), "sessions": len(sessions), **(stats() if stats else {})}
    session = sessions.get(lid)
    if session is None:
        raise EnvError("internal", f"worker {os.getpid()} holds no session {lid}")
    if op == "step":
        return session.step(payload), session.done
    if op == "restart":
        session.restart()
        return session.state(), session.done
    if op == "state":
        return session.state(), session.done
    if op == "expert":
        return session.expert(payload)
    raise EnvError("internal", f"unknown worker call {op}")


def _serve(conn: multiprocessing.connection.Connection, factory: Callable[..., Environment], args: tuple[Any, ...],
           environ: dict[str, str]) -> None:
    """A worker's loop: builds its environment, then answers one message at a time until the pipe closes."""
    # A terminal's Ctrl-C reaches the whole process group: the server stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The server's environment variables as they are now (the fork server kept those of its start).
    os.environ.clear()
    os.environ.update(environ)
    try:
        env = factory(*args)
    except BaseException as e:  # noqa: BLE001 - reported to the server, which stops
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", os.getpid()))
    sessions: dict[int, Session] = {}
    counter = [0]
    while True:
        try:
            closes, op, lid, payload = conn.recv()
        except (EOFError, OSError):
            return  # the server is gone
        for c in closes:
            gone = sessions.pop(c, None)
            if gone is not None:
                _closed_quietly(gone)
        if op is None:
            conn.send(("ok", None))
            continue
        try:
            reply: tuple[str, Any] = ("ok", _answer(env, sessions, counter, op, lid, payload))
        except EnvError as e:
            reply = ("env_error", (e.kind, e.message, e.choices, e.field, e.retry_after, e.status))
        except Exception as e:  # noqa: BLE001 - an adapter bug: a 500 in the server, as in-process
            reply = ("error", f"{type(e).__name__}: {e}")
        conn.send(reply)


# ------------------------------------------------------------------------------------------------
# the server's side


class WorkerLost(Exception):
    """The worker died before answering (the message says how)."""


@dataclass
class Worker:
    """One worker process and the pipe to it; calls take turns on `lock` (one in flight)."""

    slot: int
    process: BaseProcess
    conn: multiprocessing.connection.Connection
    pid: int
    started: float
    sessions: int = 0
    dead: str | None = None
    # Whether the pool has counted this worker's sessions lost.
    counted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    _closes: list[int] = field(default_factory=list)
    _closes_lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, op: str | None, lid: int = 0, payload: Any = None) -> Any:
        with self.lock:
            if self.dead is not None:
                raise WorkerLost(self.dead)
            result = self._roundtrip(op, lid, payload)
            try:
                while self._closes:  # closes that came in meanwhile
                    self._roundtrip(None, 0, None)
            except WorkerLost:
                pass  # this call's reply came: it is answered; the next call finds the worker dead
        status, value = result
        if status == "ok":
            return value
        if status == "env_error":
            kind, message, choices, fld, retry_after, code = value
            raise EnvError(kind, message, choices=choices, field=fld, retry_after=retry_after, status=code)
        raise RuntimeError(str(value))

    def _roundtrip(self, op: str | None, lid: int, payload: Any) -> tuple[str, Any]:
        with self._closes_lock:
            closes, self._closes = self._closes, []
        try:
            self.conn.send((closes, op, lid, payload))
            reply: tuple[str, Any] = self.conn.recv()
            return reply
        except (EOFError, OSError) as e:
            raise WorkerLost(self.ended(e)) from None

    def close_session(self, lid: int) -> None:
        """Closes a session without waiting for a call in flight (see the module's doc)."""
        with self._closes_lock:
            self._closes.append(lid)
        if self.dead is None and self.lock.acquire(blocking=False):
            try:
                while self._closes and self.dead is None:
                    self._roundtrip(None, 0, None)
            except WorkerLost:
                pass
            finally:
                self.lock.release()

    def ended(self, cause: BaseException | None = None) -> str:
        """Marks the worker dead; how it ended, in words."""
        if self.dead is None:
            self.process.join(timeout=1.0)
            code = self.process.exitcode
            if code is None:
                how = f"stopped answering ({type(cause).__name__ if cause else 'its process ended'})"
                self.process.kill()
            elif code < 0:
                how = f"was killed by {signal.Signals(-code).name}"
            else:
                how = f"exited with status {code}"
            self.dead = f"its engine worker (process {self.pid}) {how}"
        return self.dead


class RemoteSession(Session):
    """A session that lives in a worker process (the server's view of it)."""

    def __init__(self, pool: ProcessEnvironment, worker: Worker, lid: int, created: Json):
        self.pool = pool
        self.worker = worker
        self.lid = lid
        self._prompt: Json = created["prompt"]
        self._state: Json | None = created["state"]
        self._done: bool = created["done"]
        self.instances = created["instances"]
        self._closed = False

    @property
    def gone(self) -> str | None:
        return None if self.worker.dead is None else lost_message(self.worker.dead)

    def _call(self, op: str, payload: Any = None) -> Any:
        try:
            return self.worker.call(op, self.lid, payload)
        except WorkerLost as e:
            raise EnvError("unknown_session", lost_message(str(e)), status=410) from None

    def prompt(self) -> Json:
        return self._prompt

    def state(self) -> Json:
        if self._state is None:
            self._state, self._done = self._call("state")
        return self._state

    def step(self, response: str) -> Json:
        reply, self._done = self._call("step", response)
        self._state = None
        result: Json = reply
        return result

    def restart(self) -> None:
        self._state, self._done = self._call("restart")

    @property
    def done(self) -> bool:
        return self._done

    def expert(self, memory: list[str]) -> Json:
        result: Json = self._call("expert", memory)
        return result

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self.pool.lock:
                self.worker.sessions -= 1
            self.worker.close_session(self.lid)


def lost_message(why: str) -> str:
    return (f"the session is lost: {why}; the server replaced the worker and the other sessions go on: "
            "create a new session")


class ProcessEnvironment(Environment):
    """`env`'s sessions in `workers` worker processes, each building its engine as `factory(*args)`
    (both picklable: a module's function and plain values); `env` itself only describes."""

    def __init__(self, env: Environment, factory: Callable[..., Environment], args: tuple[Any, ...], workers: int,
                 preload: list[str] | None = None):
        if workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers}")
        self.name = env.name
        self._env = env
        self._description = env.describe()
        self._factory = factory
        self._args = args
        self._context = multiprocessing.get_context("forkserver")
        if preload:
            self._context.set_forkserver_preload(preload)
        self.lock = threading.Lock()
        self._closing = False
        #: Sessions lost with their workers so far (the server drops them from its table when this grows).
        self.lost = 0
        #: Workers replaced so far.
        self.replaced = 0
        self.workers: list[Worker] = []
        try:
            for slot in range(workers):
                self.workers.append(self._start(slot))
        except BaseException:
            self.close()
            raise
        self._monitor = threading.Thread(target=self._watch, name="engine-workers", daemon=True)
        self._monitor.start()

    def describe(self) -> Json:
        return self._description

    def opponent_ok(self, spec: str) -> bool:
        return self._env.opponent_ok(spec)

    def _start(self, slot: int) -> Worker:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(theirs, self._factory, self._args, dict(os.environ)),
                                        daemon=True, name=f"{self.name}-worker-{slot}")
        process.start()
        theirs.close()
        if not ours.poll(START_SECONDS):
            process.kill()
            raise RuntimeError(f"{self.name} worker {slot} did not start within {START_SECONDS:g} s")
        try:
            status, value = ours.recv()
        except EOFError:
            process.join(timeout=1.0)
            raise RuntimeError(f"{self.name} worker {slot} ended while starting (exit status {process.exitcode})") from None
        if status != "ready":
            process.join(timeout=1.0)
            raise RuntimeError(f"{self.name} worker {slot} could not build its environment: {value}")
        return Worker(slot, process, ours, int(value), time.monotonic())

    def _pick(self) -> Worker:
        with self.lock:
            live = [w for w in self.workers if w.dead is None]
            if not live:
                raise EnvError("engine_timeout", "every engine worker is being replaced; retry", retry_after=1)
            worker = min(live, key=lambda w: (w.sessions, w.slot))
            worker.sessions += 1
            return worker

    def create(self, args: CreateArgs) -> Session:
        worker = self._pick()
        try:
            lid, created = worker.call("create", 0, args)
        except WorkerLost as e:
            raise EnvError("internal", f"{e} while building the session; it was replaced: retry the /create") from None
        except BaseException:
            with self.lock:
                worker.sessions -= 1
            raise
        return RemoteSession(self, worker, lid, created)

    def stats(self) -> list[Json]:
        """Each live worker's own figures (`"stats"` call: its pid, sessions, and the environment's `stats()`)."""
        out: list[Json] = []
        for w in list(self.workers):
            try:
                out.append(w.call("stats"))
            except WorkerLost:
                continue
        return out

    def _watch(self) -> None:
        """Replaces each worker whose process ends (its sessions are lost with it)."""
        while not self._closing:
            current = list(self.workers)
            ready = multiprocessing.connection.wait([w.process.sentinel for w in current], timeout=0.5)
            for w in current:
                if w.process.sentinel in ready and not self._closing:
                    self.replace(w)

    def replace(self, worker: Worker) -> None:
        """Marks a dead worker so, counts its sessions lost, and starts another in its slot."""
        with self.lock:
            if self.workers[worker.slot] is not worker:
                return
            worker.ended()
            if not worker.counted:
                worker.counted = True
                self.lost += worker.sessions
        try:
            fresh = self._start(worker.slot)
        except RuntimeError:
            time.sleep(1.0)  # the monitor tries again at its next turn
            return
        with self.lock:
            self.workers[worker.slot] = fresh
            self.replaced += 1
        worker.conn.close()

    def close(self) -> None:
        """Stops the workers (their sessions end with them)."""
        self._closing = True
        for w in self.workers:
            w.dead = w.dead or "the server stopped"
            try:
                w.conn.close()
            except OSError:
                pass
        for w in self.workers:
            w.process.join(timeout=2.0)
            if w.process.exitcode is None:
                w.process.kill()
