import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  MINESWEEPER_REWARDS,
  type MinesweeperBoard,
  minePositions,
  minesweeperFromMines,
  newMinesweeper,
  parseMinesweeperAction,
  renderMinesweeper,
  revealCell,
  stepMinesweeperText,
} from "../../src/games/minesweeper.js";

function openedCells(b: MinesweeperBoard): number {
  return b.revealed.filter(Boolean).length;
}

describe("minesweeper reset", () => {
  it("the first reveal is never a mine over 10,000 seeds, and the board is still in play", () => {
    const mineCounts = new Array(36).fill(0);
    for (let seed = 0; seed < 10_000; seed++) {
      const b = newMinesweeper(Rng.seeded(seed));
      assert.equal(b.status, "playing");
      assert.equal(b.mines.filter(Boolean).length, 3);
      const opened = openedCells(b);
      assert.ok(opened >= 1, "something is open");
      assert.equal(b.openedSafe, opened);
      assert.ok(opened < 36 - 3, "the first reveal did not already win");
      for (let i = 0; i < 36; i++) {
        if (b.revealed[i]) assert.equal(b.mines[i], false, `seed ${seed}: revealed mine at ${i}`);
        if (b.mines[i]) mineCounts[i]++;
      }
    }
    // mines land everywhere, roughly uniformly (expected 10,000·3/36 ≈ 833 per cell)
    for (const c of mineCounts) assert.ok(c > 600 && c < 1100, `mine count per cell ${c}`);
  });

  it("is deterministic: same seed ⇒ identical board; different seeds differ", () => {
    const a = newMinesweeper(Rng.seeded(4608).derive("task", 3));
    const b = newMinesweeper(Rng.seeded(4608).derive("task", 3));
    assert.deepEqual(a, b);
    assert.equal(renderMinesweeper(a), renderMinesweeper(b));
    const renders = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const x = newMinesweeper(Rng.seeded(4608).derive("task", i));
      renders.add(`${renderMinesweeper(x)}|${JSON.stringify(minePositions(x))}`);
    }
    assert.ok(renders.size >= 19);
  });

  it("redraws boards whose first reveal wins, and errors clearly when it cannot", () => {
    // one mine on 4×4: the first reveal often opens everything
    for (let seed = 0; seed < 300; seed++)
      assert.equal(newMinesweeper(Rng.seeded(seed), { rows: 4, cols: 4, mines: 1 }).status, "playing");
    let threw = 0;
    for (let seed = 0; seed < 50; seed++) {
      try {
        newMinesweeper(Rng.seeded(seed), { rows: 4, cols: 4, mines: 1, maxRedraws: 0 });
      } catch (e) {
        assert.ok(e instanceof UsageError && /rows=4, cols=4, mines=1/.test(e.message));
        threw++;
      }
    }
    assert.ok(threw > 0);
    assert.throws(() => newMinesweeper(Rng.seeded(1), { mines: 35 }), UsageError);
    assert.throws(() => newMinesweeper(Rng.seeded(1), { mines: 0 }), UsageError);
  });
});

