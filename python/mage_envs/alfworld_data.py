"""ALFWorld's game files: the committed compact copy, a user's data folder, ALFWorld's loader filters,
and the 2.1.1 → 2.1.2 rebuild (docs/environments.md, *ALFWorld*).

Standard library only, so the game lists can be read (and tested) without the engine installed.

- The compact copy (`data/alfworld/games-json_2.1.1.jsonl.xz`, ALFWorld's MIT licence and the
  provenance beside it) holds, per trial of the three evaluation splits, what a game is made of
  besides the shared domain and grammar: the PDDL problem, the goal text, `solvable`, and the
  `task_type` and `pddl_params` of its `traj_data.json`.
- A user's folder is the layout `alfworld-download` writes (`$ALFWORLD_DATA/json_2.1.1/<split>/
  <task>/<trial>/{game.tw-pddl,traj_data.json}`; the folder itself or its `json_2.1.1` may be given).
- The filters are ALFWorld's (`AlfredTWEnv.collect_game_files`): no movable or sliced receptacles
  (by the path), the selected task types, a game file, and a `solvable` key that is true.
- The `alfworld` wheel ships the 2.1.2 domain and grammar, and its hand-coded expert speaks 2.1.2. A
  2.1.1 game (the compact copy's, or an old download) is rebuilt from its PDDL problem with the
  wheel's domain and grammar and its own goal text, written once to a cache folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

# ALFWorld's numbering of its six task types (alfred_tw_env.TASK_TYPES).
TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
SPLITS = ("valid_seen", "valid_unseen", "valid_train", "train")
COMPACT = Path(__file__).parent / "data" / "alfworld" / "games-json_2.1.1.jsonl.xz"
DATA_ENV = "MAGE_ALFWORLD_DATA"
CACHE_ENV = "MAGE_ALFWORLD_CACHE"
_GOAL = re.compile(r'"Your task is to: (.*?)\."')


@dataclass(frozen=True)
class GameEntry:
    """One trial as the loader sees it (before the filters)."""

    split: str
    rel: str  # "<task>/<trial>"
    task_type: str
    solvable: bool | None  # None: the game file has no `solvable` key
    # Either the compact copy's row or the game file of a user's folder.
    row: dict[str, Any] | None = None
    game_file: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.split}/{self.rel}"


def parse_task_types(spec: str) -> list[int]:
    """`"1,2,3,4"`, `"1-4"` or `"all"` → sorted type numbers; ValueError naming the bad part."""
    text = spec.strip().lower()
    if text == "all":
        return sorted(TASK_TYPES)
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"([1-6])(?:-([1-6]))?", part)
        if not m:
            raise ValueError(f'taskTypes: "{part}" is not a task type 1-6 or a range like 1-4 (types: '
                             + ", ".join(f"{k} {v}" for k, v in TASK_TYPES.items()) + ")")
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if hi < lo:
            raise ValueError(f'taskTypes: the range "{part}" is empty')
        out.update(range(lo, hi + 1))
    return sorted(out)


def kept(entry: GameEntry, task_types: list[int]) -> bool:
    """ALFWorld's loader filters, in its order."""
    if "movable" in entry.rel or "Sliced" in entry.rel:
        return False
    if entry.task_type not in {TASK_TYPES[t] for t in task_types}:
        return False
    return entry.solvable is True


# ------------------------------------------------------------------------------------------------
# sources


_compact_rows: list[dict[str, Any]] | None = None


def compact_rows() -> list[dict[str, Any]]:
    global _compact_rows
    if _compact_rows is None:
        with lzma.open(COMPACT, "rt", encoding="utf-8") as f:
            _compact_rows = [json.loads(line) for line in f if line.strip()]
    return _compact_rows


def split_folder(root: Path, split: str) -> Path:
    """`<root>/json_2.1.1/<split>` (alfworld-download's layout) or `<root>/<split>`."""
    for cand in (root / "json_2.1.1" / split, root / split):
        if cand.is_dir():
            return cand
    raise FileNotFoundError(
        f"ALFWorld data folder {root}: no {split} split (looked for {root / 'json_2.1.1' / split} and {root / split})"
    )


