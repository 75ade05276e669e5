import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { miniBatches } from "../../src/train/iteration.js";

describe("miniBatches", () => {
  it("closes a mini-batch of whole sequences once it holds the rows asked for, in the given order", () => {
    // Sequences 0..4 hold 3, 1, 4, 2, 2 rows.
    const rows = [3, 1, 4, 2, 2];
    assert.deepEqual(miniBatches([4, 0, 2, 1, 3], rows, 4), [[4, 0], [2], [1, 3]]);
    assert.deepEqual(miniBatches([0, 1, 2, 3, 4], rows, 100), [[0, 1, 2, 3, 4]]);
    assert.deepEqual(miniBatches([0, 1, 2, 3, 4], rows, 1), [[0], [1], [2], [3], [4]]);
    assert.deepEqual(miniBatches([], rows, 4), []);
  });
});
