"""TextArena's offline two-player games served over mage's environment protocol (`mage-env/1`).

    python -m mage_envs.textarena_server --port 8767

Games (textarena 0.7.4, raw environments without wrappers, no network needed): TicTacToe-v0,
KuhnPoker-v0 (a match of `rounds` hands, 3 by default; TextArena's player 1 opens the first hand), ConnectFour-v0. The observation is what TextArena sent the
agent since its previous move (the board, the opponent's move, round results), the rules are
TextArena's own player prompt. An answer is mage's `<action>…</action>`; its content is handed
to TextArena in TextArena's bracket form (`4` or `[4]` → `[4]`); an answer that is not one of
the legal moves spends the turn without reaching TextArena (as in mage's own tasks), so
TextArena's own invalid-move rule (a loss after one error) never ends a game.
mage-style answers are accepted too: `(row, col)` (1-based) in TicTacToe, PASS / BET in Kuhn poker.

Opponent: TextArena's agents are LLM clients (OpenRouter, OpenAI, …) that need the network, so
the built-in opponent is `random`, a uniformly random legal move from a generator seeded by
`opponentSeed` and the decision's place in the session's stream (or, with `replayOpponent`, the
moves so far). TextArena draws its chance events (Kuhn's deals) from Python's global `random`,
which `reset(seed=…)` seeds; the server runs every TextArena call under one lock with the
session's own saved `random` state, so concurrent sessions never disturb each other's cards and
`/restart` (a deep copy of the initial environment and random state) replays the same deals.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
import threading
from collections.abc import Sequence
from typing import Any, Callable

import textarena as ta

from .answers import Matcher
from .protocol import U32_MAX, CreateArgs, Environment, Json, Session, fingerprint, invalid_step
from .server import argument_parser, serve_from_args

GAMES = ("TicTacToe-v0", "KuhnPoker-v0", "ConnectFour-v0")
MAX_TURNS = {"TicTacToe-v0": 7, "KuhnPoker-v0": 8, "ConnectFour-v0": 25}
_LOCK = threading.Lock()  # TextArena uses the global `random` module


def legal_moves(game: str, env: Any) -> list[str]:
    """The current player's legal moves in TextArena's bracket form."""
    gs = env.state.game_state
    if game == "TicTacToe-v0":
        return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if gs["board"][r][c] == ""]
    if game == "KuhnPoker-v0":
        return [f"[{k}]" for k in gs["current_legal_action_tree"]]
    if game == "ConnectFour-v0":
        return [f"[col {c}]" for c in range(len(gs["board"][0])) if gs["board"][0][c] == "."]
    raise AssertionError(game)


def move_key(game: str, content: str, legal: Sequence[str]) -> str:
    """An answer's key in TextArena's bracket form, matched against the legal moves in lower case.
    Accepts `4`, `[4]`, `col 3`, and mage's forms (`(r, c)` cells, Kuhn's PASS and BET)."""
    text = content.strip()
    if game == "TicTacToe-v0":
        m = re.fullmatch(r"\(?\s*(\d)\s*,\s*(\d)\s*\)?", text)
        if m and 1 <= int(m.group(1)) <= 3 and 1 <= int(m.group(2)) <= 3:
            text = str((int(m.group(1)) - 1) * 3 + int(m.group(2)) - 1)
    if game == "KuhnPoker-v0" and text.upper() in ("PASS", "BET"):
        facing = "[call]" in legal
        text = {"PASS": "fold" if facing else "check", "BET": "call" if facing else "bet"}[text.upper()]
    if game == "ConnectFour-v0" and re.fullmatch(r"\d", text):
        text = f"col {text}"
    if not text.startswith("["):
        text = f"[{text}]"
    return re.sub(r"\s+", " ", text.lower())


def matcher(game: str) -> Matcher:
    """How a game's answers name its available moves (`move_key`)."""
    return Matcher('"{content}" is not an available move; available: {legal}', quote=60,
                   answer_key=functools.partial(move_key, game))


