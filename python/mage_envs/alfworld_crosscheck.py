"""The ALFWorld adapter against ALFWorld's own `AlfredTWEnv`, game by game.

    python -m mage_envs.alfworld_crosscheck --split valid_unseen               # every kept game
    python -m mage_envs.alfworld_crosscheck --split valid_seen --sample 20     # 20 games drawn by --seed
    python -m mage_envs.alfworld_crosscheck --split valid_seen --walks 0 --noisy 0   # the expert's path only

For each game ALFWorld's loader keeps (`AlfredTWEnv.collect_game_files` over the split's 2.1.2 game
files, which must be the adapter's list) one adapter session plays, in lockstep with ALFWorld's gym
environment on the same game (`AlfredTWEnv.init_env`, batch size 1):

- the expert's path: the actions of ALFWorld's hand-coded expert (`AlfredExpert`, which
  `AlfredTWEnv` attaches only in its "train" mode);
- `--walks` random walks in ALFWorld's evaluation mode (`train_eval` "eval_in_distribution" for
  valid_seen and valid_train, "eval_out_of_distribution" for valid_unseen: no expert, no facts): a
  random admissible command (`help` included; now and then written in other case or spacing, which
  the adapter accepts and ALFWorld is sent as listed) or, with probability `--inadmissible`, one that
  is not admissible (a typo, a wrong object, a command admissible earlier in the walk, an unknown
  verb), until the step limit;
- `--noisy` expert-led walks in evaluation mode: the adapter's own `/expert` advice, a random
  admissible command with probability `--noise`, an inadmissible one with `--inadmissible`; these
  reach the win, with the reward and done that go with it.

At every step the observation, the admissible commands, the reward (the adapter's 10 × ALFWorld's
score), done and won must agree, and the adapter's `legalActions` must be the admissible commands
without `help` (none once done). An inadmissible command must be refused by the adapter with its
state unchanged, and ALFWorld must answer it "Nothing happens." with its state unchanged.
After each path the session restarts from where it ended, replays part of it, restarts mid-attempt
and replays all of it, every step compared again.

Two differences are by design and mapped, not reported: the adapter never sends an inadmissible
command to the game, so its `maxSteps` counts game steps only, where ALFWorld's step limit
(`max_nb_steps_per_episode`) counts every command it is sent, "Nothing happens." included; so a walk
plans which of its commands will be inadmissible before it starts, and ALFWorld's limit is set to
`--max-steps` plus those before the `--max-steps`-th admissible one, which makes both limits fall on
the same command. And the adapter accepts an admissible command in any case and spacing (mage's
answer matching), where TextWorld compares the text as sent.

Prints one JSON line per game and a summary line (games, steps compared by path, commands by kind,
wins, mismatches by kind); exits 1 on any mismatch. A walk stops at its first mismatching step (the
states differ after it), so a mismatch count is the number of paths that differed.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

from . import alfworld_data as data
from .alfworld_server import REWARD_WON, AlfworldEnv, AlfworldSession, offered
from .protocol import CreateArgs, Json

# `AlfredTWEnv`'s evaluation modes: which of its config's data paths a split plays under.
EVAL_MODES = {"valid_seen": "eval_in_distribution", "valid_unseen": "eval_out_of_distribution",
              "valid_train": "eval_in_distribution", "train": "eval_in_distribution"}
NOTHING = "Nothing happens."
VERBS = ("jump", "wait", "sleep", "go north", "look around", "check inventory", "eat {o}", "climb {r}",
         "pick up {o}", "put {o} in {r}", "turn on {o}", "search {r}", "throw {o}", "drop {o}", "walk to {r}",
         "place {o} on {r}", "wash {o}", "microwave {o}")
INADMISSIBLE = ("typo", "wrongObject", "stale", "unknownVerb")
_ENTITY = re.compile(r"\b([a-z]+) (\d+)\b")


@dataclass(frozen=True)
class Step:
    """One side's state after a command: what the two sides must agree on."""

    observation: str
    commands: list[str]  # every admissible command, `help` included
    reward: float  # on the adapter's scale
    done: bool
    won: bool


