"""TextWorldExpress's games served over mage's environment protocol (`mage-env/1`).

    python -m mage_envs.textworld_express_server --port 8769 [--games coin,cookingworld]

One environment per game (`twx-coin`, `twx-cookingworld`, `twx-twc`, `twx-mapreader`,
`twx-arithmetic`, `twx-sorting`, `twx-simonsays`, `twx-peckingorder`), each with TextWorldExpress's
own splits (`split`: train seeds 0-999, dev 10000-10999, test 20000-20999; the seed is
TextWorldExpress's game seed, so `twx-coin` seed 3 is the game its papers call seed 3), the game's
`gameParams` as typed config fields with the engine's ranges and defaults, and a step limit. An
answer is mage's `<action>…</action>`; its content must be one of the engine's valid actions
(listed, sorted); anything else is an invalid step that never reaches the engine. Reward: 10 × the
change of the game's score (0-1), so a won coin game pays 10 like ALFWorld; `won` is the engine's
task success, and a task failure ends the attempt.

The engine runs in one JVM (`jvm.py`) that holds one game at a time: TextWorldExpress keeps static
state, and a game generated on one `PythonInterface` changes what another interface's game answers
(measured: the coin collector's and TWC's texts differ after another game is generated in between).
So the engine plays one session at a time and a session that finds another one's game loaded gets
its own back by generating it from its seed and replaying its actions (about 1 ms plus 0.3 ms per
step; `TwxEngine.bind`), checked against the text it last saw. `/restart` generates the game again
from its seed (the same text: the fingerprint checks it). The valid actions come back from the
engine in a hash order that changes between runs, so they are sorted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from textworld_express.constants import BASEPATH, JAR_PATH

from .coin_expert import LEAD_FROM, coin_map
from .jvm import Jvm
from .answers import Matcher
from .protocol import CreateArgs, EnvError, Environment, Json, Session, applied_step, fingerprint, invalid_step
from .server import argument_parser, serve_from_args

REWARD_SCALE = 10.0  # reward = 10 × the change of the 0-1 score (10 for a won coin game, as ALFWorld)
DEFAULT_MAX_STEPS = 50
# An answer names a valid action in any case and spacing.
ANSWERS = Matcher('"{content}" is not a valid action')
SPLITS: dict[str, tuple[int, int]] = {"train": (0, 999), "dev": (10000, 10999), "test": (20000, 20999)}


@dataclass(frozen=True)
class Param:
    """One `gameParams` option: the engine's name, range and default (checked against the engine)."""

    name: str
    lo: int
    hi: int
    default: int
    description: str
    boolean: bool = False

    def field(self) -> Json:
        if self.boolean:
            return {"type": "boolean", "default": bool(self.default), "description": self.description}
        return {"type": "integer", "min": self.lo, "max": self.hi, "default": self.default, "description": self.description}

    def wire(self, value: Any) -> str:
        return f"{self.name}={int(value)}"


def _locations(hi: int, default: int) -> Param:
    return Param("numLocations", 1, hi, default, "rooms in the house")


_DOORS = Param("includeDoors", 0, 1, 1, "rooms are joined by doors that must be opened", boolean=True)
_NO_DOORS = Param("includeDoors", 0, 1, 0, "rooms are joined by doors that must be opened", boolean=True)
_INVENTORY = Param("limitInventorySize", 0, 1, 1, "the inventory holds a limited number of items", boolean=True)
_NO_INVENTORY = Param("limitInventorySize", 0, 1, 0, "the inventory holds a limited number of items", boolean=True)


@dataclass(frozen=True)
class Game:
    name: str
    title: str
    hint: str
    params: tuple[Param, ...]


