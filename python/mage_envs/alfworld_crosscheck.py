"""The ALFWorld adapter against ALFWorld's own `AlfredTWEnv`, game by game.

    python -m mage_envs.alfworld_crosscheck --split valid_seen            # every kept game
    python -m mage_envs.alfworld_crosscheck --split valid_seen --per-type 1

For each game ALFWorld's loader keeps (`AlfredTWEnv.collect_game_files` over the split's 2.1.2 game
files, which must be the adapter's list), ALFWorld's gym environment (`init_env`: TextWorld's PDDL
environment under `AlfredDemangler`, `AlfredInfos` and `AlfredExpert` with the hand-coded expert)
plays the expert's actions; the adapter plays the same actions in a session of its own, then again
after a `/restart`. Every observation and admissible-command list (without `help`) and every won flag
must be equal. Prints one JSON line per game and a summary line; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import atexit
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

from . import alfworld_data as data
from .alfworld_server import AlfworldEnv, AlfworldSession, offered
from .protocol import CreateArgs


@dataclass
class Transcript:
    observations: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    won: list[bool] = field(default_factory=list)


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


def alfworld_env(folder: Path, task_types: list[int], max_steps: int) -> AlfredTWEnv:
    config: dict[str, Any] = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": task_types, "domain_randomization": False,
                "expert_type": "handcoded"},
        "dataset": {"data_path": str(folder), "num_train_games": -1, "num_eval_games": -1},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": max_steps}},
    }
    return AlfredTWEnv(config, train_eval="train")  # "train": the expert wrapper is on


def expert_run(tw: AlfredTWEnv, game_file: str, seed: int) -> tuple[Transcript, list[str]]:
    """ALFWorld's gym environment on one game, acting on its expert's plan."""
    tw.game_files = [game_file]
    env = tw.init_env(batch_size=1)
    random.seed(seed)  # the hand-coded expert falls back to random.choice
    obs, infos = env.reset()
    t = Transcript([obs[0]], [offered(list(infos["admissible_commands"][0]))], [bool(infos["won"][0])])
    actions: list[str] = []
    done = False
    while not done:
        action = infos["extra.expert_plan"][0][0]
        obs, _, dones, infos = env.step([action])
        actions.append(action)
        done = bool(dones[0])
        t.observations.append(obs[0])
        t.commands.append(offered(list(infos["admissible_commands"][0])))
        t.won.append(bool(infos["won"][0]))
    env.close()
    return t, actions


def adapter_run(session: AlfworldSession, actions: list[str]) -> Transcript:
    first = session.state()
    t = Transcript([first["observation"]], [first["legalActions"]], [False])
    for action in actions:
        if session.done:
            break
        reply = session.step(f"<action>{action}</action>")
        if not reply["valid"]:  # an action the adapter refuses: record, stop
            t.observations.append(f"(refused: {action}: {reply['invalidReason']})")
            break
        t.observations.append(reply["observation"])
        t.commands.append(offered(list(session.gs["admissible_commands"])))
        t.won.append(bool(reply["won"]))
    return t


def first_difference(a: Transcript, b: Transcript) -> str | None:
    for name in ("observations", "commands", "won"):
        x, y = getattr(a, name), getattr(b, name)
        for i, (u, v) in enumerate(zip(x, y)):
            if u != v:
                return f"{name}[{i}]: {json.dumps(u)[:200]} != {json.dumps(v)[:200]}"
        if len(x) != len(y):
            return f"{name}: {len(x)} vs {len(y)} entries"
    return None


def check(split: str, task_types: list[int], max_steps: int, per_type: int | None, seed: int = 0,
          data_dir: Path | None = None, out: Any = sys.stdout, shard: tuple[int, int] = (0, 1),
          start: int = 0, only: str = "") -> dict[str, Any]:
    env = AlfworldEnv(data_dir)
    folder = split_folder(env, split)
    tw = alfworld_env(folder, task_types, max_steps)
    ours = env.games(split, task_types)
    theirs = sorted(Path(p).parent.relative_to(folder).as_posix() for p in tw.game_files)
    if [g.rel for g in ours] != theirs:
        raise AssertionError(f"the game lists differ: {len(ours)} kept here, {len(theirs)} by AlfredTWEnv")
    chosen = list(range(len(ours)))
    if per_type is not None:
        taken: dict[str, int] = {}
        chosen = []
        for i, g in enumerate(ours):
            if taken.get(g.task_type, 0) < per_type:
                taken[g.task_type] = taken.get(g.task_type, 0) + 1
                chosen.append(i)
    chosen = [i for i in chosen if i % shard[1] == shard[0] and i >= start
              and any(o in ours[i].name for o in only.split(","))]
    summary: dict[str, Any] = {"split": split, "kept": len(ours), "checked": 0, "equal": 0, "expertWon": 0,
                               "restartMs": []}
    for i in chosen:
        game = ours[i]
        ref, actions = expert_run(tw, str(folder / game.rel / "game.tw-pddl"), seed)
        args = CreateArgs(config={"split": split, "taskTypes": ",".join(map(str, task_types)), "maxSteps": max_steps},
                          seed=i, opponent_seed=0, opponent=None, seat=None)
        session = env.create(args)
        assert isinstance(session, AlfworldSession) and session.entry.name == game.name
        mine = adapter_run(session, actions)
        t0 = time.perf_counter()
        session.restart()
        restart_ms = (time.perf_counter() - t0) * 1000
        again = adapter_run(session, actions)
        diff = first_difference(ref, mine) or first_difference(mine, again)
        summary["checked"] += 1
        summary["equal"] += diff is None
        summary["expertWon"] += any(ref.won)
        summary["restartMs"].append(round(restart_ms, 1))
        print(json.dumps({"game": game.name, "steps": len(actions), "expertWon": any(ref.won),
                          "restartMs": round(restart_ms, 1), "difference": diff}), file=out, flush=True)
    ms = sorted(summary["restartMs"])
    summary["restartMs"] = {"median": ms[len(ms) // 2], "max": ms[-1]} if ms else {}
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.alfworld_crosscheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="valid_seen", choices=data.SPLITS)
    ap.add_argument("--task-types", default="all")
    ap.add_argument("--max-steps", type=int, default=50, help="ALFWorld's evaluation default")
    ap.add_argument("--per-type", type=int, default=None, help="check only the first N games of each task type")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--shard", default="0/1", help="I/N: check only the games whose index is I mod N (parallel runs)")
    ap.add_argument("--start", type=int, default=0, help="check only the games from this index on (in path order)")
    ap.add_argument("--only", default="", help="check only the games whose name contains one of these (comma-separated)")
    a = ap.parse_args(argv)
    i, n = (int(x) for x in a.shard.split("/"))
    t0 = time.time()
    summary = check(a.split, data.parse_task_types(a.task_types), a.max_steps, a.per_type, data_dir=a.data, shard=(i, n),
                    start=a.start, only=a.only)
    summary["seconds"] = round(time.time() - t0)
    print(json.dumps(summary), flush=True)
    return 0 if summary["equal"] == summary["checked"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
