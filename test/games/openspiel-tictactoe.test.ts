import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { type TicTacToeState, tictactoe } from "../../src/games/tictactoe.js";
import { runPythonJson } from "../openspiel/python.js";

/**
 * Cross-check against OpenSpiel (issue 19): 10,000 uniformly random TicTacToe games played by
 * mage's engine are replayed in OpenSpiel's `tic_tac_toe`, state by state: legal moves, terminal,
 * player to move and returns agree. mage's cell index (row * 3 + col) is OpenSpiel's action.
 */

interface StateRecord {
  legal: number[];
  terminal: boolean;
  player: number;
  returns: number[];
}
interface GameRecord {
  moves: number[];
  states: StateRecord[];
}
interface Answer {
  games: number;
  states: number;
  outcomes: { x: number; o: number; draw: number };
  mismatches: { game: number; ply: number; what: string; mage: unknown; openspiel: unknown }[];
}

function record(s: TicTacToeState): StateRecord {
  return {
    legal: tictactoe.legalMoves(s),
    terminal: tictactoe.isTerminal(s),
    player: tictactoe.currentPlayer(s),
    returns: tictactoe.returns(s),
  };
}

function randomGames(n: number, rng: Rng): GameRecord[] {
  const out: GameRecord[] = [];
  for (let g = 0; g < n; g++) {
    let s = tictactoe.initialState(rng);
    const moves: number[] = [];
    const states = [record(s)];
    while (!tictactoe.isTerminal(s)) {
      const m = rng.pick(tictactoe.legalMoves(s));
      moves.push(m);
      s = tictactoe.apply(s, m);
      states.push(record(s));
    }
    out.push({ moves, states });
  }
  return out;
}

const replay = (games: GameRecord[]) =>
  runPythonJson<Answer>(
    "mage_envs.crosscheck",
    ["tictactoe"],
    games.map((g) => JSON.stringify(g)).join("\n"),
  );

describe("TicTacToe rules against OpenSpiel", () => {
  const GAMES = 10_000;
  const games = randomGames(GAMES, Rng.seeded("openspiel-tictactoe"));

  it("10,000 random games agree state by state", () => {
    const r = replay(games);
    assert.deepEqual(r.mismatches, []);
    assert.equal(r.games, GAMES);
    const states = games.reduce((n, g) => n + g.states.length, 0);
    assert.equal(r.states, states);
    // Every kind of ending is met (X wins, O wins, draws), and OpenSpiel's count of each equals ours.
    const ours = { x: 0, o: 0, draw: 0 };
    for (const g of games) {
      const r0 = g.states[g.states.length - 1].returns[0];
      ours[r0 > 0 ? "x" : r0 < 0 ? "o" : "draw"]++;
    }
    assert.deepEqual(r.outcomes, ours);
    assert.ok(ours.x > 0 && ours.o > 0 && ours.draw > 0);
  });

  it("a wrong record is reported (the comparison can fail)", () => {
    const g = structuredClone(games[0]);
    const last = g.states[g.states.length - 1];
    last.returns = [last.returns[1], last.returns[0] === 0 ? 1 : last.returns[0]];
    g.states[0].legal = g.states[0].legal.slice(1);
    const r = replay([g]);
    assert.deepEqual(r.mismatches.map((m) => m.what).sort(), ["legal", "returns"]);
  });
});
