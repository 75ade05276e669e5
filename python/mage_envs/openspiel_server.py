"""OpenSpiel games served over mage's environment protocol (`mage-env/1`).

    python -m mage_envs.openspiel_server --port 8766 [--cfr-iterations 100] [--games kuhn_poker,...]

Games: kuhn_poker, leduc_poker, tic_tac_toe, connect_four, liars_dice (two players; the agent
takes the seat it is given, OpenSpiel's bots the other). Observations are text: the agent's
`observation_string` (or `information_state_string` where the game has no observation string),
made readable (cards named, bracketed fields on their own lines), the moves so far named with
`action_to_string`, and the legal actions by name. An answer is mage's `<action>NAME</action>`,
matched case- and space-insensitively against the legal names.

Opponents (OpenSpiel's own bots):
- `random`: uniformly random legal action (OpenSpiel's `uniform_random` policy);
- `mcts:<simulations>`: OpenSpiel's MCTSBot (the C++ `pyspiel.MCTSBot`, UCT c = 2, one random
  rollout, solver on), for the perfect-information games only (on a poker or dice state it would
  read the agent's hidden cards);
- `cfr:<iterations>`: samples from the average policy of OpenSpiel's `cfr.CFRSolver` after that
  many iterations (poker games), computed at start-up for the counts `--cfr-iterations` lists.

Chance events (deals, dice, Leduc's public card) are drawn from a generator seeded by the
session's seed and rewound on `/restart`, so every attempt meets the same cards. Each opponent
decision draws from a generator seeded by `opponentSeed` and the decision's place in the
session's stream (which continues across attempts), or with `replayOpponent` by the position
(the history of actions), so the same position gets the same answer in every attempt.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, Callable

import pyspiel
from open_spiel.python.algorithms import cfr

from .answers import Matcher, unspaced_lower
from .protocol import U32_MAX, CreateArgs, EnvError, Environment, Json, Session, fingerprint, invalid_step, normalise
from .server import argument_parser, serve_from_args

GAMES = ("kuhn_poker", "leduc_poker", "tic_tac_toe", "connect_four", "liars_dice")
POKER = ("kuhn_poker", "leduc_poker")
PERFECT_INFORMATION = ("tic_tac_toe", "connect_four")
# An answer names a legal action case- and space-insensitively (no two of a state's names share a key).
ANSWERS = Matcher('"{content}" is not a legal action; legal: {legal}', quote=60, answer_key=unspaced_lower,
                  legal_key=normalise)
MCTS_UCT_C = 2.0
MAX_MCTS_SIMULATIONS = 100_000

RULES = {
    "kuhn_poker": (
        "You are playing Kuhn poker against an opponent. The deck has three cards, Jack < Queen < King; "
        "each player antes 1 chip and gets one private card. Player 0 acts first. Pass checks or folds; "
        "Bet bets 1 chip or calls a bet. If nobody folds, the higher card wins the pot."
    ),
    "leduc_poker": (
        "You are playing Leduc poker against an opponent. The deck has six cards, two each of Jack, Queen "
        "and King; each player antes 1 chip and gets one private card. There are two betting rounds (raises "
        "of 2 chips, then 4, at most two per round); after the first a public card is dealt. Fold gives up "
        "the pot, Call checks or matches the bet, Raise bets more. At showdown a pair with the public card "
        "wins, else the higher card."
    ),
    "tic_tac_toe": (
        "You are playing TicTacToe on a 3x3 board against an opponent. Player 0 plays x and moves first, "
        "player 1 plays o. Cells are (row,col) counted from 0. Three of your marks in a row, column or "
        "diagonal win; a full board without a line is a draw."
    ),
    "connect_four": (
        "You are playing Connect Four on a board of 6 rows and 7 columns against an opponent. Player 0 "
        "plays x and moves first, player 1 plays o. A move drops your disc into a column (0-6); four of "
        "your discs in a row, column or diagonal win."
    ),
    "liars_dice": (
        "You are playing Liar's Dice against an opponent; each player rolls one six-sided die in secret. "
        "Players take turns raising the bid 'q-f' (at least q dice among both show face f; a 6 counts as "
        "any face) or calling Liar on the last bid. If the bid holds, the caller loses; otherwise the bidder."
    ),
}

MAX_TURNS = {"kuhn_poker": 4, "leduc_poker": 8, "tic_tac_toe": 7, "connect_four": 25, "liars_dice": 8}

CARD = ["Jack", "Queen", "King"]


def leduc_card(c: int) -> str:
    return f"{CARD[c // 2]} (suit {c % 2})" if c >= 0 else "none"


def readable(game: str, text: str) -> str:
    """OpenSpiel's observation / information-state string made readable."""
    if game == "kuhn_poker":
        return f"Your card: {CARD[int(text[0])]}."
    if game == "leduc_poker":
        fields = re.findall(r"\[([^\]]*)\]", text)
        out = []
        for f in fields:
            key, _, value = f.partition(":")
            value = value.strip()
            if key in ("Observer", "Player"):
                continue
            if key in ("Private", "Public"):
                value = leduc_card(int(value))
                key = "Your card" if key == "Private" else "Public card"
            out.append(f"{key}: {value}" if value else key)
        return "\n".join(out)
    if game == "liars_dice":
        return f"Your die: {text.split()[0]}."
    return text.strip()


