"""OpenSpiel's side of the cross-checks of mage's engines (issue 19).

Each subcommand reads one JSON document (or JSON lines) on stdin and writes one JSON object on
stdout; the TypeScript tests (test/*/openspiel-*.test.ts) produce the input from mage's engines
and assert on the answer, so the comparison itself stays next to the TypeScript code it checks.

  python -m mage_envs.crosscheck kuhn        # {"policies": {NAME: {INFOSTATE: P(BET)}}, "cfr": [N, ...]}
  python -m mage_envs.crosscheck tictactoe   # JSON lines, one game each (see `tictactoe`)
  python -m mage_envs.crosscheck mcts        # {"games": N, "simulations": S, "uct_c": C, "seed": K}
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any, TextIO

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import cfr, expected_game_score, exploitability, mcts

Table = dict[str, float]


def kuhn_tabular_policy(game: Any, table: Table) -> Any:
    """An OpenSpiel TabularPolicy for kuhn_poker from mage's table (information state → P(BET)).

    mage names Kuhn information states exactly as OpenSpiel's `information_state_string` does
    (the player's card 0/1/2 followed by the betting history in p/b letters), so the mapping is
    the identity; every one of OpenSpiel's 12 states must be in the table.
    """
    pol = os_policy.TabularPolicy(game)
    missing = [s for s in pol.state_lookup if s not in table]
    if missing:
        raise ValueError(f"mage's table lacks OpenSpiel information states {sorted(missing)}")
    for state, index in pol.state_lookup.items():
        p_bet = float(table[state])
        pol.action_probability_array[index] = [1.0 - p_bet, p_bet]  # actions 0 = Pass, 1 = Bet
    return pol


def tabular_to_table(game: Any, pol: Any) -> Table:
    """P(BET) per information state of an OpenSpiel kuhn_poker TabularPolicy."""
    return {s: float(pol.action_probability_array[i][1]) for s, i in pol.state_lookup.items()}


def kuhn(doc: dict[str, Any]) -> dict[str, Any]:
    """NashConv, exploitability and player 0's value of each profile; CFR average policies.

    Each named policy is played by both seats. `cfr` lists iteration counts for which OpenSpiel's
    CFRSolver and CFRPlusSolver average policies are returned as tables.
    """
    game = pyspiel.load_game("kuhn_poker")
    out: dict[str, Any] = {"policies": {}, "cfr": {}, "cfr_plus": {}}
    for name, table in doc.get("policies", {}).items():
        pol = kuhn_tabular_policy(game, table)
        nc = exploitability.nash_conv(game, pol, return_only_nash_conv=False)
        values = expected_game_score.policy_value(game.new_initial_state(), [pol, pol])
        out["policies"][name] = {
            "nash_conv": float(nc.nash_conv),
            "player_improvements": [float(x) for x in nc.player_improvements],
            "exploitability": float(exploitability.exploitability(game, pol)),
            "value0": float(values[0]),
        }
    for n in doc.get("cfr", []):
        for key, solver_class in (("cfr", cfr.CFRSolver), ("cfr_plus", cfr.CFRPlusSolver)):
            solver = solver_class(game)
            for _ in range(int(n)):
                solver.evaluate_and_update_policy()
            out[key][str(n)] = tabular_to_table(game, solver.average_policy())
    return out


def tictactoe(lines: TextIO) -> dict[str, Any]:
    """Replays mage's TicTacToe games in OpenSpiel's tic_tac_toe, state by state.

    Each line: {"moves": [cell, ...], "states": [{"legal": [...], "terminal": bool,
    "player": p, "returns": [r0, r1]}, ...]} with one state per prefix of `moves` (the empty
    board first). Cells are row-major 0..8, which is OpenSpiel's action numbering
    (action = row * 3 + col). Compares legal actions, terminality, the player to move (-1 at a
    terminal state) and the returns (zeros before the end in both libraries); answers counts
    and the first mismatches.
    """
    game = pyspiel.load_game("tic_tac_toe")
    games = states = 0
    outcomes = {"x": 0, "o": 0, "draw": 0}
    mismatches: list[dict[str, Any]] = []

    def mismatch(game_index: int, ply: int, what: str, ours: Any, theirs: Any) -> None:
        if len(mismatches) < 20:
            mismatches.append({"game": game_index, "ply": ply, "what": what, "mage": ours, "openspiel": theirs})

    for game_index, line in enumerate(lines):
        if not line.strip():
            continue
        record = json.loads(line)
        moves: list[int] = record["moves"]
        recorded: list[dict[str, Any]] = record["states"]
        if len(recorded) != len(moves) + 1:
            mismatch(game_index, -1, "state count", len(recorded), len(moves) + 1)
            continue
        games += 1
        state = game.new_initial_state()
        for ply, ours in enumerate(recorded):
            states += 1
            terminal = bool(state.is_terminal())
            legal = [] if terminal else [int(a) for a in state.legal_actions()]
            player = -1 if terminal else int(state.current_player())
            if sorted(ours["legal"]) != legal:
                mismatch(game_index, ply, "legal", sorted(ours["legal"]), legal)
            if bool(ours["terminal"]) != terminal:
                mismatch(game_index, ply, "terminal", ours["terminal"], terminal)
            if int(ours["player"]) != player:
                mismatch(game_index, ply, "player", ours["player"], player)
            returns = [float(r) for r in state.returns()]
            if [float(r) for r in ours["returns"]] != returns:
                mismatch(game_index, ply, "returns", ours["returns"], returns)
            if terminal:
                outcomes["x" if returns[0] > 0 else "o" if returns[0] < 0 else "draw"] += 1
            if ply < len(moves):
                if terminal or moves[ply] not in legal:
                    mismatch(game_index, ply, "move not legal in OpenSpiel", moves[ply], legal)
                    break
                state.apply_action(moves[ply])
    return {"games": games, "states": states, "outcomes": outcomes, "mismatches": mismatches}


def mcts_vs_random(doc: dict[str, Any]) -> dict[str, Any]:
    """OpenSpiel's MCTSBot against a uniformly random player on tic_tac_toe, `games` per seat.

    `impl` "cpp" uses pyspiel.MCTSBot (OpenSpiel's C++ bot, fast enough for CI), "python" the
    open_spiel.python.algorithms.mcts.MCTSBot; both with a RandomRolloutEvaluator of one rollout,
    `uct_c`, `simulations` and the solver (`solve`). `seats` picks which seats to play (0, 1).
    Answers [wins, draws, losses] of the bot per seat.
    """
    game = pyspiel.load_game("tic_tac_toe")
    games = int(doc["games"])
    sims = int(doc.get("simulations", 100))
    uct_c = float(doc.get("uct_c", 1.4))
    solve = bool(doc.get("solve", True))
    seed = int(doc.get("seed", 0))
    impl = str(doc.get("impl", "cpp"))
    seats = [int(s) for s in doc.get("seats", [0, 1])]
    results: dict[str, list[int]] = {}
    for seat in seats:
        opponent = random.Random(seed * 2 + seat)
        if impl == "cpp":
            evaluator = pyspiel.RandomRolloutEvaluator(1, seed * 2 + seat)
            bot: Any = pyspiel.MCTSBot(game, evaluator, uct_c, sims, 1000, solve, seed * 2 + seat, False)
        elif impl == "python":
            rs = np.random.RandomState(seed * 2 + seat)
            evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=rs)
            bot = mcts.MCTSBot(game, uct_c, sims, evaluator, solve=solve, random_state=rs)
        else:
            raise ValueError(f'unknown impl "{impl}"; valid choices: cpp, python')
        wdl = [0, 0, 0]
        for _ in range(games):
            state = game.new_initial_state()
            while not state.is_terminal():
                if state.current_player() == seat:
                    action = bot.step(state)
                else:
                    action = opponent.choice(state.legal_actions())
                state.apply_action(action)
            r = state.returns()[seat]
            wdl[0 if r > 0 else 1 if r == 0 else 2] += 1
        results[str(seat)] = wdl
    return {"impl": impl, "games": games, "simulations": sims, "uct_c": uct_c, "solve": solve, "wdl": results}


def main(argv: list[str]) -> int:
    commands = ("kuhn", "tictactoe", "mcts")
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python -m mage_envs.crosscheck {{{'|'.join(commands)}}} < input", file=sys.stderr)
        return 2
    if argv[0] == "kuhn":
        result = kuhn(json.load(sys.stdin))
    elif argv[0] == "tictactoe":
        result = tictactoe(sys.stdin)
    else:
        result = mcts_vs_random(json.load(sys.stdin))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