GAMES: dict[str, Game] = {
    g.name: g
    for g in (
        Game("coin", "Coin Collector",
             "Explore the house room by room (open closed doors to pass through them) until you see the coin, then take it.",
             (_locations(11, 11), Param("numDistractorItems", 0, 10, 0, "distractor items in the rooms"), _DOORS, _INVENTORY)),
        Game("cookingworld", "CookingWorld",
             "Read the cookbook, gather and prepare the ingredients it lists, then prepare and eat the meal.",
             (_locations(11, 11), Param("numIngredients", 1, 5, 3, "ingredients in the recipe"),
              Param("numDistractorItems", 0, 10, 10, "distractor items in the rooms"), _DOORS, _INVENTORY)),
        Game("twc", "TextWorld Commonsense",
             "Pick up the misplaced objects and put each where it usually belongs.",
             (_locations(3, 3), Param("numItemsToPutAway", 1, 4, 4, "objects to put away"), _NO_DOORS, _NO_INVENTORY)),
        Game("mapreader", "MapReader",
             "Read the map, fetch the coin from the room the task names and bring it back to the box.",
             (_locations(50, 15), Param("maxDistanceApart", 1, 8, 4, "the greatest distance between the start and the coin"),
              Param("maxDistractorItemsPerLocation", 0, 3, 3, "distractor items per room at most"), _NO_DOORS, _NO_INVENTORY)),
        Game("arithmetic", "Arithmetic",
             "Read the math problem, then put the item whose quantity is its answer into the box.", ()),
        Game("sorting", "Sorting", "Put the objects into the box from the smallest quantity to the largest.", ()),
        Game("simonsays", "Simon Says", "Do exactly what Simon says, one command at a time.",
             (Param("gameLength", 1, 20, 5, "commands Simon gives"), Param("numDistractors", 0, 5, 3, "distractor commands offered"))),
        Game("peckingorder", "Pecking Order", "Read the instructions book and follow it until the game is completed.", ()),
    )
}


def compact_room(text: str) -> str:
    """`You are in the kitchen. <furniture…> \n<exits>` → `You are in the kitchen. <coin sentence>\n<exits>`;
    other texts as they are."""
    lines = text.split("\n")
    head = lines[0]
    if not head.startswith("You are in the ") or ". " not in head:
        return text
    sentences = head.split(". ")
    kept = [sentences[0] + "."] + [f"{x.rstrip('.')}." for x in sentences[1:] if " coin" in x]
    return "\n".join([" ".join(kept)] + lines[1:])


_ROOM_NAME = re.compile(r"You are in the (.+?)\.")
_EXIT_TO = re.compile(r"(you see the )(.+?)(\.)")


def visited_rooms(trace: list[tuple[str, str]]) -> set[str]:
    """The rooms an attempt has been in: those its observations (`trace`, (action, observation)) began in."""
    return {m.group(1) for _, o in trace if (m := _ROOM_NAME.match(o))}


def mark_visited(text: str, visited: set[str]) -> str:
    """A compact room description with " (visited)" after each exit's room that is in `visited`."""
    lines = text.split("\n")
    if not lines[0].startswith("You are in the ") or len(lines) < 2:
        return text
    lines[1] = _EXIT_TO.sub(lambda m: m.group(1) + m.group(2) + (" (visited)" if m.group(2) in visited else "") + m.group(3),
                            lines[1])
    return "\n".join(lines)


class TwxEngine:
    """The JVM and its one game interface, with the session whose game it holds."""

    def __init__(self, jvm: Jvm):
        self.jvm = jvm
        self._iface: Any = None
        self.loaded: tuple[str, str] | None = None
        self.owner: TwxSession | None = None
        self.replays = 0

    @property
    def lock(self) -> Any:
        return self.jvm.lock

    def iface(self) -> Any:
        if self._iface is None:
            self._iface = self.jvm.jvm.textworldexpress.runtime.PythonInterface()
        return self._iface

    def load(self, game: str, params: str) -> str:
        """Loads a game's generator (a message when the engine refuses the parameters); under `lock`."""
        if self.loaded != (game, params):
            self.owner = None  # loading may drop the game in play
            message = str(self.iface().load(game, params) or "")
            if message:
                self.loaded = None
                return message
            self.loaded = (game, params)
        return ""

    def generate(self, session: TwxSession, gold: bool = False) -> Json:
        """A fresh game of the session's seed; under `lock`."""
        self.load(session.game.name, session.params)
        self.owner = None if gold else session
        reply: Json = json.loads(self.iface().generateNewGameJSON(session.seed, session.split, gold))
        return reply

    def bind(self, session: TwxSession) -> Any:
        """The interface holding `session`'s game as the session last saw it; under `lock`."""
        if self.owner is not session:
            reply = self.generate(session)
            for action in session.actions:
                reply = json.loads(self.iface().stepJSON(action))
            self.replays += 1
            if str(reply["observation"]).strip() != session.observation:
                raise RuntimeError(f"replaying {session.game.name} seed {session.seed} gave another text")
        return self.iface()


