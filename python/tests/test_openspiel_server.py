"""The OpenSpiel adapter over the protocol: every game plays to the end from both seats, restarts
to the identical state (same chance outcomes), rejects bad requests with the valid choices, and
serves OpenSpiel's bots."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import time

import pyspiel

from mage_envs.openspiel_server import GAMES, CfrPolicies, Opponent, build_envs
from envhelp import Client, play, running


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with running(build_envs(list(GAMES), [5])) as c:
        yield c


def first_legal(legal: list[str], i: int) -> str:
    return legal[0]


def last_legal(legal: list[str], i: int) -> str:
    return legal[-1]


def test_info_lists_the_games_and_bots(client: Client) -> None:
    info = client.ok("/info")
    assert info["protocol"] == "mage-env/1"
    envs = {e["name"]: e for e in info["environments"]}
    assert sorted(envs) == sorted(GAMES)
    specs = {n: [o["spec"] for o in e["opponents"]] for n, e in envs.items()}
    assert specs["tic_tac_toe"] == ["random", "mcts:<simulations>"]
    assert specs["leduc_poker"] == ["random", "cfr:5"]
    assert specs["liars_dice"] == ["random"]


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("seat", ["first", "second"])
def test_plays_to_the_end_and_restarts_identically(client: Client, game: str, seat: str) -> None:
    opponent = {"tic_tac_toe": "mcts:20", "connect_four": "mcts:20", "kuhn_poker": "cfr:5", "leduc_poker": "cfr:5"}
    body = {"env": game, "seed": 12345, "opponentSeed": 7, "seat": seat, "opponent": opponent.get(game, "random"),
            "config": {"replayOpponent": True}}
    created = client.ok("/create", body)
    sid = created["session"]
    assert created["toMove"] == "agent" and not created["done"]
    assert created["legalActions"] and "Legal actions:" in created["observation"]
    assert created["prompt"]["rules"] and "<action>" in created["prompt"]["playInstruction"]
    first, seq = play(client, sid, created, last_legal)
    end = first[-1]
    assert end["done"] and end["toMove"] is None and end["legalActions"] == []
    assert end["reward"] == end["score"] and end["won"] == (end["score"] > 0) and end["draw"] == (end["score"] == 0)
    restarted = client.ok("/restart", {"session": sid, "seq": seq + 1})
    for key in ("fingerprint", "observation", "legalActions", "done"):
        assert restarted[key] == created[key], key
    # With replayOpponent, the same answers meet the same chance outcomes and the same replies.
    again, _ = play(client, sid, restarted, last_legal, seq + 1)
    assert [r["observation"] for r in again] == [r["observation"] for r in first]
    assert client.ok("/close", {"session": sid}) == {"closed": True}
    status, err = client.call("/step", {"session": sid, "seq": 99, "action": "x"})
    assert status == 404 and err["error"]["kind"] == "unknown_session"


def test_the_seed_fixes_the_deal_and_only_the_seed(client: Client) -> None:
    fingerprints = {}
    for seed in range(8):
        a = client.ok("/create", {"env": "leduc_poker", "seed": seed, "opponentSeed": 1})
        b = client.ok("/create", {"env": "leduc_poker", "seed": seed, "opponentSeed": 1})
        assert a["fingerprint"] == b["fingerprint"] and a["observation"] == b["observation"]
        fingerprints[seed] = a["observation"]
    assert len(set(fingerprints.values())) >= 3  # different seeds deal different cards


def test_an_invalid_answer_spends_the_turn_and_changes_nothing(client: Client) -> None:
    c = client.ok("/create", {"env": "kuhn_poker", "seed": 3})
    for bad in ("no tags", "<action>Raise</action>", "<think>open"):
        r = client.ok("/step", {"session": c["session"], "seq": 1, "action": bad})
        assert r["valid"] is False and r["invalidReason"] and r["observation"] == c["observation"]
        # a repeated seq answers the stored reply and does not step again
        assert client.ok("/step", {"session": c["session"], "seq": 1, "action": "<action>Bet</action>"}) == r
        c = client.ok("/create", {"env": "kuhn_poker", "seed": 3})
    status, err = client.call("/step", {"session": c["session"], "seq": 5, "action": "<action>Bet</action>"})
    assert status == 409 and err["error"]["kind"] == "out_of_order"


def test_pass_bet_names_in_leduc_map_to_check_fold_and_raise_call(client: Client) -> None:
    c = client.ok("/create", {"env": "leduc_poker", "seed": 1, "seat": "first", "config": {"actions": "pass-bet"}})
    assert c["legalActions"] == ["PASS", "BET"]
    r = client.ok("/step", {"session": c["session"], "seq": 1, "action": "<action>bet</action>"})
    assert r["valid"] and r["action"] == "BET"
    assert "you: Raise" in r["observation"]


@pytest.mark.parametrize(
    "body,kind,choices",
    [
        ({"env": "chess", "seed": 1}, "unknown_env", sorted(GAMES)),
        ({"env": "kuhn_poker", "seed": -1}, "bad_seed", None),
        ({"env": "kuhn_poker", "seed": 2**32}, "bad_seed", None),
        ({"env": "kuhn_poker", "seed": 1, "config": {"depth": 3}}, "bad_config", ["replayOpponent", "actions"]),
        ({"env": "kuhn_poker", "seed": 1, "config": {"actions": "words"}}, "bad_config", ["openspiel", "pass-bet"]),
        ({"env": "kuhn_poker", "seed": 1, "opponent": "mcts:10"}, "bad_opponent", ["random", "cfr:5"]),
        ({"env": "kuhn_poker", "seed": 1, "opponent": "cfr:7"}, "bad_opponent", ["random", "cfr:5"]),
        ({"env": "tic_tac_toe", "seed": 1, "opponent": "mcts:0"}, "bad_opponent", ["random", "mcts:<simulations>"]),
        ({"env": "tic_tac_toe", "seed": 1, "seat": "third"}, "bad_seat", ["first", "second"]),
    ],
)
def test_bad_requests_name_the_valid_choices(client: Client, body: dict[str, Any], kind: str, choices: Any) -> None:
    status, err = client.call("/create", body)
    assert status == 400 and err["error"]["kind"] == kind, err
    if choices is not None:
        assert err["error"]["choices"] == choices


def test_mcts_beats_a_player_that_always_takes_the_first_cell(client: Client) -> None:
    wins = 0
    for seed in range(6):
        c = client.ok("/create", {"env": "tic_tac_toe", "seed": seed, "opponentSeed": seed, "opponent": "mcts:200"})
        replies, _ = play(client, c["session"], c, first_legal)
        wins += replies[-1]["score"] < 0
    assert wins >= 5


def test_the_cfr_opponent_samples_the_cfr_average_policy() -> None:
    tables = CfrPolicies([5])
    tables.build("kuhn_poker")
    game = pyspiel.load_game("kuhn_poker")
    opponent = Opponent("cfr:5", "kuhn_poker", game, 11, tables, replay=False)
    for card in range(3):
        state = game.new_initial_state()
        state.apply_action(card)
        state.apply_action((card + 1) % 3)
        state.apply_action(1)  # player 0 bets; player 1 holds card+1
        key = state.information_state_string(1)
        p_call = tables.tables[("kuhn_poker", 5)][key][1]
        n = 4000
        calls = sum(opponent.act(state) for _ in range(n))  # replay off: a fresh draw each decision
        assert abs(calls / n - p_call) < 4 * (p_call * (1 - p_call) / n) ** 0.5 + 1e-9, (key, calls / n, p_call)


def test_idle_sessions_expire() -> None:
    with running(build_envs(["kuhn_poker"], []), ttl_seconds=0.3) as c:
        assert c.ok("/info")["sessionTtlSeconds"] == 0.3
        sid = c.ok("/create", {"env": "kuhn_poker", "seed": 1})["session"]
        c.ok("/step", {"session": sid, "seq": 1, "action": "<action>Pass</action>"})
        time.sleep(0.6)
        status, err = c.call("/restart", {"session": sid, "seq": 2})
        assert status == 404 and err["error"]["kind"] == "unknown_session"