class TextArenaSession(Session):
    def __init__(self, env_def: TextArenaEnv, args: CreateArgs):
        self.game = env_def.name
        self.answers = matcher(self.game)
        self.agent = 0 if args.seat == "first" else 1
        self.replay = bool(args.config.get("replayOpponent"))
        self.env_def_rounds = int(args.config.get("rounds", 3))
        self.salt = json.dumps([self.game, args.seed, args.opponent, args.seat, args.config], sort_keys=True)
        self.opponent_seed = args.opponent_seed
        self.decisions = 0
        self.moves: list[str] = []
        self.played: list[tuple[int, int, str]] = []  # (player, round, move), for the compact view
        self.cards: dict[int, int] = {}  # the agent's card per round (Kuhn poker)
        with _LOCK:
            saved = random.getstate()
            try:
                kwargs = {"max_rounds": int(args.config["rounds"])} if "rounds" in args.config else {}
                env = ta.make(f"{self.game}-raw", **kwargs)
                env.reset(num_players=2, seed=args.seed)
                # TextArena's player prompt (the rules from this seat's side) is the agent's first message.
                self.rules = "\n".join(
                    str(m) for _, m, kind in env.state.observations[self.agent] if kind == ta.ObservationType.PROMPT
                )
                self.env = env
                self.seen: list[str] = []
                self._opponent_turns([])
                self.random_state = random.getstate()
            finally:
                random.setstate(saved)
        self.initial = (copy.deepcopy(self.env), list(self.seen), self.random_state, list(self.moves), list(self.played), dict(self.cards))
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> str:
        gs = json.dumps(self.env.state.game_state, sort_keys=True, default=str)
        return fingerprint(self.salt, gs, "\n".join(self.seen), str(self.env.state.current_player_id))

    # Runs with _LOCK held and the session's random state installed.
    def _drain(self) -> list[str]:
        """New messages TextArena sent the agent (its prompt and echoes of its own moves left out)."""
        obs = self.env.state.observations
        msgs = obs[self.agent]
        obs[self.agent] = []
        obs[1 - self.agent] = []
        out = []
        for from_id, message, kind in msgs:
            if kind == ta.ObservationType.PROMPT or from_id == self.agent:
                continue
            out.append(str(message).strip())
        return out

    def _opponent_turns(self, replies: list[str]) -> None:
        st = self.env.state
        while not st.done and st.current_player_id != self.agent:
            # One generator per decision, keyed by its place in the session's stream, or with
            # replayOpponent by the moves so far (the same position gets the same answer).
            key = "h" + "|".join(self.moves) if self.replay else f"n{self.decisions}"
            self.decisions += 1
            rng = random.Random(int(fingerprint(str(self.opponent_seed), key), 16))
            move = rng.choice(legal_moves(self.game, self.env))
            replies.append(move)
            self.moves.append(move)
            self._note(st.current_player_id, move)
            self.env.step(move)
        self.seen = self._drain()

    def _locked(self, fn: Callable[[], Any]) -> Any:
        with _LOCK:
            saved = random.getstate()
            random.setstate(self.random_state)
            try:
                return fn()
            finally:
                self.random_state = random.getstate()
                random.setstate(saved)

    def prompt(self) -> Json:
        return {
            "rules": self.rules.strip(),
            "playInstruction": (
                "Think briefly, then answer with exactly one of the available moves written inside "
                "<action></action>, for example <action>"
                + (legal_moves(self.game, self.initial[0])[0] if not self.initial[0].state.done else "[0]")
                + "</action>."
            ),
            "compactRules": (
                "Kuhn poker (TextArena). Cards J<Q<K, ante 1. PASS = check/fold, BET = bet/call 1 chip. Both "
                "check or a call: higher card wins. Reply <action>PASS</action> or <action>BET</action>."
                if self.game == "KuhnPoker-v0"
                else f"{self.game} (TextArena). Reply <action>[MOVE]</action> with an available move."
            ),
            "compactAsk": "Your move?",
            "actionWord": "Move",
        }

    def _note(self, player: int, move: str) -> None:
        gs = self.env.state.game_state
        rnd = int(gs.get("current_round", 0))
        self.played.append((player, rnd, move))
        if "player_cards" in gs:
            self.cards[rnd] = int(gs["player_cards"][self.agent])

    def _compact(self) -> str:
        """A terse form for mage's compact prompts: Kuhn poker in mage's words (`Card: Q. Opp: PASS.`,
        check/fold = PASS, bet/call = BET), TicTacToe's board on one line; else the observation."""
        gs = self.env.state.game_state
        if self.game == "KuhnPoker-v0":
            rnd = int(gs["current_round"])
            card = int(gs["player_cards"][self.agent])
            if self.env.state.done and self.played:
                # TextArena deals a fresh hand even after the last one: show the hand that was played.
                rnd = self.played[-1][1]
                card = self.cards[rnd]
            parts = [f"Card: {'JQK'[card]}."]
            if int(self.env_def_rounds) > 1:
                parts.insert(0, f"Hand {min(rnd, self.env_def_rounds)} of {self.env_def_rounds}.")
            hand = [(p, m) for p, r, m in self.played if r == rnd]
            if not hand and not self.env.state.done and self.env.state.current_player_id == self.agent:
                parts.append("You act first.")
            for p, m in hand:
                word = "BET" if m in ("[bet]", "[call]") else "PASS"
                parts.append(f"{'You' if p == self.agent else 'Opp'}: {word}.")
            return " ".join(parts)
        if self.game == "TicTacToe-v0":
            rows = [" ".join(c or "." for c in row) for row in gs["board"]]
            return "Board: " + " / ".join(rows) + ". Moves: " + ", ".join(legal_moves(self.game, self.env)) + "."
        return self._observation()

    def _observation(self) -> str:
        return "\n".join(self.seen) if self.seen else "(no new messages)"

    def _legal(self) -> list[str]:
        return [] if self.env.state.done else legal_moves(self.game, self.env)

    def state(self) -> Json:
        done = bool(self.env.state.done)
        return {
            "fingerprint": self.fingerprint,
            "observation": self._observation(),
            "compactObservation": self._compact(),
            "legalActions": self._legal(),
            "toMove": None if done else "agent",
            "done": done,
            "forfeit": None if done else {"reward": -1.0, "score": -1.0},
        }

    @property
    def done(self) -> bool:
        return bool(self.env.state.done)

    def restart(self) -> None:
        env, seen, rstate, moves, played, cards = self.initial
        self.played = list(played)
        self.cards = dict(cards)
        self.env = copy.deepcopy(env)
        self.seen = list(seen)
        self.random_state = rstate
        self.moves = list(moves)
        self.fingerprint = self._fingerprint()

    def step(self, response: str) -> Json:
        legal = self._legal()
        answer = self.answers.match(response, legal)
        move = answer.action
        if move is None:
            return invalid_step(self._observation(), self._compact(), answer.reason, answer.content, legal,
                                {"reward": -1.0, "score": -1.0})
        replies: list[str] = []

        def play() -> None:
            self.moves.append(move)
            self._note(self.agent, move)
            self.env.step(move)
            self._opponent_turns(replies)

        self._locked(play)
        st = self.env.state
        done = bool(st.done)
        reply: Json = {
            "observation": self._observation(),
            "compactObservation": self._compact(),
            "reward": 0.0,
            "done": done,
            "won": False,
            "draw": False,
            "score": 0.0,
            "valid": True,
            "action": move,
            "feedback": ("The opponent played " + ", then ".join(replies) + ".") if replies else "",
            "compactFeedback": ("Opp: " + ", ".join(replies) + ".") if replies else "",
            "legalActions": self._legal(),
            "toMove": None if done else "agent",
            "forfeit": None if done else {"reward": -1.0, "score": -1.0},
            "info": {"opponentMoves": replies},
        }
        if done:
            rewards = st.rewards or {0: 0, 1: 0}
            r = float(rewards[self.agent])
            reason = str(st.game_info.get(self.agent, {}).get("reason", ""))
            reply.update(
                reward=r,
                score=r,
                won=r > 0,
                draw=r == 0,
                outcome=f"You {'won' if r > 0 else 'lost' if r < 0 else 'drew'}. {reason}".strip(),
                compactOutcome=f"{'Won' if r > 0 else 'Lost' if r < 0 else 'Draw'}.",
            )
        return reply


