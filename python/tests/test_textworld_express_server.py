"""The TextWorldExpress adapter over HTTP: identical text on every attempt (also with other
sessions' games played in between, which the one-game engine replays), the splits' seed ranges,
config errors naming the field, malformed answers as invalid steps, and the coin collector's
expert (wins from the start; with a failed attempt's facts, a later attempt walks to the coin in
fewer steps)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mage_envs.jvm import java_missing

if java_missing():  # pragma: no cover - CI installs Java (.ci/run)
    pytest.skip(str(java_missing()), allow_module_level=True)

from envhelp import Client, running

from mage_envs.coin_expert import CoinMap, coin_map, join_words, split_rooms
from mage_envs.protocol import CreateArgs
from mage_envs.textworld_express_server import TwxEnv, TwxSession, environments


@pytest.fixture(scope="module")
def envs() -> dict[str, TwxEnv]:
    return {e.name: e for e in environments()}


@pytest.fixture(scope="module")
def client(envs: dict[str, TwxEnv]) -> Iterator[Client]:
    with running(list(envs.values())) as c:
        yield c


def _create(client: Client, env: str, seed: int, **config: Any) -> dict[str, Any]:
    return client.ok("/create", {"env": env, "seed": seed, "config": config})


def _steps(client: Client, sid: str, actions: list[str], seq: int) -> tuple[list[dict[str, Any]], int]:
    out = []
    for a in actions:
        seq += 1
        out.append(client.ok("/step", {"session": sid, "seq": seq, "action": f"ok. <action>{a}</action>"}))
    return out, seq


@pytest.mark.parametrize("env", ["twx-coin", "twx-cookingworld", "twx-twc", "twx-mapreader", "twx-sorting"])
def test_two_attempts_with_the_same_actions_read_the_same(client: Client, env: str) -> None:
    created = _create(client, env, 7)
    other = _create(client, "twx-twc" if env != "twx-twc" else "twx-coin", 8)
    sid = created["session"]
    assert created["legalActions"] == sorted(created["legalActions"]) and created["info"]["seed"] == 7
    # a fixed policy over what is listed: the i-th action in sorted order, cycling
    actions, state = [], created
    for i in range(8):
        if state["done"]:
            break
        actions.append(state["legalActions"][(3 * i + 1) % len(state["legalActions"])])
        seq = i + 1
        state = client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{actions[-1]}</action>"})
        # another session's game played in between: the engine must give this one back
        client.ok("/step", {"session": other["session"], "seq": seq, "action": f"<action>{other['legalActions'][0]}</action>"})
    first = [state]
    restarted = client.ok("/restart", {"session": sid, "seq": len(actions) + 1})
    for key in ("fingerprint", "observation", "legalActions", "done"):
        assert restarted[key] == created[key], key
    replay, _ = _steps(client, sid, actions, len(actions) + 1)
    assert replay[-1] == first[-1]
    # and a new session of the same game reads the same too
    again = _create(client, env, 7)
    assert again["fingerprint"] == created["fingerprint"] and again["observation"] == created["observation"]


def test_whole_attempts_replay_step_for_step(client: Client) -> None:
    created = _create(client, "twx-coin", 3, numLocations=6)
    sid = created["session"]
    legal = created["legalActions"]
    acts = [legal[i % len(legal)] for i in range(12)]
    first, seq = _steps(client, sid, acts, 0)
    seq += 1
    client.ok("/restart", {"session": sid, "seq": seq})
    second, _ = _steps(client, sid, acts, seq)
    assert [(r["observation"], r["legalActions"], r["reward"]) for r in first] == \
           [(r["observation"], r["legalActions"], r["reward"]) for r in second]


@pytest.mark.parametrize(
    ("split", "seed", "valid"),
    [("train", 0, True), ("train", 999, True), ("train", 1000, False), ("dev", 10000, True), ("dev", 999, False),
     ("test", 20999, True), ("test", 3, False)],
)
def test_seeds_must_lie_in_the_split(client: Client, split: str, seed: int, valid: bool) -> None:
    status, reply = client.call("/create", {"env": "twx-coin", "seed": seed, "config": {"split": split}})
    if valid:
        assert status == 200 and reply["category"] == split
    else:
        assert status == 400 and reply["error"]["kind"] == "bad_seed" and reply["error"]["field"] == "seed"
        lo, hi = {"train": (0, 999), "dev": (10000, 10999), "test": (20000, 20999)}[split]
        assert f"[{lo}, {hi}]" in reply["error"]["message"]


@pytest.mark.parametrize(
    ("env", "config", "field", "fragment"),
    [
        ("twx-coin", {"numLocations": 12}, "config.numLocations", "[1, 11]"),
        ("twx-coin", {"includeDoors": 1}, "config.includeDoors", "boolean"),
        ("twx-coin", {"numIngredients": 2}, "config.numIngredients", "valid fields"),
        ("twx-cookingworld", {"numIngredients": 6}, "config.numIngredients", "[1, 5]"),
        ("twx-twc", {"numItemsToPutAway": 5}, "config.numItemsToPutAway", "[1, 4]"),
        ("twx-coin", {"split": "valid"}, "config.split", "train"),
        ("twx-coin", {"maxSteps": 0}, "config.maxSteps", "[1, 500]"),
        ("twx-coin", {"markVisited": 1}, "config.markVisited", "boolean"),
    ],
)
def test_bad_config_names_the_field(client: Client, env: str, config: dict[str, Any], field: str, fragment: str) -> None:
    status, err = client.call("/create", {"env": env, "seed": 1, "config": config})
    assert status == 400 and err["error"]["kind"] == "bad_config", err
    assert err["error"]["field"] == field and fragment in err["error"]["message"]


def test_malformed_answers_are_invalid_steps(client: Client) -> None:
    created = _create(client, "twx-coin", 5)
    sid = created["session"]
    answers = ["move north", "<action></action>", "<think>hm <action>look around</action>", "<action>fly</action>",
               "<action>take coin</action>", "\x00" * 50, "<action>" + "x" * 5000 + "</action>"]
    for seq, answer in enumerate(answers, 1):
        r = client.ok("/step", {"session": sid, "seq": seq, "action": answer})
        assert not r["valid"] and r["reward"] == 0 and not r["done"] and r["invalidReason"], r
        assert r["observation"] == created["observation"] and r["legalActions"] == created["legalActions"]
    r = client.ok("/step", {"session": sid, "seq": len(answers) + 1, "action": "<action>  LOOK   Around </action>"})
    assert r["valid"] and r["action"] == "look around"


def test_the_step_limit_ends_the_attempt(client: Client) -> None:
    sid = _create(client, "twx-coin", 5, maxSteps=2)["session"]
    r, _ = _steps(client, sid, ["look around", "look around"], 0)
    assert not r[0]["done"] and r[1]["done"] and not r[1]["won"] and r[1]["legalActions"] == []
    status, err = client.call("/step", {"session": sid, "seq": 3, "action": "<action>look around</action>"})
    assert status == 409 and err["error"]["kind"] == "game_over"


def _session(env: TwxEnv, seed: int, **config: Any) -> TwxSession:
    cfg = {k: v["default"] for k, v in env.describe()["config"].items()} | config
    s = env.create(CreateArgs(cfg, seed, 0, None, None))
    assert isinstance(s, TwxSession)
    return s


def _follow(s: TwxSession, memory: list[str]) -> int | None:
    """Plays the expert's actions; the steps it took to win, or None."""
    while not s.done:
        action = s.expert(memory)["action"]
        if action is None:
            return None
        assert s.step(f"<action>{action}</action>")["valid"]
    return s.steps if s.won else None


