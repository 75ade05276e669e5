import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

describe("train.maxMinutes", () => {
  it("starts no iteration after the time box, checkpoints and evaluates what it trained", async () => {
    const { cfgPath, out } = await timeBoxedRun();
    const logs: string[] = [];
    const r = await train({
      config: loadConfig(cfgPath),
      outDir: out,
      resume: false,
      progress: false,
      log: (m) => logs.push(m),
    });
    assert.equal(r.stopped, false);
    assert.equal(metricLines(out), 1);
    assert.equal(r.summary.iterationsDone, 1);
    assert.ok(r.summary.finalEval, "the final evaluation ran");
    assert.ok(
      logs.some((l) => l.includes("train.maxMinutes")),
      logs.join("\n"),
    );
  });

  it("resumed after the box ran out, goes straight to the final evaluation", async () => {
    const { cfgPath, out } = await timeBoxedRun();
    const logs: string[] = [];
    // Stopped as soon as the final evaluation starts, as a Ctrl-C during it would.
    const first = await train({
      config: loadConfig(cfgPath),
      outDir: out,
      resume: false,
      progress: false,
      log: (m) => logs.push(m),
      shouldStop: () => logs.some((l) => l.includes("train.maxMinutes")),
    });
    assert.equal(first.stopped, true);
    assert.equal(first.summary.finalEval, null);
    const resumedLogs: string[] = [];
    const r = await train({
      config: loadConfig(cfgPath),
      outDir: out,
      resume: true,
      progress: false,
      log: (m) => resumedLogs.push(m),
    });
    assert.equal(r.stopped, false);
    assert.equal(metricLines(out), 1, "no iteration was trained after the box");
    assert.equal(r.summary.iterationsDone, 1);
    assert.ok(r.summary.finalEval, "the final evaluation ran");
    assert.ok(
      resumedLogs.some((l) => l.includes("train.maxMinutes (0.00001) reached after 1 of 50")),
      resumedLogs.join("\n"),
    );
  });
});

/** A run whose box is far shorter than one iteration: only the first iteration runs. */
async function timeBoxedRun(): Promise<{ cfgPath: string; out: string }> {
  const root = mkdtempSync(join(tmpdir(), "mage-timebox-"));
  await saveRandomCheckpoint(join(root, "base"), { contextLength: 1024, seed: 4 });
  const cfgPath = join(root, "run.yaml");
  writeFileSync(
    cfgPath,
    [
      "name: time-box",
      "seed: 1",
      "game: kuhn",
      `model: { checkpoint: ${JSON.stringify(join(root, "base"))}, kernels: auto }`,
      "task: { attempts: 2, maxTurns: 2 }",
      "population: { opponents: [{ spec: aggressive }] }",
      "rollout: { tasksPerIteration: 1, groupSize: 2, maxResponseTokens: 4 }",
      "train: { iterations: 50, checkpointEvery: 100, maxMinutes: 0.00001 }",
      "eval: { every: 0, trials: 2, finalTrials: 2 }",
      "",
    ].join("\n"),
  );
  return { cfgPath, out: join(root, "run") };
}

function metricLines(out: string): number {
  return readFileSync(join(out, "metrics.jsonl"), "utf8").trim().split("\n").length;
}
