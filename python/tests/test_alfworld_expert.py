"""ALFWorld's expert over `POST /expert`: followed from the start it wins valid_seen games of task
types 1-4, its facts name only what the attempt looked at, and with the facts of an earlier attempt
as memory it reaches the object sooner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import alfworld.agents.environment  # noqa: F401
    import fast_downward  # noqa: F401
    import textworld  # noqa: F401
except ImportError as e:  # pragma: no cover - the pinned environment has them
    pytest.skip(f"ALFWorld's engine is not installed ({e}); `node scripts/python-env.mjs` installs it",
                allow_module_level=True)

from envhelp import Client, running

from mage_envs import alfworld_data as data
from mage_envs.alfworld_expert import AttemptFacts, looked_at, remembered_misses, remembered_places, seen_objects
from mage_envs.alfworld_server import AlfworldEnv

CONFIG = {"split": "valid_seen", "taskTypes": "1-4", "maxSteps": 50}


def test_observations_read_as_facts() -> None:
    assert seen_objects("You arrive at drawer 1. On the drawer 1, you see nothing.") == []
    assert seen_objects("You open the cabinet 3. The cabinet 3 is open. In it, you see a mug 1, and a soapbar 2.") == [
        "mug 1", "soapbar 2"]
    assert seen_objects("You arrive at cabinet 3. The cabinet 3 is closed.") is None
    assert looked_at("go to cabinet 3") == "cabinet 3" and looked_at("take mug 1 from cabinet 3") is None
    f = AttemptFacts("mug", {"mug"})
    f.record("go to cabinet 3", "You arrive at cabinet 3. The cabinet 3 is closed.")
    f.record("open cabinet 3", "You open the cabinet 3. The cabinet 3 is open. In it, you see a mug 1, and a soapbar 2.")
    f.record("go to drawer 1", "You arrive at drawer 1. On the drawer 1, you see nothing.")
    f.record("go to shelf 1", "You arrive at shelf 1. On the shelf 1, you see a vase 2.")
    f.record("take mug 1 from cabinet 3", "You pick up the mug 1 from the cabinet 3.")
    f.record("go to cabinet 3", "You arrive at cabinet 3. The cabinet 3 is open. In it, you see a soapbar 2.")
    assert f.sentences() == ["cabinet 3 held a mug 1.", "drawer 1 was empty.", "shelf 1 held no mug."]
    assert remembered_places(f.sentences(), {"mug"}) == ["cabinet 3"]
    assert remembered_places(["shelf 1 held no mug.", "drawer 1 was empty."], {"mug"}) == []
    assert remembered_misses(f.sentences(), "mug") == {"drawer 1", "shelf 1"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(data.CACHE_ENV, str(tmp_path_factory.mktemp("alfworld-cache")))
        with running([AlfworldEnv()], time_budget_ms=60_000) as c:
            yield c


def follow(c: Client, sid: str, memory: list[str], seq: int) -> tuple[list[str], dict[str, Any], int]:
    """Plays the expert's actions to the end of the attempt; the actions, the last step reply and seq."""
    actions: list[str] = []
    reply: dict[str, Any] = {}
    while True:
        advice = c.ok("/expert", {"session": sid, "memory": memory})
        if advice["action"] is None:
            return actions, reply, seq
        seq += 1
        reply = c.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{advice['action']}</action>"})
        assert reply["valid"], (advice, reply)
        actions.append(advice["action"])


def first_take(actions: list[str]) -> int:
    return next(i for i, a in enumerate(actions) if a.startswith("take "))


# valid_seen, types 1-4, in path order: 2 look at in light, 13/14 pick and place, 75 heat.
@pytest.mark.parametrize("seed", [2, 13, 14, 75])
def test_the_expert_wins_from_the_start_and_states_only_what_it_saw(client: Client, seed: int) -> None:
    assert next(e for e in client.ok("/info")["environments"] if e["name"] == "alfworld")["expert"] is True
    sid = client.ok("/create", {"env": "alfworld", "seed": seed, "config": CONFIG})["session"]
    actions, last, _ = follow(client, sid, [], 0)
    assert last["won"] and last["done"], actions
    facts = client.ok("/expert", {"session": sid})["facts"]
    looked = {p for p in map(looked_at, actions) if p is not None}
    assert facts and all(f.split(" held ")[0].split(" was ")[0] in looked for f in facts), (facts, looked)
    client.ok("/close", {"session": sid})


def test_memory_of_an_earlier_attempt_reaches_the_object_sooner(client: Client) -> None:
    sid = client.ok("/create", {"env": "alfworld", "seed": 13, "config": CONFIG})["session"]
    before, _, seq = follow(client, sid, [], 0)
    facts = client.ok("/expert", {"session": sid})["facts"]
    client.ok("/restart", {"session": sid, "seq": seq + 1})
    assert client.ok("/expert", {"session": sid})["facts"] == [], "facts are this attempt's"
    after, last, _ = follow(client, sid, facts, seq + 1)
    assert last["won"]
    print(f"\nfirst take at step {first_take(before) + 1} without memory, {first_take(after) + 1} with {facts[:2]}")
    assert first_take(after) < first_take(before)
    assert len(after) < len(before)
    client.ok("/close", {"session": sid})


def test_the_expert_is_read_only_and_deterministic(client: Client) -> None:
    a = client.ok("/create", {"env": "alfworld", "seed": 14, "config": CONFIG})["session"]
    b = client.ok("/create", {"env": "alfworld", "seed": 14, "config": CONFIG})["session"]
    seen = []
    for sid in (a, b):
        first = client.ok("/expert", {"session": sid})
        assert client.ok("/expert", {"session": sid}) == first
        step = client.ok("/step", {"session": sid, "seq": 1, "action": "<action>go to sofa 1</action>"})
        seen.append((first, step["observation"], client.ok("/expert", {"session": sid})))
    assert seen[0] == seen[1]


def test_memory_of_where_the_object_was_not_skips_those_places(client: Client) -> None:
    # An attempt cut after 6 steps sees only places without the book; the next one skips them.
    sid = client.ok("/create", {"env": "alfworld", "seed": 13, "config": {**CONFIG, "maxSteps": 6}})["session"]
    _, last, seq = follow(client, sid, [], 0)
    assert not last["won"]
    facts = client.ok("/expert", {"session": sid})["facts"]
    assert facts and all(" held a " not in f for f in facts), facts
    misses = {f.split(" was empty.")[0].split(" held no ")[0] for f in facts}
    client.ok("/close", {"session": sid})
    sid = client.ok("/create", {"env": "alfworld", "seed": 13, "config": CONFIG})["session"]
    after, last, _ = follow(client, sid, facts, 0)
    assert last["won"]
    search = after[: first_take(after)]
    assert not any(a.startswith("go to ") and a[len("go to "):] in misses for a in search), (misses, after)
    assert first_take(after) + 1 < 13, after  # 13 without memory (the test above)
