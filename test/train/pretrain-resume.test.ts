import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { REPORT_FILE } from "../../src/train/pretrain/run.js";
import { planTorchResume, type TorchResumeInputs } from "../../src/train/pretrain/torch-resume.js";
import { TORCH_PRETRAIN_DEFAULTS } from "../../src/train/pretrain/torch-run.js";

function inputs(out: string, over: Partial<TorchResumeInputs> = {}): TorchResumeInputs {
  return {
    out,
    game: "minesweeper",
    seed: 0,
    settings: { ...TORCH_PRETRAIN_DEFAULTS.minesweeper, threads: 1 },
    taskKnobs: {},
    base: { dir: "/m/base", name: "base", sha256: "ab12" },
    ...over,
  };
}

/** A directory holding the report a run with `inputs` would write, checks done or not. */
function reportDir(checked: boolean, over: Partial<TorchResumeInputs> = {}): string {
  const out = mkdtempSync(join(tmpdir(), "mage-pretrain-resume-"));
  const i = inputs(out, over);
  const report = {
    backend: "torch",
    game: i.game,
    seed: i.seed,
    out,
    settings: i.settings,
    taskKnobs: i.taskKnobs,
    base: i.base,
    evaluation: checked ? { trials: 40, targets: [] } : null,
    targetsMet: false,
  };
  writeFileSync(join(out, REPORT_FILE), JSON.stringify(report));
  return out;
}

describe("mage pretrain --backend torch --resume", () => {
  it("starts afresh in an empty directory", () => {
    const out = mkdtempSync(join(tmpdir(), "mage-pretrain-resume-"));
    assert.deepEqual(planTorchResume(inputs(out)), { kind: "fresh" });
  });

  it("samples only the checks of a warm start cut off after its export, and leaves a complete one", () => {
    const cut = reportDir(false);
    assert.equal(planTorchResume(inputs(cut)).kind, "checks");
    const done = reportDir(true);
    const plan = planTorchResume(inputs(done));
    assert.equal(plan.kind, "done");
    assert.equal(plan.kind === "done" && plan.report.evaluation?.trials, 40);
  });

  it("lets the worker's threads, prefix store and batch differ, since they change speed and memory only", () => {
    const cut = reportDir(false);
    const s = { ...TORCH_PRETRAIN_DEFAULTS.minesweeper, threads: 2, prefixCacheMB: 512, evalBatch: 8 };
    assert.equal(planTorchResume(inputs(cut, { settings: s })).kind, "checks");
  });

  it("refuses another warm start's directory, naming the field that differs", () => {
    const cut = reportDir(false);
    const cases: [Partial<TorchResumeInputs>, RegExp][] = [
      [{ seed: 1 }, /seed 0, not 1/],
      [{ game: "sokoban" }, /game "minesweeper", not "sokoban"/],
      [{ base: { dir: "/m/other", name: "other", sha256: "cd34" } }, /base sha256 "ab12", not "cd34"/],
      [{ taskKnobs: { minesweeper: { mines: 3 } } }, /taskKnobs \{\}, not \{"minesweeper":\{"mines":3\}\}/],
      [
        { settings: { ...TORCH_PRETRAIN_DEFAULTS.minesweeper, threads: 1, steps: 48 } },
        new RegExp(`settings\\.steps ${TORCH_PRETRAIN_DEFAULTS.minesweeper.steps}, not 48`),
      ],
      [
        { settings: { ...TORCH_PRETRAIN_DEFAULTS.minesweeper, threads: 1, reflectionMoves: undefined } },
        /settings\.reflectionMoves 3, not unset/,
      ],
    ];
    for (const [over, message] of cases) {
      assert.throws(
        () => planTorchResume(inputs(cut, over)),
        (e: unknown) =>
          e instanceof UsageError &&
          /^--resume: .* holds a different warm start/.test(e.message) &&
          message.test(e.message),
        JSON.stringify(over),
      );
    }
  });
});