class CfrPolicies:
    """CFR average policies per (game, iterations), computed once at start-up."""

    def __init__(self, iterations: list[int]):
        self.iterations = sorted(set(iterations))
        self.tables: dict[tuple[str, int], dict[str, list[float]]] = {}

    def build(self, game_name: str) -> None:
        game = pyspiel.load_game(game_name)
        solver = cfr.CFRSolver(game)
        done = 0
        for n in self.iterations:
            for _ in range(n - done):
                solver.evaluate_and_update_policy()
            done = n
            avg = solver.average_policy()
            self.tables[(game_name, n)] = {
                s: [float(p) for p in avg.action_probability_array[i]] for s, i in avg.state_lookup.items()
            }


class Opponent:
    """One of OpenSpiel's bots over pyspiel states.

    Each decision draws from its own generator, seeded by (opponentSeed, key). The key is the
    decision's position in the session's stream (continuing across attempts), or with `replay`
    the game's history of actions, so the same position gets the same answer in every attempt.
    """

    def __init__(self, spec: str, game_name: str, game: Any, seed: int, cfr_tables: CfrPolicies, replay: bool):
        self.spec = spec
        self.game_name = game_name
        self.game = game
        self.seed = seed
        self.replay = replay
        self.cfr_tables = cfr_tables
        kind, _, arg = spec.partition(":")
        self.kind = kind
        self.arg = int(arg) if arg else 0
        self.decisions = 0

    def _seed(self, state: Any) -> int:
        key = "h" + ",".join(map(str, state.history())) if self.replay else f"n{self.decisions}"
        self.decisions += 1
        return int(fingerprint(str(self.seed), key), 16) % (2**31)

    def act(self, state: Any) -> int:
        seed = self._seed(state)
        rng = random.Random(seed)
        legal = list(state.legal_actions())
        if self.kind == "random":
            return int(rng.choice(legal))
        if self.kind == "mcts":
            evaluator = pyspiel.RandomRolloutEvaluator(1, seed)
            bot = pyspiel.MCTSBot(self.game, evaluator, MCTS_UCT_C, self.arg, 1000, True, seed, False)
            return int(bot.step(state))
        if self.kind == "cfr":
            table = self.cfr_tables.tables[(self.game_name, self.arg)]
            probs = table[state.information_state_string(state.current_player())]
            return int(rng.choices(legal, weights=[probs[a] for a in legal])[0])
        raise AssertionError(self.kind)


