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
    assert data.materialise(new, DOMAIN_212, GRAMMAR_212) == new.game_file
    path = data.materialise(old, DOMAIN_212, GRAMMAR_212)
    assert path != old.game_file and path.is_relative_to(tmp_path / "cache")
    game = json.loads(path.read_text())
    assert game["pddl_domain"] == DOMAIN_212 and data.is_212(game["pddl_domain"])
    assert data.goal_of(game["grammar"]) == "put an apple in fridge"
    assert game["pddl_problem"] == "(define (problem put-an-apple-in-fridge))" and game["solvable"] is True
    traj = json.loads((path.parent / "traj_data.json").read_text())
    assert traj == {"task_type": "pick_and_place_simple", "pddl_params": {"object_target": "Apple"}}
    assert data.materialise(old, DOMAIN_212, GRAMMAR_212) == path  # cached


def test_compact_games_are_rebuilt_with_their_own_goal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path))
    entry = data.games("valid_seen", [2], None)[0]
    assert entry.row is not None
    game = json.loads(data.materialise(entry, DOMAIN_212, GRAMMAR_212).read_text())
    assert data.goal_of(game["grammar"]) == entry.row["goal"]
    assert game["pddl_problem"] == entry.row["problem"]


def test_pack_writes_the_rows_the_loader_reads(user_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.jsonl.xz"
    assert data.pack(user_folder, out, splits=("train",)) == 6  # trial_g has no game file
    rows = [json.loads(line) for line in lzma.decompress(out.read_bytes()).decode().splitlines()]
    assert {r["path"].split("/")[-1] for r in rows} == {"trial_a", "trial_b", "trial_c", "trial_d", "trial_e", "trial_f"}
    a = next(r for r in rows if r["path"].endswith("trial_a"))
    assert a["goal"] == "put an apple in fridge" and a["task_type"] == "pick_and_place_simple"


def test_the_cache_is_keyed_by_content_not_by_path(user_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    entry = data.games("train", [1], user_folder)[0]
    assert entry.game_file is not None
    first = data.materialise(entry, DOMAIN_212, GRAMMAR_212)
    # The same game under another folder is the same cached file.
    copy = tmp_path / "elsewhere"
    _trial(copy, "train", "pick_and_place_simple-Apple-None-Fridge-1", "trial_a", "pick_and_place_simple",
           json.loads(entry.game_file.read_text()))
    assert data.materialise(data.games("train", [1], copy)[0], DOMAIN_212, GRAMMAR_212) == first
    # The game changed in place (a new download over the old one): rebuilt, never the stale copy.
    entry.game_file.write_text(json.dumps(_game(DOMAIN_211, "put a cold apple in fridge")))
    second = data.materialise(entry, DOMAIN_212, GRAMMAR_212)
    assert second != first
    assert data.goal_of(json.loads(second.read_text())["grammar"]) == "put a cold apple in fridge"
    assert data.goal_of(json.loads(first.read_text())["grammar"]) == "put an apple in fridge"
    # Another wheel logic is another file too.
    assert data.materialise(entry, DOMAIN_212 + " ", GRAMMAR_212) not in (first, second)


def test_trials_at_any_depth_below_a_split_are_read_as_alfworlds_walk_reads_them(tmp_path: Path) -> None:
    root = tmp_path / "data"
    pick = "pick_and_place_simple"
    # One level flatter than alfworld-download writes (no task folder), and two levels deeper.
    for rel, goal in (("trial_flat", "put an apple in fridge"), ("a/b/task/trial_deep", "put an egg in fridge")):
        folder = root / "json_2.1.1" / "valid_seen" / rel
        folder.mkdir(parents=True)
        (folder / "traj_data.json").write_text(json.dumps({"task_type": pick, "pddl_params": {}}))
        (folder / "game.tw-pddl").write_text(json.dumps(_game(DOMAIN_212, goal)))
    kept = data.games("valid_seen", [1], root)
    assert [g.rel for g in kept] == ["a/b/task/trial_deep", "trial_flat"]
    assert data.pack(root, tmp_path / "copy.jsonl.xz", splits=("valid_seen",)) == 2


def test_the_survey_counts_what_each_of_alfworlds_filters_drops(user_folder: Path) -> None:
    s = data.survey("train", user_folder)
    assert (s.trials, s.movable, s.no_game, s.no_solvable, s.unsolvable) == (7, 1, 1, 1, 1)
    assert s.kept_by_type == (2, 0, 0, 1, 0, 0) and s.kept == 3
    assert s.line() == (
        f"train ({user_folder / 'json_2.1.1' / 'train'}): 3 games kept of 7 trials; ALFWorld's filters dropped "
        '1 movable or sliced, 1 without game.tw-pddl, 1 without a "solvable" key, 1 marked unsolvable; '
        "by task type 1-6: 2/0/0/1/0/0"
    )
    assert s.why_none() == ""
    compact = data.survey("valid_seen", None)
    assert compact.kept_by_type == tuple(OFFICIAL["valid_seen"]) and compact.where == "the committed copy"
    assert compact.trials == len(data.entries("valid_seen", None))


def test_a_folder_whose_games_are_not_marked_solvable_is_refused_naming_the_folder_and_the_filter(tmp_path: Path) -> None:
    root = tmp_path / "unmarked"
    for i in range(3):
        _trial(root, "valid_seen", f"pick_and_place_simple-Apple-None-Fridge-{i}", "trial_a", "pick_and_place_simple",
               _game(DOMAIN_212, "put an apple in fridge", solvable=None))
    with pytest.raises(data.DataError) as e:
        data.check_folder(root)
    text = str(e.value)
    assert f"ALFWorld data folder {root}: no split keeps a game" in text
    assert f"valid_seen ({root / 'json_2.1.1' / 'valid_seen'}): 0 games kept of 3 trials" in text
    assert '3 without a "solvable" key' in text
    assert 'ALFWorld plays only games whose game.tw-pddl says "solvable": true' in text


def test_a_missing_folder_or_one_without_splits_names_the_layout_expected(tmp_path: Path) -> None:
    with pytest.raises(data.DataError, match=f"ALFWorld data folder {tmp_path / 'nowhere'} is not a folder .*"
                       "FOLDER/json_2.1.1/<split>/<task>/<trial>/ holding traj_data.json and game.tw-pddl"):
        data.check_folder(tmp_path / "nowhere")
    (tmp_path / "empty" / "json_2.1.1" / "games").mkdir(parents=True)
    with pytest.raises(data.DataError, match="holds no split folder; expected alfworld-download's layout"):
        data.check_folder(tmp_path / "empty")
    # A split folder with nothing below it says so.
    (tmp_path / "hollow" / "valid_seen" / "x").mkdir(parents=True)
    with pytest.raises(data.DataError, match="valid_seen .* holds no traj_data.json at any depth"):
        data.check_folder(tmp_path / "hollow")


def test_a_game_file_that_is_not_json_names_the_file(user_folder: Path) -> None:
    bad = user_folder / "json_2.1.1" / "train" / "pick_and_place_simple-Apple-None-Fridge-1" / "trial_a" / "game.tw-pddl"
    bad.write_text("{not json")
    with pytest.raises(data.DataError, match=f"ALFWorld game data {bad}: cannot be read as JSON"):
        data.games("train", [1], user_folder)


def test_a_folder_with_a_playable_split_passes_and_tells_each_split(user_folder: Path) -> None:
    surveys = data.check_folder(user_folder)
    assert [s.split for s in surveys] == ["train"] and surveys[0].kept == 3
