import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { rebuiltBaseLines } from "../../src/experiment/base-check.js";
import { readBaseTargets } from "../../src/experiment/base-targets.js";
import { wholeGridBases } from "../../src/experiment/grid-record.js";
import { trainJobsOf } from "../../src/experiment/jobs.js";
import { describePlan, runState } from "../../src/experiment/plan-state.js";
import { runExperiment } from "../../src/experiment/runner.js";
import { planExperiment, pretrainArgs, pretrainKey, readExperiment } from "../../src/experiment/spec.js";
import { checkNoStaleRuns } from "../../src/experiment/stale.js";
import type { PretrainGame } from "../../src/train/pretrain/corpus.js";
import { PRETRAIN_DEFAULTS } from "../../src/train/pretrain/run.js";
import { readSummary, SUMMARY_FORMAT } from "../../src/train/summary.js";

function writeConfig(root: string): string {
  const path = join(root, "tiny.yaml");
  writeFileSync(
    path,
    [
      "name: tiny",
      "game: kuhn",
      "pretrain: { steps: 2, corpusTrials: 12, evalTrials: 2 }",
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

function writeExperiment(root: string, config: string, extra: string[] = []): string {
  const path = join(root, "exp.yaml");
  writeFileSync(
    path,
    [
      "name: smoke",
      "seeds: [0, 1]",
      "jobs: 2",
      `runsDir: ${JSON.stringify(join(root, "runs"))}`,
      `pretrainedDir: ${JSON.stringify(join(root, "pretrained"))}`,
      `resultsDir: ${JSON.stringify(join(root, "results"))}`,
      "diversity: { samples: 3 }",
      "set:",
      '  - "eval.scaling={attempts: 3, trials: 2, cells: [{opponent: cfr, seat: second}]}"',
      "methods:",
      `  - { name: alpha, config: ${JSON.stringify(config)} }`,
      `  - { name: beta, config: ${JSON.stringify(config)}, set: [credit.trajGamma=0], seeds: [1] }`,
      ...extra,
      "",
    ].join("\n"),
  );
  return path;
}

describe("experiment plan", () => {
  it("pairs methods on seeds and shares one pretrained model per seed", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-plan-"));
    const file = writeExperiment(root, writeConfig(root));
    const plan = planExperiment(readExperiment(file), file);
    assert.deepEqual(
      plan.runs.map((r) => `${r.method}-s${r.seed}`),
      ["alpha-s0", "alpha-s1", "beta-s1"],
    );
    assert.equal(plan.pretrains.length, 2);
    const s1 = plan.runs.filter((r) => r.seed === 1).map((r) => r.pretrainedDir);
    assert.equal(s1[0], s1[1]);
    assert.equal(plan.runs[2].config.credit.trajGamma, 0);
    assert.equal(plan.runs[0].config.credit.trajGamma, 0.6);
    const args = pretrainArgs(plan.pretrains[0]);
    assert.deepEqual(args.slice(args.indexOf("--steps"), args.indexOf("--steps") + 2), ["--steps", "2"]);
    assert.ok(args.includes("--eval-trials"));
  });

  it("lists the whole grid's bases when a filter limits what it builds", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-filter-"));
    const file = writeExperiment(root, writeConfig(root));
    const whole = planExperiment(readExperiment(file), file);
    const seed1 = planExperiment(readExperiment(file), file, { seeds: [1] });
    const beta = planExperiment(readExperiment(file), file, { methods: ["beta"] });
    assert.deepEqual(
      seed1.runs.map((r) => `${r.method}-s${r.seed}`),
      ["alpha-s1", "beta-s1"],
    );
    assert.deepEqual(
      beta.pretrains.map((p) => p.seed),
      [1],
    );
    assert.equal(whole.gridBaseDirs.length, 2);
    assert.deepEqual(seed1.gridBaseDirs.toSorted(), whole.gridBaseDirs.toSorted());
    assert.deepEqual(beta.gridBaseDirs.toSorted(), whole.gridBaseDirs.toSorted());
  });

  it("keeps earlier bases of the grid in its record and drops those it no longer has", () => {
    const base = (dir: string, seconds: number) => ({ dir, seconds, targets: null });
    const earlier = [base("p/old-s0", 5), base("p/new-s0", 6), base("p/new-s1", 7)];
    const now = [base("p/new-s1", 8), base("p/new-s2", 9)];
    const kept = wholeGridBases(now, earlier, ["p/new-s0", "p/new-s1", "p/new-s2"]);
    assert.deepEqual(
      kept.map((b) => [b.dir, b.seconds]),
      [
        ["p/new-s0", 6],
        ["p/new-s1", 8],
        ["p/new-s2", 9],
      ],
    );
    assert.deepEqual(wholeGridBases(now, "not a list", []), now);
  });

  it("keys a pretrained model by the resolved pretraining settings, defaults included", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-key-"));
    const file = writeExperiment(root, writeConfig(root));
    const config = planExperiment(readExperiment(file), file).runs[0].config;
    const key = pretrainKey(config);
    assert.equal(pretrainKey(structuredClone(config)), key);
    assert.notEqual(pretrainKey({ ...config, pretrain: { ...config.pretrain, lr: 1e-3 } }), key);
    const defaults = PRETRAIN_DEFAULTS[config.game as PretrainGame];
    const before = defaults.initStd;
    defaults.initStd = before * 2;
    try {
      assert.notEqual(pretrainKey(config), key, "a changed default must not reuse the old model");
    } finally {
      defaults.initStd = before;
    }
    assert.equal(pretrainKey(config), key);
    // A setting added later keys the model only when set away from its neutral value.
    assert.equal(pretrainKey({ ...config, pretrain: { ...config.pretrain, tacticalRate: 0 } }), key);
    assert.notEqual(pretrainKey({ ...config, pretrain: { ...config.pretrain, tacticalRate: 0.5 } }), key);
    const planned = planExperiment(readExperiment(file), file).pretrains[0];
    const args = pretrainArgs({ ...planned, settings: { tacticalRate: 0.5, shards: 1, actionWeight: 4 } });
    assert.deepEqual(args.slice(args.indexOf("--tactical-rate")), [
      "--tactical-rate",
      "0.5",
      "--shards",
      "1",
      "--action-weight",
      "4",
    ]);
    assert.equal(
      pretrainKey({ ...config, pretrain: { ...config.pretrain, heedReflections: false } }),
      key,
      "heedReflections: false keeps the key",
    );
    assert.notEqual(
      pretrainKey({ ...config, pretrain: { ...config.pretrain, heedReflections: true } }),
      key,
      "heedReflections: true is another model",
    );
    // A boolean setting is a bare flag, present only when true.
    const heed = (v: boolean) => pretrainArgs({ ...planned, settings: { heedReflections: v } });
    assert.equal(heed(true).filter((a) => a === "--heed-reflections").length, 1, "bare flag when true");
    assert.ok(!heed(true).includes("true"), "no value after the flag");
    assert.ok(!heed(false).includes("--heed-reflections"), "no flag when false");
  });

  it("names the method and the field of a bad override before anything runs", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-bad-"));
    const file = writeExperiment(root, writeConfig(root), [
      `  - { name: gamma, config: ${JSON.stringify(writeConfig(root))}, set: [credit.trajGamma=7] }`,
    ]);
    assert.throws(
      () => planExperiment(readExperiment(file), file),
      (e: unknown) =>
        e instanceof UsageError && /gamma/.test(e.message) && /credit\.trajGamma/.test(e.message),
    );
    assert.throws(
      () =>
        planExperiment(readExperiment(writeExperiment(root, writeConfig(root))), file, { methods: ["nope"] }),
      /unknown method "nope"/,
    );
  });

  it("tells in a dry run which runs are done, which resume and which start", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-state-"));
    const file = writeExperiment(root, writeConfig(root));
    const plan = planExperiment(readExperiment(file), file);
    const [alpha0, alpha1, beta1] = plan.runs;
    const finalSummary = { format: SUMMARY_FORMAT, iterationsDone: 1, finalEval: { cells: [] } };
    mkdirSync(plan.resultsDir, { recursive: true });
    writeFileSync(alpha0.summaryPath, JSON.stringify(finalSummary));
    mkdirSync(join(alpha1.runDir, "checkpoints"), { recursive: true });
    writeFileSync(
      join(alpha1.runDir, "summary.json"),
      JSON.stringify({ ...finalSummary, iterationsDone: 0, finalEval: null }),
    );
    mkdirSync(plan.pretrains[0].dir, { recursive: true });
    writeFileSync(join(plan.pretrains[0].dir, "config.json"), "{}");
    assert.deepEqual(runState(alpha0), { kind: "committed" });
    assert.deepEqual(runState(alpha1), { kind: "resumes", iteration: 0, of: 1 });
    assert.deepEqual(runState(beta1), { kind: "new" });
    mkdirSync(beta1.runDir, { recursive: true });
    writeFileSync(join(beta1.runDir, "summary.json"), JSON.stringify(finalSummary));
    assert.deepEqual(runState(beta1), { kind: "finished" });
    const lines = describePlan(plan);
    assert.match(lines[0], /seed 0 .*: exists, reused$/);
    assert.match(lines[1], /seed 1 .*: to pretrain$/);
    assert.match(lines[2], /alpha seed 0.*: done \(/);
    assert.match(lines[3], /alpha seed 1.*: resumes after iteration 0\/1$/);
    assert.equal(
      lines.at(-1),
      "3 runs: 1 done, 1 finished but not copied, 1 to resume, 0 to start; 1 base model(s) to pretrain",
    );
    const measureOnly = describePlan(plan, { noTrain: true });
    assert.match(measureOnly[1], /seed 1 .*: not pretrained \(--no-train\)$/);
    assert.match(measureOnly[3], /alpha seed 1.*: left at iteration 0\/1 \(--no-train\)$/);
    assert.equal(
      measureOnly.at(-1),
      "3 runs: 1 done, 1 finished but not copied, 0 to resume, 0 to start; 0 base model(s) to pretrain; " +
        "--no-train leaves 1 unfinished run(s) alone",
    );
  });
});

