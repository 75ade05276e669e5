import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { loadGame } from "../../src/games/registry.js";
import {
  cellAt,
  cellIndex,
  colOf,
  EMPTY_BOARD,
  emptyCells,
  isLegalMove,
  moveCount,
  randomPlayoutValue,
  rowOf,
  stateFromCells,
  stateFromMoves,
  type TicTacToeState,
  tictactoe,
  WIN_LINES,
  winnerOf,
} from "../../src/games/tictactoe.js";

const g = tictactoe;

describe("tictactoe rules", () => {
  it("starts empty with player 0 to move and 9 legal moves in row-major order", () => {
    const s = g.initialState(Rng.seeded(1));
    assert.equal(s, EMPTY_BOARD);
    assert.equal(g.currentPlayer(s), 0);
    assert.deepEqual(g.legalMoves(s), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert.equal(g.isTerminal(s), false);
    assert.deepEqual(g.returns(s), [0, 0]);
    assert.equal(g.numPlayers, 2);
  });

  it("maps cells to rows and columns row-major", () => {
    for (let r = 0; r < 3; r++) {
      for (let c = 0; c < 3; c++) {
        const m = cellIndex(r, c);
        assert.equal(m, 3 * r + c);
        assert.equal(rowOf(m), r);
        assert.equal(colOf(m), c);
      }
    }
    assert.equal(g.moveToString(5), "(2,3)");
  });

  it("alternates players, places marks and never mutates the input state", () => {
    const s0 = EMPTY_BOARD;
    const s1 = g.apply(s0, 4);
    const s2 = g.apply(s1, 0);
    assert.equal(s0, EMPTY_BOARD);
    assert.equal(cellAt(s1, 4), 0);
    assert.equal(cellAt(s1, 0), -1);
    assert.equal(cellAt(s2, 0), 1);
    assert.equal(g.currentPlayer(s1), 1);
    assert.equal(g.currentPlayer(s2), 0);
    assert.equal(moveCount(s2), 2);
    assert.deepEqual(g.legalMoves(s2), [1, 2, 3, 5, 6, 7, 8]);
  });

  it("rejects occupied, out-of-range and post-game moves", () => {
    const s = stateFromMoves([4]);
    assert.throws(() => g.apply(s, 4), RangeError);
    assert.throws(() => g.apply(s, 9), RangeError);
    assert.throws(() => g.apply(s, -1), RangeError);
    assert.throws(() => g.apply(s, 1.5), RangeError);
    const won = stateFromMoves([0, 3, 1, 4, 2]);
    assert.equal(g.isTerminal(won), true);
    assert.equal(g.currentPlayer(won), -1);
    assert.deepEqual(g.legalMoves(won), []);
    assert.throws(() => g.apply(won, 8), RangeError);
    assert.throws(() => stateFromMoves([0, 0]), RangeError);
  });

  it("detects every line for either player", () => {
    const isLine = (cells: number[]) =>
      WIN_LINES.some((l) => l.every((c) => cells.includes(c)) && cells.length === 3);
    for (const line of WIN_LINES) {
      const off = [0, 1, 2, 3, 4, 5, 6, 7, 8].filter((c) => !line.includes(c));
      for (const p of [0, 1]) {
        // The other player: 2 marks off the line (X wins), or 3 that make no line (O wins).
        let filler = off.slice(0, 2);
        if (p === 1) {
          for (let k = 2; k < off.length; k++) {
            if (!isLine([off[0], off[1], off[k]])) {
              filler = [off[0], off[1], off[k]];
              break;
            }
          }
        }
        const cells = Array<number>(9).fill(-1);
        for (const c of line) cells[c] = p;
        for (const c of filler) cells[c] = 1 - p;
        const s = stateFromCells(cells);
        assert.equal(winnerOf(s), p, `line ${line} for player ${p}`);
        assert.equal(g.isTerminal(s), true);
        assert.deepEqual(g.returns(s), p === 0 ? [1, -1] : [-1, 1]);
      }
    }
    assert.equal(winnerOf(stateFromMoves([0, 3, 1, 4, 2])), 0);
    assert.equal(winnerOf(stateFromMoves([0, 2, 1, 4, 8, 6])), 1);
    assert.equal(winnerOf(stateFromMoves([2, 0, 4, 1, 6])), 0); // anti-diagonal
  });

  it("scores a full board without a line as a draw", () => {
    // X O X / X O O / O X X
    const s = stateFromMoves([0, 1, 2, 4, 3, 5, 7, 6, 8]);
    assert.equal(winnerOf(s), -1);
    assert.equal(g.isTerminal(s), true);
    assert.deepEqual(g.returns(s), [0, 0]);
  });

  it("renders three lines of ./X/O joined by spaces, optionally from player 1's side", () => {
    const s = stateFromMoves([4, 6]);
    assert.equal(g.render(s), ". . .\n. X .\nO . .");
    assert.equal(g.render(s, 0), ". . .\n. X .\nO . .");
    assert.equal(g.render(s, 1), ". . .\n. O .\nX . .");
  });

  it("returns a fresh legal-move array each call", () => {
    const a = emptyCells(EMPTY_BOARD);
    a.reverse();
    assert.deepEqual(g.legalMoves(EMPTY_BOARD), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it("checks cell counts in stateFromCells", () => {
    assert.throws(() => stateFromCells([1, -1, -1, -1, -1, -1, -1, -1, -1]), RangeError);
    assert.throws(() => stateFromCells([0, 0, -1, -1, -1, -1, -1, -1, -1]), RangeError);
    assert.throws(() => stateFromCells([0, 2, -1, -1, -1, -1, -1, -1, -1]), RangeError);
    assert.equal(stateFromCells([0, 1, -1, -1, -1, -1, -1, -1, -1]), stateFromMoves([0, 1]));
  });

  it("has the known state-space and game-tree counts", () => {
    // 5,478 reachable positions, 958 terminal (626 X wins, 316 O wins, 16 draws);
    // 255,168 distinct games (131,184 X wins, 77,904 O wins, 46,080 draws).
    const seen = new Set<number>();
    const terminal = [0, 0, 0]; // X wins, O wins, draws
    const games = [0, 0, 0];
    const visit = (s: TicTacToeState) => {
      const first = !seen.has(s);
      seen.add(s);
      if (g.isTerminal(s)) {
        const w = winnerOf(s);
        const k = w === 0 ? 0 : w === 1 ? 1 : 2;
        games[k]++;
        if (first) terminal[k]++;
        return;
      }
      for (const m of g.legalMoves(s)) {
        assert.ok(isLegalMove(s, m));
        visit(g.apply(s, m));
      }
    };
    visit(EMPTY_BOARD);
    assert.equal(seen.size, 5478);
    assert.deepEqual(terminal, [626, 316, 16]);
    assert.deepEqual(games, [131184, 77904, 46080]);
  });

  it("fast random playouts match the exact random-play outcome distribution", () => {
    // Exact probabilities under uniformly random play from the empty board.
    const exact = [0, 0, 0];
    const walk = (s: TicTacToeState, p: number) => {
      if (g.isTerminal(s)) {
        const w = winnerOf(s);
        exact[w === 0 ? 0 : w === 1 ? 1 : 2] += p;
        return;
      }
      const moves = g.legalMoves(s);
      for (const m of moves) walk(g.apply(s, m), p / moves.length);
    };
    walk(EMPTY_BOARD, 1);
    assert.ok(Math.abs(exact[0] - 0.585) < 0.001 && Math.abs(exact[1] - 0.288) < 0.001);
    const rng = Rng.seeded(3);
    const n = 200_000;
    const counts = [0, 0, 0];
    for (let i = 0; i < n; i++) {
      const v = randomPlayoutValue(EMPTY_BOARD, rng);
      counts[v === 1 ? 0 : v === -1 ? 1 : 2]++;
    }
    for (let k = 0; k < 3; k++) {
      const sd = Math.sqrt((exact[k] * (1 - exact[k])) / n);
      assert.ok(Math.abs(counts[k] / n - exact[k]) < 5 * sd, `outcome ${k}: ${counts[k] / n} vs ${exact[k]}`);
    }
    // From a decided position the playout returns the result without drawing.
    assert.equal(randomPlayoutValue(stateFromMoves([0, 3, 1, 4, 2]), rng), 1);
  });

  it("is registered as 'tictactoe'", async () => {
    assert.equal(await loadGame("tictactoe"), tictactoe);
  });
});
