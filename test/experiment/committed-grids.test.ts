import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command as experimentCommand } from "../../src/cli/commands/experiment.js";
import { UsageError } from "../../src/core/errors.js";
import { planExperiment, readExperiment } from "../../src/experiment/spec.js";
import { checkNoStaleRuns } from "../../src/experiment/stale.js";

const GRIDS = "configs/experiments";

describe("committed grids", () => {
  // A change to a preset, an override or a base's key (the warm start's, the pretraining's) would
  // make a grid refuse to resume, and its committed summaries would no longer name what made them.
  for (const file of readdirSync(GRIDS).filter((f) => f.endsWith(".yaml"))) {
    it(`${file}: the committed summaries were made with what the grid plans now`, () => {
      const path = join(GRIDS, file);
      const spec = readExperiment(path);
      const plan = planExperiment(spec, path);
      assert.ok(plan.runs.length > 0);
      // An archived grid's record was made by an earlier recipe, which mage refuses to resume.
      if (spec.archived === null) assert.doesNotThrow(() => checkNoStaleRuns(plan));
    });
  }

  it("an archived grid is refused by mage experiment, naming why", async () => {
    const path = join(GRIDS, "coin-real-main.yaml");
    const reason = readExperiment(path).archived;
    assert.ok(reason);
    await assert.rejects(
      experimentCommand.run([path, "--dry-run"]),
      (e: unknown) =>
        e instanceof UsageError && e.message.includes("is archived") && e.message.includes(reason),
    );
  });
});
