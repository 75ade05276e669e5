import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { categoryMetrics, type TrialOutcome } from "../../src/evaluate/metrics.js";
import { indexBody } from "../../src/web/pages.js";
import type { DashboardRun } from "../../src/web/runs.js";
import { makeSummary } from "../report/fixtures.js";

const trial = (category: string, won: boolean): TrialOutcome => ({
  opponent: "cfr",
  seat: "first",
  taskId: "t",
  category,
  attempts: [{ won, draw: false, score: won ? 1 : 0, reward: 0, turns: 2, invalidActions: 0 }],
});

describe("dashboard: categories", () => {
  it("the runs table shows success@K per category under a cell's headline (ALFWorld: split and task type)", () => {
    const summary = makeSummary({ name: "alf", seed: 0, attempts: 1, iterations: 2 });
    const byCategory = categoryMetrics(
      [trial("valid_seen/heat", true), trial("valid_seen/heat", false), trial("valid_seen/cool", false)],
      1,
    );
    summary.finalEval!.cells[0].byCategory = byCategory;
    const run = {
      id: "r",
      summaryPath: "r/summary.json",
      runDir: "r",
      summary,
      state: "finished",
      lastWriteMs: 0,
    };
    const html = indexBody([run as DashboardRun], 0);
    assert.match(html, /valid_seen: success@1 33\.3% \(3\)/);
    assert.match(html, /valid_seen\/heat: success@1 50\.0% \(2\)/);
    assert.match(html, /valid_seen\/cool: success@1 0\.0% \(1\)/);
  });
});