class TwxSession(Session):
    def __init__(self, env: TwxEnv, args: CreateArgs):
        self.env = env
        self.game = env.game
        self.seed = args.seed
        self.split = str(args.config["split"])
        self.max_steps = int(args.config["maxSteps"])
        self.facts_lead = str(args.config.get("factsLead", LEAD_FROM[0]))
        self.mark_visited = bool(args.config.get("markVisited", False))
        self.params = ",".join(p.wire(args.config[p.name]) for p in self.game.params)
        with env.engine.lock:
            message = env.engine.load(self.game.name, self.params)
        if message:
            raise EnvError("bad_config", f"TextWorldExpress refuses {self.params}: {message.strip()}", field="config")
        self._gold: list[str] | None = None
        self._reset()
        self.initial_observation = self.observation
        self.fingerprint = fingerprint("twx", self.game.name, self.params, self.split, str(self.seed),
                                       self.observation, "\n".join(self.legal))

    def _reset(self) -> None:
        with self.env.engine.lock:
            reply = self.env.engine.generate(self)
            self.task = str(self.env.engine.iface().getTaskDescription()).strip()
        self._read(reply)
        self.actions: list[str] = []
        self.steps = 0
        self.score = 0.0
        self.won = False
        self.failed = False
        self.trace: list[tuple[str, str]] = [("", self.observation)]

    def _read(self, reply: Json) -> None:
        self.observation = str(reply["observation"]).strip()
        self.legal = sorted(set(map(str, reply["validActions"])))

    def restart(self) -> None:
        self._reset()

    @property
    def done(self) -> bool:
        return self.won or self.failed or self.steps >= self.max_steps

    def _legal(self) -> list[str]:
        return [] if self.done else self.legal

    def info(self) -> Json:
        return {"game": self.game.name, "split": self.split, "seed": self.seed, "gameParams": self.params,
                "score": self.score, "steps": self.steps}

    def prompt(self) -> Json:
        title = self.game.title
        return {
            "rules": (
                f"You are playing {title}, a TextWorldExpress text game. {self.task}\n{self.game.hint}\n"
                "You act by choosing one of the valid actions listed with the current state, for example "
                "`look around`, `move north`, `open door to east`, `take coin`."
            ),
            "playInstruction": (
                "Now it's your turn to take an action. First reason step by step about the current situation "
                "and what you have already seen; then choose one valid action and write it exactly as listed "
                "inside <action> </action>, for example <action>move north</action>."
            ),
            "compactRules": (
                f"{title} (TextWorldExpress): {self.task} {self.game.hint} Reply with one listed action in "
                "<action></action>, written exactly (e.g. <action>move north</action>)."
            ),
            "compactAsk": "Action?",
            "actionWord": "Action",
            "legalActionsHeading": "Your valid actions in the current situation are:",
        }

    def _compact(self, text: str) -> str:
        """The compact prompts' observation: the coin collector's room descriptions without their
        furniture (the room, the coin when it is there, the exits), then the valid actions."""
        if self.game.name == "coin":
            text = compact_room(text)
            if self.mark_visited:
                text = mark_visited(text, visited_rooms(self.trace))
        return text if self.done else f"{text}\nActions: {', '.join(self.legal)}."

    def state(self) -> Json:
        return {
            "fingerprint": self.fingerprint,
            "observation": self.observation,
            "compactObservation": self._compact(self.observation),
            "legalActions": self._legal(),
            "toMove": None if self.done else "agent",
            "done": self.done,
            "forfeit": None,
            "category": self.split,
            "info": self.info(),
        }

    def step(self, response: str) -> Json:
        answer = ANSWERS.match(response, self.legal)
        command = answer.action
        if command is None:
            return invalid_step(self.observation, self._compact(self.observation), answer.reason, answer.content,
                                self._legal(), None)
        with self.env.engine.lock:
            reply = json.loads(self.env.engine.bind(self).stepJSON(command))
        self._read(reply)
        self.actions.append(command)
        self.trace.append((command, self.observation))
        self.steps += 1
        score = float(reply["score"])
        reward = REWARD_SCALE * (score - self.score)
        self.score = score
        self.won = bool(reply["tasksuccess"])
        self.failed = bool(reply["taskfailure"]) and not self.won
        return applied_step(
            self.observation, reward, self.done, self.won, self.score, command, self.info(),
            compact=self._compact(self.observation), legal=self._legal(),
            outcome=("The task is done.", "Done.") if self.won
            else ("The task failed.", "Failed.") if self.failed
            else (f"The task is not done after {self.steps} steps (score {self.score:g}).", "Not done."),
        )

    # -- the expert (the `/expert` endpoint of the protocol) ---------------------------------------

    def expert(self, memory: list[str]) -> Json:
        """Coin collector: an exploring policy over what this attempt saw and `memory` (coin_expert.py).
        The other games: the game's gold path while this attempt has followed it, None after a deviation."""
        if self.game.name == "coin":
            m = coin_map(self.trace, memory)
            action = None if self.done else m.next_action(self.legal)
            avoid = [] if self.done else m.avoid(self.legal, action)
            return {"action": action, "facts": m.facts(self.facts_lead), "avoid": avoid}
        played = [a for a, _ in self.trace[1:]]
        gold = self.gold()
        on_path = played == gold[: len(played)] and len(played) < len(gold)
        return {"action": gold[len(played)] if on_path and not self.done else None, "facts": []}

    def gold(self) -> list[str]:
        """The engine's gold path for this game (generated once; the session's game is replayed after)."""
        if self._gold is None:
            with self.env.engine.lock:
                self.env.engine.generate(self, gold=True)
                self._gold = [str(a) for a in self.env.engine.iface().getGoldActionSequence()]
        return self._gold


