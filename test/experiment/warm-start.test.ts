import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { baseConflict } from "../../src/experiment/base-check.js";
import { readBaseTargets } from "../../src/experiment/base-targets.js";
import { describePlan } from "../../src/experiment/plan-state.js";
import { planExperiment, pretrainArgs, readExperiment } from "../../src/experiment/spec.js";
import { warmStartArgs, warmStartDone, warmStartKey } from "../../src/experiment/warm-start.js";
import { hfWeightsSha256Sync } from "../../src/model/checkpoint.js";
import { formatMissedTargets, formatTargetValue } from "../../src/train/pretrain/target-text.js";

function torchConfig(root: string): string {
  const path = join(root, "real.yaml");
  writeFileSync(
    path,
    [
      "name: real",
      "game: kuhn",
      `model: { backend: torch, torch: { path: ${JSON.stringify(join(root, "base-model"))} } }`,
      "task: { attempts: 2 }",
      "population: { opponents: [{ spec: aggressive }] }",
      "rollout: { tasksPerIteration: 1, groupSize: 2, maxResponseTokens: 6 }",
      "train: { iterations: 1 }",
      "eval: { every: 0, finalTrials: 2, cells: [{ opponent: cfr, seat: second }] }",
      "",
    ].join("\n"),
  );
  return path;
}

function grid(root: string, lines: string[]): string {
  const config = torchConfig(root);
  const path = join(root, "grid.yaml");
  writeFileSync(
    path,
    [
      "name: real-grid",
      "seeds: [0, 1]",
      `runsDir: ${JSON.stringify(join(root, "runs"))}`,
      `pretrainedDir: ${JSON.stringify(join(root, "pretrained"))}`,
      `resultsDir: ${JSON.stringify(join(root, "results"))}`,
      "methods:",
      `  - { name: alpha, config: ${JSON.stringify(config)} }`,
      `  - { name: beta, config: ${JSON.stringify(config)}, set: [credit.trajGamma=0] }`,
      ...lines,
      "",
    ].join("\n"),
  );
  return path;
}