@dataclass(frozen=True)
class Slot:
    """One command of a path: the adapter's answer, what ALFWorld is sent, and its kind."""

    answer: str
    command: str
    kind: str

    @property
    def admissible(self) -> bool:
        return self.kind not in INADMISSIBLE


@dataclass
class Played:
    """A path played: its slots, what ALFWorld answered to each, and the first mismatch."""

    name: str
    first: Step
    slots: list[Slot] = field(default_factory=list)
    expected: list[Step] = field(default_factory=list)
    difference: str | None = None
    kinds: list[str] = field(default_factory=list)


@dataclass
class Tally:
    games: int = 0
    equal: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    won: Counter[str] = field(default_factory=Counter)
    at_limit: Counter[str] = field(default_factory=Counter)
    mismatches: Counter[str] = field(default_factory=Counter)
    restart_ms: list[float] = field(default_factory=list)


def split_folder(env: AlfworldEnv, split: str) -> Path:
    """Every trial of the split as a 2.1.2 game file, laid out as the split's folder for ALFWorld's
    loader: a temporary folder of links `<task>/<trial>/{game.tw-pddl,traj_data.json}` to the
    files the adapter plays (rebuilt ones live in the cache, one folder per content)."""
    folder = Path(tempfile.mkdtemp(prefix=f"alfworld-{split}-"))
    atexit.register(shutil.rmtree, folder, True)
    for e in data.entries(split, env.data_dir):
        game = data.materialise(e, env.domain, env.grammar)
        trial = folder / e.rel
        trial.mkdir(parents=True, exist_ok=True)
        for name in ("game.tw-pddl", "traj_data.json"):
            (trial / name).symlink_to((game.parent / name).resolve())
    return folder


def alfworld_env(folder: Path, task_types: list[int], max_steps: int, mode: str = "train") -> AlfredTWEnv:
    """ALFWorld's `AlfredTWEnv` on the folder, as its training ("train": the expert wrapper on) or
    evaluation scripts build it (`mode` one of EVAL_MODES' values; domain randomisation off)."""
    config: dict[str, Any] = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": task_types, "domain_randomization": False,
                "expert_type": "handcoded"},
        "dataset": {"data_path": str(folder), "eval_id_data_path": str(folder), "eval_ood_data_path": str(folder),
                    "num_train_games": -1, "num_eval_games": -1},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": max_steps}},
    }
    with contextlib.redirect_stdout(sys.stderr):  # its progress lines: stdout stays one JSON line per game
        return AlfredTWEnv(config, train_eval=mode)


class Reference:
    """ALFWorld's gym environment on one game (a batch of one), its answers as `Step`s."""

    def __init__(self, tw: AlfredTWEnv, game_file: str, limit: int):
        tw.game_files = [game_file]
        tw.config["dagger"]["training"]["max_nb_steps_per_episode"] = limit
        self.env = tw.init_env(batch_size=1)
        obs, self.infos = self.env.reset()
        self.first = Step(obs[0], list(self.infos["admissible_commands"][0]), 0.0, False, bool(self.infos["won"][0]))

    def step(self, command: str) -> Step:
        obs, scores, dones, self.infos = self.env.step([command])
        return Step(obs[0], list(self.infos["admissible_commands"][0]), REWARD_WON * float(scores[0]), bool(dones[0]),
                    bool(self.infos["won"][0]))

    def close(self) -> None:
        self.env.close()


def adapter_state(session: AlfworldSession) -> Step:
    s = session.state()
    return Step(s["observation"], session.game.admissible, 0.0, bool(s["done"]), session.game.won)


def differences(ours: Step, theirs: Step) -> list[str]:
    return [k for k in ("observation", "commands", "reward", "done", "won") if getattr(ours, k) != getattr(theirs, k)]