@pytest.mark.parametrize("seed", [0, 3, 4, 5, 8])
@pytest.mark.parametrize("locations", [6, 11])
def test_the_coin_expert_wins_from_the_start(envs: dict[str, TwxEnv], seed: int, locations: int) -> None:
    s = _session(envs["twx-coin"], seed, numLocations=locations)
    assert _follow(s, []) is not None
    done = s.expert([])
    assert done["action"] is None and "The coin was in the " + str(coin_map(s.trace, []).coin) + "." in done["facts"]


@pytest.mark.parametrize("seed", [0, 4, 5, 8])
def test_a_failed_attempts_facts_shorten_the_next(envs: dict[str, TwxEnv], seed: int) -> None:
    """Attempt 1 explores and runs out of steps before the coin; attempt 2, given its facts, does not
    search the rooms it searched and reaches the coin in fewer steps than a fresh search does."""
    fresh = _follow(_session(envs["twx-coin"], seed), [])
    assert fresh is not None and fresh >= 6, fresh  # the coin is several rooms away on these seeds
    failed = _session(envs["twx-coin"], seed, maxSteps=fresh - 2)
    assert _follow(failed, []) is None
    facts = failed.expert([])["facts"]
    assert any(f.startswith("The coin was not in the ") for f in facts) and any("leads to the" in f for f in facts)
    second = _session(envs["twx-coin"], seed)
    steps = _follow(second, facts)
    assert steps is not None and steps < fresh, (steps, fresh)