describe("experiment grids of real models", () => {
  it("warm-starts the base once per seed and points every method of the seed at it", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-warm-plan-"));
    const file = grid(root, ["warmStart: { steps: 3, threads: 1 }"]);
    const plan = planExperiment(readExperiment(file), file);
    assert.equal(plan.pretrains.length, 2);
    for (const seed of [0, 1]) {
      const runs = plan.runs.filter((r) => r.seed === seed);
      const dir = plan.pretrains.find((p) => p.seed === seed)!.dir;
      assert.equal(runs.length, 2);
      for (const run of runs) {
        assert.equal(run.pretrainedDir, dir);
        assert.equal(run.config.model.torch.path, dir);
        assert.equal(run.overrides.at(-1), `model.torch.path=${dir}`);
        assert.equal(run.config.model.checkpoint, null, "a real model gets no embedded checkpoint");
      }
    }
    assert.notEqual(plan.pretrains[0].dir, plan.pretrains[1].dir);
    const args = pretrainArgs(plan.pretrains[1]);
    assert.deepEqual(args.slice(0, 9), [
      "pretrain",
      "--game",
      "kuhn",
      "--backend",
      "torch",
      "--model",
      join(root, "base-model"),
      "--seed",
      "1",
    ]);
    assert.deepEqual(args.slice(9), [
      "--out",
      plan.pretrains[1].dir,
      "--resume",
      "--steps",
      "3",
      "--threads",
      "1",
    ]);
    const described = describePlan(plan);
    assert.match(described[0], /^warm-start kuhn base-model seed 0 → .*: to warm-start$/);
    assert.match(described.at(-1) ?? "", /; 2 base model\(s\) to pretrain/);

    // Where each would go on from: seed 0 cut off during its SFT, seed 1 during its checks.
    const progressDir = `${plan.pretrains[0].dir}.sft-checkpoint`;
    mkdirSync(progressDir, { recursive: true });
    const progress = {
      format: "mage-torch-sft-checkpoint",
      identity: { settings: { steps: 3 } },
      progress: { steps: 2 },
    };
    writeFileSync(join(progressDir, "sft-progress.json"), JSON.stringify(progress));
    mkdirSync(plan.pretrains[1].dir, { recursive: true });
    writeFileSync(
      join(plan.pretrains[1].dir, "pretrain-report.json"),
      JSON.stringify({ backend: "torch", evaluation: null }),
    );
    const resumed = describePlan(plan);
    assert.match(resumed[0], /: to warm-start \(goes on after SFT step 2\/3\)$/);
    assert.match(resumed[1], /: to warm-start \(trained, its checks to sample\)$/);
    assert.match(resumed.at(-1) ?? "", /; 2 base model\(s\) to pretrain/);
  });

  it("keys a warm start by what shapes its weights, not by how the process runs", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-warm-key-"));
    const file = grid(root, ["warmStart: {}"]);
    const config = planExperiment(readExperiment(file), file).runs[0].config;
    const base = { ...config, model: { ...config.model, torch: { ...config.model.torch, path: "/m/smol" } } };
    const key = warmStartKey(base, {});
    assert.match(key, /^kuhn-smol-[0-9a-f]{8}$/);
    assert.equal(warmStartKey(base, { threads: 1, prefixCacheMB: 64, device: "cuda", evalBatch: 10 }), key);
    assert.notEqual(warmStartKey(base, { steps: 31 }), key);
    const args = warmStartArgs("kuhn", "/m/smol", 0, "out", { evalBatch: 10, threads: 1 });
    assert.equal(args[args.indexOf("--eval-batch") + 1], "10");
    assert.notEqual(warmStartKey(base, { lr: 2e-3 }), key);
    const other = { ...base, model: { ...base.model, torch: { ...base.model.torch, path: "/m/qwen" } } };
    assert.notEqual(warmStartKey(other, {}), key);
  });

  it("a served environment warm-starts from its pretrain config file, keyed by its contents", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-warm-served-"));
    const kuhn = planExperiment(readExperiment(grid(root, ["warmStart: {}"])), "g").runs[0].config;
    const served = {
      ...kuhn,
      game: "remote" as const,
      env: {
        url: "http://127.0.0.1:1",
        name: "twx-coin",
        config: {},
        timeoutMs: 1,
        retries: 0,
        concurrency: 1,
        seeds: null,
        apiKeyEnv: null,
      },
      model: { ...kuhn.model, torch: { ...kuhn.model.torch, path: "/m/smol" } },
    };
    const file = join(root, "coin.yaml");
    writeFileSync(file, "game: remote\nsettings: { steps: 3 }\n");
    const key = warmStartKey(served, { config: file, threads: 1 });
    assert.match(key, /^twx-coin-smol-[0-9a-f]{8}$/);
    assert.equal(warmStartKey(served, { config: file, threads: 2 }), key, "threads do not shape weights");
    writeFileSync(file, "game: remote\nsettings: { steps: 4 }\n");
    assert.notEqual(
      warmStartKey(served, { config: file, threads: 1 }),
      key,
      "an edited file is another base",
    );
    const args = warmStartArgs("remote", "/m/smol", 2, "out", { config: file, threads: 1 });
    assert.deepEqual(args.slice(0, 7), ["pretrain", "--config", file, "--model", "/m/smol", "--seed", "2"]);
    assert.ok(args.includes("--resume") && args[args.indexOf("--threads") + 1] === "1");
    assert.throws(() => warmStartKey(served, {}), /warmStart\.config: a served environment/);
    assert.throws(() => warmStartKey(kuhn, { config: file }), /warmStart\.config: only a served/);
  });

  it("leaves a real model alone without warmStart, and refuses diversity for real models", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-warm-none-"));
    const file = grid(root, []);
    const plan = planExperiment(readExperiment(file), file);
    assert.equal(plan.pretrains.length, 0);
    assert.ok(
      plan.runs.every(
        (r) => r.pretrainedDir === null && r.config.model.torch.path === join(root, "base-model"),
      ),
    );
    const withDiversity = grid(root, ["diversity: { samples: 3 }"]);
    assert.throws(
      () => planExperiment(readExperiment(withDiversity), withDiversity),
      (err: unknown) => {
        return (
          err instanceof UsageError && /diversity is measured for embedded models only/.test(err.message)
        );
      },
    );
  });

  it("counts a warm start as done only once its checks are written", () => {
    const dir = mkdtempSync(join(tmpdir(), "mage-warm-done-"));
    assert.equal(warmStartDone(dir), false);
    writeFileSync(join(dir, "pretrain-report.json"), JSON.stringify({ evaluation: null }));
    assert.equal(warmStartDone(dir), false, "written before the checks: not done");
    writeFileSync(join(dir, "pretrain-report.json"), JSON.stringify({ evaluation: { targets: [] } }));
    assert.equal(warmStartDone(dir), true);
  });

  it("reads which of its own targets a base missed from its report", () => {
    const dir = mkdtempSync(join(tmpdir(), "mage-base-targets-"));
    assert.equal(readBaseTargets(dir), null, "no report");
    writeFileSync(join(dir, "pretrain-report.json"), JSON.stringify({ evaluation: null }));
    assert.equal(readBaseTargets(dir), null, "no checks yet");
    const targets = [
      { name: "play answers well-formed and legal", value: 0.918, threshold: 0.95, met: false },
      { name: "first-move entropy on the empty board (bits)", value: 2.15, threshold: 1.5, met: true },
    ];
    writeFileSync(join(dir, "pretrain-report.json"), JSON.stringify({ evaluation: { targets } }));
    const read = readBaseTargets(dir);
    assert.deepEqual(read, {
      met: false,
      missed: [{ name: "play answers well-formed and legal", value: 0.918, threshold: 0.95 }],
    });
    assert.equal(
      formatMissedTargets(read!.missed),
      "play answers well-formed and legal: 91.8% (target ≥ 95.0%)",
    );
    assert.equal(formatTargetValue(targets[1]), "2.15 (target ≥ 1.50)", "entropy targets read in bits");
    writeFileSync(
      join(dir, "pretrain-report.json"),
      JSON.stringify({ evaluation: { targets: [{ ...targets[0], value: 0.97, met: true }] } }),
    );
    assert.deepEqual(readBaseTargets(dir), { met: true, missed: [] });
    writeFileSync(join(dir, "pretrain-report.json"), "{ not json");
    assert.equal(readBaseTargets(dir), null, "an unreadable report is no report");
  });

  it("refuses a warm start whose weights differ from the ones the seed's committed runs used", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-warm-conflict-"));
    const file = grid(root, ["warmStart: {}"]);
    const plan = planExperiment(readExperiment(file), file);
    const dir = plan.pretrains[0].dir;
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "model.safetensors"), "weights, first build");
    const sha = hfWeightsSha256Sync(dir)!;
    mkdirSync(plan.resultsDir, { recursive: true });
    const summary = (s: string) => JSON.stringify({ baseModel: { dir, sha256: s } });
    writeFileSync(join(plan.resultsDir, "alpha-s0.json"), summary(sha));
    assert.equal(baseConflict(plan, dir), null);
    writeFileSync(join(dir, "model.safetensors"), "weights, second build");
    assert.match(baseConflict(plan, dir) ?? "", /holds other weights/);
  });
});
