import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { completingCells, countTactics, parseBoard } from "../../src/evaluate/tictactoe-tactics.js";
import type { TrialMemory, TurnRecord } from "../../src/tasks/memory.js";

function turn(action: string, observation: string, valid = true): TurnRecord {
  return {
    reward: 0,
    done: false,
    won: false,
    draw: false,
    score: 0,
    valid,
    action: valid ? action : "",
    feedback: "",
    observation,
    compactObservation: "",
    compactFeedback: "",
    response: `<action>${action}</action>`,
  };
}

function memory(initial: string, turns: TurnRecord[]): TrialMemory {
  return {
    task: "tictactoe",
    opponent: "mcts:100",
    seat: "first",
    attempts: [{ index: 0, initialObservation: initial, compactInitialObservation: "", turns }],
  };
}

describe("TicTacToe one-move tactics", () => {
  it("finds the cells that complete a line, on rows, columns and both diagonals", () => {
    const board = parseBoard("X . O\n. X O\n. . .")!;
    assert.deepEqual([...completingCells(board, "X")].sort(), ["(3, 3)"]);
    assert.deepEqual([...completingCells(board, "O")].sort(), ["(3, 3)"]);
    const anti = parseBoard("Board:\n. . O\n. O .\nX X .")!;
    assert.deepEqual([...completingCells(anti, "O")], [], "the anti-diagonal's last cell is taken by X");
    assert.deepEqual([...completingCells(anti, "X")], ["(3, 3)"]);
    assert.deepEqual([...completingCells(parseBoard(". . O\n. O .\n. X X")!, "O")], ["(3, 1)"]);
    assert.equal(parseBoard("no board here"), null);
  });

  it("counts wins taken and missed, blocks made, and skips invalid answers", () => {
    const m = memory(". . .\n. . .\n. . .", [
      turn("(1, 1)", "X . .\n. O .\n. . ."),
      turn("(1, 2)", "X X .\n. O .\n. . O"),
      // X can win at (1, 3); an invalid answer (not counted), then a move elsewhere: a missed win.
      turn("(9, 9)", "X X .\n. O .\n. . O", false),
      turn("(3, 1)", "X X .\n. O .\nX O O"),
      // X can win at (1, 3) or (2, 1) and takes (1, 3).
      turn("(1, 3)", "X X X\n. O .\nX O O"),
    ]);
    const blocking = memory(". . .\n. O .\n. . O", [
      turn("(1, 1)", "X . .\n. O .\n. O O"),
      turn("(3, 1)", ""),
    ]);
    const n = countTactics([m, blocking]);
    // blocking: (1, 1) stops O's diagonal, then (3, 1) stops O's bottom row.
    assert.deepEqual(n, { winChances: 2, winsTaken: 1, blockChances: 2, blocksMade: 2 });
    assert.deepEqual(countTactics([{ ...m, task: "kuhn" }]), {
      winChances: 0,
      winsTaken: 0,
      blockChances: 0,
      blocksMade: 0,
    });
  });
});
