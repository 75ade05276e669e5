"""ALFWorld's hand-coded expert at a session's current state, for `POST /expert` (docs/env-protocol.md).

The expert is ALFWorld's own `HandCodedTWAgent` (the wheel's `agents/expert/handcoded_expert_tw.py`),
driven as ALFWorld's `AlfredExpert` wrapper drives it: it observes the welcome text at the start of
an attempt, suggests `look` first, then after every step it is told the command played and the new
game state and answers its next action; an answer that is not admissible becomes `look`. It keeps
its own memory of the attempt (what it saw where), so it is fed every step the agent played, in
order, whoever chose them; the feeding is lazy (only when asked) and every step's fallback
`random.choice` is seeded by the game and the step's index, so the same play gets the same answers.

`facts` are what this attempt observed, from the commands played and their observations: for each
receptacle looked at (arrived at, opened or examined) the first thing seen there, as `"cabinet 3
held a mug 1."` (only the objects of the task's classes: the object to move, and the lamp of a
look-in-light task), `"drawer 1 was empty."` or `"shelf 2 held no mug."`; the receptacles that held
the target come first.

`memory` (facts of earlier attempts) steers the expert: when a remembered receptacle held an object
of the target class and this attempt has neither seen one nor looked there yet, the expert goes
there first and opens it when closed (a small planner: the hand-coded expert cannot be told where to
look), then the hand-coded expert goes on from what it has seen there. While it searches, it skips
the receptacles memory says were empty or held no target (the next one on its own list instead).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alfworld.agents.expert.handcoded_expert import HandCodedAgentFailed, HandCodedAgentTimeout
from alfworld.agents.expert.handcoded_expert_tw import HandCodedTWAgent

from .protocol import fingerprint

MAX_EXPERT_STEPS = 200  # AlfredExpert's limit
_HELD = re.compile(r"^(?P<recep>.+?) held (?P<objects>.+)\.$")
_OBJECT = re.compile(r"\b(?:a|an) ([a-z]+) (\d+)")


def object_class(name: str) -> str:
    """`mug 1` -> `mug`."""
    return name.split(" ")[0]


def seen_objects(observation: str) -> list[str] | None:
    """The objects an observation says are at a receptacle (`["mug 1", "soapbar 2"]`); [] for
    "you see nothing"; None when it shows no receptacle's contents."""
    low = observation.lower()
    if "you see nothing" in low:
        return []
    at = low.rfind("you see ")
    if at < 0 or "you are in the middle of a room" in low:
        return None
    listed = low[at + len("you see ") :].split(".")[0]
    return [f"{m.group(1)} {m.group(2)}" for m in _OBJECT.finditer(listed)]


def looked_at(command: str) -> str | None:
    """The receptacle a command looks at (`go to`, `open`, `examine`), else None."""
    for verb in ("go to ", "open ", "examine "):
        if command.startswith(verb):
            return command[len(verb) :]
    return None


def remembered_places(memory: list[str], classes: set[str]) -> list[str]:
    """The receptacles that earlier attempts' facts say held an object of one of `classes`."""
    out: list[str] = []
    for fact in memory:
        m = _HELD.match(fact.strip())
        if not m or m.group("objects").startswith("no "):
            continue
        if any(c in classes for c, _ in _OBJECT.findall(m.group("objects"))) and m.group("recep") not in out:
            out.append(m.group("recep"))
    return out


def remembered_misses(memory: list[str], target: str) -> set[str]:
    """The receptacles that earlier attempts' facts say were empty or held no object of `target`."""
    out: set[str] = set()
    for fact in memory:
        f = fact.strip()
        if f.endswith(" was empty."):
            out.add(f[: -len(" was empty.")])
        elif f.endswith(f" held no {target}."):
            out.add(f[: -len(f" held no {target}.")])
    return out


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass
class AttemptFacts:
    """What one attempt saw: the first observation of each receptacle it looked at."""

    target: str
    relevant: set[str]
    places: dict[str, list[str]] = field(default_factory=dict)
    location: str | None = None
    closed_at: set[str] = field(default_factory=set)

    def record(self, command: str, observation: str) -> None:
        place = looked_at(command)
        if place is None:
            return
        if command.startswith("go to "):
            self.location = place
        if "is closed" in observation:
            self.closed_at.add(place)
        objects = seen_objects(observation)
        if objects is not None and place not in self.places:
            self.places[place] = objects

    def saw(self, classes: set[str]) -> bool:
        return any(object_class(o) in classes for objs in self.places.values() for o in objs)

    def sentences(self) -> list[str]:
        held, others = [], []
        for place, objects in self.places.items():
            mine = [o for o in objects if object_class(o) in self.relevant]
            if mine:
                held.append(f"{place} held {_join(['a ' + o for o in mine])}.")
            elif not objects:
                others.append(f"{place} was empty.")
            else:
                others.append(f"{place} held no {self.target}.")
        return held + others


