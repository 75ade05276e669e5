import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loggingOverrides } from "../../src/cli/commands/train.js";
import { UsageError } from "../../src/core/errors.js";
import { planExperiment, readExperiment } from "../../src/experiment/spec.js";
import { checkNoStaleRuns } from "../../src/experiment/stale.js";
import { applyOverrides, configToYaml, validateConfig } from "../../src/train/config.js";
import { runLabel, tensorboardRunDir } from "../../src/train/logging/run-logger.js";

const minimal = { game: "kuhn", population: { opponents: [{ spec: "conservative" }] } };
const withSets = (sets: string[]) => validateConfig(applyOverrides(minimal, sets));

describe("logging config", () => {
  it("logs nowhere besides the run's files by default", () => {
    assert.deepEqual(validateConfig(minimal).logging, { tensorboard: null, group: null, wandb: null });
  });

  it("--set and the CLI flags fill the section, W&B fields with their defaults", () => {
    const c = withSets(loggingOverrides({ tensorboard: "runs/tb", wandb: "2024" }));
    assert.equal(c.logging.tensorboard, "runs/tb");
    assert.deepEqual(c.logging.wandb, { project: "2024", entity: null, name: null, mode: "online" });
    const offline = withSets(["logging.wandb={project: p, entity: team, mode: offline}"]);
    assert.deepEqual(offline.logging.wandb, { project: "p", entity: "team", name: null, mode: "offline" });
  });

  it("a bad field is named with what is allowed", () => {
    assert.throws(
      () => withSets(["logging.wandb.project=p", "logging.wandb.mode=cloud"]),
      (e: unknown) =>
        e instanceof UsageError &&
        /logging\.wandb\.mode/.test(e.message) &&
        /"online"\|"offline"\|"disabled"/.test(e.message),
    );
    assert.throws(() => withSets(["logging.wandb.mode=offline"]), /logging\.wandb\.project/);
    assert.throws(() => withSets(["logging.tensorbord=runs/tb"]), /logging[\s\S]*tensorbord/);
    assert.throws(() => withSets(['logging.tensorboard=""']), /logging\.tensorboard/);
  });

  it("a run's TensorBoard folder is <root>/[<group>/]<run directory's name>", () => {
    const c = withSets(["logging.tensorboard=tb"]);
    assert.equal(tensorboardRunDir(c.logging, "runs/quickstart-s0/"), join("tb", "quickstart-s0"));
    assert.equal(
      tensorboardRunDir({ ...c.logging, group: "kuhn-main" }, "x/mage-s2"),
      join("tb", "kuhn-main", "mage-s2"),
    );
    assert.equal(tensorboardRunDir(validateConfig(minimal).logging, "runs/a"), null);
    assert.equal(runLabel("."), runLabel(process.cwd()));
  });

  it("mage experiment groups a grid's runs under the grid's name; logging never makes a run stale", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-logging-grid-"));
    const config = join(root, "tiny.yaml");
    writeFileSync(
      config,
      "game: kuhn\npopulation: { opponents: [{ spec: aggressive }] }\ntrain: { iterations: 1 }\n",
    );
    const file = join(root, "grid.yaml");
    writeFileSync(
      file,
      [
        "name: kuhn-grid",
        "seeds: [0, 1]",
        `runsDir: ${JSON.stringify(join(root, "runs"))}`,
        `resultsDir: ${JSON.stringify(join(root, "results"))}`,
        `methods: [{ name: mage, config: ${JSON.stringify(config)}, set: ["model.checkpoint=base"] }]`,
        "",
      ].join("\n"),
    );
    const read = readExperiment(file);
    const spec = {
      ...read,
      set: [...read.set, ...loggingOverrides({ tensorboard: join(root, "tb"), wandb: "mage" })],
    };
    const plan = planExperiment(spec, file);
    for (const run of plan.runs) {
      assert.equal(run.config.logging.group, "kuhn-grid");
      assert.equal(run.config.logging.wandb?.project, "mage");
      assert.equal(
        tensorboardRunDir(run.config.logging, run.runDir),
        join(root, "tb", "kuhn-grid", `mage-s${run.seed}`),
      );
    }
    // A run started before logging was switched on is the same run.
    const run = plan.runs[0];
    mkdirSync(run.runDir, { recursive: true });
    const before = { ...run.config, logging: { tensorboard: null, group: null, wandb: null } };
    writeFileSync(join(run.runDir, "config.yaml"), configToYaml(before));
    checkNoStaleRuns(plan);
    writeFileSync(
      join(run.runDir, "config.yaml"),
      configToYaml({ ...before, optim: { ...before.optim, lr: 0.5 } }),
    );
    assert.throws(() => checkNoStaleRuns(plan), /optim\.lr/);
  });
});