class TextArenaEnv(Environment):
    def __init__(self, name: str):
        self.name = name
        self._desc: Json = {
            "name": name,
            "description": f"TextArena's {name} (offline) against a random legal player",
            "twoPlayer": True,
            "seats": ["first", "second"],
            "opponents": [{"spec": "random", "description": "uniformly random available move (TextArena's agents need an LLM API)"}],
            "defaultOpponent": "random",
            "maxTurns": MAX_TURNS[name],
            "seeds": {"min": 0, "max": U32_MAX},
            "config": {
                "replayOpponent": {
                    "type": "boolean",
                    "default": False,
                    "description": "the opponent answers the same position the same way in every attempt",
                }
            },
            "legalActions": True,
        }
        if name == "KuhnPoker-v0":
            self._desc["config"]["rounds"] = {
                "type": "integer",
                "min": 1,
                "max": 10,
                "default": 3,
                "description": "hands in the match (TextArena's max_rounds); the starting player alternates, player 1 first",
            }

    def describe(self) -> Json:
        return self._desc

    def create(self, args: CreateArgs) -> Session:
        return TextArenaSession(self, args)


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("python -m mage_envs.textarena_server", __doc__.split("\n\n")[0], default_port=8767)
    ap.add_argument("--games", default=",".join(GAMES), help=f"comma-separated subset of {','.join(GAMES)}")
    a = ap.parse_args(argv)
    games = [g.strip() for g in a.games.split(",") if g.strip()]
    for g in games:
        if g not in GAMES:
            raise SystemExit(f"unknown game {g!r}; valid choices: {', '.join(GAMES)}")
    return serve_from_args(a, [TextArenaEnv(g) for g in games], "mage_envs.textarena_server 0.1.0")


if __name__ == "__main__":
    raise SystemExit(main())