class OpenSpielSession(Session):
    def __init__(self, env: OpenSpielEnv, args: CreateArgs):
        self.env = env
        self.game_name = env.name
        self.game = env.game
        self.agent = 0 if args.seat == "first" else 1
        self.config = args.config
        self.pass_bet = args.config.get("actions") == "pass-bet"
        self.salt = json.dumps([env.name, args.seed, args.opponent, args.seat, args.config], sort_keys=True)
        assert args.opponent is not None
        self.opponent = Opponent(
            args.opponent, env.name, env.game, args.opponent_seed, env.cfr, bool(args.config.get("replayOpponent"))
        )
        self.chance = random.Random(args.seed)
        state = self.game.new_initial_state()
        self.history: list[tuple[int, int, str]] = []
        self.kuhn_history: list[str] = []
        state = self._advance(state, [])
        self.initial = state.clone()
        self.initial_history = list(self.history)
        self.initial_kuhn_history = list(self.kuhn_history)
        self.initial_chance = self.chance.getstate()
        self.cur = state
        self.fingerprint = fingerprint(self.salt, str(self.initial), repr(self.initial_history))

    # --- moves ---

    def _advance(self, state: Any, replies: list[str]) -> Any:
        """Chance events and opponent moves until the agent is to act or the game is over."""
        while not state.is_terminal() and (state.is_chance_node() or state.current_player() != self.agent):
            if state.is_chance_node():
                outcomes = state.chance_outcomes()
                actions = [a for a, _ in outcomes]
                action = self.chance.choices(actions, weights=[p for _, p in outcomes])[0]
                state.apply_action(action)
            else:
                player = state.current_player()
                action = self.opponent.act(state)
                replies.append(self._record(state, player, action))
                state.apply_action(action)
        return state

    def _names(self, state: Any) -> dict[str, int]:
        """The agent's legal actions by name (pass-bet names for poker when configured)."""
        legal = list(state.legal_actions())
        if not self.pass_bet:
            return {state.action_to_string(self.agent, a): a for a in legal}
        if self.game_name == "kuhn_poker":
            return {"PASS": 0, "BET": 1}
        facing_bet = 0 in legal  # Leduc: Fold is legal only when facing a bet
        return {"PASS": 0 if facing_bet else 1, "BET": 1 if facing_bet else 2}

    def _kuhn_name(self, state: Any, action: int) -> str:
        """The action as mage's Kuhn poker names it: PASS (check / fold) or BET (bet, raise, call)."""
        if self.game_name == "kuhn_poker":
            return "BET" if action == 1 else "PASS"
        facing_bet = 0 in state.legal_actions()
        return "PASS" if action == 0 or (action == 1 and not facing_bet) else "BET"

    def _record(self, state: Any, player: int, action: int) -> str:
        name = str(state.action_to_string(player, action))
        self.history.append((player, action, name))
        if self.game_name in POKER:
            self.kuhn_history.append(self._kuhn_name(state, action))
        return name

    # --- text ---

    def _observation(self, state: Any) -> str:
        g = self.game_name
        if self.game.get_type().provides_observation_string and g != "kuhn_poker":
            text = state.observation_string(self.agent)
        else:
            text = state.information_state_string(self.agent)
        lines = [f"You are player {self.agent} ({'first' if self.agent == 0 else 'second'} to act)."]
        lines.append(readable(g, text))
        moves = [f"{'you' if p == self.agent else 'opponent'}: {n}" for p, _, n in self.history]
        lines.append("Moves so far: " + ("; ".join(moves) if moves else "none") + ".")
        if not state.is_terminal():
            lines.append("Legal actions: " + ", ".join(self._names(state)) + ".")
        return "\n".join(lines)

    def _compact(self, state: Any) -> str:
        """A terse one-line form for mage's compact prompts (the card(s), the moves, the legal actions)."""
        g = self.game_name
        if self.pass_bet:
            return self._compact_pass_bet(state)
        moves = ", ".join(f"{'you' if p == self.agent else 'opp'} {n}" for p, _, n in self.history) or "none"
        if g == "kuhn_poker":
            head = f"Card: {CARD[int(state.information_state_string(self.agent)[0])][0]}."
        elif g == "leduc_poker":
            obs = state.observation_string(self.agent)
            priv = re.search(r"\[Private: (-?\d+)\]", obs)
            pub = re.search(r"\[Public: (-?\d+)\]", obs)
            pot = re.search(r"\[Pot: (\d+)\]", obs)
            head = f"Card: {CARD[int(priv.group(1)) // 2][0] if priv else '?'}."
            if pub and int(pub.group(1)) >= 0:
                head += f" Public: {CARD[int(pub.group(1)) // 2][0]}."
            if pot:
                head += f" Pot: {pot.group(1)}."
        elif g == "liars_dice":
            head = f"Die: {state.information_state_string(self.agent).split()[0]}."
        else:
            head = state.observation_string(self.agent).strip().replace("\n", "/")
        legal = "" if state.is_terminal() else " Legal: " + ", ".join(self._names(state)) + "."
        return f"{head} Moves: {moves}.{legal}"

    def _compact_pass_bet(self, state: Any) -> str:
        """mage's Kuhn compact form (`Card: Q. You: BET. Opp: PASS.`), plus Leduc's public card."""
        if self.game_name == "kuhn_poker":
            card = int(state.information_state_string(self.agent)[0])
            parts = [f"Card: {CARD[card][0]}."]
        else:
            obs = state.observation_string(self.agent)
            priv = re.search(r"\[Private: (-?\d+)\]", obs)
            pub = re.search(r"\[Public: (-?\d+)\]", obs)
            parts = [f"Card: {CARD[int(priv.group(1)) // 2][0]}." if priv else "Card: ?."]
            if pub and int(pub.group(1)) >= 0:
                parts.append(f"Public: {CARD[int(pub.group(1)) // 2][0]}.")
        if not self.history:
            parts.append("You act first.")
        for (p, _, _), k in zip(self.history, self.kuhn_history):
            parts.append(f"{'You' if p == self.agent else 'Opp'}: {k}.")
        return " ".join(parts)

    def prompt(self) -> Json:
        names = ", ".join(f"<action>{n}</action>" for n in self._names(self.initial)) if not self.initial.is_terminal() else ""
        pass_bet = (
            " Answer PASS to check or fold and BET to bet, raise or call (Leduc: BET raises when nobody has bet, else calls)."
            if self.pass_bet
            else ""
        )
        first = "first" if self.agent == 0 else "second"
        compact_rules = f"{self.game_name.replace('_', ' ')}, OpenSpiel rules.{pass_bet} Reply <action>ACTION</action> with a legal action."
        if self.pass_bet and self.game_name == "leduc_poker":
            compact_rules = (
                "Leduc poker. Cards J,J,Q,Q,K,K, ante 1, a public card after round 1. PASS = check/fold, "
                "BET = bet/call (2 chips, then 4). A pair with the public card wins, else the higher card. "
                f"You act {first}. Reply <action>PASS</action> or <action>BET</action>."
            )
        elif self.pass_bet:
            compact_rules = (
                "Kuhn poker. Cards J<Q<K, ante 1. PASS = check/fold, BET = bet/call 1 chip. Both check or a call: "
                f"higher card wins. You act {first}. Reply <action>PASS</action> or <action>BET</action>."
            )
        return {
            "rules": RULES[self.game_name] + pass_bet,
            "playInstruction": (
                "Think briefly, then answer with exactly one of the legal actions listed in the observation, "
                f"written inside <action></action> (for example {names or '<action>NAME</action>'})."
            ),
            "compactRules": compact_rules,
            "compactAsk": "Your move?",
            "actionWord": "Action",
        }

    def _forfeit(self, state: Any) -> Json | None:
        """What an attempt cut off now costs: the chips the agent has put in (poker), else a loss."""
        if state.is_terminal():
            return None
        if self.game_name == "kuhn_poker":
            put_in = 1 + sum(1 for p, a, _ in self.history if p == self.agent and a == 1)
            return {"reward": -float(put_in), "score": -float(put_in)}
        if self.game_name == "leduc_poker":
            money = re.search(r"\[Money: (\d+) (\d+)\]", state.observation_string(self.agent))
            put_in = 100 - int(money.group(1 + self.agent)) if money else 1
            return {"reward": -float(put_in), "score": -float(put_in)}
        return {"reward": -1.0, "score": -1.0}

    def state(self) -> Json:
        """The reply to /create and /restart (both leave the session at its initial state)."""
        s = self.cur
        done = bool(s.is_terminal())
        return {
            "fingerprint": self.fingerprint,
            "observation": self._observation(s),
            "compactObservation": self._compact(s),
            "legalActions": [] if done else list(self._names(s)),
            "toMove": None if done else "agent",
            "done": done,
            "forfeit": self._forfeit(s),
        }

    @property
    def done(self) -> bool:
        return bool(self.cur.is_terminal())

    def restart(self) -> None:
        self.cur = self.initial.clone()
        self.history = list(self.initial_history)
        self.kuhn_history = list(self.initial_kuhn_history)
        self.chance.setstate(self.initial_chance)
        # Recomputed from the restored state, so a restore that went wrong shows as a different fingerprint.
        self.fingerprint = fingerprint(self.salt, str(self.cur), repr(self.history))

    def step(self, response: str) -> Json:
        s = self.cur
        names = self._names(s)
        answer = ANSWERS.match(response, list(names))
        if answer.action is None:
            return invalid_step(self._observation(s), self._compact(s), answer.reason, answer.content, list(names),
                                self._forfeit(s))
        name, action = answer.action, names[answer.action]
        self._record(s, self.agent, action)
        s.apply_action(action)
        replies: list[str] = []
        s = self._advance(s, replies)
        self.cur = s
        done = bool(s.is_terminal())
        reply: Json = {
            "observation": self._observation(s),
            "compactObservation": self._compact(s),
            "reward": 0.0,
            "done": done,
            "won": False,
            "draw": False,
            "score": 0.0,
            "valid": True,
            "action": name,
            "feedback": ("The opponent played " + ", then ".join(replies) + ".") if replies else "",
            "compactFeedback": ("Opp: " + ", ".join(replies) + ".") if replies and not self.pass_bet else "",
            "legalActions": [] if done else list(self._names(s)),
            "toMove": None if done else "agent",
            "forfeit": self._forfeit(s),
            "info": {"opponentMoves": replies},
        }
        if done:
            r = float(s.returns()[self.agent])
            reply.update(
                reward=r,
                score=r,
                won=r > 0,
                draw=r == 0,
                outcome=f"You {'won' if r > 0 else 'lost' if r < 0 else 'drew'}"
                + (f" {abs(r):g} chips." if self.game_name in POKER else "."),
                compactOutcome=f"{'Won' if r > 0 else 'Lost' if r < 0 else 'Draw'} {r:+g}.",
                hindsightObservation=f"Final state (all hidden information shown):\n{str(s).strip()}",
            )
        return reply


