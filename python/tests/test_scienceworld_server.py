"""The ScienceWorld adapter over HTTP: identical text on every attempt (with another session played in
between), lists in a fixed order, the variations' splits, config errors naming the field, answers the
engine cannot parse as invalid steps, the gold path as the expert, and the find tasks' exploring
expert (wins without knowing where the thing is; a later attempt with a lost one's facts walks
straight to it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mage_envs.jvm import java_missing

if java_missing():  # pragma: no cover - CI installs Java (.ci/run)
    pytest.skip(str(java_missing()), allow_module_level=True)

from envhelp import Client, running

from mage_envs.protocol import CreateArgs
from mage_envs.scienceworld_server import TASKS, SwEnv, SwSession, canonical, environments

SERVED = ["boil", "find-animal", "find-living-thing", "test-conductivity", "use-thermometer"]


@pytest.fixture(scope="module")
def envs() -> dict[str, SwEnv]:
    return {e.name: e for e in environments(SERVED)}


@pytest.fixture(scope="module")
def client(envs: dict[str, SwEnv]) -> Iterator[Client]:
    with running(list(envs.values()), time_budget_ms=60_000) as c:
        yield c


def _create(client: Client, env: str, seed: int, **config: Any) -> dict[str, Any]:
    return client.ok("/create", {"env": env, "seed": seed, "config": config})


def test_canonical_sorts_every_list() -> None:
    a = "Here you see: \n\tb thing\n\ta table (containing z cup (containing water, air), a lid)\nYou also see:\n\tA door"
    b = "Here you see: \n\ta table (containing a lid, z cup (containing air, water))\n\tb thing\nYou also see:\n\tA door"
    assert canonical(a) == canonical(b) == b


def test_two_attempts_with_the_same_actions_read_the_same(client: Client) -> None:
    created = _create(client, "sw-boil", 3)
    other = _create(client, "sw-find-living-thing", 2)
    sid = created["session"]
    assert "Objects in view: " in created["observation"]
    assert "open door to kitchen" in created["legalActions"]
    assert "boil water" in created["prompt"]["rules"] and "open OBJ" in created["prompt"]["rules"]
    actions = ["open door to kitchen", "go to kitchen", "look around", "open cupboard", "pick up metal pot",
               "look at cupboard", "open fridge", "look around"]
    first = []
    for seq, a in enumerate(actions, 1):
        first.append(client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{a}</action>"}))
        client.ok("/step", {"session": other["session"], "seq": seq, "action": "<action>look around</action>"})
    assert all(r["valid"] for r in first)
    seq = len(actions) + 1
    restarted = client.ok("/restart", {"session": sid, "seq": seq})
    assert restarted["fingerprint"] == created["fingerprint"] and restarted["observation"] == created["observation"]
    second = [client.ok("/step", {"session": sid, "seq": seq + i, "action": f"<action>{a}</action>"})
              for i, a in enumerate(actions, 1)]
    assert [(r["observation"], r["reward"]) for r in first] == [(r["observation"], r["reward"]) for r in second]
    assert _create(client, "sw-boil", 3)["observation"] == created["observation"]


@pytest.mark.parametrize("task", ["test-conductivity", "use-thermometer", "boil"])
def test_the_simulation_replays_exactly_with_other_worlds_in_between(envs: dict[str, SwEnv], task: str) -> None:
    """Circuits and heat flow iterate the engine's hash sets: with the JVM's default identity hashes the
    same commands gave other temperatures and bulb states once other games had run (see the module)."""
    env = envs[f"sw-{task}"]
    s = _session(env, 1)
    gold = s.gold()[:30]
    runs = []
    for r in range(3):
        other = _session(envs["sw-find-living-thing"], 2 + r)
        s.restart()
        texts = []
        for i, a in enumerate(gold):
            texts.append(s.step(f"<action>{a}</action>")["observation"])
            if i % 7 == 0:
                other.step("<action>look around</action>")
        runs.append(texts)
    assert runs[1] == runs[0] and runs[2] == runs[0]


@pytest.mark.parametrize(("split", "seed", "valid"), [("train", 13, True), ("train", 14, False), ("dev", 14, True),
                                                      ("test", 20, False), ("test", 29, True)])
def test_variations_must_lie_in_the_split(client: Client, split: str, seed: int, valid: bool) -> None:
    status, reply = client.call("/create", {"env": "sw-boil", "seed": seed, "config": {"split": split}})
    if valid:
        assert status == 200 and reply["category"] == f"boil/{split}"
    else:
        lo, hi = TASKS["boil"][split]
        assert status == 400 and reply["error"]["kind"] == "bad_seed" and f"[{lo}, {hi}]" in reply["error"]["message"]
    status, reply = client.call("/create", {"env": "sw-boil", "seed": 30})
    assert status == 400 and reply["error"]["kind"] == "bad_seed" and "[0, 29]" in reply["error"]["message"]


@pytest.mark.parametrize(
    ("env", "config", "field"),
    [("sw-boil", {"openDoors": "yes"}, "config.openDoors"), ("sw-boil", {"easy": True}, "config.easy"),
     ("sw-test-conductivity", {"noElectricalAction": True}, "config.noElectricalAction"),
     ("sw-boil", {"maxSteps": 1001}, "config.maxSteps"), ("sw-boil", {"split": "val"}, "config.split"),
     ("sw-boil", {"expert": "explore"}, "config.expert"), ("sw-find-animal", {"expert": "oracle"}, "config.expert")],
)
def test_bad_config_names_the_field(client: Client, env: str, config: dict[str, Any], field: str) -> None:
    status, err = client.call("/create", {"env": env, "seed": 0, "config": config})
    assert status == 400 and err["error"]["kind"] == "bad_config" and err["error"]["field"] == field, err


def test_simplifications_reach_the_engine(client: Client) -> None:
    plain = _create(client, "sw-boil", 0)
    easy = _create(client, "sw-boil", 0, openDoors=True, teleportAction=True)
    assert "(that is closed)" in plain["observation"] and "(that is closed)" not in easy["observation"]
    assert "teleport OBJ" in easy["prompt"]["rules"] and plain["fingerprint"] != easy["fingerprint"]


def test_unparsed_answers_are_invalid_steps(client: Client) -> None:
    created = _create(client, "sw-find-living-thing", 1)
    sid = created["session"]
    for seq, answer in enumerate(["look around", "<action>fly to the moon</action>", "<action>reset task</action>",
                                  "<think>x", "<action></action>"], 1):
        r = client.ok("/step", {"session": sid, "seq": seq, "action": answer})
        assert not r["valid"] and r["reward"] == 0 and not r["done"] and r["observation"] == created["observation"], r
    r = client.ok("/step", {"session": sid, "seq": 6, "action": "<action>look   around</action>"})
    assert r["valid"] and r["action"] == "look around" and r["info"]["steps"] == 1


def _session(env: SwEnv, seed: int, **config: Any) -> SwSession:
    cfg = {k: v["default"] for k, v in env.describe()["config"].items()} | config
    s = env.create(CreateArgs(cfg, seed, 0, None, None))
    assert isinstance(s, SwSession)
    return s


def test_objects_in_view_changed_lists_them_only_when_they_change(envs: dict[str, SwEnv]) -> None:
    always = _session(envs["sw-boil"], 3)
    changed = _session(envs["sw-boil"], 3, objectsInView="changed")
    first = always.observation
    assert changed.observation == first
    actions = ["open door to kitchen", "look around", "go to kitchen", "look around", "open cupboard"]

    def play(s: SwSession) -> list[str]:
        return [s.step(f"<action>{a}</action>")["observation"] for a in actions]

    full, lean = play(always), play(changed)
    shown = first.rpartition("\nObjects in view: ")[2]
    as_before = 0
    for f, c in zip(full, lean, strict=True):
        head, _, listed = f.rpartition("\nObjects in view: ")
        same = listed == shown
        as_before += same
        assert c == (f"{head}\nObjects in view: as before." if same else f), (f, c)
        shown = listed
    assert 0 < as_before < len(actions), "the actions both keep and change the objects in view"
    changed.restart()
    assert changed.observation == first and play(changed) == lean, "an attempt replays exactly"


@pytest.mark.parametrize(("env", "seed"), [("sw-find-living-thing", 2), ("sw-boil", 1)])
def test_the_gold_path_expert_wins_and_stops_after_a_deviation(envs: dict[str, SwEnv], env: str, seed: int) -> None:
    s = _session(envs[env], seed)
    while not s.done:
        action = s.expert([])["action"]
        assert action is not None
        assert s.step(f"<action>{action}</action>")["valid"]
    assert s.won and s.score == 1.0
    assert any(f.startswith("The ") and " held: " in f for f in s.expert([])["facts"])
    s.restart()
    s.step("<action>look around</action>" if s.gold()[0] != "look around" else "<action>wait1</action>")
    assert s.expert([])["action"] is None


def test_the_split_table_is_the_engines(envs: dict[str, SwEnv]) -> None:
    engine = envs["sw-boil"].pool.engines[0]
    with engine.lock:
        engine.owner = None  # its session's world is replayed when next used
        iface = engine.iface()
        for task in SERVED:
            iface.load(task, 0, "", False)
            assert iface.getTaskMaxVariations(task) == TASKS[task]["variations"]
            for split, got in (("train", iface.getVariationsTrain()), ("dev", iface.getVariationsDev()),
                               ("test", iface.getVariationsTest())):
                assert list(got) == list(range(TASKS[task][split][0], TASKS[task][split][1] + 1))


def test_the_expert_over_http(client: Client) -> None:
    sid = _create(client, "sw-find-living-thing", 4)["session"]
    seq, reply = 0, {"done": False}
    while not reply["done"]:
        action = client.ok("/expert", {"session": sid, "memory": []})["action"]
        assert isinstance(action, str)
        seq += 1
        reply = client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{action}</action>"})
    assert reply["won"] and reply["score"] == 1.0 and reply["reward"] > 0


def test_legal_actions_are_the_one_object_commands_and_each_is_a_valid_step(client: Client) -> None:
    created = _create(client, "sw-find-living-thing", 1)
    legal = created["legalActions"]
    assert "look around" in legal and "focus on OBJ" not in " ".join(legal)
    assert not any("OBJ" in a for a in legal) and legal == sorted(set(legal))
    objects = created["observation"].rsplit("Objects in view: ", 1)[1].rstrip(".").split(", ")
    assert f"open {objects[0]}" in legal or f"look at {objects[0]}" in legal
    assert not any(" to " in a and a.startswith("move ") for a in legal), "two-object commands are left out"
    sid, seq = created["session"], 0
    # Commands that do not end the task (a wrong `focus on` would): each one is parsed by the engine.
    for action in [a for a in legal if not a.startswith("focus on")][:: max(1, len(legal) // 8)][:8]:
        seq += 1
        r = client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{action}</action>"})
        assert r["valid"], (action, r.get("invalidReason"))
        if r["done"]:
            break
        assert r["legalActions"] and all("OBJ" not in a for a in r["legalActions"])


def test_facts_name_a_rooms_things_briefly(envs: dict[str, SwEnv]) -> None:
    s = _session(envs["sw-find-living-thing"], 1)
    facts = s.expert([])["facts"]
    assert facts, "the first look is noted"
    for fact in facts:
        room, items = fact[len("The "):].split(" held: ", 1)
        things = items.rstrip(".").split(", ")
        assert len(things) <= 7 and not any(t.startswith(("a ", "the ", "door to")) for t in things), fact
        assert "containing" not in fact and "is:" not in fact, fact
        assert len(fact) < 160, f"a remark of 48 tokens holds it: {fact}"


def _play(s: SwSession, memory: list[str]) -> list[str]:
    """The expert's commands until the attempt ends; every one is a valid step."""
    played: list[str] = []
    while not s.done:
        action = s.expert(memory)["action"]
        assert isinstance(action, str), (s.variation, played)
        assert s.step(f"<action>{action}</action>")["valid"], (s.variation, action)
        played.append(action)
    return played