def test_coin_memory_with_the_coin_walks_the_shortest_route(envs: dict[str, TwxEnv]) -> None:
    first = _session(envs["twx-coin"], 4)
    fresh = _follow(first, [])
    facts = first.expert([])["facts"]
    second = _session(envs["twx-coin"], 4)
    steps = _follow(second, facts)
    assert fresh is not None and steps is not None and steps < fresh
    # the known route only: every move goes towards the coin's room, no room searched twice
    rooms = [a for a in second.actions if a.startswith("move ")]
    assert len(rooms) == len({o for _, o in second.trace if o.startswith("You are in")}) - 1


@pytest.mark.parametrize("env", ["twx-cookingworld", "twx-twc", "twx-mapreader", "twx-arithmetic", "twx-sorting",
                                 "twx-simonsays", "twx-peckingorder"])
def test_other_games_follow_the_gold_path_to_a_win(envs: dict[str, TwxEnv], env: str) -> None:
    s = _session(envs[env], 2)
    assert _follow(s, []) is not None and s.score == 1.0
    s.restart()
    s.step(f"<action>{s.legal[0] if s.legal[0] != s.gold()[0] else s.legal[1]}</action>")
    assert s.expert([]) == {"action": None, "facts": []}  # off the gold path: nothing to suggest


def _follow_http(client: Client, sid: str, memory: list[str], seq: int) -> tuple[dict[str, Any], int, int]:
    """Plays `/expert`'s actions over HTTP until the attempt ends; (last reply, steps, last seq)."""
    steps, reply = 0, {"done": False}
    while not reply["done"]:
        action = client.ok("/expert", {"session": sid, "memory": memory})["action"]
        assert action is not None
        seq += 1
        reply = client.ok("/step", {"session": sid, "seq": seq, "action": f"<action>{action}</action>"})
        assert reply["valid"]
        steps += 1
    return reply, steps, seq


def test_the_expert_over_http_a_failed_attempt_then_a_shorter_one(client: Client) -> None:
    assert all(e["expert"] for e in client.ok("/info", None)["environments"] if e["name"].startswith("twx-"))
    fresh = _create(client, "twx-coin", 5)
    won, fresh_steps, _ = _follow_http(client, fresh["session"], [], 0)
    assert won["won"] and won["reward"] == 10.0 and fresh_steps >= 6
    sid = _create(client, "twx-coin", 5, maxSteps=fresh_steps - 2)["session"]
    lost, _, seq = _follow_http(client, sid, [], 0)
    assert not lost["won"]
    reply = client.ok("/expert", {"session": sid, "memory": []})
    facts = reply["facts"]
    assert reply["avoid"] == []  # the attempt is over
    assert client.ok("/expert", {"session": sid, "memory": facts})["action"] is None  # over: nothing to suggest
    client.ok("/restart", {"session": sid, "seq": seq + 1})
    again, steps, _ = _follow_http(client, sid, facts, seq + 1)
    assert again["won"] and steps < fresh_steps


