"""The worker threads that run an adapter's blocking engine calls (building a session, a step with
the opponent's replies, a restart) off the server's event loop, at most `threads` at once, each
request waiting at most the time budget. Python cannot stop a thread: a call that overruns keeps
running and its result is kept for whoever waits next (see `EnvService.sequenced`); a call still
queued when its budget runs out is dropped before it starts."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass
class Call(Generic[R]):
    """One engine call: the thread pool's future and the event loop's view of it."""

    work: concurrent.futures.Future[R]
    result: asyncio.Future[R]

    @property
    def done(self) -> bool:
        return self.result.done()


class CallTimeout(Exception):
    """The budget ran out; `started` says whether the call is running (it then finishes later) or
    was dropped from the queue (nothing was done)."""

    def __init__(self, started: bool):
        super().__init__("started" if started else "queued")
        self.started = started


class CallAbandoned(Exception):
    """The server is stopping and its grace is over."""


class EnginePool:
    def __init__(self, threads: int, budget_seconds: float):
        if threads < 1:
            raise ValueError(f"engine threads must be a positive integer, got {threads}")
        if not budget_seconds > 0:
            raise ValueError(f"the time budget must be > 0, got {budget_seconds}")
        self.threads = threads
        self.budget = budget_seconds
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="engine")
        self._running = 0
        self._lock = threading.Lock()
        self._abandon: asyncio.Future[None] | None = None

    @property
    def running(self) -> int:
        """Engine calls running now (not queued)."""
        return self._running

    def submit(self, fn: Callable[[], R]) -> Call[R]:
        def counted() -> R:
            with self._lock:
                self._running += 1
            try:
                return fn()
            finally:
                with self._lock:
                    self._running -= 1

        work = self._executor.submit(counted)
        result = asyncio.wrap_future(work)
        # A result nobody waits for any more (a request that timed out, then its session closed)
        # is retrieved here so that asyncio does not report it as never retrieved.
        result.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        return Call(work, result)

    async def wait(self, call: Call[R]) -> R:
        """The call's result (or its exception) within the budget; CallTimeout or CallAbandoned otherwise."""
        if self._abandon is None:
            self._abandon = asyncio.get_running_loop().create_future()
        if not call.done:
            await asyncio.wait((call.result, self._abandon), timeout=self.budget, return_when=asyncio.FIRST_COMPLETED)
        if call.done:
            return call.result.result()
        if self._abandon.done():
            raise CallAbandoned()
        if call.work.cancel():
            raise CallTimeout(started=False)
        raise CallTimeout(started=True)

    def abandon(self) -> None:
        """Every request still waiting on an engine call stops waiting (the server's grace is over)."""
        if self._abandon is None:
            self._abandon = asyncio.get_running_loop().create_future()
        if not self._abandon.done():
            self._abandon.set_result(None)

    def shutdown(self) -> None:
        """Drops the queued calls; running ones go on in their threads (Python cannot stop them)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