describe("minesweeper reveals and rewards", () => {
  // 5×5, a full row of mines in row 2 splits the board into two regions.
  const split = () =>
    minesweeperFromMines(5, 5, [
      [2, 0],
      [2, 1],
      [2, 2],
      [2, 3],
      [2, 4],
    ]);

  it("a cascade opens the zero region and its numbered border, then the win replaces the reveal reward", () => {
    const b0 = split();
    const r1 = revealCell(b0, 4, 4);
    assert.equal(r1.opened, 10, "rows 3 and 4");
    assert.equal(r1.reward, MINESWEEPER_REWARDS.cascade);
    assert.equal(r1.done, false);
    for (let i = 0; i < 25; i++) assert.equal(r1.board.revealed[i], i >= 15, `cell ${i}`);
    assert.equal(r1.board.counts[15], 2); // (3,0) touches (2,0),(2,1)
    assert.equal(r1.board.counts[16], 3);
    const r2 = revealCell(r1.board, 0, 0);
    assert.equal(r2.opened, 10);
    assert.equal(r2.won, true);
    assert.equal(r2.done, true);
    assert.equal(r2.reward, MINESWEEPER_REWARDS.win);
    assert.equal(r2.board.status, "won");
    // the finished board ignores further actions
    const r3 = revealCell(r2.board, 2, 2);
    assert.equal(r3.board, r2.board);
    assert.equal(r3.reward, 0);
    assert.equal(r3.done, true);
    // the original board is untouched (immutable)
    assert.equal(openedCells(b0), 0);
  });

  it("a numbered cell opens alone (+0.5); a win by a single cell scores +10", () => {
    const b = minesweeperFromMines(2, 3, [[0, 0]]);
    const single = revealCell(b, 1, 1); // touches the mine
    assert.equal(single.opened, 1);
    assert.equal(single.reward, MINESWEEPER_REWARDS.single);
    assert.equal(single.done, false);
    const c = revealCell(b, 0, 2); // a zero: opens (0,1) (0,2) (1,1) (1,2)
    assert.equal(c.opened, 4);
    assert.equal(c.reward, MINESWEEPER_REWARDS.cascade);
    assert.deepEqual(
      [0, 1, 2, 3, 4, 5].filter((i) => !c.board.revealed[i]),
      [0, 3],
    );
    assert.equal(revealCell(c.board, 1, 1).reward, MINESWEEPER_REWARDS.invalid);
    const e = revealCell(c.board, 1, 0); // the last safe cell, a number
    assert.equal(e.opened, 1);
    assert.equal(e.won, true);
    assert.equal(e.done, true);
    assert.equal(e.reward, MINESWEEPER_REWARDS.win);
  });

  it("hitting a mine: −0.1, done, lost, and mines drawn as *", () => {
    const b = minesweeperFromMines(3, 4, [
      [0, 0],
      [2, 3],
    ]);
    assert.ok(!renderMinesweeper(b).includes("*"));
    const r = revealCell(b, 2, 3);
    assert.equal(r.reward, MINESWEEPER_REWARDS.mine);
    assert.equal(r.done, true);
    assert.equal(r.lost, true);
    assert.equal(r.board.hit, 2 * 4 + 3);
    assert.equal(
      renderMinesweeper(r.board),
      ["Row 1: * ? ? ?", "Row 2: ? ? ? ?", "Row 3: ? ? ? *"].join("\n"),
    );
  });

  it("invalid or ineffective actions cost −1 and change nothing", () => {
    const b = minesweeperFromMines(
      4,
      4,
      [
        [0, 0],
        [0, 3],
      ],
      [3, 3],
    );
    assert.equal(b.status, "playing");
    const opened = openedCells(b);
    assert.ok(opened > 1);
    for (const [r, c] of [
      [3, 3],
      [-1, 0],
      [0, 4],
      [4, 0],
      [1.5, 2],
    ]) {
      const res = revealCell(b, r, c);
      assert.equal(res.reward, MINESWEEPER_REWARDS.invalid);
      assert.equal(res.done, false);
      assert.equal(res.valid, false);
      assert.equal(res.board, b);
    }
    const bad = stepMinesweeperText(b, "I reveal the top-left cell");
    assert.equal(bad.reward, -1);
    assert.equal(bad.board, b);
  });

  it("text API is 1-based and renders rows as `Row i: …`", () => {
    const b = minesweeperFromMines(3, 3, [[2, 2]]);
    assert.deepEqual(parseMinesweeperAction("think (9, 9) no wait"), { row: 9, col: 9 });
    assert.equal(parseMinesweeperAction("row 1 col 1"), null);
    const r = stepMinesweeperText(b, "(1,1)"); // (0,0) is a zero: opens all but the mine's corner
    assert.equal(r.valid, true);
    assert.equal(renderMinesweeper(r.board), ["Row 1: . . .", "Row 2: . 1 1", "Row 3: . 1 ?"].join("\n"));
    assert.equal(r.won, true);
    const s = stepMinesweeperText(b, "( 2 , 2 )");
    assert.equal(s.reward, MINESWEEPER_REWARDS.single);
    assert.equal(renderMinesweeper(s.board), ["Row 1: ? ? ?", "Row 2: ? 1 ?", "Row 3: ? ? ?"].join("\n"));
    assert.equal(stepMinesweeperText(b, "(4, 1)").reward, MINESWEEPER_REWARDS.invalid);
    assert.equal(stepMinesweeperText(b, "(0, 1)").reward, MINESWEEPER_REWARDS.invalid);
  });

  it("rejects bad hand-made boards", () => {
    assert.throws(() => minesweeperFromMines(3, 3, [[3, 0]]), UsageError);
    assert.throws(
      () =>
        minesweeperFromMines(3, 3, [
          [1, 1],
          [1, 1],
        ]),
      UsageError,
    );
    assert.throws(() => minesweeperFromMines(3, 3, [[1, 1]], [1, 1]), UsageError);
  });
});