def entries(split: str, data_dir: Path | None) -> list[GameEntry]:
    """Every trial of a split with a game file, sorted by path (the filters are not applied)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if data_dir is None:
        if split == "train":
            raise ValueError(
                f"the train split is not in the committed copy; set {DATA_ENV} (or --data) to a folder "
                "that alfworld-download wrote"
            )
        return [
            GameEntry(split, r["path"].split("/", 1)[1], r["task_type"], r["solvable"], row=r)
            for r in compact_rows()
            if r["path"].startswith(split + "/")
        ]
    base = split_folder(data_dir, split)
    out: list[GameEntry] = []
    for traj in sorted(base.glob("*/*/traj_data.json")):
        game = traj.parent / "game.tw-pddl"
        if not game.exists():
            continue
        rel = traj.parent.relative_to(base).as_posix()
        with open(traj) as f:
            task_type = json.load(f)["task_type"]
        solvable: bool | None = None
        if "movable" not in rel and "Sliced" not in rel:  # ALFWorld never opens those
            with open(game) as f:
                solvable = json.load(f).get("solvable")
        out.append(GameEntry(split, rel, task_type, solvable, game_file=game))
    return out


def games(split: str, task_types: list[int], data_dir: Path | None) -> list[GameEntry]:
    return [e for e in entries(split, data_dir) if kept(e, task_types)]


# ------------------------------------------------------------------------------------------------
# 2.1.2 game files


def is_212(pddl_domain: str) -> bool:
    """2.1.2 added the `help` action to the domain (and `move` to the grammar)."""
    return "(:action help" in pddl_domain


def goal_of(grammar: str) -> str:
    found = _GOAL.findall(grammar)
    if len(found) != 1:
        raise ValueError(f"the game's grammar has {len(found)} task texts, expected one")
    return str(found[0])


def rebuild(problem: str, goal: str, solvable: bool | None, domain: str, grammar: str) -> dict[str, Any]:
    """A 2.1.2 game file from a 2.1.1 game's problem and goal, with the wheel's domain and grammar."""
    if "UNKNOWN GOAL" not in grammar:
        raise ValueError("the grammar has no UNKNOWN GOAL placeholder")
    game: dict[str, Any] = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", goal),
        "pddl_problem": problem,
    }
    if solvable is not None:
        game["solvable"] = solvable
    return game


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "mage" / "alfworld"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def materialise(entry: GameEntry, domain: str, grammar: str, data_dir: Path | None) -> Path:
    """The path of a 2.1.2 `game.tw-pddl` for the entry, with its `traj_data.json` beside it
    (the expert reads it). A user's 2.1.2 file is used in place; anything else is rebuilt once
    into the cache, under a key of the source and the wheel's domain and grammar."""
    if entry.game_file is not None:
        with open(entry.game_file) as f:
            src = json.load(f)
        if is_212(src["pddl_domain"]):
            return entry.game_file
        problem, goal, solvable = src["pddl_problem"], goal_of(src["grammar"]), src.get("solvable")
        with open(entry.game_file.parent / "traj_data.json") as f:
            traj = json.load(f)
        origin = str(data_dir.resolve() if data_dir else "")
    else:
        assert entry.row is not None
        problem, goal, solvable = entry.row["problem"], entry.row["goal"], entry.row["solvable"]
        traj = {"task_type": entry.row["task_type"], "pddl_params": entry.row["pddl_params"]}
        origin = "compact"
    key = hashlib.sha256("\0".join([origin, domain, grammar]).encode()).hexdigest()[:16]
    folder = cache_root() / key / entry.split / entry.rel
    game_path = folder / "game.tw-pddl"
    if not game_path.exists():
        _write_atomic(folder / "traj_data.json", json.dumps({"task_type": traj["task_type"], "pddl_params": traj["pddl_params"]}))
        _write_atomic(game_path, json.dumps(rebuild(problem, goal, solvable, domain, grammar)))
    return game_path


# ------------------------------------------------------------------------------------------------
# packing the compact copy


def _walk_trials(root: Path) -> Iterator[tuple[str, Path]]:
    for split in SPLITS:
        try:
            base = split_folder(root, split)
        except FileNotFoundError:
            continue
        for traj in sorted(base.glob("*/*/traj_data.json")):
            yield split, traj.parent


def pack(root: Path, out: Path, splits: tuple[str, ...] = ("valid_seen", "valid_unseen", "valid_train")) -> int:
    """Writes the compact copy of a folder in alfworld-download's layout; returns the rows written.
    Trials without a game file are left out (ALFWorld's loader skips them too)."""
    rows = []
    for split, folder in _walk_trials(root):
        if split not in splits or not (folder / "game.tw-pddl").exists():
            continue
        with open(folder / "game.tw-pddl") as f:
            game = json.load(f)
        with open(folder / "traj_data.json") as f:
            traj = json.load(f)
        rel = folder.relative_to(split_folder(root, split)).as_posix()
        rows.append({
            "path": f"{split}/{rel}",
            "goal": goal_of(game["grammar"]),
            "solvable": game.get("solvable"),
            "task_type": traj["task_type"],
            "pddl_params": traj["pddl_params"],
            "problem": game["pddl_problem"],
        })
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.alfworld_data", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="write the compact copy from a folder in alfworld-download's layout")
    p.add_argument("src", type=Path)
    p.add_argument("--out", type=Path, default=COMPACT)
    c = sub.add_parser("count", help="games kept per split and task type")
    c.add_argument("--data", type=Path, default=None, help=f"a user's data folder (default: ${DATA_ENV} or the compact copy)")
    a = ap.parse_args(argv)
    if a.cmd == "pack":
        print(f"{pack(a.src, a.out)} trials → {a.out} ({a.out.stat().st_size} bytes)")
        return 0
    data = a.data or (Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None)
    for split in SPLITS:
        try:
            kept_games = games(split, sorted(TASK_TYPES), data)
        except (ValueError, FileNotFoundError) as e:
            print(f"{split}: {e}", file=sys.stderr)
            continue
        per = [sum(g.task_type == TASK_TYPES[t] for g in kept_games) for t in sorted(TASK_TYPES)]
        print(f"{split}: {len(kept_games)} ({'/'.join(map(str, per))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
