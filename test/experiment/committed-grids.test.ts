import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { planExperiment, readExperiment } from "../../src/experiment/spec.js";
import { checkNoStaleRuns } from "../../src/experiment/stale.js";

const GRIDS = "configs/experiments";

describe("committed grids", () => {
  // A change to a preset, an override or a base's key (the warm start's, the pretraining's) would
  // make a grid refuse to resume, and its committed summaries would no longer name what made them.
  for (const file of readdirSync(GRIDS).filter((f) => f.endsWith(".yaml"))) {
    it(`${file}: the committed summaries were made with what the grid plans now`, () => {
      const path = join(GRIDS, file);
      const plan = planExperiment(readExperiment(path), path);
      assert.ok(plan.runs.length > 0);
      assert.doesNotThrow(() => checkNoStaleRuns(plan));
    });
  }
});
