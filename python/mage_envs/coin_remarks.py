"""Whether a coin-collector reflection is true, and whether the next attempt acted on it.

`mage replay --remarks` counts remarks that are well formed and informative (they name something the
attempt saw); it cannot tell a right "Not tried: the bedroom's east door." from a wrong one. This
reads mage's trial transcripts (a run's `transcripts.jsonl` or `eval-transcripts.jsonl`, a warm
start's `checks-transcripts.jsonl`), rebuilds each attempt's map with the coin expert's parser, and
for every attempt followed by another counts:
- the exits its remark names as not tried, and how many of them the attempt had indeed not tried
  (an exit it saw that leads nowhere it searched: `CoinMap.untried`);
- whether the first one named is among them;
- whether the next attempt went through an exit the remark named, or through one truly not tried,
  and how often it won then;
- for a remark with a plan ("Plan: move west, open door to south, move south."): whether the plan
  walks the attempt's map from its first room and ends through an exit truly not tried (or in the
  room where the coin was), and whether the next attempt began with the plan's commands, and won.
Over every attempt it also counts the walk's waste: valid steps, moves into a room the attempt had
already been in, and doors opened that were already open.

    python -m mage_envs.coin_remarks FILE.jsonl [FILE.jsonl …] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from .coin_expert import _FACT_PLAN, DIRECTIONS, _UNTRIED_ITEM, CoinMap, coin_map, read_look

Exit = tuple[str, str]


def attempt_trace(attempt: dict[str, Any]) -> list[tuple[str, str]]:
    """(action, observation) pairs as `coin_map` reads them; the first action is "" (the start).
    Invalid answers are left out: the game never saw them (their observation is the last one again)."""
    out = [("", str(attempt.get("initialObservation") or ""))]
    for turn in attempt.get("turns", []):
        if turn.get("valid", True):
            out.append((str(turn.get("action") or ""), str(turn.get("observation") or "")))
    return out


def named_exits(remark: str) -> list[Exit]:
    """The exits a remark's "Not tried: …" sentence names, in order."""
    start = remark.find("Not tried:")
    if start < 0:
        return []
    sentence = remark[start:].split(".")[0]
    return [(room, d) for room, d, _ in _UNTRIED_ITEM.findall(sentence)]


def plan_of(remark: str) -> list[str]:
    """The commands of a remark's "Plan: …" sentence ([] when it has none the expert could read)."""
    start = remark.find("Plan:")
    if start < 0:
        return []
    m = _FACT_PLAN.match(remark[start:].split(".")[0] + ".")
    return m.group(1).split(", ") if m else []


def plan_right(plan: list[str], m: CoinMap) -> bool:
    """Whether `plan` walks the attempt's map `m` from its first room along exits it knows (doors
    opened before they are walked through) and ends through an exit truly not tried, or in the coin's room."""
    room, opened, untried = m.start, set(), set(m.untried())
    for i, command in enumerate(plan):
        words = command.split()
        d, last = words[-1], i == len(plan) - 1
        if room is None or d not in m.exits.get(room, {}):
            return False
        if words[0] == "open":
            if (room, d) not in m.doors:
                return False
            opened.add((room, d))
            continue
        if (room, d) in m.doors and (room, d) not in opened:
            return False
        if last and (room, d) in untried:
            return True
        room = m.exits[room][d]
    return room is not None and room == m.coin


def exits_taken(attempt: dict[str, Any]) -> list[Exit]:
    """The exits an attempt opened or moved through, as (room it was in, direction)."""
    m = coin_map([], [])
    out: list[Exit] = []
    for action, observation in attempt_trace(attempt):
        words = action.split()
        if m.here and words and words[-1] in DIRECTIONS and (words[0] == "move" or words[:2] == ["open", "door"]):
            out.append((m.here, words[-1]))
        m.apply(action, observation)
    return out


def walk_waste(attempt: dict[str, Any]) -> tuple[int, int, int]:
    """(valid steps, moves back into a room this attempt had been in, opens of a door already open)."""
    been: set[str] = set()
    steps = revisits = reopens = 0
    for action, observation in attempt_trace(attempt):
        look = read_look(observation)
        if action:
            steps += 1
            revisits += look is not None and action.startswith("move ") and look.room in been
            reopens += action.startswith("open door") and observation.startswith("That is already open")
        if look is not None:
            been.add(look.room)
    return steps, revisits, reopens


