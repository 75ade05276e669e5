"""ALFWorld's game files: the committed compact copy, a user's data folder, ALFWorld's loader filters,
and the 2.1.1 → 2.1.2 rebuild (docs/environments.md, *ALFWorld*).

Standard library only, so the game lists can be read (and tested) without the engine installed.

- The compact copy (`data/alfworld/games-json_2.1.1.jsonl.xz`, ALFWorld's MIT licence and the
  provenance beside it) holds, per trial of the three evaluation splits, what a game is made of
  besides the shared domain and grammar: the PDDL problem, the goal text, `solvable`, and the
  `task_type` and `pddl_params` of its `traj_data.json`.
- A user's folder is the layout `alfworld-download` writes (`$ALFWORLD_DATA/json_2.1.1/<split>/
  <task>/<trial>/{game.tw-pddl,traj_data.json}`; the folder itself or its `json_2.1.1` may be given).
  Below a split's folder a trial may sit at any depth, as ALFWorld's loader walks the whole tree.
- The filters are ALFWorld's (`AlfredTWEnv.collect_game_files`): no movable or sliced receptacles
  (by the path), the selected task types, a game file, and a `solvable` key that is true. `survey`
  counts what each filter drops, for the server's start and its errors.
- The `alfworld` wheel ships the 2.1.2 domain and grammar, and its hand-coded expert speaks 2.1.2. A
  2.1.1 game (the compact copy's, or an old download) is rebuilt from its PDDL problem with the
  wheel's domain and grammar and its own goal text, written once to a cache folder named by the
  hash of what is written (so a changed game is rebuilt, and two folders never share a stale file).
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
LAYOUT = ("alfworld-download's layout: FOLDER/json_2.1.1/<split>/<task>/<trial>/ holding traj_data.json and "
          "game.tw-pddl (or FOLDER/<split>/...; trials at any depth below <split>), <split> one of " + ", ".join(SPLITS))


class DataError(ValueError):
    """A data folder or a game file that cannot be read as ALFWorld's; the message names the path."""


@dataclass(frozen=True)
class GameEntry:
    """One trial as the loader sees it (before the filters)."""

    split: str
    rel: str  # "<task>/<trial>" (any depth in a user's folder)
    task_type: str  # "" for a movable or sliced trial of a user's folder (never read, as ALFWorld)
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


def trial_folders(base: Path) -> list[Path]:
    """Every folder at or below `base` that holds a `traj_data.json`, at any depth (ALFWorld's loader
    walks the whole tree, symbolic links to folders not followed), in path order."""
    return sorted(p.parent for p in base.rglob("traj_data.json") if p.is_file())


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise DataError(f"ALFWorld game data {path}: cannot be read as JSON ({type(e).__name__}: {e})") from e


def _task_type(traj: Path) -> str:
    parsed = read_json(traj)
    value = parsed.get("task_type") if isinstance(parsed, dict) else None
    if not isinstance(value, str):
        raise DataError(f"ALFWorld game data {traj}: no \"task_type\" string (ALFWorld's traj_data.json has one)")
    return value


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
    for folder in trial_folders(base):
        game = folder / "game.tw-pddl"
        if not game.exists():
            continue
        rel = folder.relative_to(base).as_posix()
        if "movable" in rel or "Sliced" in rel:  # ALFWorld never opens those
            out.append(GameEntry(split, rel, "", None, game_file=game))
            continue
        parsed = read_json(game)
        solvable = parsed.get("solvable") if isinstance(parsed, dict) else None
        out.append(GameEntry(split, rel, _task_type(folder / "traj_data.json"), solvable, game_file=game))
    return out


def games(split: str, task_types: list[int], data_dir: Path | None) -> list[GameEntry]:
    return [e for e in entries(split, data_dir) if kept(e, task_types)]


@dataclass(frozen=True)
class Survey:
    """What ALFWorld's loader keeps of one split and what each of its filters drops, all task types."""

    split: str
    where: str  # the split's folder, or "the committed copy"
    trials: int  # folders holding a traj_data.json
    movable: int  # movable or sliced receptacles (by the path): never opened
    no_game: int  # no game.tw-pddl beside the traj_data.json
    no_solvable: int  # a game.tw-pddl without a "solvable" key
    unsolvable: int  # "solvable": false
    kept_by_type: tuple[int, ...]  # kept games of types 1-6

    @property
    def kept(self) -> int:
        return sum(self.kept_by_type)

    def line(self) -> str:
        """`valid_seen (FOLDER): 140 games kept of 251 trials; dropped ...; by task type 1-6: 35/13/27/16/25/24`."""
        return (f"{self.split} ({self.where}): {self.kept} games kept of {self.trials} trials; ALFWorld's filters dropped "
                f"{self.movable} movable or sliced, {self.no_game} without game.tw-pddl, {self.no_solvable} without "
                f"a \"solvable\" key, {self.unsolvable} marked unsolvable; by task type 1-6: "
                + "/".join(map(str, self.kept_by_type)))

    def why_none(self) -> str:
        """Why the split keeps no game, and what to fix (empty when it keeps some)."""
        if self.kept:
            return ""
        if self.trials == 0:
            return (f"{self.split} ({self.where}) holds no traj_data.json at any depth; expected {LAYOUT}")
        hint = ""
        if self.no_solvable:
            hint = (" ALFWorld plays only games whose game.tw-pddl says \"solvable\": true (alfworld-download's "
                    "files carry it; games written by other tools need it set once checked solvable).")
        return f"{self.line()}.{hint}"


