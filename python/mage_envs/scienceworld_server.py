"""ScienceWorld's 30 science tasks served over mage's environment protocol (`mage-env/1`).

    python -m mage_envs.scienceworld_server --port 8770 [--tasks boil,find-animal]

One environment per task (`sw-boil`, `sw-find-animal`, …); the seed is ScienceWorld's variation
index and must lie in the `split`'s range (ScienceWorld's own train/dev/test variations, from
`data/scienceworld_tasks.json`, measured from the engine; a test checks them). Config: the split,
ScienceWorld's simplifications as booleans (`teleportAction`, `openDoors`, `openContainers`,
`selfWateringFlowerPots`, `noElectricalAction`; all five are ScienceWorld's `easy`), a step
limit, and the expert (`expert`: `gold`, the default, the engine's gold path; `explore`, for the find
tasks, an explorer that does not know where the thing is and reads earlier attempts' facts,
sw_find_expert.py). Score: ScienceWorld's 0-100 as 0-1 (a wrong `focus on` ends the attempt at -1); reward 10 ×
the score's change; `won` when the task is completed with the full score.

What the agent sees: the engine's text, then the objects in view (`Objects in view: …`, the
engine's referents there; with `objectsInView: changed`, only when the list differs from the one
last shown, else `Objects in view: as before.`: 28% fewer observation tokens on find-animal's gold
paths, 38% on a trained SmolLM2's attempts, docs/environments.md); the rules list the task's action
templates (`open OBJ`, `move OBJ to OBJ`, …). The engine's valid-action list (hundreds to thousands
of strings, about 170 ms a step through the stock Python class) is never built: `legalActions`
lists the one-object commands (templates with one OBJ filled with each object in view, and those
without; every one parses, but two-object commands are left out), which the prompts do not show and
a warm start's ε-moves draw from; an answer the engine cannot parse ("No known action matches that
input.") is an invalid step that changes nothing (the engine does not count it as a move). `reset
task` is refused.

Determinism, three measures. (1) ScienceWorld's JVM lists a container's contents in another order
from one run to the next, so the adapter sorts every list in the text (`canonical`: the tab-indented
lines of a room description and the items of each `(containing …)`). (2) Its simulation iterates
hash sets keyed by the objects' identity hash codes, which HotSpot draws from per-thread random
generators: after other games had run in the same JVM, the same commands gave other temperatures
(use-thermometer: 45 vs 47 degrees) and bulb states (test-conductivity). The JVMs run with
`-XX:hashCode=2` (every identity hash equal, so those sets iterate in insertion order). (3) Other
worlds alive in the same JVM changed what the parser accepted (`focus on substance in metal pot`
parsed in one rollout and not in another), so a JVM holds one world at a time, as for
TextWorldExpress: a session that finds another one's world loaded loads its variation again and
replays its commands (`SwEngine.bind`, about 0.1-0.4 s plus 20 ms a command), and `--jvms N`
(default 2) JVMs share the sessions. `/restart` reloads the task's variation.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from scienceworld.constants import BASEPATH, JAR_PATH

from .jvm import Jvm
from .answers import Matcher, spaced
from .protocol import CreateArgs, EnvError, Environment, Json, Session, applied_step, fingerprint, invalid_step
from .server import argument_parser, serve_from_args
from .sw_find_expert import FIND_TASKS, FindTask, find_map, find_task

TASKS: dict[str, Json] = json.loads((Path(__file__).parent / "data" / "scienceworld_tasks.json").read_text())
SPLITS = ("train", "dev", "test")
SIMPLIFICATIONS = {
    "teleportAction": "`teleport to LOCATION` moves the agent anywhere at once",
    "openDoors": "every door starts open",
    "openContainers": "every container starts open",
    "selfWateringFlowerPots": "flower pots water themselves",
    "noElectricalAction": "no electrical actions (refused for the electrical tasks)",
}
ELECTRICAL = ("power-component", "conductivity")
REWARD_SCALE = 10.0
DEFAULT_MAX_STEPS = 100
OBJECTS_IN_VIEW = ("always", "changed")
EXPERTS = ("gold", "explore")
OBJECTS_AS_BEFORE = "Objects in view: as before."
UNKNOWN = "No known action matches that input."
_LOCATION = re.compile(r"This (?:\w+ )?(?:location|room) is called the (.+?)\. (?:Here you see|In it, you see):")


def _no_reset(command: str) -> str | None:
    return "`reset task` is not allowed" if command.lower() == "reset task" else None


# ScienceWorld has no list of legal commands: its parser judges the answer (singly spaced, its
# case kept), which must not be `reset task`; what the parser does not understand is refused.
ANSWERS = Matcher('"{content}" is not a command ScienceWorld understands', answer_key=spaced, forbid=_no_reset)


def _close(text: str, i: int) -> int:
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return j
    return -1


def _split_top(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0 and text.startswith(", ", i):
            items.append(text[start:i])
            start = i + 2
    return items + [text[start:]]


def _sort_containing(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        j = _close(text, i) if text[i] == "(" else -1
        if j < 0:
            out.append(text[i])
            i += 1
            continue
        inner = _sort_containing(text[i + 1 : j])
        if inner.startswith("containing "):
            inner = "containing " + ", ".join(sorted(_split_top(inner[len("containing "):])))
        out.append(f"({inner})")
        i = j + 1
    return "".join(out)


# A reflection states what a room held in a few words: a 48-token remark holds about one room.
FACT_ITEMS = 6
_ARTICLE = re.compile(r"^(?:an?|the|A|An|The) (?:substance called )?")


def _head(item: str) -> str:
    """An object of a room description without its article, state and contents: "a fridge. The
    fridge door is closed." → "fridge"; "a glass jar (containing …)" → "glass jar"."""
    head = re.split(r" \(|\. |, |\.$", item, maxsplit=1)[0]
    return _ARTICLE.sub("", head).strip()


