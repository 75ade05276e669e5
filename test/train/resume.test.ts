import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { readTrialLog } from "../../src/replay/read.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

const TIMING_KEYS = new Set(["rollout_ms", "update_ms", "env_ms", "wall_s"]);

function metricsWithoutTimes(dir: string): Record<string, number>[] {
  return readFileSync(join(dir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .map(
      (m) =>
        Object.fromEntries(Object.entries(m).filter(([k]) => !TIMING_KEYS.has(k))) as Record<string, number>,
    );
}

async function waitFor(pred: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error("timed out waiting for the run to progress");
    await new Promise((r) => setTimeout(r, 50));
  }
}

function saveRandomBase(dir: string, contextLength: number): Promise<void> {
  return saveRandomCheckpoint(dir, { contextLength, seed: 4 });
}

describe("resume", () => {
  it("kill -9 mid-iteration, then --resume, ends exactly where an uninterrupted run ends", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-resume-"));
    await saveRandomBase(join(root, "base"), 1024);
    const cfgPath = join(root, "run.yaml");
    writeFileSync(
      cfgPath,
      [
        "name: resume-test",
        "seed: 3",
        "game: kuhn",
        `model: { checkpoint: ${JSON.stringify(join(root, "base"))}, kernels: auto }`,
        "task: { attempts: 2, maxTurns: 2 }",
        "population: { opponents: [{ spec: aggressive }, { spec: cfr-mixed }] }",
        "rollout: { tasksPerIteration: 2, groupSize: 3, maxResponseTokens: 6 }",
        "optim: { lr: 1.0e-3, klCoef: 0.1, miniBatchRows: 8 }",
        "advantage: { roleBaselineDecay: 0.9 }",
        "train: { iterations: 6, checkpointEvery: 1, keepLast: 2 }",
        "eval: { every: 2, trials: 2, finalTrials: 3 }",
        "",
      ].join("\n"),
    );
    const config = loadConfig(cfgPath);

    const straight = join(root, "straight");
    await train({ config, outDir: straight, resume: false, progress: false, log: () => {} });

    const killed = join(root, "killed");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "train", "--config", cfgPath, "--out", killed, "--no-progress"],
      { stdio: "ignore" },
    );
    const metricsFile = join(killed, "metrics.jsonl");
    const lines = () =>
      existsSync(metricsFile) ? readFileSync(metricsFile, "utf8").trim().split("\n").length : 0;
    await waitFor(() => lines() >= 3, 120_000);
    await new Promise((r) => setTimeout(r, 150)); // somewhere inside the next iteration
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    assert.ok(lines() < 6, "the run was killed before it finished");

    await train({ config, outDir: killed, resume: true, progress: false, log: () => {} });

    assert.deepEqual(metricsWithoutTimes(killed), metricsWithoutTimes(straight));
    const a = await loadCheckpoint(join(straight, "checkpoints", "iter-000006"), { trainingState: true });
    const b = await loadCheckpoint(join(killed, "checkpoints", "iter-000006"), { trainingState: true });
    for (const [name, t] of a.params) assert.deepEqual(b.params.get(name), t, `parameter ${name}`);
    for (const [name, t] of a.trainingState!.tensors) {
      assert.deepEqual(b.trainingState!.tensors.get(name)!.data, t.data, `optimizer ${name}`);
    }
    const sa = JSON.parse(readFileSync(join(straight, "summary.json"), "utf8"));
    const sb = JSON.parse(readFileSync(join(killed, "summary.json"), "utf8"));
    assert.deepEqual(sb.finalEval, sa.finalEval);
    assert.deepEqual(sb.periodicEval, sa.periodicEval);
  });

  it("a stop during the final evaluation ends the run without it, and --resume plays only the phases not yet finished", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-resume-"));
    await saveRandomBase(join(root, "base"), 256);
    const cfgPath = join(root, "run.yaml");
    writeFileSync(
      cfgPath,
      `game: kuhn\nmodel: { checkpoint: ${JSON.stringify(join(root, "base"))} }\ntask: { attempts: 2, maxTurns: 2 }\npopulation: { opponents: [{ spec: aggressive }] }\nrollout: { tasksPerIteration: 1, groupSize: 2, maxResponseTokens: 4 }\ntrain: { iterations: 2 }\neval: { every: 0, finalTrials: 3, transcriptsPerCell: 2, scaling: { attempts: 3, trials: 2, cells: [{ opponent: cfr, seat: second }] } }\n`,
    );
    const config = loadConfig(cfgPath);
    const straight = join(root, "straight");
    const whole = await train({ config, outDir: straight, resume: false, progress: false, log: () => {} });
    // Every final-evaluation trial's outcome, and the whole play of the first two per cell.
    const outcomes = readTrialLog(join(straight, "eval-trials.jsonl")).records;
    const kept = readTrialLog(join(straight, "eval-transcripts.jsonl")).records;
    const cellCount = whole.summary.finalEval?.cells.length ?? 0;
    assert.ok(cellCount > 0);
    assert.equal(outcomes.length, 3 * cellCount);
    assert.ok(outcomes.every((r) => r.memory === undefined));
    assert.equal(kept.length, 2 * cellCount);
    assert.ok(
      kept.every((r) => r.trialId % 3 < 2),
      "each cell's first trials by index, not by finish",
    );
    assert.ok(kept.every((r) => r.memory !== undefined && r.memory.attempts.length === r.attempts.length));

    // The training loop asks once per iteration; every later question comes from the evaluations:
    // a stop at the third question falls in the held-out cells, one once scaling has begun in it.
    const stoppedIn: string[] = [];
    for (const where of ["final", "scaling"]) {
      const out = join(root, `stopped-${where}`);
      let asked = 0;
      const lines: string[] = [];
      const cut = await train({
        config,
        outDir: out,
        resume: false,
        progress: false,
        log: (l) => lines.push(l),
        shouldStop: () =>
          where === "final" ? ++asked >= 3 : lines.some((l) => l.startsWith("test-time scaling")),
      });
      assert.equal(cut.stopped, true);
      assert.equal(cut.summary.finalEval, null, "no final evaluation is reported half done");
      assert.ok(lines.some((l) => l.includes("stopped during the final evaluation")));
      const inScaling = lines.some((l) => l.startsWith("test-time scaling"));
      stoppedIn.push(inScaling ? "scaling" : "final");
      const resumedLines: string[] = [];
      const resumed = await train({
        config,
        outDir: out,
        resume: true,
        progress: false,
        log: (l) => resumedLines.push(l),
      });
      assert.equal(resumed.stopped, false);
      assert.deepEqual(resumed.summary.finalEval, whole.summary.finalEval);
      assert.deepEqual(resumed.summary.scalingEval, whole.summary.scalingEval);
      // A final evaluation finished before the stop is kept, not played again; its trial logs too.
      assert.equal(
        resumedLines.some((l) => l.startsWith("final evaluation: kept from the interrupted run")),
        inScaling,
      );
      assert.equal(
        resumedLines.some((l) => l.startsWith("final evaluation: 3 trials per cell")),
        !inScaling,
      );
      assert.deepEqual(readTrialLog(join(out, "eval-trials.jsonl")).records, outcomes);
      assert.ok(
        !existsSync(join(out, "final-eval-phases.json")),
        "removed once the summary holds the phases",
      );
    }
    assert.deepEqual(stoppedIn, ["final", "scaling"]);
  });

  it("refuses to overwrite a run that has checkpoints unless asked to resume", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-resume-"));
    await saveRandomBase(join(root, "base"), 256);
    const cfgPath = join(root, "run.yaml");
    writeFileSync(
      cfgPath,
      `game: kuhn\nmodel: { checkpoint: ${JSON.stringify(join(root, "base"))} }\ntask: { attempts: 1, maxTurns: 1 }\npopulation: { opponents: [{ spec: aggressive }] }\nrollout: { tasksPerIteration: 1, groupSize: 2, maxResponseTokens: 4 }\ntrain: { iterations: 1 }\neval: { every: 0, finalTrials: 1 }\n`,
    );
    const config = loadConfig(cfgPath);
    const out = join(root, "run");
    await train({ config, outDir: out, resume: false, progress: false, log: () => {} });
    await assert.rejects(
      train({ config, outDir: out, resume: false, progress: false, log: () => {} }),
      /--resume/,
    );
    // Resuming with another learning rate would splice two runs; more iterations extend the run.
    const changed = loadConfig(cfgPath, ["optim.lr=0.5"]);
    await assert.rejects(
      train({ config: changed, outDir: out, resume: true, progress: false, log: () => {} }),
      /another config[\s\S]*optim\.lr: [0-9.e-]+ → 0\.5/,
    );
    // How the processes run is not what they compute: the worker's prefix store may change.
    const longer = loadConfig(cfgPath, [
      "train.iterations=2",
      "eval.finalTrials=2",
      "model.torch.prefixCacheMB=64",
    ]);
    const result = await train({ config: longer, outDir: out, resume: true, progress: false, log: () => {} });
    assert.equal(result.summary.iterationsDone, 2);
  });
});
