"""Starts an adapter's server on a free loopback port in a thread and talks to it over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mage_envs.protocol import EnvService, Environment, ServiceLimits
from mage_envs.server import running_in_thread


class Client:
    def __init__(self, url: str):
        self.url = url

    def call(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ok(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        status, reply = self.call(path, body)
        assert status == 200, f"{path}: {status} {reply}"
        return reply


@contextmanager
def running(envs: list[Environment], ttl_seconds: float = 600, **limits: Any) -> Iterator[Client]:
    service = EnvService(envs, "test", ServiceLimits(ttl_seconds=ttl_seconds, **limits))
    with running_in_thread(service) as r:
        yield Client(r.url)


def play(client: Client, session: str, first: dict[str, Any], choose: Any, seq: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Steps with `choose(legalActions, i)` until done; returns the step replies and the last seq."""
    replies = []
    state = first
    i = 0
    while not state["done"]:
        seq += 1
        action = choose(state["legalActions"], i)
        state = client.ok("/step", {"session": session, "seq": seq, "action": f"<action>{action}</action>"})
        assert state["valid"], state
        replies.append(state)
        i += 1
        assert i < 100
    return replies, seq