describe("incomplete runs", () => {
  /** A grid of tiny runs boxed at `box` minutes, and its plan. */
  const boxedGrid = (root: string, box: number) => {
    const file = join(root, `exp-${box}.yaml`);
    writeFileSync(
      file,
      [
        "name: boxed",
        "seeds: [0, 1]",
        `runsDir: ${JSON.stringify(join(root, "runs"))}`,
        `pretrainedDir: ${JSON.stringify(join(root, "pretrained"))}`,
        `resultsDir: ${JSON.stringify(join(root, "results"))}`,
        `set: [train.maxMinutes=${box}]`,
        "methods:",
        `  - { name: alpha, config: ${JSON.stringify(writeConfig(root))} }`,
        "",
      ].join("\n"),
    );
    return planExperiment(readExperiment(file), file);
  };
  /** A finished run's summary; `complete` left out, as summaries written before it existed. */
  const finished = (iterationsDone: number) => ({
    format: SUMMARY_FORMAT,
    iterationsDone,
    wallSeconds: 1900,
    config: { train: { iterations: 1, maxMinutes: 30 } },
    finalEval: { cells: [] },
  });

  it("records a run the box stopped early as incomplete, and counts it apart from the done ones", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-boxed-"));
    const plan = boxedGrid(root, 30);
    const [s0, s1] = plan.runs;
    mkdirSync(plan.resultsDir, { recursive: true });
    writeFileSync(s0.summaryPath, JSON.stringify(finished(1)));
    writeFileSync(s1.summaryPath, JSON.stringify(finished(0)));
    assert.deepEqual(runState(s0), { kind: "committed" });
    assert.deepEqual(runState(s1), {
      kind: "incomplete",
      iteration: 0,
      of: 1,
      copied: true,
      wallSeconds: 1900,
    });
    const lines = describePlan(plan);
    assert.match(
      lines.at(-2)!,
      /alpha seed 1.*: incomplete: train\.maxMinutes stopped it after iteration 0\/1; /,
    );
    assert.match(lines.at(-1)!, /^2 runs: 1 done, 0 finished but not copied, 1 incomplete, 0 to resume/);

    const log: string[] = [];
    const r = await runExperiment(plan, { log: (l) => log.push(l), statusEverySeconds: 0 });
    assert.deepEqual(
      r.record.runs.map((x) => x.status),
      ["skipped", "incomplete"],
    );
    assert.match(log[0], /2 runs \(1 already done, 1 incomplete \(stopped by train\.maxMinutes/);
    assert.match(
      log.at(-1)!,
      /: 1\/2 runs done, 1 incomplete \(stopped by train\.maxMinutes before their iterations\), 0 failed/,
    );
  });

  it("trains an incomplete run on once the grid's box is raised and its checkpoints are there", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-unboxed-"));
    const plan = boxedGrid(root, 60);
    const s1 = plan.runs[1];
    mkdirSync(plan.resultsDir, { recursive: true });
    writeFileSync(
      s1.summaryPath,
      JSON.stringify({ ...finished(0), complete: false, stoppedBy: "maxMinutes" }),
    );
    assert.equal(runState(s1).kind, "incomplete", "no checkpoints: nothing to train on");
    mkdirSync(join(s1.runDir, "checkpoints"), { recursive: true });
    assert.deepEqual(runState(s1), { kind: "resumes", iteration: 0, of: 1 });
    checkNoStaleRuns(plan); // the summary's 30-minute box is not another run
    const { records, jobs } = trainJobsOf(plan, new Map(), false);
    assert.equal(records[1].status, "pending");
    assert.deepEqual(
      jobs.map((j) => j.id),
      ["alpha-s0", "alpha-s1"],
    );
    // The same box as the run had: a rerun would stop it at once.
    assert.equal(runState(boxedGrid(root, 30).runs[1]).kind, "incomplete");
  });
});