def describe(kinds: list[str], ours: Step, theirs: Step, labels: tuple[str, str] = ("adapter", "ALFWorld")) -> str:
    """The first differing field, both sides' values cut short."""
    k = kinds[0]
    u, v = (json.dumps(getattr(x, k))[:200] for x in (ours, theirs))
    return f"{k}: {u} ({labels[0]}) != {v} ({labels[1]})"


def at_start(session: AlfworldSession, first: Step, label: str) -> tuple[list[str], str | None]:
    """The session's state against ALFWorld's first one."""
    ours = adapter_state(session)
    kinds = differences(ours, first)
    return [f"{label}.{k}" for k in kinds], (f"{label}: {describe(kinds, ours, first)}" if kinds else None)


def play(session: AlfworldSession, slot: Slot, expected: Step | None) -> tuple[list[str], str | None]:
    """The adapter plays one slot; `expected` is ALFWorld's answer to an admissible command, None for
    an inadmissible one (refused, the state unchanged). The mismatching kinds, and a description."""
    before, legal_before = adapter_state(session), session.state()["legalActions"]
    reply: Json = session.step(f"<action>{slot.answer}</action>")
    if expected is None:
        if reply["valid"]:
            return ["refusal"], f"refusal: the adapter played {slot.answer!r}, not admissible in ALFWorld"
        after = adapter_state(session)
        kinds = differences(after, before)
        if kinds:
            return [f"refused.{k}" for k in kinds], f"refused: {describe(kinds, after, before, ('after', 'before'))}"
        if reply["observation"] != before.observation or reply["legalActions"] != legal_before:
            return ["refused.reply"], "refused: the reply's observation or legalActions are not the state's"
        return [], None
    if not reply["valid"]:
        return ["refusal"], f"refusal: the adapter refused {slot.answer!r}: {reply['invalidReason']}"
    ours = Step(reply["observation"], session.game.admissible, float(reply["reward"]),
                bool(reply["done"]), bool(reply["won"]))
    kinds = differences(ours, expected)
    if kinds:
        return kinds, describe(kinds, ours, expected)
    legal = [] if ours.done else offered(ours.commands)
    if reply["legalActions"] != legal:
        return ["legal"], f"legalActions: {json.dumps(reply['legalActions'])[:200]} != {json.dumps(legal)[:200]}"
    return [], None


def replay(session: AlfworldSession, path: Played, upto: int, tally: Tally) -> tuple[list[str], str | None]:
    """Restarts the session and plays the path's first `upto` slots again, each compared with what
    ALFWorld answered in the path: the mismatching kinds and a description, or [] and None."""
    t0 = time.perf_counter()
    session.restart()
    tally.restart_ms.append((time.perf_counter() - t0) * 1000)
    kinds, text = at_start(session, path.first, "replay.start")
    if kinds:
        return kinds, text
    for i, (slot, expected) in enumerate(zip(path.slots[:upto], path.expected)):
        kinds, text = play(session, slot, expected if slot.admissible else None)
        tally.steps["replayed"] += 1
        if kinds:
            return [f"replay.{k}" for k in kinds], f"replay step {i + 1} ({slot.kind} {slot.answer!r}): {text}"
    return [], None


def restarts(session: AlfworldSession, path: Played, rng: random.Random, tally: Tally) -> tuple[list[str], str | None]:
    """From the path's end, a restart and a replay of part of it, then a restart mid-attempt and a
    replay of all of it."""
    n = len(path.slots)
    kinds, text = replay(session, path, rng.randint(1, n - 1) if n > 1 else n, tally)
    return (kinds, text) if kinds else replay(session, path, n, tally)


