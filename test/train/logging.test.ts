import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import type { CellResult } from "../../src/evaluate/evaluate.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";
import { isolatedWandbEnv, readTensorBoard, readWandb, type WandbRun } from "./logging-helpers.js";

/**
 * A run's curves in TensorBoard and W&B (offline) hold exactly what its own files hold: every
 * number of metrics.jsonl under train/ at its iteration, every evaluation cell under
 * eval/<opponent>-<seat>/ at the iterations done; and a run killed with -9 and resumed logs each
 * step once.
 */

type Triple = [tag: string, step: number, value: number];

function jsonl(path: string): Record<string, unknown>[] {
  return readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
}

/** The expected eval tags of one cell, written out here rather than taken from the code under test. */
function cellTriples(prefix: string, step: number, cell: CellResult): Triple[] {
  const m = cell.metrics;
  const name = `${prefix}/${cell.opponent}-${cell.seat}`;
  const out: Triple[] = [];
  const perAttempt = (measure: string, estimates: { mean: number }[]) =>
    estimates.map((e, i): Triple => [`${name}/${measure}@${i + 1}`, step, e.mean]);
  out.push(...perAttempt("success", m.successAt), ...perAttempt("non_loss", m.nonLossAt));
  out.push(...perAttempt("score", m.scoreAt));
  out.push([`${name}/final`, step, m.final.mean], [`${name}/final_lo`, step, m.final.lo]);
  out.push([`${name}/final_hi`, step, m.final.hi], [`${name}/gain`, step, m.gain.mean]);
  out.push([`${name}/gain_lo`, step, m.gain.lo], [`${name}/gain_hi`, step, m.gain.hi]);
  out.push(
    [`${name}/invalid_rate`, step, m.invalidRate],
    [`${name}/attempts_played`, step, m.meanAttemptsPlayed],
  );
  out.push([`${name}/trials`, step, m.trials]);
  // Among the cell's reflect calls, where it made any (and informative where the task judges it).
  if (m.validReflectionRate !== undefined)
    out.push([`${name}/valid_reflection`, step, m.validReflectionRate]);
  if (m.informativeReflectionRate !== undefined)
    out.push([`${name}/informative_reflection`, step, m.informativeReflectionRate]);
  return out;
}

/** Everything a finished run directory says should be in its curves. */
function expectedTriples(outDir: string): Triple[] {
  const out: Triple[] = [];
  for (const m of jsonl(join(outDir, "metrics.jsonl")) as Record<string, number>[]) {
    for (const [k, v] of Object.entries(m)) if (k !== "iteration") out.push([`train/${k}`, m.iteration, v]);
  }
  for (const e of jsonl(join(outDir, "eval.jsonl")) as { iteration: number; cells: CellResult[] }[]) {
    for (const c of e.cells) out.push(...cellTriples("eval", e.iteration, c));
  }
  const summary = JSON.parse(readFileSync(join(outDir, "summary.json"), "utf8"));
  for (const c of summary.finalEval.cells) out.push(...cellTriples("eval", summary.iterationsDone, c));
  return out;
}

const key = (t: Triple) => `${t[0]}@${t[1]}`;
const sortTriples = (ts: Triple[]) => [...ts].sort((a, b) => key(a).localeCompare(key(b)));

/** The W&B history as triples (W&B's own fields and the table's reference left out). */
function wandbTriples(runs: WandbRun[]): Triple[] {
  const out: Triple[] = [];
  for (const run of runs) {
    for (const row of run.history) {
      for (const [k, v] of Object.entries(row)) {
        if (k.startsWith("_") || k.startsWith("final_eval/")) continue;
        out.push([k, row._step as number, v as number]);
      }
    }
  }
  return out;
}

