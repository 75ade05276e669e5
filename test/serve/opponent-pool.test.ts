import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { EMPTY_BOARD } from "../../src/games/tictactoe.js";
import { OpponentPool, OpponentTimeoutError } from "../../src/serve/opponent-pool.js";

describe("OpponentPool", () => {
  it("a move that expires while its worker starts leaves that worker starting, and the next move plays on it", async () => {
    const pool = new OpponentPool(1);
    try {
      const job = { game: "tictactoe", spec: "mcts:5", rng: Rng.seeded(1).getState(), state: EMPTY_BOARD };
      // A thread takes far longer than 1 ms to start: the move expires before the worker is ready.
      await assert.rejects(pool.play(job, performance.now() + 1, 1), OpponentTimeoutError);
      const played = await pool.play(job, performance.now() + 60_000, 60_000);
      assert.equal(typeof played.move, "number");
      assert.deepEqual(pool.counts, { played: 1, timedOut: 1, started: 1 });
    } finally {
      await pool.close();
    }
  });

  it("a move that runs past its deadline has its worker replaced", async () => {
    const pool = new OpponentPool(1);
    try {
      const job = { game: "tictactoe", spec: "mcts:5", rng: Rng.seeded(1).getState(), state: EMPTY_BOARD };
      await pool.play(job, performance.now() + 60_000, 60_000); // the worker is up
      const slow = { ...job, spec: "mcts:100000000" };
      await assert.rejects(pool.play(slow, performance.now() + 200, 200), OpponentTimeoutError);
      await pool.play(job, performance.now() + 60_000, 60_000);
      assert.deepEqual(pool.counts, { played: 2, timedOut: 1, started: 2 });
    } finally {
      await pool.close();
    }
  });
});
