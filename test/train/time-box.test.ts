import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadConfig } from "../../src/train/config.js";
import { readSummary, trainingOf } from "../../src/train/summary.js";
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
    const onDisk = readSummary(join(out, "summary.json"));
    assert.equal(onDisk.complete, false, "a boxed run is incomplete");
    assert.equal(onDisk.stoppedBy, "maxMinutes");
    assert.deepEqual(trainingOf(onDisk), { done: 1, planned: 50, complete: false });
  });

  it("resumed without the box, trains the rest and becomes complete", async () => {
    const { cfgPath, out } = await timeBoxedRun(3);
    const boxed = await train({
      config: loadConfig(cfgPath),
      outDir: out,
      resume: false,
      progress: false,
      log: () => {},
    });
    assert.equal(boxed.summary.complete, false);
    assert.ok(boxed.summary.finalEval, "the boxed run was evaluated");
    const unboxed = loadConfig(cfgPath);
    unboxed.train.maxMinutes = null;
    const r = await train({ config: unboxed, outDir: out, resume: true, progress: false, log: () => {} });
    assert.equal(r.stopped, false);
    assert.equal(metricLines(out), 3, "iterations 2 and 3 were trained");
    assert.equal(r.summary.iterationsDone, 3);
    assert.equal(r.summary.finalEval?.iteration, 3, "evaluated again after the last iteration");
    assert.equal(r.summary.complete, true);
    assert.equal(r.summary.stoppedBy, null);
  });

  it("judges a summary written before `complete` existed by its iterations", () => {
    const old = { iterationsDone: 3, config: { train: { iterations: 6 } } };
    assert.deepEqual(trainingOf(old), { done: 3, planned: 6, complete: false });
    assert.equal(trainingOf({ ...old, iterationsDone: 6 }).complete, true);
    assert.equal(trainingOf({ iterationsDone: 0, config: { train: { iterations: 0 } } }).complete, true);
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
    assert.equal(r.summary.complete, false, "still incomplete: the same box allows no more");
    assert.equal(r.summary.stoppedBy, "maxMinutes");
    assert.ok(
      resumedLogs.some((l) => l.includes("train.maxMinutes (0.00001) reached after 1 of 50")),
      resumedLogs.join("\n"),
    );
  });
});

/** A run whose box is far shorter than one iteration: only the first iteration runs. */
async function timeBoxedRun(iterations = 50): Promise<{ cfgPath: string; out: string }> {
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
      `train: { iterations: ${iterations}, checkpointEvery: 100, maxMinutes: 0.00001 }`,
      "eval: { every: 0, trials: 2, finalTrials: 2 }",
      "",
    ].join("\n"),
  );
  return { cfgPath, out: join(root, "run") };
}

function metricLines(out: string): number {
  return readFileSync(join(out, "metrics.jsonl"), "utf8").trim().split("\n").length;
}
