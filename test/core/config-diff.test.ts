import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { configDifferences } from "../../src/core/config-diff.js";

describe("configDifferences", () => {
  it("names each changed leaf by its path, inside arrays too", () => {
    const stored = { optim: { lr: 3e-4, klCoef: 1 }, population: { opponents: [{ spec: "a", weight: 1 }] } };
    const current = {
      optim: { lr: 3e-4, klCoef: 0.1 },
      population: { opponents: [{ spec: "a", weight: 4 }] },
    };
    assert.deepEqual(configDifferences(stored, current), [
      "optim.klCoef: 1 → 0.1",
      "population.opponents[0].weight: 1 → 4",
    ]);
  });

  it("ignores keys only one side has, and compares arrays by length first", () => {
    assert.deepEqual(configDifferences({ a: 1, old: 2 }, { a: 1, added: 3 }), []);
    assert.deepEqual(configDifferences({ xs: [1, 2] }, { xs: [1, 2, 3] }), ["xs: 2 items → 3 items"]);
    assert.deepEqual(configDifferences({ a: null }, { a: { b: 1 } }), ['a: null → {"b":1}']);
    assert.deepEqual(configDifferences({ a: [1] }, { a: { 0: 1 } }), ['a: [1] → {"0":1}']);
  });

  it("skips the paths the caller allows to change", () => {
    const diff = configDifferences(
      { train: { iterations: 4, lr: 1 }, eval: { trials: 2 } },
      { train: { iterations: 8, lr: 2 }, eval: { trials: 9 } },
      (p) => p === "train.iterations" || p.startsWith("eval"),
    );
    assert.deepEqual(diff, ["train.lr: 1 → 2"]);
  });
});