class AlfworldExpert:
    """ALFWorld's hand-coded expert shadowing one session's attempts (see the module's doc). A
    session builds one only when asked for the expert (`AttachedExpert` in `alfworld_server.py`)."""

    #: Experts built in this process (a test counts that a session never asked builds none).
    built = 0

    def __init__(self, game_file: Path, initial_feedback: str, game_key: str):
        AlfworldExpert.built += 1
        self.game_file = game_file
        self.initial_feedback = initial_feedback
        self.game_key = game_key
        probe = HandCodedTWAgent(max_steps=MAX_EXPERT_STEPS)
        probe.reset(str(game_file))
        params: dict[str, Any] = probe.task_params
        self.target = str(params["object_target"]).lower()
        toggle = str(params.get("toggle_target") or "").lower()
        self.relevant = {self.target} | ({toggle} if toggle else set())
        self.restart()

    def restart(self) -> None:
        self.agent = HandCodedTWAgent(max_steps=MAX_EXPERT_STEPS)
        self.agent.reset(str(self.game_file))
        self.agent.observe(self.initial_feedback)
        # Steps recorded and not yet told to the hand-coded expert; a step's game state is let go
        # once told (only the last one is read again).
        self.pending: list[tuple[str, Any]] = []
        self.last: Any = None
        self.fed = 0
        self.suggestion: str | None = "look"
        self.facts = AttemptFacts(self.target, self.relevant)

    def record(self, command: str, game_state: Any) -> None:
        """A step the agent played (a command the game accepted) and the state it led to."""
        self.pending.append((command, game_state))
        self.last = game_state
        self.facts.record(command, str(game_state.feedback))

    def _feed(self) -> None:
        """Tells the hand-coded expert the steps it has not seen yet, each with its seeded fallback."""
        for command, gs in self.pending:
            saved = random.getstate()
            random.seed(int(fingerprint("alfworld-expert", self.game_key, str(self.fed)), 16))
            try:
                action = self.agent.act(gs, 0, gs["won"], command)
                self.suggestion = action if action in gs["admissible_commands"] else "look"
            except (HandCodedAgentTimeout, HandCodedAgentFailed):
                self.suggestion = None
            finally:
                random.setstate(saved)
            self.fed += 1
        self.pending = []

    def _holding_target(self) -> bool:
        if self.last is None:
            return False
        facts = self.agent.policy.get_facts(self.last)
        return any(f.startswith("holds ") and object_class(f.split(" ", 2)[-1]) == self.target for f in facts)

    def _steered(self, memory: list[str]) -> str | None:
        """Where memory says the target is, while this attempt has not looked there nor seen one."""
        if not self._searching():
            return None
        for place in remembered_places(memory, {self.target}):
            if place in self.facts.places:
                continue  # looked there in this attempt already
            if self.facts.location != place:
                return f"go to {place}"
            if place in self.facts.closed_at:
                return f"open {place}"
        return None

    def _searching(self) -> bool:
        return not self.facts.saw({self.target}) and not self._holding_target()

    def _around_misses(self, memory: list[str], suggestion: str | None) -> str | None:
        """While searching, a `go to` a receptacle that memory says held no target becomes a `go to`
        the next receptacle on the hand-coded expert's own list that memory does not rule out (its
        state is left as it is: the answer is read-only)."""
        if suggestion is None or not suggestion.startswith("go to ") or not self._searching():
            return suggestion
        misses = remembered_misses(memory, self.target)
        if suggestion[len("go to ") :] not in misses:
            return suggestion
        todo = [r for r in self.agent.policy.receptacles_to_check if r not in misses and r not in self.facts.places]
        return f"go to {todo[-1]}" if todo else suggestion

    def advice(self, memory: list[str], done: bool, admissible: list[str]) -> dict[str, Any]:
        self._feed()
        facts = self.facts.sentences()
        if done:
            return {"action": None, "facts": facts}
        steered = self._steered(memory)
        if steered in admissible:
            return {"action": steered, "facts": facts}
        action = self._around_misses(memory, self.suggestion)
        return {"action": action if action in admissible else self.suggestion, "facts": facts}