function writeRunConfig(root: string, base: string): string {
  const path = join(root, "run.yaml");
  writeFileSync(
    path,
    [
      "name: logging-test",
      "seed: 3",
      "game: kuhn",
      `model: { checkpoint: ${JSON.stringify(base)} }`,
      "task: { attempts: 2, maxTurns: 2 }",
      "population: { opponents: [{ spec: aggressive }, { spec: cfr-mixed }] }",
      "rollout: { tasksPerIteration: 2, groupSize: 3, maxResponseTokens: 6 }",
      "optim: { lr: 1.0e-3, klCoef: 0.1, miniBatchRows: 8 }",
      "train: { iterations: 6, checkpointEvery: 2, keepLast: 2 }",
      "eval: { every: 2, atStart: true, trials: 2, finalTrials: 3, cells: [{ opponent: cfr, seat: second }, { opponent: 'cfr:10', seat: first }] }",
      "",
    ].join("\n"),
  );
  return path;
}

describe("training curves in TensorBoard and W&B", () => {
  let root = "";
  let cfgPath = "";
  let env: NodeJS.ProcessEnv = {};
  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-logging-"));
    await saveRandomCheckpoint(join(root, "base"), { contextLength: 1024, seed: 4 });
    cfgPath = writeRunConfig(root, join(root, "base"));
    env = isolatedWandbEnv(join(root, "wandb-home"));
  });

  it("TensorBoard and the offline W&B run hold every number of the run's files at its step", async () => {
    const outDir = join(root, "whole");
    const config = loadConfig(cfgPath, [
      `logging.tensorboard=${join(root, "tb")}`,
      "logging.group=grid-a",
      "logging.wandb={project: mage-test, entity: team-x, mode: offline}",
    ]);
    const lines: string[] = [];
    await train({
      config,
      outDir,
      resume: false,
      progress: false,
      log: (l) => lines.push(l),
      loggingEnv: env,
    });
    assert.ok(!lines.some((l) => l.includes("warning")), lines.join("\n"));
    const expected = sortTriples(expectedTriples(outDir));
    assert.ok(expected.length > 100);

    // TensorBoard: <root>/<group>/<run directory's name>, every triple once, values as float32.
    const tb = readTensorBoard(join(root, "tb"));
    assert.deepEqual(Object.keys(tb), ["grid-a/whole"]);
    const tbTriples = tb["grid-a/whole"].scalars.map((s) => [s.tag, s.step, s.value] as Triple);
    assert.deepEqual(
      sortTriples(tbTriples),
      expected.map(([t, s, v]) => [t, s, Math.fround(v)]),
    );

    // W&B: one offline run with the group, name and resolved config; the same numbers exactly.
    const runs = readWandb(join(outDir, "wandb"));
    assert.equal(runs.length, 1);
    const [run] = runs;
    assert.deepEqual(
      { project: run.run.project, name: run.run.name, group: run.run.group },
      { project: "mage-test", name: "whole", group: "grid-a" },
    );
    const { _wandb, ...wandbConfig } = run.config;
    assert.deepEqual(wandbConfig, JSON.parse(JSON.stringify(config)));
    assert.deepEqual(sortTriples(wandbTriples(runs)), expected);
    const steps = run.history.map((r) => r._step);
    assert.deepEqual(
      steps,
      [...new Set(steps)].sort((a, b) => (a as number) - (b as number)),
    );

    // The final evaluation as a table, one row per cell; its numbers in the summary.
    const summary = JSON.parse(readFileSync(join(outDir, "summary.json"), "utf8"));
    const table = run.tables.final_eval;
    assert.deepEqual(table.columns.slice(0, 4), ["opponent", "seat", "unseen", "success@1"]);
    assert.deepEqual(
      table.data.map((r) => r.slice(0, 3)),
      summary.finalEval.cells.map((c: CellResult) => [c.opponent, c.seat, c.unseen]),
    );
    summary.finalEval.cells.forEach((c: CellResult, i: number) => {
      const row = table.data[i];
      assert.equal(row[table.columns.indexOf("final")], c.metrics.final.mean);
      assert.equal(row[table.columns.indexOf("gain_hi")], c.metrics.gain.hi);
      assert.equal(row[table.columns.indexOf("success@2")], c.metrics.successAt[1].mean);
    });
    for (const [tag, step, value] of expected) {
      if (step === summary.iterationsDone && tag.startsWith("eval/"))
        assert.equal(run.summary[tag], value, tag);
    }
    assert.equal(run.summary.iterations_done, 6);
  });

  it("kill -9 mid-run, then --resume: each step once in TensorBoard and in W&B", async () => {
    const outDir = join(root, "killed");
    const tbRoot = join(root, "tb-resume");
    const flags = ["--tensorboard", tbRoot, "--wandb", "mage-test", "--set", "logging.wandb.mode=offline"];
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "train",
        "--config",
        cfgPath,
        "--out",
        outDir,
        "--no-progress",
        ...flags,
      ],
      { stdio: "ignore", env },
    );
    const metricsFile = join(outDir, "metrics.jsonl");
    const lines = () =>
      existsSync(metricsFile) ? readFileSync(metricsFile, "utf8").trim().split("\n").length : 0;
    const end = Date.now() + 120_000;
    while (lines() < 3) {
      assert.ok(Date.now() < end, "the run did not progress");
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 100)); // the third iteration's events are written too
    child.kill("SIGKILL"); // past the checkpoint taken after two iterations
    await new Promise((r) => child.once("exit", r));
    assert.ok(lines() < 6, "killed before the end");
    const before = readTensorBoard(tbRoot).killed.scalars.filter((s) => s.tag === "train/loss").length;
    assert.ok(before >= 3, "the killed process had logged past its last checkpoint");

    const config = loadConfig(cfgPath, [
      `logging.tensorboard=${tbRoot}`,
      "logging.wandb={project: mage-test, mode: offline}",
    ]);
    await train({ config, outDir, resume: true, progress: false, log: () => {}, loggingEnv: env });

    const expected = sortTriples(expectedTriples(outDir));
    const tb = readTensorBoard(tbRoot).killed;
    assert.equal(tb.files.length, 1, "the killed process's event file was replaced");
    assert.deepEqual(
      sortTriples(tb.scalars.map((s) => [s.tag, s.step, s.value])),
      expected.map(([t, s, v]) => [t, s, Math.fround(v)]),
    );
    assert.deepEqual(
      tb.accumulator["train/loss"].map(([s]) => s),
      [0, 1, 2, 3, 4, 5],
    );

    // W&B: two offline run directories of one run id (one per process), each step logged once across them.
    const runs = readWandb(join(outDir, "wandb"));
    assert.equal(runs.length, 2);
    assert.equal(runs[0].run.id, runs[1].run.id);
    // The killed process logged steps it had not checkpointed; they equal the resumed run's (the
    // run is deterministic), so the resumed process skips them and the union is the whole run.
    // (Timings differ between the two processes and are compared for presence only.)
    const timing = /_ms$|wall_s$/;
    const got = sortTriples(wandbTriples(runs));
    assert.deepEqual(
      got.map(([t, s, v]) => [t, s, timing.test(t) ? 0 : v]),
      expected.map(([t, s, v]) => [t, s, timing.test(t) ? 0 : v]),
    );
  });

  it("a W&B failure is one warning and the run goes on", async () => {
    const outDir = join(root, "no-key");
    const config = loadConfig(cfgPath, [
      "train.iterations=2",
      "eval.atStart=false",
      "logging.wandb={project: mage-test, mode: online}",
    ]);
    const lines: string[] = [];
    const result = await train({
      config,
      outDir,
      resume: false,
      progress: false,
      log: (l) => lines.push(l),
      loggingEnv: env,
    });
    assert.equal(result.stopped, false);
    assert.equal(result.summary.iterationsDone, 2);
    const warnings = lines.filter((l) => l.includes("W&B"));
    assert.equal(warnings.length, 1, lines.join("\n"));
    assert.match(warnings[0], /^warning: W&B logging is off .*API key.*Training goes on\.$/s);
  });
});