def test_memory_of_a_room_whose_doors_were_not_opened_still_leads_on(envs: dict[str, TwxEnv]) -> None:
    """Seed 3, 6 rooms: attempt 1 stops in the corridor before opening its doors; attempt 2 must go back
    there (its exits are known only from the facts) rather than give up."""
    failed = _session(envs["twx-coin"], 3, numLocations=6, maxSteps=4)
    assert _follow(failed, []) is None
    facts = failed.expert([])["facts"]
    assert any(f.startswith("Not tried: ") and "door" in f for f in facts), facts
    assert _follow(_session(envs["twx-coin"], 3, numLocations=6), facts) is not None


@pytest.mark.parametrize("seed", [1, 2, 4, 5, 7])
def test_facts_lead_with_what_the_next_attempt_needs(envs: dict[str, TwxEnv], seed: int) -> None:
    """An attempt cut short before the coin: its facts open with the exits not tried (at most two) and
    where the coin was not (one sentence); an attempt that saw the coin opens with it and the route to
    it. Given the first two facts only (what a capped remark keeps), the next attempt still wins."""
    fresh = _follow(_session(envs["twx-coin"], seed, numLocations=4), [])
    assert fresh is not None and fresh >= 3, fresh
    cut = _session(envs["twx-coin"], seed, numLocations=4)
    while cut.steps < fresh - 2:
        cut.step(f"<action>{cut.expert([])['action']}</action>")
    facts = cut.expert([])["facts"]
    assert facts[0].startswith("Not tried: the ") and facts[0].count("'s ") <= 2, facts
    assert facts[1].startswith("The coin was not in the ") and facts[1].count("The coin") == 1, facts
    assert _follow(_session(envs["twx-coin"], seed, numLocations=4), facts[:2]) is not None
    won = _session(envs["twx-coin"], seed, numLocations=4)
    _follow(won, [])
    found = won.expert([])["facts"]
    assert found[0].startswith("The coin was in the ") and "leads to the" in found[1], found
    assert not any(f.startswith("Not tried") for f in found)


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 5])
def test_an_exit_named_not_tried_is_taken_first(envs: dict[str, TwxEnv], seed: int) -> None:
    """Given "Not tried: <the first room's exit>", the expert's first step goes through that exit, even
    where, with no memory, it would have explored another one first."""
    fresh = _session(envs["twx-coin"], seed)
    first = fresh.expert([])["action"]
    start = coin_map(fresh.trace, []).here
    assert start is not None and first is not None and first != "take coin", first
    exits = coin_map(fresh.trace, []).exits[start]
    others = [d for d in exits if d != first.split()[-1]]
    assert others, exits
    d = others[0]
    kind = "door" if f"open door to {d}" in fresh.legal else "exit"
    memory = [f"Not tried: the {start}'s {d} {kind}."]
    taken = _session(envs["twx-coin"], seed).expert(memory)["action"]
    assert taken in (f"open door to {d}", f"move {d}"), (memory, taken, first)
    named = CoinMap()
    named.remember(memory)
    assert named.named == [(start, d)]


