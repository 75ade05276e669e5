from __future__ import annotations

from pathlib import Path

from mage_learner.folders import replace_dir


def _folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "file.txt").write_text(text)
    return path


def test_a_new_folder_is_moved_into_place(tmp_path: Path) -> None:
    replace_dir(_folder(tmp_path / "tmp", "new"), tmp_path / "out")
    assert (tmp_path / "out" / "file.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_existing_folder_is_replaced_whole_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    out = _folder(tmp_path / "out", "old")
    (out / "stale.txt").write_text("only in the old folder")
    replace_dir(_folder(tmp_path / "tmp", "new"), out)
    assert (out / "file.txt").read_text() == "new"
    assert not (out / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
