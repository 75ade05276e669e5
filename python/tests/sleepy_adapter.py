"""A test adapter whose engine stalls on demand: `sleepy` is a single-player counter whose `/step`
sleeps `stepSleepMs` (and whose `/create` sleeps `createSleepMs`) before counting the step. Its
expert (`POST /expert`, declared in /info) answers `count` (null once done) with the facts
`step N counted.` for the steps so far and `remembered: M` for each memory item M it is given (so
tests see memory reach it). `SleepyEnv.closed` lists the seeds of the sessions the server closed.
It uses
the shared server entry point as every adapter does:

    PYTHONPATH=python python python/tests/sleepy_adapter.py --port 0 --time-budget-ms 300
"""

from __future__ import annotations

import time

from mage_envs.protocol import CreateArgs, Environment, Json, Session
from mage_envs.server import argument_parser, serve_from_args


class SleepySession(Session):
    def __init__(self, args: CreateArgs, closed: list[int] | None = None):
        self.sleep_s = args.config["stepSleepMs"] / 1000
        self.seed = args.seed
        self.steps = 0
        self._closed = closed if closed is not None else []

    def close(self) -> None:
        self._closed.append(self.seed)

    def prompt(self) -> Json:
        return {"rules": "Count.", "playInstruction": "Answer <action>count</action>."}

    def state(self) -> Json:
        return {
            "fingerprint": f"sleepy-{self.seed}",
            "observation": f"count {self.steps}",
            "legalActions": ["count"],
            "toMove": None if self.done else "agent",
            "done": self.done,
        }

    def step(self, response: str) -> Json:
        time.sleep(self.sleep_s)
        self.steps += 1
        return {**self.state(), "reward": 1.0, "won": self.done, "valid": True, "action": "count"}

    def restart(self) -> None:
        self.steps = 0

    def expert(self, memory: list[str]) -> Json:
        facts = [f"step {i + 1} counted." for i in range(self.steps)]
        if self.done:
            return {"action": None, "facts": facts}
        return {"action": "count", "facts": facts + [f"remembered: {m}" for m in memory]}

    @property
    def done(self) -> bool:
        return self.steps >= 5


class SleepyEnv(Environment):
    name = "sleepy"

    def __init__(self) -> None:
        # The seeds of the sessions the server closed (`Session.close`), in order.
        self.closed: list[int] = []

    def describe(self) -> Json:
        return {
            "name": self.name,
            "description": "count to 5; each step sleeps stepSleepMs",
            "twoPlayer": False,
            "seats": [],
            "opponents": [],
            "defaultOpponent": None,
            "maxTurns": 5,
            "seeds": {"min": 0, "max": 1000},
            "config": {
                "stepSleepMs": {"type": "integer", "min": 0, "max": 60000, "default": 0},
                "createSleepMs": {"type": "integer", "min": 0, "max": 60000, "default": 0},
            },
            "legalActions": True,
            "expert": True,
        }

    def create(self, args: CreateArgs) -> Session:
        time.sleep(args.config["createSleepMs"] / 1000)
        return SleepySession(args, self.closed)


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("sleepy_adapter", "a test adapter whose engine stalls on demand", default_port=0)
    return serve_from_args(ap.parse_args(argv), [SleepyEnv()], "sleepy_adapter")


if __name__ == "__main__":
    raise SystemExit(main())