@pytest.mark.parametrize("seed", [1, 2, 4, 5, 7])
def test_last_room_facts_lead_with_the_exits_the_last_observation_shows(envs: dict[str, TwxEnv], seed: int) -> None:
    """`factsLead: last-room`: an attempt cut short leads its facts with exits of the room it ended in
    (each named in its last observation), then the route there; given those first facts only, the
    next attempt goes through the named exit and wins. `nearest` (the default) is unchanged."""
    fresh = _follow(_session(envs["twx-coin"], seed), [])
    assert fresh is not None and fresh >= 4, fresh
    cut = _session(envs["twx-coin"], seed, factsLead="last-room")
    while cut.steps < fresh - 2:
        cut.step(f"<action>{cut.expert([])['action']}</action>")
    m = coin_map(cut.trace, [])
    facts = cut.expert([])["facts"]
    assert facts == m.facts("last-room") and m.facts() == m.facts("nearest")
    named = CoinMap()
    named.remember(facts[:1])
    assert named.named and all(room == m.here for room, _ in named.named), (facts, m.here)
    # each named exit is in the room's last description, or is the door the attempt opened after it
    looks = [i for i, (_, o) in enumerate(cut.trace) if o.startswith(f"You are in the {m.here}.")]
    look, after = cut.trace[looks[-1]][1], [a for a, _ in cut.trace[looks[-1] + 1:]]
    assert all(f"o the {d.capitalize()}" in look or f"open door to {d}" in after for _, d in named.named), (look, after)
    route = len([f for f in facts[1:] if "leads to the" in f][:1])
    assert route == (0 if m.here == m.start else 1) and (route == 0 or "leads to the" in facts[1]), facts
    again = _session(envs["twx-coin"], seed)
    assert _follow(again, facts[: 1 + route]) is not None
    room, d = named.named[0]
    walked = coin_map([], [])
    through = False
    for action, observation in again.trace:
        through |= walked.here == room and action in (f"open door to {d}", f"move {d}")
        walked.apply(action, observation)
    assert through, (facts, again.actions)
    with pytest.raises(ValueError, match="lead_from"):
        m.facts("farthest")


@pytest.mark.parametrize("seed", [1, 3, 4, 7, 9])
def test_plan_facts_walk_from_the_first_room_through_the_named_exit(envs: dict[str, TwxEnv], seed: int) -> None:
    """`factsLead: plan`: the last-room lead, then a plan of commands from the first room through the
    first exit it names; given those two facts only, the next attempt plays the plan and wins. The
    plan opens every door it walks through (all start closed), found or not by this attempt."""
    fresh = _follow(_session(envs["twx-coin"], seed, numLocations=8), [])
    assert fresh is not None and fresh >= 4, fresh
    cut = _session(envs["twx-coin"], seed, numLocations=8, factsLead="plan")
    while cut.steps < fresh - 2:
        cut.step(f"<action>{cut.expert([])['action']}</action>")
    m = coin_map(cut.trace, [])
    facts = cut.expert([])["facts"]
    assert facts == m.facts("plan") and facts[0] == m.facts("last-room")[0] and facts[1].startswith("Plan: "), facts
    plan = facts[1][len("Plan: "):-1].split(", ")
    named = CoinMap()
    named.remember(facts[:1])
    room, d = named.named[0]
    assert plan[-1] == f"move {d}" and (plan[-2] == f"open door to {d}") == ((room, d) in m.doors), (facts, m.doors)
    again = _session(envs["twx-coin"], seed, numLocations=8)
    assert _follow(again, facts[:2]) is not None and again.actions[: len(plan)] == plan, (plan, again.actions)
    walked = coin_map([], [])
    for action, observation in again.trace[: len(plan)]:
        walked.apply(action, observation)
    assert walked.here == room  # the plan's last command is the move through the named exit


def test_a_plan_the_game_refuses_is_dropped() -> None:
    """The expert follows a remembered plan only while this attempt has played it so far and its next
    command is legal; after that it explores as without one."""
    m = CoinMap()
    m.remember(["Plan: move south, move east."])
    assert m._planned(["move south", "move north"]) == "move south"
    m.played = ["move north"]
    assert m._planned(["move south", "move east"]) is None
    m.played = ["move south"]
    assert m._planned(["move east"]) == "move east" and m._planned(["move west"]) is None
    m.played = ["move south", "move east"]
    assert m._planned(["move east"]) is None


