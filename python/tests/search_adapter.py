"""A test adapter with an expert, shaped like ALFWorld's search: `boxes` hides a key in one of
`boxes` boxes (the seed picks which; the others hold a sock or nothing); the agent opens boxes and
takes the key to win. Its expert opens the boxes in order and takes the key when it sees it; given
memory that names the key's box ("box 3 held a key 1.") it opens that box first. Facts are what
the attempt saw: "box 2 held a key 1.", "box 1 held no key.", "box 4 was empty." (the key first).

    PYTHONPATH=python python python/tests/search_adapter.py --port 0
"""

from __future__ import annotations

import re

from mage_envs.protocol import CreateArgs, Environment, Json, Session, action_content, invalid_step
from mage_envs.server import argument_parser, serve_from_args


class SearchSession(Session):
    def __init__(self, args: CreateArgs):
        self.n = int(args.config["boxes"])
        self.max_steps = int(args.config["maxSteps"])
        self.key_box = 1 + args.seed % self.n
        self.sock_boxes = {b for b in range(1, self.n + 1) if b != self.key_box and (b + args.seed) % 2 == 0}
        self.restart()

    def restart(self) -> None:
        self.opened: list[int] = []
        self.won = False
        self.steps = 0
        self.last = f"You are in a room with {self.n} closed boxes. Your task is to: take the key."

    @property
    def done(self) -> bool:
        return self.won or self.steps >= self.max_steps

    def _contents(self, box: int) -> str:
        return "a key 1" if box == self.key_box else "a sock 1" if box in self.sock_boxes else ""

    def _legal(self) -> list[str]:
        if self.done:
            return []
        acts = [f"open box {b}" for b in range(1, self.n + 1) if b not in self.opened]
        if self.key_box in self.opened:
            acts.append(f"take key 1 from box {self.key_box}")
        return acts + ["look"]

    def prompt(self) -> Json:
        return {
            "rules": "Find the key in one of the boxes and take it.",
            "playInstruction": "Answer with one listed action in <action></action>.",
            "compactRules": "Find and take the key. Reply <action>open box N</action> or a listed action.",
            "compactAsk": "Action?",
        }

    def state(self) -> Json:
        compact = f"{self.last}\nActions: {', '.join(self._legal())}."
        return {
            "fingerprint": f"boxes-{self.n}-{self.key_box}-{sorted(self.sock_boxes)}",
            "observation": self.last,
            "compactObservation": compact,
            "legalActions": self._legal(),
            "toMove": None if self.done else "agent",
            "done": self.done,
            "category": f"boxes/{self.n}",
        }

    def step(self, response: str) -> Json:
        content, reason = action_content(response)
        if content is None or content.lower() not in self._legal():
            why = reason or f'"{content}" is not a legal action'
            return invalid_step(self.last, self.last, why, content, self._legal(), None)
        action = content.lower()
        self.steps += 1
        if action.startswith("open box "):
            box = int(action.split()[-1])
            self.opened.append(box)
            inside = self._contents(box)
            self.last = f"You open box {box}. In it, you see {inside or 'nothing'}."
        elif action.startswith("take key"):
            self.won = True
            self.last = "You take the key 1."
        else:
            self.last = f"Boxes opened: {', '.join(map(str, self.opened)) or 'none'}."
        reply = {**self.state(), "reward": 1.0 if self.won else 0.0, "won": self.won, "valid": True, "action": action}
        if self.done:
            reply["compactOutcome"] = "Done." if self.won else "Not done."
        return reply

    def expert(self, memory: list[str]) -> Json:
        facts = self._facts()
        if self.done:
            return {"action": None, "facts": facts}
        legal = self._legal()
        avoid = ["look"]  # a step that shows nothing new
        take = [a for a in legal if a.startswith("take key")]
        if take:
            return {"action": take[0], "facts": facts, "avoid": avoid}
        for m in memory:
            hit = re.fullmatch(r"box (\d+) held a key 1\.", m.strip())
            if hit and f"open box {hit.group(1)}" in legal:
                return {"action": f"open box {hit.group(1)}", "facts": facts, "avoid": avoid}
        return {"action": next(a for a in legal if a.startswith("open box")), "facts": facts, "avoid": avoid}

    def _facts(self) -> list[str]:
        key = [f"box {b} held a key 1." for b in self.opened if b == self.key_box]
        rest = [f"box {b} held no key." if self._contents(b) else f"box {b} was empty."
                for b in self.opened if b != self.key_box]
        return key + rest


class SearchEnv(Environment):
    name = "boxes"

    def describe(self) -> Json:
        return {
            "name": self.name,
            "description": "find the key in one of N boxes",
            "twoPlayer": False,
            "seats": [],
            "opponents": [],
            "defaultOpponent": None,
            "maxTurns": 3,
            "seeds": {"min": 0, "max": 1000},
            "config": {
                "boxes": {"type": "integer", "min": 2, "max": 9, "default": 4},
                "maxSteps": {"type": "integer", "min": 1, "max": 50, "default": 10},
            },
            "legalActions": True,
            "expert": True,
        }

    def create(self, args: CreateArgs) -> Session:
        return SearchSession(args)


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("search_adapter", "a test adapter with an expert: find the key in a box", default_port=0)
    return serve_from_args(ap.parse_args(argv), [SearchEnv()], "search_adapter")


if __name__ == "__main__":
    raise SystemExit(main())
