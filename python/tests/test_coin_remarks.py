"""The coin remark tally (`python -m mage_envs.coin_remarks`) on a hand-written two-attempt trial:
a remark with one right and one wrong exit, a next attempt that goes through the right one and wins;
plans that are right or wrong, followed or not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mage_envs.coin_remarks import exits_taken, main, named_exits, plan_of, tally, walk_waste

KITCHEN = ("You are in the kitchen. In one part of the room you see a stove. \n"
           "To the North you see a closed wood door. To the East you see a closed plain door.")
BACKYARD = "You are in the backyard. \nThrough an open wood door, to the South you see the kitchen."
PANTRY = "You are in the pantry. You also see a coin. \nThrough an open plain door, to the West you see the kitchen."


def turn(action: str, observation: str, won: bool = False) -> dict[str, Any]:
    return {"action": action, "observation": observation, "won": won}


def trial(remark: str) -> dict[str, Any]:
    first = {"initialObservation": KITCHEN, "turns": [
        turn("open door to north", "You open the wood door, revealing the backyard."),
        turn("move north", BACKYARD)],
        "reflection": {"text": remark, "valid": True}}
    second = {"initialObservation": KITCHEN, "turns": [
        turn("open door to east", "You open the plain door, revealing the pantry."),
        turn("move east", PANTRY),
        turn("take coin", "You take the coin.", won=True)]}
    return {"memory": {"attempts": [first, second]}}


def test_a_remark_with_one_right_exit_and_a_next_attempt_through_it() -> None:
    remark = "Not tried: the kitchen's east door and the backyard's west door. The coin was not in the kitchen."
    assert named_exits(remark) == [("kitchen", "east"), ("backyard", "west")]
    assert exits_taken(trial(remark)["memory"]["attempts"][1]) == [("kitchen", "east"), ("kitchen", "east")]
    c = tally([trial(remark)])
    assert (c["followed"], c["remarks"], c["not_tried_remarks"]) == (1, 1, 1)
    assert (c["named"], c["named_true"], c["first_named_true"]) == (2, 1, 1)
    assert (c["next_won"], c["next_through_named"], c["next_through_named_won"]) == (1, 1, 1)
    assert (c["next_through_true"], c["next_through_true_won"]) == (1, 1)


def test_a_wrong_first_exit_and_a_remark_without_exits() -> None:
    wrong = tally([trial("Not tried: the backyard's west door and the kitchen's east door.")])
    assert (wrong["named_true"], wrong["first_named_true"]) == (1, 0)
    none = tally([trial("The coin was not in the kitchen or the backyard.")])
    assert (none["not_tried_remarks"], none["named"], none["next_through_named"]) == (0, 0, 0)
    assert none["next_through_true"] == 1


def test_invalid_answers_are_not_read_as_moves() -> None:
    """An invalid answer repeats the last observation; read as a move it would name a door "home"."""
    t = trial("Not tried: the kitchen's east door.")
    first = t["memory"]["attempts"][0]["turns"]
    first.insert(1, {**turn("open door to home", "You open the wood door, revealing the backyard."), "valid": False})
    c = tally([t])
    assert (c["named"], c["named_true"]) == (1, 1)


def test_the_command_reads_jsonl_files(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(trial("Not tried: the kitchen's east door.")) + "\n")
    assert main([str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["named_true"] == 1
    assert main([str(path)]) == 0
    assert "exits named that the attempt had not tried: 1 of 1 (100.0%)" in capsys.readouterr().out


def test_a_right_plan_followed_and_wrong_plans() -> None:
    """The next attempt plays "open door to east, move east" and wins: the plan that says so is right
    and followed; one through the tried north door, one through the east door unopened, and one
    through an exit the kitchen does not have are wrong and not followed."""
    right = tally([trial("Not tried: the kitchen's east door. Plan: open door to east, move east.")])
    assert (right["plans"], right["plans_right"], right["next_followed_plan"], right["next_followed_plan_won"]) == (1, 1, 1, 1)
    assert (right["next_followed_right_plan"], right["next_followed_right_plan_won"]) == (1, 1)
    for plan in ("open door to north, move north", "move east", "move west"):
        wrong = tally([trial(f"Plan: {plan}.")])
        assert (wrong["plans"], wrong["plans_right"], wrong["next_followed_plan"]) == (1, 0, 0), plan
    assert plan_of("Plan: move up, go north.") == [] and tally([trial("Plan: go north.")])["plans"] == 0


def test_the_walks_waste_moves_back_and_doors_already_open() -> None:
    """Attempt 1 goes north and back south (a move into the kitchen it was in) and opens the open door;
    attempt 2 goes east once: no waste."""
    t = trial("Not tried: the kitchen's east door.")
    first = t["memory"]["attempts"][0]
    first["turns"] += [turn("move south", KITCHEN.replace("closed wood door", "open wood door")),
                       turn("open door to north", "That is already open.")]
    assert walk_waste(first) == (4, 1, 1) and walk_waste(t["memory"]["attempts"][1]) == (3, 0, 0)
    c = tally([t])
    assert (c["attempts"], c["steps"], c["revisits"], c["reopens"]) == (2, 7, 1, 1)