def canonical(text: str) -> str:
    """The text with every list in a fixed order: runs of tab-indented lines sorted, and the items
    of each `(containing a, b)` sorted (nested ones first)."""
    lines = _sort_containing(text.strip()).split("\n")
    out: list[str] = []
    run: list[str] = []
    for line in lines + [""]:
        if line.startswith("\t"):
            run.append(line)
            continue
        out += sorted(run)
        run = []
        out.append(line)
    return "\n".join(out[:-1])


# Identity hash codes all equal (HotSpot's experimental mode 2): ScienceWorld's simulation iterates
# hash sets of objects keyed by identity, so with the default per-thread random hash codes the same
# actions gave other temperatures and circuit states after other games had run in the JVM.
JVM_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")


class SwEngine:
    """One JVM holding one world at a time, and the session whose world it is (see the module doc)."""

    def __init__(self, jvm: Jvm):
        self.jvm = jvm
        self.lock = jvm.lock
        self._iface: Any = None
        self.owner: SwSession | None = None

    def iface(self) -> Any:
        if self._iface is None:
            self._iface = self.jvm.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        return self._iface

    def bind(self, session: SwSession) -> Any:
        """The interface holding `session`'s world as the session last saw it: when another session's
        world is loaded, the session's variation is loaded again and its commands replayed (checked
        against the text it last read); under `lock`."""
        if self.owner is not session:
            iface = self.iface()
            text = session.load(iface)
            for command in session.actions:
                text = str(iface.step(command))
            self.owner = session
            if canonical(text) != session.engine_text:
                raise RuntimeError(f"replaying {session.task} variation {session.variation} gave another text")
        return self.iface()


class SwPool:
    """`--jvms` engines; each new session goes to the next one in turn."""

    def __init__(self, size: int):
        self.engines = [SwEngine(Jvm(JAR_PATH, BASEPATH, JVM_OPTIONS)) for _ in range(size)]
        self._next = 0
        self._lock = threading.Lock()

    def pick(self) -> SwEngine:
        with self._lock:
            engine = self.engines[self._next % len(self.engines)]
            self._next += 1
            return engine


