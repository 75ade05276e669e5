"""ALFWorld's text household games served over mage's environment protocol (`mage-env/1`).

    python -m mage_envs.alfworld_server --port 8768 [--data FOLDER] [--workers N]

The games are ALFWorld's official ones (the committed compact copy of valid_seen, valid_unseen
and valid_train, or a user's `alfworld-download` folder: `--data` or $MAGE_ALFWORLD_DATA, train
split included), loaded with ALFWorld's filters (`alfworld_data.py`). They are played through
ALFWorld's own TextWorld pipeline: TextWorld's PDDL environment under ALFWorld's wrappers
(`AlfredDemangler`, `AlfredInfos`) with the 2.1.2 domain and grammar of the `alfworld` wheel, as
`AlfredTWEnv` plays them in evaluation. An answer is mage's `<action>…</action>`; its content must
be one of the admissible commands (`help` is not offered, as in the reference); anything else is an
invalid action that spends the turn without reaching the game. Reward 10 when the task is done
(the reference's 10 × won), else 0.

`/restart` does not reload or re-translate the PDDL, nor re-derive the texts: the session keeps
what TextWorld's reset built (the translated `PddlState`, fast-downward's SAS task, the initial game
state with its observation and admissible commands) and puts a copy back; see `_restore`.

A session is three layers: the game (`AlfworldGame`: TextWorld's state under ALFWorld's wrappers,
step, restart), its text (`AlfworldText`: the prompt's prose, the compact rendering) and its expert
(`AttachedExpert`, built at the first /expert); `AlfworldSession` joins them to the protocol with
the step limit, the answer matching (`answers.py`) and the replies.

The sessions run in `--workers` worker processes (default: a worker per core), each session on one
of them (`worker_processes.py`); a step derives no facts and builds no expert unless the session asks
for the expert, and its texts come from `alfworld_textgen.FastGrammar` (the same text, about 20 times
cheaper); docs/environments.md, *Step cost* and *Worker processes*.

At start the server checks the planner and the data folder (`AlfworldEnv.check_setup`) and stops
with what to fix. A closed session's planner library goes back to a pool (`Planners`): TextWorld
loads a private copy per environment and never unloads it.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH
from textworld.envs.pddl import pddl as tw_pddl

from . import alfworld_data as data
from .alfworld_expert import AlfworldExpert
from .alfworld_textgen import speed_up
from .answers import Matcher, as_written
from .protocol import (U32_MAX, CreateArgs, EnvError, Environment, Json, ServiceLimits, Session, applied_step,
                       fingerprint, invalid_step)
from .server import _positive, argument_parser, serve_from_args
from .worker_processes import ProcessEnvironment, default_workers

# TextWorld is not thread-safe (its grammar and PDDL parsers share state: concurrent loads fail),
# so every TextWorld call of a process holds this lock. The server runs its sessions in worker
# processes (`--workers`), one call at a time each, where it is never contended; it matters to
# callers that use `AlfworldEnv` from threads in one process (tests, benches).
_ENGINE = threading.Lock()
REWARD_WON = 10.0
DEFAULT_MAX_TURNS = 10  # the reference's LLM turns per attempt
DEFAULT_MAX_STEPS = 30  # the reference's env max_steps
# Memory one live session holds, measured (`python -m mage_envs.alfworld_bench --sessions 40`:
# docs/environments.md, *Sessions and memory*), rounded up; the default session cap lets live
# sessions fill at most MEMORY_SHARE of the machine's memory.
SESSION_BYTES = 12_000_000
MEMORY_SHARE = 0.5
# Engine threads per worker process at least: a thread waits on its worker's pipe for the whole
# call, so threads queued on a busy worker must leave others for the idle ones.
THREADS_PER_WORKER = 4
# An answer names an admissible command in any case and spacing (the commands are lower case and
# singly spaced as TextWorld lists them).
ANSWERS = Matcher('"{content}" is not an admissible action', legal_key=as_written)
PLANNER_FIX = ("reinstall the project's Python environment with `node scripts/python-env.mjs` (it compiles "
               "fast-downward-textworld; docs/environments.md, Installing)")


def machine_memory() -> int:
    """The machine's physical memory, or its cgroup's limit when lower (a container's)."""
    total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def default_max_sessions(memory: int | None = None) -> int:
    """The default `--max-sessions`: as many live sessions as fill MEMORY_SHARE of the memory at
    SESSION_BYTES each, at least 1 and at most the protocol servers' default."""
    mem = machine_memory() if memory is None else memory
    return max(1, min(ServiceLimits().max_sessions, int(MEMORY_SHARE * mem) // SESSION_BYTES))


class Planners:
    """fast-downward's library for the sessions' PDDL environments, reused. TextWorld's `PddlEnv`
    loads a private copy of the library for each environment (`fast_downward.load_lib`: a copy of
    libdownward.so, opened) and never unloads it, so every session ever created kept about 2.6 MB;
    unloading it (`close_lib`) makes the next load crash. A closed session's library comes back
    here and the next session loads its game into it, as TextWorld's own environment does when it
    loads another game."""

    def __init__(self) -> None:
        self._free: list[Any] = []
        self._lock = threading.Lock()
        self.loaded = 0

    def take(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        if tw_pddl.fast_downward_missing:
            raise EnvError("server_setup", "ALFWorld needs TextWorld's PDDL planner fast-downward, and its Python "
                           f"module does not import; {PLANNER_FIX}")
        try:
            lib = tw_pddl.fast_downward.load_lib()
        except (OSError, RuntimeError) as e:
            raise EnvError("server_setup", "ALFWorld needs TextWorld's PDDL planner fast-downward, and its library "
                           f"does not load ({type(e).__name__}: {e}); {PLANNER_FIX}") from e
        with self._lock:
            self.loaded += 1
        return lib

    def give(self, lib: Any) -> None:
        with self._lock:
            self._free.append(lib)

    @property
    def idle(self) -> int:
        return len(self._free)


class _PddlEnvOn(tw_pddl.PddlEnv):  # type: ignore[misc]
    """TextWorld's `PddlEnv` on a planner library it is given instead of a copy of its own
    (`PddlEnv.__init__` does nothing else), whose first reset keeps the PDDL state its load built.

    `PddlEnv.load` builds a `PddlState` from the game's problem (fast-downward's translator, run
    twice: the task and its replanning twin, with the task loaded into the library) only to name
    the entities, and `reset` builds another from the same problem: half of a session's create.
    The first reset after a load keeps the one just built, never stepped, and does the rest of
    `PddlEnv.reset` (the intro text and the infos, as TextWorld derives them); later resets are
    TextWorld's (sessions restart with `_restore`)."""

    def __init__(self, infos: textworld.EnvInfos, lib: Any):
        textworld.Environment.__init__(self, infos)
        self.downward_lib = lib
        self._fresh = False

    def load(self, filename_or_data: Any) -> None:
        super().load(filename_or_data)
        self._fresh = True

    def reset(self) -> Any:
        if not self._fresh:
            return super().reset()
        self._fresh = False
        self.prev_state = None
        self.state = textworld.core.GameState()
        self._last_action = None
        self._moves = 0
        context = {"state": self._pddl_state, "facts": list(self._pddl_state.facts), "variables": {}, "mapping": {},
                   "entity_infos": self._entity_infos}
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        if "walkthrough" in self.request_infos.extras:
            self.state["extra.walkthrough"] = self.walkthrough or self._pddl_state.replan(self._entity_infos)
        return self.state


def _wheel_logic() -> tuple[str, str]:
    with open(ALFRED_PDDL_PATH) as f:
        domain = f.read()
    with open(ALFRED_TWL2_PATH) as f:
        grammar = f.read()
    return domain, grammar


def request_infos(facts: bool = True) -> textworld.EnvInfos:
    """What `AlfredTWEnv.init_env` requests; a session asks for no `facts` (the expert's input,
    which only a session asking for the expert needs: `AlfworldGame.facts_of` derives them then
    from the state's own `_facts`, as TextWorld would)."""
    return textworld.EnvInfos(won=True, admissible_commands=True, facts=facts, extras=["gamefile"])


def start_game(game_file: Path, lib: Any = None, facts: bool = True) -> Any:
    """ALFWorld's evaluation stack on one game: TextWorld's environment under ALFWorld's wrappers;
    given a planner library, `textworld.start`'s own steps for a PDDL game on it."""
    wrappers: list[Any] = [AlfredDemangler(shuffle=False), AlfredInfos]
    if lib is None:
        return textworld.start(str(game_file), request_infos(facts), wrappers=wrappers)
    env: Any = _PddlEnvOn(request_infos(facts), lib)
    for wrapper in wrappers:
        env = wrapper(env)
    env.load(str(game_file))
    return env


def offered(commands: list[str]) -> list[str]:
    """The admissible commands as the prompt lists them: without `help` (the reference drops it)."""
    return [c for c in commands if c != "help"]


def compact_actions(legal: list[str]) -> str:
    """The compact prompts' action line: `go to`, `examine`, `look` and `inventory` are always there
    (every place is named in the room description), so only the commands that act on objects are
    listed, to keep a whole trial inside a small model's context."""
    acting = [c for c in legal if not c.startswith(("go to ", "examine ")) and c not in ("look", "inventory")]
    return "Actions: go to PLACE" + "".join(f", {c}" for c in acting) + "."


def _copy_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """A PddlState's attributes with its mutable fact tables copied (the rest is never changed)."""
    out = dict(attrs)
    out["_facts"] = defaultdict(set, {k: set(v) for k, v in attrs["_facts"].items()})
    out["_vars_by_name"] = dict(attrs["_vars_by_name"])
    out["_vars_by_type"] = defaultdict(set, {k: set(v) for k, v in attrs["_vars_by_type"].items()})
    out["_var_counts"] = Counter(attrs["_var_counts"])
    return out


def _restore(pddl_env: Any, pddl_attrs: dict[str, Any], game_state: Any) -> None:
    """Sets a TextWorld `PddlEnv` back to the state its reset left: the fields `PddlEnv.reset`
    assigns (`_pddl_state`, `state`, `prev_state`, `_last_action`, `_moves`), the PDDL state rebuilt
    from a copy of its saved attributes, and the environment's own copy of fast-downward's library
    reloaded with the same translated task (what `PddlState.__init__` loads). TextWorld's `step`
    never changes a previous game state, so the saved one is reused as it is."""
    cls: Any = type(pddl_env._pddl_state)
    state = cls.__new__(cls)  # the attributes come from the saved state, not from __init__
    state.__dict__.update(_copy_attrs(pddl_attrs))
    state.downward_lib.load_sas(state.sas.encode("utf-8"))
    state.downward_lib.load_sas_replan(state.sas_replan.encode("utf-8"))
    pddl_env._pddl_state = state
    pddl_env.state = copy.copy(game_state)
    pddl_env.prev_state = None
    pddl_env._last_action = None
    pddl_env._moves = 0


class AlfworldGame:
    """The engine session: one ALFWorld game in TextWorld's PDDL environment under ALFWorld's
    wrappers, as `AlfredTWEnv` plays it: its state (`gs`, TextWorld's game state), a step of an
    admissible command, a restart, and the game's identity (its fingerprint). Nothing of what the
    agent reads beyond TextWorld's own texts (`AlfworldText`), nor the expert (`AttachedExpert`,
    which watches the steps once attached); as OpenSpiel's state is apart from its bots and
    gymnasium's environment from its wrappers. Every TextWorld call holds the engine lock."""

    def __init__(self, planners: Planners, entry: data.GameEntry, game_file: Path):
        self.entry = entry
        self.game_file = game_file
        self._planners = planners
        with _ENGINE:
            self._lib = planners.take()
            try:
                self.env = start_game(game_file, self._lib, facts=False)
                self._pddl_env = self._innermost(self.env)
                speed_up(self._pddl_env)
                self.gs = self.env.reset()
            except MemoryError:
                planners.give(self._lib)
                raise
            except Exception as e:  # a game TextWorld cannot load fails the same way every time
                planners.give(self._lib)
                raise EnvError("server_setup", f"ALFWorld game {entry.name} ({game_file}) does not load in TextWorld: "
                               f"{type(e).__name__}: {e}") from e
        # What TextWorld's reset built: the translated PDDL state and the game state with its texts.
        self._initial_pddl = _copy_attrs(self._pddl_env._pddl_state.__dict__)
        self._initial_gs = self._pddl_env.state
        self.steps = 0
        self.won = False
        # The commands this attempt played (an expert attached late replays them).
        self.played: list[str] = []
        self.initial_obs = str(self.gs.feedback)
        self.goal = data.goal_of(self._pddl_env._game_data["grammar"])
        self.fingerprint = fingerprint(entry.name, self.initial_obs, "\n".join(self.gs["admissible_commands"]),
                                       "\n".join(sorted(map(str, self.facts_of(self.gs)))))
        # Called with each command played and the state it led to, under the engine lock.
        self.watcher: Callable[[str, Any], None] | None = None

    def close(self) -> None:
        """The planner library goes back to the pool for the next game."""
        lib, self._lib = self._lib, None
        if lib is not None:
            self._planners.give(lib)

    @staticmethod
    def _innermost(env: Any) -> Any:
        while hasattr(env, "_wrapped_env"):
            env = env._wrapped_env
        return env

    @property
    def feedback(self) -> str:
        return str(self.gs.feedback)

    @property
    def admissible(self) -> list[str]:
        """The admissible commands, `help` included, as TextWorld lists them."""
        return list(self.gs["admissible_commands"])

    def step(self, command: str) -> None:
        """Plays an admissible command."""
        with _ENGINE:
            self.gs, _, _ = self.env.step(command)
            if self.watcher is not None:
                self.watcher(command, self.gs)
        self.played.append(command)
        self.steps += 1
        self.won = bool(self.gs["won"])

    def restart(self) -> None:
        """Puts back the state TextWorld's reset left (see `_restore`), without re-translating the
        PDDL or re-deriving the texts."""
        with _ENGINE:
            _restore(self._pddl_env, self._initial_pddl, self._initial_gs)
        self.gs = self._pddl_env.state
        self.steps = 0
        self.won = False
        self.played = []

    def replay(self, see: Callable[[str, Any], None]) -> None:
        """Plays this attempt's commands again from the initial state, `see`ing each command and its
        state (TextWorld's steps are deterministic: the same states again). The caller holds the
        engine lock; the attempt's count of steps and its commands are unchanged."""
        if not self.played:
            return
        _restore(self._pddl_env, self._initial_pddl, self._initial_gs)
        for command in self.played:
            self.gs, _, _ = self.env.step(command)
            see(command, self.gs)

    def facts_of(self, gs: Any) -> list[Any]:
        """A game state's facts as TextWorld's `facts` info gives them (its `_facts`, named as the
        game's demangled entities), for the expert and the fingerprint."""
        return list(map(self._pddl_env._get_human_readable_fact, gs["_facts"]))

    def with_facts(self, gs: Any) -> Any:
        gs["facts"] = self.facts_of(gs)
        return gs


class AttachedExpert:
    """ALFWorld's hand-coded expert on a game (`alfworld_expert.py`), built at the session's first
    /expert: until then a step derives no facts and feeds no expert. Once built it watches the
    game's steps (each state with its facts)."""

    def __init__(self, game: AlfworldGame):
        self.game = game
        self._expert: AlfworldExpert | None = None

    def _record(self, command: str, gs: Any) -> None:
        assert self._expert is not None
        self._expert.record(command, self.game.with_facts(gs))

    def _attach(self) -> AlfworldExpert:
        """The expert, built now. The attempt's steps so far are replayed from the initial state so
        that it sees each one with its facts, as if it had followed from the start."""
        self._expert = AlfworldExpert(self.game.game_file, self.game.initial_obs, self.game.entry.name)
        self.game.replay(self._record)
        self.game.watcher = self._record
        return self._expert

    def advice(self, memory: list[str], done: bool) -> Json:
        """The expert's action at the current state and what this attempt saw. Its fallback draws
        from Python's global `random`, so it runs under the engine lock as the TextWorld calls do."""
        with _ENGINE:
            expert = self._expert or self._attach()
            return expert.advice(memory, done, self.game.admissible)

    def restart(self) -> None:
        if self._expert is not None:
            self._expert.restart()


class AlfworldText:
    """What the agent reads of a game besides TextWorld's texts: the prompt's prose around the goal
    and the compact rendering (mage's compact prompts)."""

    WELCOME = "-= Welcome to TextWorld, ALFRED! =-"

    def __init__(self, goal: str):
        self.goal = goal

    def prompt(self) -> Json:
        return {
            "rules": (
                "You are an expert agent in the ALFRED household environment, a text game in a simulated "
                f"home. Your task is to: {self.goal}.\nYou act by choosing one of the admissible actions "
                "listed with the current state, for example `go to countertop 1`, `take apple 1 from "
                "countertop 1`, `open fridge 1`, `heat apple 1 with microwave 1`, `move apple 1 to "
                "diningtable 1`. You can hold one object at a time."
            ),
            "playInstruction": (
                "Now it's your turn to take an action. First reason step by step about the current situation "
                "and what you have already seen; then choose one admissible action and write it exactly as "
                "listed inside <action> </action>, for example <action>go to countertop 1</action>."
            ),
            "compactRules": (
                f"ALFWorld household task: {self.goal}. Reply with one action in <action></action>: go to "
                "PLACE (any place in the room), examine PLACE, look, inventory, or an action listed, written "
                "exactly (e.g. <action>go to countertop 1</action>). You hold one object at a time."
            ),
            "compactAsk": "Action?",
            "actionWord": "Action",
            "legalActionsHeading": "Your admissible actions in the current situation are:",
            "history": {"turns": 15, "playObservations": 15, "reflectObservations": 15},
        }

    def compact(self, feedback: str, legal: list[str], done: bool) -> str:
        text = feedback.replace(self.WELCOME, "").strip()
        return text if done else f"{text}\n{compact_actions(legal)}"

    @staticmethod
    def outcome(won: bool, steps: int) -> tuple[str, str]:
        return ("The task is done.", "Done.") if won else (f"The task is not done after {steps} steps.", "Not done.")


class AlfworldSession(Session):
    """The protocol's session: the game (`AlfworldGame`), its text (`AlfworldText`) and its expert
    (`AttachedExpert`), with the attempt's step limit, the answer matching and the replies."""

    def __init__(self, env_def: AlfworldEnv, args: CreateArgs, entry: data.GameEntry, game_file: Path,
                 instances: int | None = None):
        self.split = str(args.config["split"])
        self.max_steps = int(args.config["maxSteps"])
        self.instances = instances
        self.game = AlfworldGame(env_def.planners, entry, game_file)
        self.text = AlfworldText(self.game.goal)
        self._expert = AttachedExpert(self.game)

    def close(self) -> None:
        self.game.close()

    def restart(self) -> None:
        self.game.restart()
        self._expert.restart()

    def expert(self, memory: list[str]) -> Json:
        return self._expert.advice(memory, self.done)

    @property
    def done(self) -> bool:
        return self.game.won or self.game.steps >= self.max_steps

    def _legal(self) -> list[str]:
        return [] if self.done else offered(self.game.admissible)

    @property
    def category(self) -> str:
        """For per-split and per-task-type measures (mage splits categories at "/")."""
        return f"{self.split}/{self.game.entry.task_type}"

    def info(self) -> Json:
        return {"split": self.split, "taskType": self.game.entry.task_type, "game": self.game.entry.name}

    def prompt(self) -> Json:
        return self.text.prompt()

    def _compact(self, feedback: str) -> str:
        return self.text.compact(feedback, self._legal(), self.done)

    def state(self) -> Json:
        return {
            "fingerprint": self.game.fingerprint,
            "observation": self.game.feedback,
            "compactObservation": self._compact(self.game.feedback),
            "legalActions": self._legal(),
            "toMove": None if self.done else "agent",
            "done": self.done,
            "forfeit": None,
            "category": self.category,
            "info": self.info(),
        }

    def step(self, response: str) -> Json:
        legal = self._legal()
        # Any admissible command is played, `help` too (the reference sends it to the game);
        # the listed ones leave `help` out as the reference's prompt does.
        answer = ANSWERS.match(response, self.game.admissible)
        command = answer.action
        if command is None:
            return invalid_step(self.game.feedback, self._compact(self.game.feedback), answer.reason, answer.content,
                                legal, None)
        self.game.step(command)
        won, steps = self.game.won, self.game.steps
        feedback = self.game.feedback
        return applied_step(
            feedback, REWARD_WON if won else 0.0, self.done, won, 1.0 if won else 0.0, command,
            {**self.info(), "won": won, "steps": steps},
            compact=self._compact(feedback), legal=self._legal(), outcome=self.text.outcome(won, steps),
        )


class AlfworldEnv(Environment):
    name = "alfworld"

    def __init__(self, data_dir: Path | None = None):
        self.data_dir = data_dir
        self.domain, self.grammar = _wheel_logic()
        self._games: dict[tuple[str, tuple[int, ...]], list[data.GameEntry]] = {}
        self._surveys: dict[str, data.Survey] = {}
        self._lock = threading.Lock()
        self.planners = Planners()

    def stats(self) -> Json:
        """This process's figures for tests and benches: experts built, planner libraries loaded."""
        return {"expertsBuilt": AlfworldExpert.built, "plannersLoaded": self.planners.loaded}

    def check_setup(self) -> list[str]:
        """What the server checks at start, as lines to print: the planner loads (its library then
        waits in the pool for the first session) and the data folder holds games ALFWorld would play
        (`alfworld_data.check_folder`). EnvError or DataError with what to fix otherwise."""
        self.planners.give(self.planners.take())
        if self.data_dir is None:
            return [f"games: the committed copy; {self.survey(split).line()}" for split in data.SPLITS[:3]]
        return [f"games: {s.line()}" for s in data.check_folder(self.data_dir)]

    def survey(self, split: str) -> data.Survey:
        with self._lock:
            if split not in self._surveys:
                self._surveys[split] = data.survey(split, self.data_dir)
            return self._surveys[split]

    def describe(self) -> Json:
        splits = ["valid_seen", "valid_unseen", "valid_train"] + (["train"] if self.data_dir else [])
        return {
            "name": self.name,
            "description": "ALFWorld's household text games (official game files, ALFWorld's TextWorld pipeline); "
                           "the seed picks a game of the split: seed mod the number of games kept (the create "
                           "reply's instances), in path order",
            "twoPlayer": False,
            "seats": [],
            "opponents": [],
            "defaultOpponent": None,
            "maxTurns": DEFAULT_MAX_TURNS,
            "seeds": {"min": 0, "max": U32_MAX},
            "config": {
                "split": {"type": "string", "choices": splits, "default": "valid_seen",
                          "description": "valid_seen: rooms seen in training; valid_unseen: unseen rooms; valid_train; train (a user's data only)"},
                "taskTypes": {"type": "string", "default": "all",
                              "description": "task types to draw from: all, a list (1,2,3,4) or a range (1-4); "
                              + ", ".join(f"{k} {v}" for k, v in data.TASK_TYPES.items())},
                "maxSteps": {"type": "integer", "min": 1, "max": 200, "default": DEFAULT_MAX_STEPS,
                             "description": "game steps per attempt (valid actions); the attempt ends unfinished after them"},
            },
            "legalActions": True,
            "expert": True,
        }

    def games(self, split: str, types: list[int]) -> list[data.GameEntry]:
        key = (split, tuple(types))
        with self._lock:
            if key not in self._games:
                self._games[key] = data.games(split, types, self.data_dir)
            return self._games[key]

    def create(self, args: CreateArgs) -> Session:
        try:
            types = data.parse_task_types(str(args.config["taskTypes"]))
        except ValueError as e:
            raise EnvError("bad_config", str(e), field="config.taskTypes") from e
        split = str(args.config["split"])
        try:
            kept = self.games(split, types)
        except data.DataError as e:
            raise EnvError("server_setup", str(e)) from e
        except (ValueError, FileNotFoundError) as e:
            raise EnvError("bad_config", str(e), field="config.split") from e
        if not kept:
            s = self.survey(split)
            if not s.kept:
                raise EnvError("server_setup", f"no {split} game to play: {s.why_none()}")
            have = ", ".join(f"{t} {data.TASK_TYPES[t]} {n}" for t, n in zip(sorted(data.TASK_TYPES), s.kept_by_type) if n)
            raise EnvError("bad_config", f"no {split} game has task types {types}; its {s.kept} games by task type: {have}",
                           field="config.taskTypes")
        entry = kept[args.seed % len(kept)]
        try:
            game_file = data.materialise(entry, self.domain, self.grammar)
        except data.DataError as e:
            raise EnvError("server_setup", str(e)) from e
        except OSError as e:
            raise EnvError("server_setup", f"cannot write ALFWorld game {entry.name}, rebuilt for the 2.1.2 logic, into "
                           f"the cache {data.cache_root()} ({type(e).__name__}: {e}); set ${data.CACHE_ENV} to a "
                           "writable folder") from e
        return AlfworldSession(self, args, entry, game_file, instances=len(kept))


def worker_env(data_dir: Path | None) -> AlfworldEnv:
    """A worker process's engine (`worker_processes.ProcessEnvironment`)."""
    return AlfworldEnv(data_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("python -m mage_envs.alfworld_server", __doc__.split("\n\n")[0], default_port=8768)
    ap.add_argument("--data", type=Path, default=None,
                    help=f"a folder alfworld-download wrote (default: ${data.DATA_ENV}, else the committed copy)")
    ap.add_argument("--workers", type=_positive(int), default=default_workers(), metavar="N",
                    help="worker processes that run the sessions' games, each session on one of them, at once "
                         f"(default %(default)s: the cores this process may use); --engine-threads is raised to "
                         f"at least {THREADS_PER_WORKER} per worker")
    # A create loads a game's PDDL (about a second) and a worker builds one at a time, so a burst
    # of creates queues: a longer budget than the server's 5 s default. The session cap
    # fits the machine's memory (default_max_sessions).
    ap.set_defaults(time_budget_ms=60_000, max_sessions=default_max_sessions())
    a = ap.parse_args(argv)
    a.engine_threads = max(a.engine_threads, THREADS_PER_WORKER * a.workers)
    folder = a.data or (Path(os.environ[data.DATA_ENV]) if os.environ.get(data.DATA_ENV) else None)
    env = AlfworldEnv(folder)
    try:
        lines = env.check_setup()
    except (EnvError, data.DataError) as e:
        raise SystemExit(f"mage_envs.alfworld_server: cannot start: {e}") from None
    for line in lines:
        print(f"mage_envs.alfworld_server: {line}", file=sys.stderr, flush=True)
    try:
        # The factory by this module's name, also when it runs as __main__, so that workers find it.
        factory = importlib.import_module("mage_envs.alfworld_server").worker_env
        pool = ProcessEnvironment(env, factory, (folder,), a.workers, preload=["mage_envs.alfworld_server"])
    except RuntimeError as e:
        raise SystemExit(f"mage_envs.alfworld_server: cannot start: {e}") from None
    print(f"mage_envs.alfworld_server: {a.workers} engine worker processes "
          f"({', '.join(str(w.pid) for w in pool.workers)})", file=sys.stderr, flush=True)
    try:
        return serve_from_args(a, [pool], "mage_envs.alfworld_server 0.1.0")
    finally:
        pool.close()


if __name__ == "__main__":
    raise SystemExit(main())