class TwxEnv(Environment):
    def __init__(self, game: Game, engine: TwxEngine):
        self.game = game
        self.engine = engine
        self.name = f"twx-{game.name}"

    def describe(self) -> Json:
        config: Json = {
            "split": {"type": "string", "choices": list(SPLITS), "default": "train",
                      "description": "TextWorldExpress's fold: seeds " + ", ".join(f"{k} {lo}-{hi}" for k, (lo, hi) in SPLITS.items())},
            **{p.name: p.field() for p in self.game.params},
            "maxSteps": {"type": "integer", "min": 1, "max": 500, "default": DEFAULT_MAX_STEPS,
                         "description": "game steps per attempt (valid actions); the attempt ends unfinished after them"},
        }
        if self.game.name == "coin":
            config["factsLead"] = {
                "type": "string", "choices": list(LEAD_FROM), "default": LEAD_FROM[0],
                "description": "the expert's facts after an attempt without the coin lead with the exits not tried "
                               "nearest the first room (nearest) or those of the room the attempt ended in (last-room), or "
                               "those and then a plan: the commands from the first room through the first of them (plan)"}
            config["markVisited"] = {
                "type": "boolean", "default": False,
                "description": "compact observations mark each exit's room this attempt has been in with "
                               "\"(visited)\" (a restart forgets them): an aid within the attempt, which "
                               "changes the task; results with it compare only with results with it"}
        return {
            "name": self.name,
            "description": f"TextWorldExpress {self.game.title}: {self.game.hint} The seed is TextWorldExpress's game "
                           "seed and must lie in the split's range",
            "twoPlayer": False,
            "seats": [],
            "opponents": [],
            "defaultOpponent": None,
            "maxTurns": DEFAULT_MAX_STEPS,
            "seeds": {"min": 0, "max": max(hi for _, hi in SPLITS.values())},
            "config": config,
            "legalActions": True,
            "expert": True,
            # markVisited's mark is not something a remark learns from the attempt
            **({"remarks": {"informative": "observed-terms", "ignoreWords": ["visited"]}} if self.game.name == "coin" else {}),
        }

    def create(self, args: CreateArgs) -> Session:
        split = str(args.config["split"])
        lo, hi = SPLITS[split]
        if not lo <= args.seed <= hi:
            raise EnvError("bad_seed", f"seed {args.seed} is not in the {split} split's range [{lo}, {hi}]", field="seed")
        return TwxSession(self, args)


def environments(names: list[str] | None = None, engine: TwxEngine | None = None) -> list[TwxEnv]:
    """The served games (all by default), sharing one engine."""
    jvm = engine or TwxEngine(Jvm(JAR_PATH, BASEPATH))
    chosen = names or list(GAMES)
    unknown = [n for n in chosen if n not in GAMES]
    if unknown:
        raise SystemExit(f"--games: unknown {', '.join(unknown)}; valid: {', '.join(GAMES)}")
    return [TwxEnv(GAMES[n], jvm) for n in chosen]


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("python -m mage_envs.textworld_express_server", __doc__.split("\n\n")[0], default_port=8769)
    ap.add_argument("--games", default=None, help=f"comma-separated subset of {', '.join(GAMES)} (default: all)")
    a = ap.parse_args(argv)
    envs = environments(a.games.split(",") if a.games else None)
    return serve_from_args(a, list(envs), "mage_envs.textworld_express_server 0.1.0")


if __name__ == "__main__":
    raise SystemExit(main())