class SwSession(Session):
    def __init__(self, env: SwEnv, args: CreateArgs):
        self.env = env
        self.engine = env.pool.pick()
        self.task = env.task
        self.variation = args.seed
        self.split = str(args.config["split"])
        self.max_steps = int(args.config["maxSteps"])
        self.objects_when = str(args.config["objectsInView"])
        self.expert_kind = str(args.config.get("expert", "gold"))
        self._find: FindTask | None = None
        self.simplifications = ",".join(k for k in SIMPLIFICATIONS if args.config[k])
        self._gold: list[str] | None = None
        with self.engine.lock:
            iface = self._restart()
            self.templates = sorted(t for t in map(str, iface.getPossibleActions()) if t != "reset task")
            self.goal = str(iface.freeActionTaskDesc()).replace("Task Description:", "").strip()
        self.initial_observation = self.observation
        self.fingerprint = fingerprint("scienceworld", self.task, str(self.variation), self.simplifications,
                                       self.observation)

    def load(self, iface: Any) -> str:
        """Loads the session's task and variation on `iface` and takes the first look (as ScienceWorld's
        own `reset` does); its text. Under the engine's lock."""
        iface.load(self.task, self.variation, self.simplifications, False)
        iface.reset()
        return str(iface.step("look around"))

    def _restart(self) -> Any:
        """The initial state, on this session's engine; under its lock."""
        iface = self.engine.iface()
        text = self.load(iface)
        self.engine.owner = self
        self.shown_objects: list[str] | None = None
        self._read(iface, text)
        self.steps = 0
        self.score = 0.0
        self.completed = False
        self.actions: list[str] = []
        self.trace: list[tuple[str, str]] = [("", self.observation)]
        self.looks: dict[str, str] = {}
        self._note_look(self.engine_text)
        return iface

    def _read(self, iface: Any, text: str) -> None:
        self.engine_text = canonical(text)
        self.objects = sorted(set(map(str, iface.getPossibleObjects())))
        listed = f"Objects in view: {', '.join(self.objects)}."
        if self.objects_when == "changed" and self.shown_objects == self.objects:
            listed = OBJECTS_AS_BEFORE
        self.shown_objects = self.objects
        self.observation = f"{self.engine_text}\n{listed}"

    def legal(self) -> list[str]:
        """The one-object commands: each template with one OBJ filled with each object in view, and
        those without OBJ. The engine parses every one (a valid step), but they are not all its valid
        actions: two-object commands (`move OBJ to OBJ`), thousands in a room, are left out."""
        out = {t for t in self.templates if t.count("OBJ") == 0}
        for t in self.templates:
            if t.count("OBJ") == 1:
                out.update(t.replace("OBJ", o) for o in self.objects)
        return sorted(out)

    def _note_look(self, text: str) -> None:
        m = _LOCATION.search(text)
        if m:
            items = [_head(line.strip()) for line in text.split("\n") if line.startswith("\t")]
            kept = [i for i in items if i not in ("agent", "air") and not i.startswith("door to ")]
            shown = kept[:FACT_ITEMS] + ([f"{len(kept) - FACT_ITEMS} more"] if len(kept) > FACT_ITEMS else [])
            self.looks[m.group(1)] = ", ".join(shown) if shown else "nothing"

    def restart(self) -> None:
        with self.engine.lock:
            self._restart()

    @property
    def won(self) -> bool:
        return self.completed and self.score >= 1.0

    @property
    def done(self) -> bool:
        return self.completed or self.score < 0 or self.steps >= self.max_steps

    def info(self) -> Json:
        return {"task": self.task, "variation": self.variation, "split": self.split,
                "simplifications": self.simplifications, "score": self.score, "steps": self.steps}

    def prompt(self) -> Json:
        templates = ", ".join(self.templates)
        return {
            "rules": (
                f"You are an agent in ScienceWorld, a text simulation of a house with a kitchen, workshop, "
                f"greenhouse and more. {self.goal}\nYou act with one command at a time, built from these "
                f"templates by putting an object in view in place of OBJ: {templates}. Objects are named as "
                "in the list of objects in view. A wrong `focus on` ends the task."
            ),
            "playInstruction": (
                "Now it's your turn to take an action. First reason step by step about the current situation "
                "and what you have already seen; then write one command inside <action> </action>, for example "
                "<action>open door to kitchen</action>. If the game asks which object you meant, answer with "
                "its number, for example <action>0</action>."
            ),
            "compactRules": (
                f"ScienceWorld. {self.goal} Commands: {templates} (OBJ = an object in view). Reply with one "
                "command in <action></action> (e.g. <action>open door to kitchen</action>)."
            ),
            "compactAsk": "Action?",
            "actionWord": "Action",
        }

    def state(self) -> Json:
        return {
            "fingerprint": self.fingerprint,
            "observation": self.observation,
            "legalActions": [] if self.done else self.legal(),
            "toMove": None if self.done else "agent",
            "done": self.done,
            "forfeit": None,
            "category": f"{self.task}/{self.split}",
            "info": self.info(),
        }

    def step(self, response: str) -> Json:
        answer = ANSWERS.match(response, None)
        command, reason = answer.action, answer.reason
        if command is not None:
            with self.engine.lock:
                iface = self.engine.bind(self)
                text = str(iface.step(command))
                if text.strip() == UNKNOWN:
                    reason = ANSWERS.refused(command)
                    command = None
                else:
                    self._read(iface, text)
                    score = float(iface.getScore())
                    self.completed = bool(iface.getCompleted())
        if command is None:
            return invalid_step(self.observation, self.observation, reason, answer.content, self.legal(), None)
        self.actions.append(command)
        self.trace.append((command, self.observation))
        self._note_look(self.engine_text)
        self.steps += 1
        reward = REWARD_SCALE * (score - self.score)
        self.score = score
        return applied_step(
            self.observation, reward, self.done, self.won, self.score, command, self.info(),
            legal=[] if self.done else self.legal(),
            outcome=("The task is done.", "Done.") if self.won
            else ("The task failed.", "Failed.") if self.score < 0
            else (f"The task is not done after {self.steps} steps (score {round(100 * self.score)} of 100).", "Not done."),
        )

    def expert(self, memory: list[str]) -> Json:
        """`expert: gold` (the default): ScienceWorld's gold action sequence while this attempt has followed
        it (None after a deviation); facts: what each room visited held (top-level objects); `memory` is
        not used. `expert: explore` (the find tasks): an explorer over what this attempt saw and `memory`,
        with the facts a next attempt needs first (sw_find_expert.py)."""
        if self.expert_kind == "explore":
            m = find_map(self.find_task(), self.trace, memory)
            return {"action": None if self.done else m.next_action(), "facts": m.facts()}
        gold = self.gold()
        on_path = self.actions == gold[: len(self.actions)] and len(self.actions) < len(gold)
        facts = [f"The {room} held: {items}." for room, items in self.looks.items()]
        return {"action": gold[len(self.actions)] if on_path and not self.done else None, "facts": facts}

    def find_task(self) -> FindTask:
        """What the exploring expert is told: the thing (the gold path's), the box, the doors' start."""
        if self._find is None:
            self._find = find_task(self.goal, self.gold(), doors_open="openDoors" in self.simplifications.split(","))
        return self._find

    def gold(self) -> list[str]:
        """The engine's gold path for this variation, generated once (ScienceWorld draws a new one on every
        load); the session's world is replayed after."""
        if self._gold is None:
            with self.engine.lock:
                iface = self.engine.iface()
                self.engine.owner = None
                iface.load(self.task, self.variation, self.simplifications, True)
                self._gold = [str(a) for a in iface.getGoldActionSequence()]
        return self._gold