class Walker:
    """Chooses a walk's commands from ALFWorld's state, as the walk's plan says."""

    def __init__(self, rng: random.Random, first: Step):
        self.rng = rng
        self.seen: set[str] = set(first.commands)
        self.entities = sorted(set(_ENTITY.findall(first.observation)) | self._entities(first.commands))

    @staticmethod
    def _entities(commands: list[str]) -> set[tuple[str, str]]:
        return {e for c in commands for e in _ENTITY.findall(c)}

    def observe(self, step: Step) -> None:
        self.seen.update(step.commands)
        self.entities = sorted(set(self.entities) | self._entities(step.commands))

    def admissible(self, state: Step) -> Slot:
        command = self.rng.choice(state.commands)
        if self.rng.random() < 0.2:
            variant = self.rng.choice([command.upper(), command.title(), f"  {command.replace(' ', '  ')} "])
            return Slot(variant, command, "variant")
        return Slot(command, command, "help" if command == "help" else "admissible")

    def inadmissible(self, state: Step) -> Slot:
        listed = {" ".join(c.lower().split()) for c in state.commands}
        for _ in range(50):
            kind = self.rng.choice(INADMISSIBLE)
            text = getattr(self, f"_{kind}")(state)
            if text and " ".join(text.lower().split()) not in listed:
                return Slot(text, text, kind)
        return Slot("xyzzy", "xyzzy", "unknownVerb")

    def _typo(self, state: Step) -> str | None:
        command = self.rng.choice(state.commands)
        letters = [i for i, ch in enumerate(command) if ch.isalpha()]
        i = self.rng.choice(letters)
        op = self.rng.choice(("drop", "double", "swap", "replace"))
        if op == "drop":
            return command[:i] + command[i + 1:]
        if op == "double":
            return command[:i] + command[i] + command[i:]
        if op == "swap" and i + 1 < len(command):
            return command[:i] + command[i + 1] + command[i] + command[i + 2:]
        return command[:i] + self.rng.choice("abcdefghijklmnopqrstuvwxyz") + command[i + 1:]

    def _wrongObject(self, state: Step) -> str | None:
        """An admissible command with one of its objects swapped for another of the game (acting
        commands first: `go to` and `examine` take any receptacle) or for one the game lacks."""
        with_objects = [c for c in state.commands if _ENTITY.search(c)]
        acting = [c for c in with_objects if not c.startswith(("go to ", "examine "))]
        if not with_objects:
            return None
        command = self.rng.choice(acting if acting and self.rng.random() < 0.8 else with_objects)
        m = self.rng.choice(list(_ENTITY.finditer(command)))
        if self.rng.random() < 0.6:
            name, number = self.rng.choice(self.entities)
            other = f"{name} {number}"
        else:
            other = f"{m.group(1)} {int(m.group(2)) + self.rng.randint(10, 19)}"
        return command[: m.start()] + other + command[m.end():]

    def _stale(self, state: Step) -> str | None:
        stale = sorted(self.seen - set(state.commands))
        return self.rng.choice(stale) if stale else None

    def _unknownVerb(self, state: Step) -> str | None:
        objects = [f"{n} {k}" for n, k in self.entities] or ["it"]
        return self.rng.choice(VERBS).format(o=self.rng.choice(objects), r=self.rng.choice(objects))


def plan(rng: random.Random, max_steps: int, inadmissible: float, noise: float | None) -> list[str]:
    """A walk's kinds of slot, up to its `max_steps`-th game step: "inadmissible", "admissible" or
    (an expert-led walk, `noise` given) "advice". Decided before the walk, whatever the states."""
    kinds: list[str] = []
    while sum(k != "inadmissible" for k in kinds) < max_steps:
        if rng.random() < inadmissible:
            kinds.append("inadmissible")
        elif noise is not None and rng.random() >= noise:
            kinds.append("advice")
        else:
            kinds.append("admissible")
    return kinds