def won(attempt: dict[str, Any]) -> bool:
    return any(bool(t.get("won")) for t in attempt.get("turns", []))


def tally(trials: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The counts above over every attempt that a later attempt followed."""
    keys = ("followed", "remarks", "not_tried_remarks", "named", "named_true", "first_named_true",
            "next_won", "next_through_named", "next_through_named_won", "next_through_true", "next_through_true_won",
            "plans", "plans_right", "next_followed_plan", "next_followed_plan_won",
            "next_followed_right_plan", "next_followed_right_plan_won", "attempts", "steps", "revisits", "reopens")
    c = dict.fromkeys(keys, 0)
    for trial in trials:
        attempts = trial.get("memory", {}).get("attempts", [])
        for attempt in attempts:
            steps, revisits, reopens = walk_waste(attempt)
            c["attempts"] += 1
            c["steps"] += steps
            c["revisits"] += revisits
            c["reopens"] += reopens
        for before, after in zip(attempts, attempts[1:]):
            c["followed"] += 1
            reflection = before.get("reflection") or {}
            text = str(reflection.get("text") or "") if reflection.get("valid", True) else ""
            c["remarks"] += bool(text)
            named = named_exits(text)
            seen = coin_map(attempt_trace(before), [])
            true = set(seen.untried())
            c["not_tried_remarks"] += bool(named)
            c["named"] += len(named)
            c["named_true"] += sum(x in true for x in named)
            c["first_named_true"] += bool(named) and named[0] in true
            taken, next_won = set(exits_taken(after)), won(after)
            c["next_won"] += next_won
            if taken & set(named):
                c["next_through_named"] += 1
                c["next_through_named_won"] += next_won
            if taken & true:
                c["next_through_true"] += 1
                c["next_through_true_won"] += next_won
            plan = plan_of(text)
            if plan:
                right = plan_right(plan, seen)
                played = [a for a, _ in attempt_trace(after)[1:]]
                c["plans"] += 1
                c["plans_right"] += right
                if played[: len(plan)] == plan:
                    c["next_followed_plan"] += 1
                    c["next_followed_plan_won"] += next_won
                    c["next_followed_right_plan"] += right
                    c["next_followed_right_plan_won"] += right and next_won
    return c


def report(c: dict[str, int]) -> str:
    def share(a: int, b: int) -> str:
        return f"{a} of {b}" + (f" ({100 * a / b:.1f}%)" if b else "")

    return "\n".join([
        f"attempts followed by another: {c['followed']}; with a remark: {c['remarks']}; "
        f"naming exits not tried: {c['not_tried_remarks']}",
        f"exits named that the attempt had not tried: {share(c['named_true'], c['named'])}",
        f"the first exit named right: {share(c['first_named_true'], c['not_tried_remarks'])}",
        f"next attempt won: {share(c['next_won'], c['followed'])}",
        f"the walk, over {c['attempts']} attempts: {c['steps']} valid steps; moves back into a room the attempt "
        f"had been in: {share(c['revisits'], c['steps'])}; doors opened that were open: {share(c['reopens'], c['steps'])}",
        f"next attempt went through an exit the remark named: {share(c['next_through_named'], c['followed'])}, "
        f"won {share(c['next_through_named_won'], c['next_through_named'])}",
        f"next attempt went through an exit truly not tried: {share(c['next_through_true'], c['followed'])}, "
        f"won {share(c['next_through_true_won'], c['next_through_true'])}",
        *([
            f"remarks with a plan: {c['plans']}; plans right: {share(c['plans_right'], c['plans'])}",
            f"next attempt began with the plan: {share(c['next_followed_plan'], c['plans'])}, "
            f"won {share(c['next_followed_plan_won'], c['next_followed_plan'])}; "
            f"with a right plan {c['next_followed_right_plan']}, won {c['next_followed_right_plan_won']}",
        ] if c["plans"] else []),
    ])


def read_trials(paths: list[str]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.coin_remarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="transcript JSONL files (one trial per line)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    a = ap.parse_args(argv)
    c = tally(read_trials(a.files))
    print(json.dumps(c) if a.json else report(c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
