"""The TextArena adapter over the protocol: its offline games play to the end from both seats,
restart to the identical state (same deals), accept mage-style answers, keep invalid answers
from reaching TextArena, and keep concurrent sessions' cards apart."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest
from envhelp import Client, play, running

from mage_envs.textarena_server import GAMES, TextArenaEnv


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with running([TextArenaEnv(g) for g in GAMES]) as c:
        yield c


def last_legal(legal: list[str], i: int) -> str:
    return legal[-1]


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("seat", ["first", "second"])
def test_plays_to_the_end_and_restarts_identically(client: Client, game: str, seat: str) -> None:
    body = {"env": game, "seed": 99, "opponentSeed": 5, "seat": seat, "config": {"replayOpponent": True}}
    created = client.ok("/create", body)
    assert created["toMove"] == "agent" and created["legalActions"]
    assert "Player" in created["prompt"]["rules"]
    first, seq = play(client, created["session"], created, last_legal)
    end = first[-1]
    assert end["done"] and end["score"] in (-1.0, 0.0, 1.0) and end["won"] == (end["score"] > 0)
    restarted = client.ok("/restart", {"session": created["session"], "seq": seq + 1})
    for key in ("fingerprint", "observation", "legalActions"):
        assert restarted[key] == created[key], key
    again, _ = play(client, created["session"], restarted, last_legal, seq + 1)
    assert [r["observation"] for r in again] == [r["observation"] for r in first]


def test_the_seed_fixes_the_deals(client: Client) -> None:
    seen = {client.ok("/create", {"env": "KuhnPoker-v0", "seed": s})["observation"] for s in range(10)}
    assert len(seen) >= 2
    a = client.ok("/create", {"env": "KuhnPoker-v0", "seed": 4})
    b = client.ok("/create", {"env": "KuhnPoker-v0", "seed": 4})
    assert a["fingerprint"] == b["fingerprint"]


def test_mage_style_answers_and_invalid_ones(client: Client) -> None:
    c = client.ok("/create", {"env": "TicTacToe-v0", "seed": 1, "seat": "first"})
    r = client.ok("/step", {"session": c["session"], "seq": 1, "action": "<action>(2, 2)</action>"})
    assert r["valid"] and r["action"] == "[4]"
    bad = client.ok("/step", {"session": c["session"], "seq": 2, "action": "<action>(2, 2)</action>"})
    assert bad["valid"] is False and "not an available move" in bad["invalidReason"]
    assert not bad["done"]  # TextArena's own rule would have ended the game after one error
    k = client.ok("/create", {"env": "KuhnPoker-v0", "seed": 2, "seat": "first"})
    r = client.ok("/step", {"session": k["session"], "seq": 1, "action": "<action>PASS</action>"})
    assert r["valid"] and r["action"] in ("[check]", "[fold]")


def test_concurrent_sessions_keep_their_own_cards(client: Client) -> None:
    def transcript() -> list[str]:
        c = client.ok("/create", {"env": "KuhnPoker-v0", "seed": 31, "opponentSeed": 3})
        replies, _ = play(client, c["session"], c, last_legal)
        return [c["observation"]] + [r["observation"] for r in replies]

    alone = transcript()
    out: list[list[str]] = []
    threads = [threading.Thread(target=lambda: out.append(transcript())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [alone] * 4


def test_unknown_game_lists_the_served_ones(client: Client) -> None:
    status, err = client.call("/create", {"env": "Chess-v0", "seed": 1})
    assert status == 400 and err["error"]["choices"] == sorted(GAMES)


def test_a_one_hand_kuhn_match(client: Client) -> None:
    for seed in range(6):
        c = client.ok("/create", {"env": "KuhnPoker-v0", "seed": seed, "seat": "first", "config": {"rounds": 1}})
        replies, _ = play(client, c["session"], c, last_legal)
        assert len(replies) <= 2 and replies[-1]["done"]
        assert "round 1 out of 1" in c["observation"]
        # the compact view speaks mage's Kuhn poker: the card, then PASS/BET per move of this hand
        assert re.fullmatch(r"Card: [JQK]\.( You act first\.| Opp: (PASS|BET)\.)", c["compactObservation"])
        end = replies[-1]["compactObservation"]
        assert end.startswith(c["compactObservation"].replace(" You act first.", "")) and "You: " in end
    status, err = client.call("/create", {"env": "KuhnPoker-v0", "seed": 1, "config": {"rounds": 0}})
    assert status == 400 and err["error"]["field"] == "config.rounds"