def walk(session: AlfworldSession, ref: Reference, name: str, kinds: list[str], rng: random.Random,
         tally: Tally) -> Played:
    """The adapter and ALFWorld in lockstep along a walk of the planned kinds, both fresh (the session
    just created or restarted), until done or the first mismatch."""
    path = Played(name, ref.first)
    path.kinds, path.difference = at_start(session, ref.first, "start")
    if path.kinds:
        return path
    walker, state = Walker(rng, ref.first), ref.first
    for kind in kinds:
        if kind == "inadmissible":
            slot = walker.inadmissible(state)
        elif kind == "expert":  # ALFWorld's own expert (its "train" mode)
            action = ref.infos["extra.expert_plan"][0][0]
            slot = Slot(action, action, "expert")
        elif kind == "advice":  # the adapter's /expert
            action = session.expert([])["action"]
            slot = Slot(action, action, "advice") if action in state.commands else walker.admissible(state)
        else:
            slot = walker.admissible(state)
        theirs = ref.step(slot.command)
        tally.commands[slot.kind] += 1
        tally.steps[name] += 1
        path.slots.append(slot)
        path.expected.append(theirs)
        if not slot.admissible:
            unchanged = Step(NOTHING, state.commands, state.reward, False, state.won)
            if theirs != unchanged:  # ALFWorld played a command it does not list
                k = differences(theirs, unchanged)
                path.kinds = ["unlisted"]
                why = describe(k, theirs, unchanged, ("it", "expected"))
                path.difference = f"ALFWorld played {slot.answer!r}: {why}"
                return path
        found, text = play(session, slot, theirs if slot.admissible else None)
        if found:
            path.kinds, path.difference = found, f"step {len(path.slots)} ({slot.kind} {slot.answer!r}): {text}"
            return path
        if slot.admissible:
            state = theirs
            walker.observe(state)
        if theirs.done:
            break
    return path


def choose(games: list[data.GameEntry], per_type: int | None, sample: int | None, seed: int, shard: tuple[int, int],
           start: int, only: str) -> list[int]:
    chosen = list(range(len(games)))
    if per_type is not None:
        taken: Counter[str] = Counter()
        chosen = []
        for i, g in enumerate(games):
            if taken[g.task_type] < per_type:
                taken[g.task_type] += 1
                chosen.append(i)
    chosen = [i for i in chosen if any(o in games[i].name for o in only.split(","))]
    if sample is not None and sample < len(chosen):
        chosen = sorted(random.Random(f"sample:{seed}").sample(chosen, sample))
    return [i for i in chosen if i % shard[1] == shard[0] and i >= start]