def survey(split: str, data_dir: Path | None) -> Survey:
    """Counts the split's trials through ALFWorld's filters (FileNotFoundError: no such split)."""
    movable = no_game = no_solvable = unsolvable = 0
    by_type = [0] * len(TASK_TYPES)
    type_no = {v: k for k, v in TASK_TYPES.items()}
    if data_dir is None:
        listed = entries(split, None)
        where, trials = "the committed copy", len(listed)
    else:
        base = split_folder(data_dir, split)
        listed = entries(split, data_dir)
        where, trials = str(base), len(trial_folders(base))
        no_game = trials - len(listed)
    for e in listed:
        if "movable" in e.rel or "Sliced" in e.rel:
            movable += 1
        elif e.solvable is None:
            no_solvable += 1
        elif e.solvable is not True:
            unsolvable += 1
        elif e.task_type in type_no:
            by_type[type_no[e.task_type] - 1] += 1
    return Survey(split, where, trials, movable, no_game, no_solvable, unsolvable, tuple(by_type))


def check_folder(data_dir: Path) -> list[Survey]:
    """A user's data folder as the server checks it at start: the surveys of the splits it holds.
    DataError when it is not a folder, holds no split, or none of its splits keeps a game."""
    if not data_dir.is_dir():
        raise DataError(f"ALFWorld data folder {data_dir} is not a folder (--data or ${DATA_ENV}); expected {LAYOUT}")
    found: list[Survey] = []
    for split in SPLITS:
        try:
            found.append(survey(split, data_dir))
        except FileNotFoundError:
            continue
    if not found:
        raise DataError(f"ALFWorld data folder {data_dir} holds no split folder; expected {LAYOUT}")
    if not any(s.kept for s in found):
        raise DataError(f"ALFWorld data folder {data_dir}: no split keeps a game that ALFWorld would play: "
                        + " ".join(s.why_none() for s in found))
    return found


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


def materialise(entry: GameEntry, domain: str, grammar: str) -> Path:
    """The path of a 2.1.2 `game.tw-pddl` for the entry, with its `traj_data.json` beside it
    (the expert reads it). A user's 2.1.2 file is used in place; anything else is rebuilt into the
    cache, in a folder named by the hash of the two files written: the same game is written once,
    and a game whose source changed is written anew (never a stale copy under an old path).
    DataError: a source that is not a game file; OSError: the cache cannot be written."""
    if entry.game_file is not None:
        src = read_json(entry.game_file)
        try:
            if is_212(src["pddl_domain"]):
                return entry.game_file
            problem, goal, solvable = src["pddl_problem"], goal_of(src["grammar"]), src.get("solvable")
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"ALFWorld game file {entry.game_file}: not a TextWorld PDDL game "
                            f"(pddl_domain, grammar with one task text, pddl_problem): {type(e).__name__}: {e}") from e
        traj = read_json(entry.game_file.parent / "traj_data.json")
    else:
        assert entry.row is not None
        problem, goal, solvable = entry.row["problem"], entry.row["goal"], entry.row["solvable"]
        traj = {"task_type": entry.row["task_type"], "pddl_params": entry.row["pddl_params"]}
    traj_text = json.dumps({"task_type": traj["task_type"], "pddl_params": traj.get("pddl_params")})
    game_text = json.dumps(rebuild(problem, goal, solvable, domain, grammar))
    key = hashlib.sha256(f"{game_text}\0{traj_text}".encode()).hexdigest()[:32]
    folder = cache_root() / "games" / key
    game_path = folder / "game.tw-pddl"
    if not game_path.exists():  # written last: a game file there has its traj_data.json beside it
        _write_atomic(folder / "traj_data.json", traj_text)
        _write_atomic(game_path, game_text)
    return game_path


# ------------------------------------------------------------------------------------------------
# packing the compact copy


def _walk_trials(root: Path) -> Iterator[tuple[str, Path]]:
    for split in SPLITS:
        try:
            base = split_folder(root, split)
        except FileNotFoundError:
            continue
        for folder in trial_folders(base):
            yield split, folder


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
            s = survey(split, data)
        except (ValueError, FileNotFoundError) as e:
            print(f"{split}: {e}", file=sys.stderr)
            continue
        print(f"{split}: {s.kept} ({'/'.join(map(str, s.kept_by_type))})  [{s.line()}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
