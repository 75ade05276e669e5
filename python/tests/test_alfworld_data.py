"""ALFWorld's game lists without the engine: the committed compact copy keeps ALFWorld's official
evaluation sets under ALFWorld's loader filters, a user's folder in alfworld-download's layout is
filtered the same way, and 2.1.1 games are rebuilt as 2.1.2 games with their own goal text."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from mage_envs import alfworld_data as data

# PROVENANCE.md: ALFWorld's own loader keeps these, by task type 1-6.
OFFICIAL = {
    "valid_seen": [35, 13, 27, 16, 25, 24],
    "valid_unseen": [24, 18, 31, 23, 21, 17],
    "valid_train": [46, 19, 37, 25, 28, 45],
}

DOMAIN_211 = "(define (domain alfred)\n(:action gotolocation)\n)"
DOMAIN_212 = "(define (domain alfred)\n(:action gotolocation)\n(:action help\n)\n)"
GRAMMAR_212 = '{"intro": [{"rhs": "Your task is to: UNKNOWN GOAL."}], "move": "move {o} to {r}"}'


@pytest.mark.parametrize("split", sorted(OFFICIAL))
def test_the_compact_copy_keeps_alfworlds_official_sets(split: str) -> None:
    kept = data.games(split, [1, 2, 3, 4, 5, 6], None)
    per_type = [sum(g.task_type == data.TASK_TYPES[t] for g in kept) for t in range(1, 7)]
    assert per_type == OFFICIAL[split]
    assert [g.name for g in kept] == sorted(g.name for g in kept)
    first4 = data.games(split, [1, 2, 3, 4], None)
    assert len(first4) == sum(OFFICIAL[split][:4])


def test_the_compact_copy_is_small_and_carries_licence_and_provenance() -> None:
    folder = data.COMPACT.parent
    assert data.COMPACT.stat().st_size <= 5 * 1024 * 1024
    assert "MIT License" in (folder / "LICENSE").read_text()
    assert "ALFWorld" in (folder / "PROVENANCE.md").read_text()


def test_the_filters_drop_what_alfworlds_loader_drops() -> None:
    rows = data.entries("valid_seen", None)
    dropped = [e for e in rows if not data.kept(e, [1, 2, 3, 4, 5, 6])]
    assert dropped, "valid_seen has unsolvable games"
    assert all(e.solvable is not True or "movable" in e.rel or "Sliced" in e.rel for e in dropped)


@pytest.mark.parametrize(
    ("spec", "want"),
    [("all", [1, 2, 3, 4, 5, 6]), ("1-4", [1, 2, 3, 4]), ("5,6", [5, 6]), (" 2, 1-2 ", [1, 2])],
)
def test_task_types(spec: str, want: list[int]) -> None:
    assert data.parse_task_types(spec) == want


@pytest.mark.parametrize("spec", ["0", "7", "4-1", "heat", ""])
def test_bad_task_types_name_the_field(spec: str) -> None:
    with pytest.raises(ValueError, match="taskTypes"):
        data.parse_task_types(spec)


def test_the_train_split_needs_a_users_folder() -> None:
    with pytest.raises(ValueError, match=data.DATA_ENV):
        data.entries("train", None)


def _trial(root: Path, split: str, task: str, trial: str, task_type: str, game: dict[str, object] | None) -> None:
    folder = root / "json_2.1.1" / split / task / trial
    folder.mkdir(parents=True)
    (folder / "traj_data.json").write_text(json.dumps({"task_type": task_type, "pddl_params": {"object_target": "Apple"}}))
    if game is not None:
        (folder / "game.tw-pddl").write_text(json.dumps(game))


def _game(domain: str, goal: str, solvable: bool | None = True) -> dict[str, object]:
    g: dict[str, object] = {
        "pddl_domain": domain,
        "grammar": GRAMMAR_212.replace("UNKNOWN GOAL", goal),
        "pddl_problem": f"(define (problem {goal.replace(' ', '-')}))",
    }
    if solvable is not None:
        g["solvable"] = solvable
    return g


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    root = tmp_path / "alfworld"
    pick, heat = "pick_and_place_simple", "pick_heat_then_place_in_recep"
    _trial(root, "train", f"{pick}-Apple-None-Fridge-1", "trial_a", pick, _game(DOMAIN_211, "put an apple in fridge"))
    _trial(root, "train", f"{pick}-Egg-None-Fridge-1", "trial_b", pick, _game(DOMAIN_212, "put an egg in fridge"))
    _trial(root, "train", f"{heat}-Egg-None-Fridge-1", "trial_c", heat, _game(DOMAIN_211, "put a hot egg in fridge"))
    _trial(root, "train", f"{pick}-Cup-None-Sink-1", "trial_d", pick, _game(DOMAIN_211, "x", solvable=False))
    _trial(root, "train", f"{pick}-Cup-None-Sink-2", "trial_e", pick, _game(DOMAIN_211, "x", solvable=None))
    _trial(root, "train", f"{pick}_with_movable_recep-AppleSliced-Pan-Sink-1", "trial_f", pick, _game(DOMAIN_211, "x"))
    _trial(root, "train", f"{pick}-Pen-None-Desk-1", "trial_g", pick, None)
    return root


def test_a_users_folder_is_filtered_as_alfworld_does(user_folder: Path) -> None:
    kept = data.games("train", [1], user_folder)
    assert [g.rel.split("/")[1] for g in kept] == ["trial_a", "trial_b"]
    assert [g.rel.split("/")[1] for g in data.games("train", [1, 4], user_folder)] == ["trial_a", "trial_b", "trial_c"]
    # the folder itself or its json_2.1.1 may be named
    assert len(data.games("train", [1], user_folder / "json_2.1.1")) == 2
    with pytest.raises(FileNotFoundError, match="no valid_seen split"):
        data.games("valid_seen", [1], user_folder)


def test_211_games_are_rebuilt_as_212_and_212_games_used_in_place(
    user_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    old, new = data.games("train", [1], user_folder)
    assert data.materialise(new, DOMAIN_212, GRAMMAR_212, user_folder) == new.game_file
    path = data.materialise(old, DOMAIN_212, GRAMMAR_212, user_folder)
    assert path != old.game_file and path.is_relative_to(tmp_path / "cache")
    game = json.loads(path.read_text())
    assert game["pddl_domain"] == DOMAIN_212 and data.is_212(game["pddl_domain"])
    assert data.goal_of(game["grammar"]) == "put an apple in fridge"
    assert game["pddl_problem"] == "(define (problem put-an-apple-in-fridge))" and game["solvable"] is True
    traj = json.loads((path.parent / "traj_data.json").read_text())
    assert traj == {"task_type": "pick_and_place_simple", "pddl_params": {"object_target": "Apple"}}
    assert data.materialise(old, DOMAIN_212, GRAMMAR_212, user_folder) == path  # cached


def test_compact_games_are_rebuilt_with_their_own_goal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path))
    entry = data.games("valid_seen", [2], None)[0]
    assert entry.row is not None
    game = json.loads(data.materialise(entry, DOMAIN_212, GRAMMAR_212, None).read_text())
    assert data.goal_of(game["grammar"]) == entry.row["goal"]
    assert game["pddl_problem"] == entry.row["problem"]


def test_pack_writes_the_rows_the_loader_reads(user_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.jsonl.xz"
    assert data.pack(user_folder, out, splits=("train",)) == 6  # trial_g has no game file
    rows = [json.loads(line) for line in lzma.decompress(out.read_bytes()).decode().splitlines()]
    assert {r["path"].split("/")[-1] for r in rows} == {"trial_a", "trial_b", "trial_c", "trial_d", "trial_e", "trial_f"}
    a = next(r for r in rows if r["path"].endswith("trial_a"))
    assert a["goal"] == "put an apple in fridge" and a["task_type"] == "pick_and_place_simple"
