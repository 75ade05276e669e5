"""`POST /expert` (docs/env-protocol.md): the optional, read-only expert endpoint over HTTP, on the
test adapter `sleepy` (whose expert counts, states one fact per step and echoes its memory)."""

from __future__ import annotations

import threading
import time
from typing import Any

from envhelp import running
from sleepy_adapter import SleepyEnv

from mage_envs.protocol import CreateArgs, EnvError, Json, Session


class PlainEnv(SleepyEnv):
    """`sleepy` without a declared expert."""

    name = "plain"

    def describe(self) -> Json:
        d = dict(super().describe())
        d["name"] = self.name
        del d["expert"]
        return d


class BrokenExpertEnv(SleepyEnv):
    """Declares an expert whose answers break the protocol."""

    name = "broken"

    def describe(self) -> Json:
        return {**super().describe(), "name": self.name}

    def create(self, args: CreateArgs) -> Session:
        session = super().create(args)
        session.expert = lambda memory: {"action": 3, "facts": []}  # type: ignore[method-assign]
        return session


class AvoidingExpertEnv(SleepyEnv):
    """An expert that names the actions it judges wasted (`avoid`), well formed or not (seed 2)."""

    name = "avoiding"

    def describe(self) -> Json:
        return {**super().describe(), "name": self.name}

    def create(self, args: CreateArgs) -> Session:
        session = super().create(args)
        avoid: Any = ["wait"] if args.seed == 1 else "wait"
        session.expert = lambda memory: {"action": "count", "facts": [], "avoid": avoid}  # type: ignore[method-assign]
        return session


def test_the_expert_may_name_actions_to_avoid() -> None:
    with running([AvoidingExpertEnv()]) as c:
        good = c.ok("/create", {"env": "avoiding", "seed": 1})["session"]
        assert c.ok("/expert", {"session": good}) == {"action": "count", "facts": [], "avoid": ["wait"]}
        bad = c.ok("/create", {"env": "avoiding", "seed": 2})["session"]
        status, err = c.call("/expert", {"session": bad})
        assert status == 500 and err["error"]["kind"] == "internal" and "avoid" in err["error"]["message"]


def test_info_declares_the_expert_only_where_there_is_one() -> None:
    with running([SleepyEnv(), PlainEnv()]) as c:
        envs = {e["name"]: e for e in c.ok("/info")["environments"]}
        assert envs["sleepy"]["expert"] is True
        assert "expert" not in envs["plain"]


def test_expert_is_read_only_states_facts_and_reads_memory() -> None:
    with running([SleepyEnv()]) as c:
        sid = c.ok("/create", {"env": "sleepy", "seed": 1})["session"]
        assert c.ok("/expert", {"session": sid}) == {"action": "count", "facts": []}
        assert c.ok("/step", {"session": sid, "seq": 1, "action": "<action>count</action>"})["observation"] == "count 1"
        first = c.ok("/expert", {"session": sid, "memory": ["the counter ends at 5."]})
        assert first == {"action": "count", "facts": ["step 1 counted.", "remembered: the counter ends at 5."]}
        # Read-only: asking again gives the same answer, no seq was used, the state did not move.
        assert c.ok("/expert", {"session": sid, "memory": ["the counter ends at 5."]}) == first
        assert c.ok("/step", {"session": sid, "seq": 2, "action": "x"})["observation"] == "count 2"
        for seq in (3, 4, 5):
            c.ok("/step", {"session": sid, "seq": seq, "action": "x"})
        over = c.ok("/expert", {"session": sid})
        assert over["action"] is None and len(over["facts"]) == 5
        c.ok("/restart", {"session": sid, "seq": 6})
        assert c.ok("/expert", {"session": sid}) == {"action": "count", "facts": []}


def test_expert_errors() -> None:
    with running([SleepyEnv(), PlainEnv(), BrokenExpertEnv()]) as c:
        plain = c.ok("/create", {"env": "plain", "seed": 1})["session"]
        status, err = c.call("/expert", {"session": plain})
        assert status == 400 and err["error"]["kind"] == "no_expert", err
        sid = c.ok("/create", {"env": "sleepy", "seed": 1})["session"]
        status, err = c.call("/expert", {"session": sid, "memory": "drawer 1 was empty."})
        assert status == 400 and err["error"]["kind"] == "bad_request" and err["error"]["field"] == "memory"
        status, err = c.call("/expert", {"session": "s-404"})
        assert status == 404 and err["error"]["kind"] == "unknown_session"
        broken = c.ok("/create", {"env": "broken", "seed": 1})["session"]
        status, err = c.call("/expert", {"session": broken})
        assert status == 500 and err["error"]["kind"] == "internal"


def test_a_session_without_an_override_answers_no_expert() -> None:
    class Bare(Session):
        def prompt(self) -> Json:
            return {}

        def state(self) -> Json:
            return {}

        def step(self, response: str) -> Json:
            return {}

        def restart(self) -> None:
            pass

        @property
        def done(self) -> bool:
            return False

    try:
        Bare().expert([])
    except EnvError as e:
        assert e.kind == "no_expert" and e.status == 400
    else:
        raise AssertionError("the default expert must raise")


def test_expert_waits_for_a_step_still_being_applied() -> None:
    with running([SleepyEnv()], engine_threads=2) as c:
        sid = c.ok("/create", {"env": "sleepy", "seed": 1, "config": {"stepSleepMs": 600}})["session"]
        got: dict[str, Any] = {}
        t = threading.Thread(target=lambda: got.update(c.ok("/step", {"session": sid, "seq": 1, "action": "x"})))
        t.start()
        time.sleep(0.15)  # the step is sleeping on its engine thread
        assert c.ok("/expert", {"session": sid})["facts"] == ["step 1 counted."]
        t.join()
        assert got["observation"] == "count 1"