def check(split: str, task_types: list[int], max_steps: int, per_type: int | None, seed: int = 0,
          data_dir: Path | None = None, out: Any = sys.stdout, shard: tuple[int, int] = (0, 1),
          start: int = 0, only: str = "", walks: int = 1, noisy: int = 1, inadmissible: float = 0.25,
          noise: float = 0.2, sample: int | None = None, expert: bool = True) -> dict[str, Any]:
    env = AlfworldEnv(data_dir)
    folder = split_folder(env, split)
    train = alfworld_env(folder, task_types, max_steps)
    evaluation = alfworld_env(folder, task_types, max_steps, EVAL_MODES[split])
    ours = env.games(split, task_types)
    for tw in (train, evaluation):
        theirs = sorted(Path(p).parent.relative_to(folder).as_posix() for p in tw.game_files)
        if [g.rel for g in ours] != theirs:
            raise AssertionError(f"the game lists differ: {len(ours)} kept here, {len(theirs)} by AlfredTWEnv "
                                 f"({tw.train_eval})")
    tally = Tally()
    for i in choose(ours, per_type, sample, seed, shard, start, only):
        game = ours[i]
        game_file = str(folder / game.rel / "game.tw-pddl")
        args = CreateArgs(config={"split": split, "taskTypes": ",".join(map(str, task_types)), "maxSteps": max_steps},
                          seed=i, opponent_seed=0, opponent=None, seat=None)
        session = env.create(args)
        assert isinstance(session, AlfworldSession) and session.game.entry.name == game.name
        rng = random.Random(f"{seed}:{game.name}")
        paths: list[Played] = []
        try:
            for j in range(int(expert) + walks + noisy):
                if paths:
                    session.restart()
                if j < int(expert):  # ALFWorld's expert's path, as ALFWorld plays it in "train" mode
                    name, kinds, tw = "expert", ["expert"] * max_steps, train
                    random.seed(seed)  # the hand-coded expert falls back to random.choice
                else:
                    name = "noisy" if j >= int(expert) + walks else "random"
                    kinds, tw = plan(rng, max_steps, inadmissible, noise if name == "noisy" else None), evaluation
                # ALFWorld's step limit counts the inadmissible commands too: those planned are added.
                ref = Reference(tw, game_file, limit=len(kinds))
                try:
                    path = walk(session, ref, name, kinds, rng, tally)
                finally:
                    ref.close()
                paths.append(path)
                if path.difference is None:
                    path.kinds, path.difference = restarts(session, path, rng, tally)
                tally.mismatches.update(path.kinds)
                ended = path.expected[-1] if path.expected else None
                tally.won[path.name] += bool(ended and ended.won)
                game_steps = sum(s.admissible for s in path.slots)
                tally.at_limit[path.name] += bool(ended and ended.done and not ended.won and game_steps == max_steps)
        finally:
            session.close()
        tally.games += 1
        tally.equal += all(p.difference is None for p in paths)
        print(json.dumps({"game": game.name, "paths": [
            {"path": p.name, "commands": len(p.slots), "gameSteps": sum(s.admissible for s in p.slots),
             "won": bool(p.expected and p.expected[-1].won), "difference": p.difference} for p in paths]}),
            file=out, flush=True)
    ms = sorted(tally.restart_ms)
    restart = {"median": round(ms[len(ms) // 2], 1), "max": round(ms[-1], 1), "count": len(ms)} if ms else {}
    return {"split": split, "kept": len(ours), "checked": tally.games, "equal": tally.equal,
            "expertWon": tally.won["expert"], "steps": dict(tally.steps),
            "commands": dict(sorted(tally.commands.items())), "won": dict(tally.won),
            "atStepLimit": dict(tally.at_limit), "mismatches": dict(tally.mismatches), "restartMs": restart}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.alfworld_crosscheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="valid_seen", choices=data.SPLITS)
    ap.add_argument("--task-types", default="all")
    ap.add_argument("--max-steps", type=int, default=50, help="game steps per attempt (default 50, as ALFWorld's)")
    ap.add_argument("--per-type", type=int, default=None, help="check only the first N games of each task type")
    ap.add_argument("--sample", type=int, default=None,
                    help="check N games drawn by --seed (of those --per-type and --only keep)")
    ap.add_argument("--seed", type=int, default=0, help="the walks' and the sample's seed")
    ap.add_argument("--no-expert", action="store_true", help="skip the path of ALFWorld's own expert")
    ap.add_argument("--walks", type=int, default=1, help="random walks to the step limit per game (default 1)")
    ap.add_argument("--noisy", type=int, default=1, help="expert-led walks with random commands per game (default 1)")
    ap.add_argument("--inadmissible", type=float, default=0.25, help="a walk's share of inadmissible commands")
    ap.add_argument("--noise", type=float, default=0.2, help="an expert-led walk's share of random admissible commands")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--shard", default="0/1", help="I/N: check only the games whose index is I mod N (parallel runs)")
    ap.add_argument("--start", type=int, default=0, help="check only the games from this index on (in path order)")
    ap.add_argument("--only", default="",
                    help="check only the games whose name contains one of these (comma-separated)")
    a = ap.parse_args(argv)
    i, n = (int(x) for x in a.shard.split("/"))
    t0 = time.time()
    summary = check(a.split, data.parse_task_types(a.task_types), a.max_steps, a.per_type, seed=a.seed,
                    data_dir=a.data, shard=(i, n), start=a.start, only=a.only, walks=a.walks, noisy=a.noisy,
                    inadmissible=a.inadmissible, noise=a.noise, sample=a.sample, expert=not a.no_expert)
    summary["seconds"] = round(time.time() - t0)
    print(json.dumps(summary), flush=True)
    return 0 if summary["equal"] == summary["checked"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