@pytest.mark.parametrize("seed", [0, 1, 2, 4])
def test_the_expert_names_the_wasted_moves(envs: dict[str, TwxEnv], seed: int) -> None:
    """`avoid` along the expert's own play: legal, never its action; re-opening an open door and
    closing any are in it; a move is in it exactly when it leads into a room already searched."""
    s = _session(envs["twx-coin"], seed, maxSteps=10)
    reopened = False
    while not s.done:
        reply = s.expert([])
        action, avoid = reply["action"], reply["avoid"]
        m = coin_map(s.trace, [])
        assert action is not None and action not in avoid and set(avoid) <= set(s.legal), (action, avoid)
        assert all(a in avoid for a in s.legal if a.startswith("close door") and a != action)
        for a in s.legal:
            d = a.split()[-1]
            if a.startswith("open door") and m.closed.get((m.here or "", d)) is False:
                assert a in avoid
                reopened = True
            if a.startswith("move ") and a != action:
                dest = m.exits.get(m.here or "", {}).get(d)
                assert (a in avoid) == (dest is not None and dest in m.searched), (a, dest, m.searched)
        s.step(f"<action>{action}</action>")
    assert reopened, "no state of these games had an open door to re-open"
    assert s.expert([])["avoid"] == []  # over: nothing to push down


def test_the_fact_grammar_reads_back() -> None:
    """Every sentence `facts()` writes, the one-room forms of earlier versions too, parses back."""
    m = CoinMap()
    m.remember([
        "The coin was not in the kitchen, the living room, the corridor or the pantry.",
        "Not tried: the corridor's east door and the kitchen's east exit.",
        "The kitchen's south door leads to the corridor.",
        "The coin was not in the bedroom.",
        "The bedroom's west door was not opened.",
        "Plan: move south, open door to east, move east.",
    ])
    assert m.searched == ["kitchen", "living room", "corridor", "pantry", "bedroom"]
    assert m.exits["corridor"]["east"] is None and ("corridor", "east") in m.doors
    assert m.exits["kitchen"]["east"] is None and ("kitchen", "east") not in m.doors
    assert m.exits["kitchen"]["south"] == "corridor" and ("kitchen", "south") in m.doors
    assert m.exits["bedroom"]["west"] is None and ("bedroom", "west") in m.doors
    assert m.plan == ["move south", "open door to east", "move east"]
    assert split_rooms("the kitchen") == ["kitchen"] and join_words(["a", "b", "c"], "or") == "a, b or c"
    again = CoinMap()
    again.remember(m.facts())
    assert again.searched == m.searched and again.exits == m.exits


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mark_visited_names_the_rooms_this_attempt_was_in(envs: dict[str, TwxEnv], seed: int) -> None:
    """`markVisited`: after a move through an exit, the room left is marked "(visited)" in the compact
    observation of the room entered (the full one is the game's own); a restart forgets; off by default."""
    marked, plain = _session(envs["twx-coin"], seed, markVisited=True), _session(envs["twx-coin"], seed)
    for s in (marked, plain):
        assert "(visited)" not in s.state()["compactObservation"]
    start = coin_map(marked.trace, []).here
    move = next(a for a in ("open door to east", "open door to north", "open door to south", "open door to west",
                            "move east", "move north", "move south", "move west") if a in marked.legal)
    moves = [move, f"move {move.split()[-1]}"] if move.startswith("open") else [move]
    replies = {id(s): [s.step(f"<action>{a}</action>") for a in moves] for s in (marked, plain)}
    assert coin_map(marked.trace, []).here != start
    assert f"the {start} (visited)." in marked.state()["compactObservation"], marked.state()["compactObservation"]
    assert replies[id(marked)][-1]["compactObservation"] == marked.state()["compactObservation"]
    assert "(visited)" not in plain.state()["compactObservation"] and "(visited)" not in marked.observation
    assert marked.state()["compactObservation"].replace(" (visited)", "") == plain.state()["compactObservation"]
    marked.restart()
    assert "(visited)" not in marked.state()["compactObservation"]
    # the mark is no informative term of a remark
    assert envs["twx-coin"].describe()["remarks"] == {"informative": "observed-terms", "ignoreWords": ["visited"]}


def test_compact_coin_observations_drop_the_furniture(client: Client) -> None:
    created = _create(client, "twx-coin", 3, numLocations=6, includeDoors=False)  # the coin is in the kitchen
    compact = created["compactObservation"]
    assert compact.startswith("You are in the kitchen. ") and "coin" in compact and "stove" not in compact
    assert "To the North you see the pantry." in compact and compact.endswith(f"Actions: {', '.join(created['legalActions'])}.")
    assert "stove" in created["observation"]