class SwEnv(Environment):
    def __init__(self, task: str, pool: SwPool):
        self.task = task
        self.pool = pool
        self.name = f"sw-{task}"
        self.splits = {s: (int(TASKS[task][s][0]), int(TASKS[task][s][1])) for s in SPLITS}

    def describe(self) -> Json:
        config: Json = {
            "split": {"type": "string", "choices": list(SPLITS), "default": "train",
                      "description": "ScienceWorld's variations: " + ", ".join(f"{k} {lo}-{hi}" for k, (lo, hi) in self.splits.items())},
            **{k: {"type": "boolean", "default": False, "description": f"simplification: {v}"} for k, v in SIMPLIFICATIONS.items()},
            "maxSteps": {"type": "integer", "min": 1, "max": 1000, "default": DEFAULT_MAX_STEPS,
                         "description": "game steps per attempt (commands the engine understood)"},
            "objectsInView": {"type": "string", "choices": list(OBJECTS_IN_VIEW), "default": "always",
                              "description": "list the objects in view after every command, or only when they changed"},
            "expert": {"type": "string", "choices": list(EXPERTS), "default": "gold",
                       "description": "POST /expert: the gold path, or (find tasks) an explorer that does not know where "
                                      "the thing is and reads earlier attempts' facts"},
        }
        return {
            "name": self.name,
            "description": f"ScienceWorld task {self.task}; the seed is the variation and must lie in the split's range",
            "twoPlayer": False,
            "seats": [],
            "opponents": [],
            "defaultOpponent": None,
            "maxTurns": DEFAULT_MAX_STEPS,
            "seeds": {"min": 0, "max": int(TASKS[self.task]["variations"]) - 1},
            "config": config,
            "legalActions": True,
            "expert": True,
        }

    def create(self, args: CreateArgs) -> Session:
        split = str(args.config["split"])
        lo, hi = self.splits[split]
        if not lo <= args.seed <= hi:
            raise EnvError("bad_seed", f"variation {args.seed} is not in {self.task}'s {split} range [{lo}, {hi}]", field="seed")
        if args.config["noElectricalAction"] and any(e in self.task for e in ELECTRICAL):
            raise EnvError("bad_config", f"{self.task} needs electrical actions: noElectricalAction must be false",
                           field="config.noElectricalAction")
        if args.config.get("expert", "gold") == "explore" and self.task not in FIND_TASKS:
            raise EnvError("bad_config", f"expert explore is for the find tasks ({', '.join(FIND_TASKS)}), not {self.task}",
                           field="config.expert")
        return SwSession(self, args)


def environments(names: list[str] | None = None, jvms: int = 1) -> list[SwEnv]:
    pool = SwPool(jvms)
    chosen = names or list(TASKS)
    unknown = [n for n in chosen if n not in TASKS]
    if unknown:
        raise SystemExit(f"--tasks: unknown {', '.join(unknown)}; valid: {', '.join(TASKS)}")
    return [SwEnv(n, pool) for n in chosen]


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("python -m mage_envs.scienceworld_server", __doc__.split("\n\n")[0], default_port=8770)
    ap.add_argument("--tasks", default=None, help="comma-separated subset of ScienceWorld's task names (default: all 30)")
    ap.add_argument("--jvms", type=int, default=2,
                    help="JVMs, each holding one world at a time (sessions are spread over them; default 2)")
    # A create loads a task in the JVM (0.1-0.5 s warm, several seconds for the first) under one lock.
    ap.set_defaults(time_budget_ms=60_000)
    a = ap.parse_args(argv)
    envs = environments(a.tasks.split(",") if a.tasks else None, max(1, a.jvms))
    return serve_from_args(a, list(envs), "mage_envs.scienceworld_server 0.1.0")


if __name__ == "__main__":
    raise SystemExit(main())
