"""The live sessions of a protocol server: at most `max_sessions` at once, each dropped once idle
for `ttl_seconds`. Kept in order of last use (a used session moves to the end), so the expired ones
are always at the front: a sweep, and the wait until a place frees, cost nothing per live session.
Event-loop only (no locks): every call comes from the server's one asyncio thread."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Touched(Protocol):
    touched: float

    @property
    def busy(self) -> bool:
        """Whether an engine call on it still runs (such a session does not expire)."""


T = TypeVar("T", bound=Touched)


class SessionTable(Generic[T]):
    def __init__(self, max_sessions: int, ttl_seconds: float, now: Callable[[], float] = time.monotonic,
                 on_drop: Callable[[T], None] | None = None):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be a positive integer, got {max_sessions}")
        if not ttl_seconds > 0:
            raise ValueError(f"the session TTL must be > 0 s, got {ttl_seconds}")
        self.max_sessions = max_sessions
        self.ttl = ttl_seconds
        self._now = now
        # Told of every session the table lets go (deleted, expired, cleared).
        self._on_drop = on_drop or (lambda s: None)
        self._map: OrderedDict[str, T] = OrderedDict()
        # Places promised to creates still being built (they count against the cap).
        self._reserved = 0

    def __len__(self) -> int:
        return len(self._map)

    def items(self) -> list[tuple[str, T]]:
        """The live sessions, least recently used first (a copy: the caller may delete while going)."""
        return list(self._map.items())

    def use(self, sid: str) -> T | None:
        """The session, marked as used now; None when unknown or expired."""
        s = self._map.get(sid)
        if s is None:
            return None
        if not s.busy and self._now() - s.touched > self.ttl:
            del self._map[sid]
            self._on_drop(s)
            return None
        s.touched = self._now()
        self._map.move_to_end(sid)
        return s

    def reserve(self) -> bool:
        """Promises a place to a create about to be built; False when every place is taken (after
        dropping the expired sessions). The caller then `add`s the session or `release`s the place."""
        self.sweep()
        if len(self._map) + self._reserved >= self.max_sessions:
            return False
        self._reserved += 1
        return True

    def release(self) -> None:
        self._reserved = max(0, self._reserved - 1)

    def add(self, sid: str, s: T) -> None:
        self.release()
        s.touched = self._now()
        self._map[sid] = s

    def delete(self, sid: str) -> bool:
        s = self._map.pop(sid, None)
        if s is None:
            return False
        self._on_drop(s)
        return True

    def sweep(self) -> int:
        """Drops the sessions idle longer than the TTL (not one whose engine call still runs)."""
        limit = self._now() - self.ttl
        expired: list[str] = []
        for sid, s in self._map.items():
            if s.touched >= limit:
                break
            expired.append(sid)
        for sid in expired:
            s = self._map[sid]
            if s.busy:
                s.touched = self._now()
                self._map.move_to_end(sid)
            else:
                del self._map[sid]
                self._on_drop(s)
        return len(expired)

    def retry_after_seconds(self) -> int:
        """Whole seconds until the least recently used session expires (at least 1): a full table's Retry-After."""
        for s in self._map.values():
            return max(1, math.ceil(s.touched + self.ttl - self._now()))
        return 1

    def clear(self) -> None:
        dropped = list(self._map.values())
        self._map.clear()
        self._reserved = 0
        for s in dropped:
            self._on_drop(s)