describe("experiment run", () => {
  it("runs the grid in parallel, copies each summary, and skips finished runs when rerun", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-run-"));
    const file = writeExperiment(root, writeConfig(root));
    const lines: string[] = [];
    const first = await runExperiment(planExperiment(readExperiment(file), file), {
      log: (l) => lines.push(l),
      statusEverySeconds: 0,
    });
    assert.equal(first.failed, 0, lines.join("\n"));
    const results = join(root, "results", "smoke");
    assert.deepEqual(readdirSync(results).sort(), [
      "alpha-s0.json",
      "alpha-s1.json",
      "beta-s1.json",
      "diversity",
      "experiment.json",
    ]);
    assert.deepEqual(readdirSync(join(results, "diversity")).sort(), [
      "alpha-s0.json",
      "alpha-s1.json",
      "beta-s1.json",
      "pretrained-s0.json",
      "pretrained-s1.json",
    ]);
    const div = JSON.parse(readFileSync(join(results, "diversity", "beta-s1.json"), "utf8"));
    assert.equal(div.format, "mage-diversity-v1");
    assert.match(div.policy, /beta-s1[/\\]checkpoints[/\\]iter-000001$/);
    assert.equal(div.cells.length, 6);
    const beta = readSummary(join(results, "beta-s1.json"));
    assert.equal(beta.name, "beta");
    assert.equal(beta.seed, 1);
    assert.ok(beta.finalEval);
    assert.equal(beta.scalingEval?.attempts, 3);
    assert.equal(beta.scalingEval?.cells[0].metrics.successAt.length, 3);
    assert.equal(readdirSync(join(root, "pretrained")).filter((n) => !n.endsWith(".log")).length, 2);
    const record = JSON.parse(readFileSync(join(results, "experiment.json"), "utf8"));
    assert.equal(record.format, "mage-experiment-v1");
    // Each base's own checks are recorded, and a base that missed one is named in the log.
    for (const p of record.pretrained as { dir: string; targets: unknown }[]) {
      const targets = readBaseTargets(p.dir);
      assert.ok(targets !== null, `${p.dir} has its checks`);
      assert.deepEqual(p.targets, targets);
      const warned = lines.some((l) => l.startsWith("warning:") && l.includes(p.dir));
      assert.equal(warned, !targets.met, lines.join("\n"));
    }
    assert.ok(
      record.pretrained.some((p: { targets: { met: boolean } }) => !p.targets.met),
      "the smoke grid's few-step bases miss a target, so the warning is exercised",
    );
    assert.deepEqual(
      record.runs.map((r: { status: string }) => r.status),
      ["done", "done", "done"],
    );

    // A record that lost a base's time (a base built by another worktree's invocation) takes it
    // from the base's own report.
    const lost = { ...record, pretrained: record.pretrained.map((p: object) => ({ ...p, seconds: null })) };
    writeFileSync(join(results, "experiment.json"), JSON.stringify(lost));
    const again: string[] = [];
    const second = await runExperiment(planExperiment(readExperiment(file), file), {
      log: (l) => again.push(l),
      statusEverySeconds: 0,
    });
    assert.equal(second.failed, 0);
    assert.ok(
      again[0].includes("3 runs (3 already done), 0 base model(s) to pretrain, 0 diversity"),
      again[0],
    );
    assert.ok(!again.some((l) => l.includes("start ")));
    const refilled = JSON.parse(readFileSync(join(results, "experiment.json"), "utf8"));
    for (const p of refilled.pretrained as { dir: string; seconds: number | null }[]) {
      const own = JSON.parse(readFileSync(join(p.dir, "pretrain-report.json"), "utf8"));
      assert.equal(p.seconds, own.timings.totalMs / 1000);
    }
    writeFileSync(join(results, "experiment.json"), JSON.stringify(record));
    assert.ok(existsSync(join(root, "runs", "smoke", "alpha-s0", "train.log")));
    assert.ok(!existsSync(join(root, "runs", "smoke", ".lock")), "the lock is released");

    // A fresh clone: the summaries are committed, the base models are not. Nothing to pretrain.
    rmSync(join(root, "pretrained"), { recursive: true });
    const fresh: string[] = [];
    await runExperiment(planExperiment(readExperiment(file), file), {
      log: (l) => fresh.push(l),
      statusEverySeconds: 0,
    });
    assert.ok(fresh[0].includes("0 base model(s) to pretrain"), fresh[0]);
    const rebuilt = existsSync(join(root, "pretrained")) ? readdirSync(join(root, "pretrained")) : [];
    assert.deepEqual(rebuilt, [], "no base model was rebuilt");
    // The resumed grid's record keeps what the earlier invocations measured.
    const resumed = JSON.parse(readFileSync(join(results, "experiment.json"), "utf8"));
    assert.deepEqual(
      resumed.pretrained.map((p: { seconds: number | null }) => p.seconds),
      record.pretrained.map((p: { seconds: number | null }) => p.seconds),
    );
    assert.ok(resumed.pretrained.every((p: { seconds: number | null }) => typeof p.seconds === "number"));
    assert.deepEqual(
      resumed.runs.map((r: { status: string; wallSeconds: number | null }) => [r.status, r.wallSeconds]),
      record.runs.map((r: { wallSeconds: number | null }) => ["skipped", r.wallSeconds]),
    );
    assert.ok(resumed.totalWallSeconds > record.totalWallSeconds);
    assert.ok(resumed.totalWallSeconds > resumed.wallSeconds);

    // `--only beta` records its own run and keeps the rest of the grid as recorded before.
    await runExperiment(planExperiment(readExperiment(file), file, { methods: ["beta"] }), {
      log: () => {},
      statusEverySeconds: 0,
    });
    const partial = JSON.parse(readFileSync(join(results, "experiment.json"), "utf8"));
    // Beta runs on seed 1 only; seed 0's base and its checks stay recorded all the same.
    assert.equal(record.pretrained.length, 2);
    assert.deepEqual(partial.pretrained, resumed.pretrained);
    assert.deepEqual(
      partial.runs.map((r: { method: string; seed: number; wallSeconds: number | null }) => [
        r.method,
        r.seed,
        r.wallSeconds,
      ]),
      record.runs.map((r: { method: string; seed: number; wallSeconds: number | null }) => [
        r.method,
        r.seed,
        r.wallSeconds,
      ]),
    );

    // --no-train counts as done only the runs that are: a missing summary stays pending.
    const betaSummary = join(results, "beta-s1.json");
    const kept = readFileSync(betaSummary, "utf8");
    rmSync(betaSummary);
    rmSync(join(root, "runs", "smoke", "beta-s1"), { recursive: true });
    const measured: string[] = [];
    await runExperiment(planExperiment(readExperiment(file), file), {
      log: (l) => measured.push(l),
      statusEverySeconds: 0,
      noTrain: true,
    });
    assert.ok(measured[0].includes("3 runs (2 already done)"), measured[0]);
    writeFileSync(betaSummary, kept);

    // A runtime-only edit (the worker's prefix store) keeps every finished run.
    const configFile = join(root, "tiny.yaml");
    const original = readFileSync(configFile, "utf8");
    writeFileSync(configFile, `${original}model: { torch: { prefixCacheMB: 64 } }\n`);
    const runtime: string[] = [];
    await runExperiment(planExperiment(readExperiment(file), file), {
      log: (l) => runtime.push(l),
      statusEverySeconds: 0,
      noTrain: true,
    });
    assert.ok(runtime[0].includes("3 runs (3 already done)"), runtime[0]);
    writeFileSync(configFile, original);

    // A method config edited after the grid ran: its old runs must not pass for the new plan.
    writeFileSync(configFile, readFileSync(configFile, "utf8").replace("groupSize: 2", "groupSize: 3"));
    await assert.rejects(
      runExperiment(planExperiment(readExperiment(file), file), { log: () => {}, statusEverySeconds: 0 }),
      (e: unknown) =>
        e instanceof UsageError &&
        /alpha-s0: .*alpha-s0\.json was made with another config \(rollout\.groupSize: 2 → 3\)/.test(
          e.message,
        ) &&
        e.message.includes("beta-s1"),
    );
    assert.ok(existsSync(join(results, "alpha-s0.json")), "nothing is deleted");
    assert.ok(!existsSync(join(root, "runs", "smoke", ".lock")), "nothing was started");
  });

  it("reuses a rebuilt base only if it holds the weights its seed's finished runs started from", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-base-"));
    const file = writeExperiment(root, writeConfig(root));
    const plan = () => planExperiment(readExperiment(file), file);
    const quiet = { log: () => {}, statusEverySeconds: 0 };
    assert.equal((await runExperiment(plan(), quiet)).failed, 0);
    const results = join(root, "results", "smoke");
    const alpha1 = join(results, "alpha-s1.json");
    const sha = (path: string) => JSON.parse(readFileSync(path, "utf8")).baseModel?.sha256;
    assert.match(sha(alpha1), /^[0-9a-f]{64}$/);
    const baseDir = plan().pretrains.find((p) => p.seed === 1)!.dir;
    const redoBeta = () => {
      rmSync(join(results, "beta-s1.json"), { force: true });
      rmSync(join(root, "runs", "smoke", "beta-s1"), { recursive: true, force: true });
    };

    // A fresh clone on the same machine: the base is rebuilt bit for bit and the seed goes on.
    redoBeta();
    rmSync(baseDir, { recursive: true });
    assert.equal((await runExperiment(plan(), quiet)).failed, 0);
    assert.equal(sha(join(results, "beta-s1.json")), sha(alpha1));

    // A base with other weights than alpha-s1 started from: refused before anything starts,
    // also when `--only beta` leaves alpha out of the plan ...
    writeFileSync(alpha1, readFileSync(alpha1, "utf8").replace(sha(alpha1), "0".repeat(64)));
    redoBeta();
    await assert.rejects(
      runExperiment(planExperiment(readExperiment(file), file, { methods: ["beta"] }), quiet),
      (e: unknown) =>
        e instanceof UsageError && e.message.includes("alpha-s1.json") && /other weights/.test(e.message),
    );
    await assert.rejects(
      runExperiment(plan(), quiet),
      (e: unknown) =>
        e instanceof UsageError && e.message.includes("alpha-s1.json") && /other weights/.test(e.message),
    );
    // ... and, when it had to be pretrained again, the seed's runs are not started on it.
    rmSync(baseDir, { recursive: true });
    const lines: string[] = [];
    const again = await runExperiment(plan(), { log: (l) => lines.push(l), statusEverySeconds: 0 });
    assert.ok(again.failed > 0);
    assert.ok(
      lines.some((l) => /base model of seed 1 cannot be used: .*alpha-s1\.json/.test(l)),
      lines.join("\n"),
    );
    assert.ok(!existsSync(join(results, "beta-s1.json")), "beta-s1 did not run on the other base");

    // --dry-run names it and what the grid will do with it.
    assert.equal(rebuiltBaseLines(plan(), false).length, 1);
    assert.match(rebuiltBaseLines(plan(), false)[0], /alpha-s1\.json started from .*: the grid refuses it/);
    assert.match(rebuiltBaseLines(plan(), true)[0], /the grid goes on from it/);

    // With --accept-rebuilt-bases the seed goes on from it, with a warning; beta-s1 records the new hash.
    const warned: string[] = [];
    const accepted = await runExperiment(plan(), {
      log: (l) => warned.push(l),
      statusEverySeconds: 0,
      acceptRebuiltBases: true,
    });
    assert.equal(accepted.failed, 0, warned.join("\n"));
    assert.ok(
      warned.some((l) =>
        /^warning: base model .* holds other weights .*alpha-s1\.json.*--accept-rebuilt-bases/.test(l),
      ),
      warned.join("\n"),
    );
    assert.match(sha(join(results, "beta-s1.json")), /^[0-9a-f]{64}$/);
    assert.notEqual(sha(join(results, "beta-s1.json")), sha(alpha1));
  });

  it("stops on request, letting the runs in flight stop, and a rerun finishes the grid", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-stop-"));
    const file = writeExperiment(root, writeConfig(root));
    const lines: string[] = [];
    const cut = await runExperiment(planExperiment(readExperiment(file), file), {
      log: (l) => lines.push(l),
      statusEverySeconds: 0,
      shouldStop: () => lines.some((l) => /\] start \w+-s\d/.test(l)),
    });
    assert.equal(cut.stopped, true, lines.join("\n"));
    const stopAt = lines.findIndex((l) => l.startsWith("stopping: runs in flight checkpoint and stop"));
    assert.ok(stopAt > 0, lines.join("\n"));
    assert.ok(!lines.slice(stopAt).some((l) => l.includes("] start ")), "nothing starts after the stop");
    // The run in flight got the stop too (SIGINT: it checkpoints and exits) rather than running on.
    assert.ok(
      lines.slice(stopAt).some((l) => /\] stopped \w+-s\d in /.test(l)),
      lines.join("\n"),
    );
    assert.match(lines.at(-1)!, /, stopped early in /);
    assert.equal(cut.failed, 0, "a run the stop ended is pending, not failed");
    const statuses = cut.record.runs.map((r) => r.status);
    assert.ok(statuses.includes("pending"), statuses.join(", "));
    const resumed = await runExperiment(planExperiment(readExperiment(file), file), {
      log: () => {},
      statusEverySeconds: 0,
    });
    assert.equal(resumed.stopped, false);
    assert.equal(resumed.failed, 0);
    assert.ok(resumed.record.runs.every((r) => r.status === "done" || r.status === "skipped"));
    assert.equal(resumed.record.runs.length, 3);
  });

  it("refuses to run a grid that another live process holds", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-exp-lock-"));
    const file = writeExperiment(root, writeConfig(root));
    const holder = spawn("sleep", ["30"], { stdio: "ignore" });
    try {
      mkdirSync(join(root, "runs", "smoke"), { recursive: true });
      writeFileSync(join(root, "runs", "smoke", ".lock"), `${holder.pid}\n`);
      await assert.rejects(
        runExperiment(planExperiment(readExperiment(file), file), { log: () => {}, statusEverySeconds: 0 }),
        (e: unknown) => e instanceof UsageError && e.message.includes(`pid ${holder.pid}`),
      );
    } finally {
      holder.kill();
    }
  });
});