class OpenSpielEnv(Environment):
    def __init__(self, name: str, cfr_tables: CfrPolicies):
        self.name = name
        self.game = pyspiel.load_game(name)
        self.cfr = cfr_tables
        opponents = [{"spec": "random", "description": "uniformly random legal action (OpenSpiel's uniform_random)"}]
        if name in PERFECT_INFORMATION:
            opponents.append(
                {
                    "spec": "mcts:<simulations>",
                    "description": f"OpenSpiel's MCTSBot (C++), UCT c = {MCTS_UCT_C:g}, one random rollout, solver",
                }
            )
        if name in POKER:
            for n in cfr_tables.iterations:
                opponents.append(
                    {"spec": f"cfr:{n}", "description": f"samples OpenSpiel's CFRSolver average policy after {n} iterations"}
                )
        config: Json = {
            "replayOpponent": {
                "type": "boolean",
                "default": False,
                "description": "the opponent answers the same position the same way in every attempt",
            }
        }
        if name in POKER:
            config["actions"] = {
                "type": "string",
                "choices": ["openspiel", "pass-bet"],
                "default": "openspiel",
                "description": "action names: OpenSpiel's (Pass/Bet, Fold/Call/Raise) or PASS/BET as in mage's Kuhn poker "
                "(Leduc: PASS checks or folds, BET raises or calls; no re-raise)",
            }
        self._desc: Json = {
            "name": name,
            "description": f"OpenSpiel's {name} against one of OpenSpiel's bots",
            "twoPlayer": True,
            "seats": ["first", "second"],
            "opponents": opponents,
            "defaultOpponent": "random",
            "maxTurns": MAX_TURNS[name],
            "seeds": {"min": 0, "max": U32_MAX},
            "config": config,
            "legalActions": True,
        }

    def describe(self) -> Json:
        return self._desc

    def opponent_ok(self, spec: str) -> bool:
        if not super().opponent_ok(spec):
            return False
        if spec.startswith("mcts:"):
            return int(spec[5:]) <= MAX_MCTS_SIMULATIONS
        return True

    def create(self, args: CreateArgs) -> Session:
        return OpenSpielSession(self, args)


def build_envs(games: list[str], cfr_iterations: list[int], log: Callable[[str], None] = lambda m: None) -> list[Environment]:
    tables = CfrPolicies(cfr_iterations)
    for g in games:
        if g not in GAMES:
            raise SystemExit(f"unknown game {g!r}; valid choices: {', '.join(GAMES)}")
        if g in POKER and cfr_iterations:
            log(f"CFR: {g}, {max(cfr_iterations)} iterations")
            tables.build(g)
    return [OpenSpielEnv(g, tables) for g in games]


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("python -m mage_envs.openspiel_server", __doc__.split("\n\n")[0], default_port=8766)
    ap.add_argument("--games", default=",".join(GAMES), help=f"comma-separated subset of {','.join(GAMES)}")
    ap.add_argument("--cfr-iterations", default="100", help="comma-separated CFR iteration counts served as cfr:N")
    a = ap.parse_args(argv)
    iterations = [int(x) for x in a.cfr_iterations.split(",") if x.strip()]
    envs = build_envs([g.strip() for g in a.games.split(",") if g.strip()], iterations, lambda m: print(m, flush=True))
    return serve_from_args(a, envs, "mage_envs.openspiel_server 0.1.0")


if __name__ == "__main__":
    raise SystemExit(main())