@pytest.mark.parametrize("doors", [False, True])
@pytest.mark.parametrize(("env", "variation"), [("sw-find-animal", 0), ("sw-find-animal", 2), ("sw-find-animal", 9),
                                                ("sw-find-living-thing", 1)])
def test_the_exploring_expert_wins_and_a_later_attempt_walks_straight_there(
        envs: dict[str, SwEnv], env: str, variation: int, doors: bool) -> None:
    s = _session(envs[env], variation, maxSteps=60, openDoors=doors, expert="explore")
    free = _play(s, [])
    assert s.won and s.score == 1.0
    gold = [a for a in s.gold() if a != "look around" and not (doors and a.startswith("open door"))]
    assert len(free) > len(gold), "it explores: it does not know where the thing is"
    # An attempt cut one step short of the box leaves facts that lead with where the thing was.
    short = _session(envs[env], variation, maxSteps=len(free) - 1, openDoors=doors, expert="explore")
    short._gold = s.gold()
    assert not _play(short, []) or not short.won
    facts = short.expert([])["facts"]
    assert facts[0].startswith(f"The {short.find_task().noun} was in the ") and facts[1].startswith("Path: "), facts
    short.restart()
    again = _play(short, facts[:3])
    assert short.won and len(again) < len(free), (again, free)
    assert again.index(f"focus on {short.find_task().target}") <= len(gold), (again, gold)


def test_the_exploring_expert_over_http(client: Client) -> None:
    created = _create(client, "sw-find-animal", 5, expert="explore", openDoors=True, maxSteps=8)
    sid, seq, reply = created["session"], 0, {"done": False}
    while not reply["done"]:
        action = client.ok("/expert", {"session": sid, "memory": []})["action"]
        seq += 1
        reply = client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{action}</action>"})
    assert not reply["won"]
    facts = client.ok("/expert", {"session": sid, "memory": []})["facts"]
    assert facts and all(isinstance(f, str) for f in facts)
    seq += 1
    client.ok("/restart", {"session": sid, "seq": seq})
    reply = {"done": False}
    while not reply["done"]:
        action = client.ok("/expert", {"session": sid, "memory": facts[:3]})["action"]
        seq += 1
        reply = client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{action}</action>"})
    assert reply["won"], facts[:3]
