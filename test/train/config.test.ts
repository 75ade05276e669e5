import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { applyOverrides, loadConfig, validateConfig } from "../../src/train/config.js";

const minimal = { game: "kuhn", population: { opponents: [{ spec: "conservative" }] } };

describe("config", () => {
  it("fills defaults", () => {
    const c = validateConfig(minimal);
    assert.equal(c.credit.trajGamma, 0.6);
    assert.equal(c.advantage.scope, "agent");
    assert.equal(c.eval.sampling.temperature, 0.7);
  });
  it("names the bad field and the allowed values", () => {
    assert.throws(
      () => validateConfig({ ...minimal, advantage: { scope: "opponent" } }),
      (e: unknown) =>
        e instanceof UsageError &&
        /advantage\.scope/.test(e.message) &&
        /"agent"\|"task"\|"batch"/.test(e.message),
    );
    assert.throws(() => validateConfig({ ...minimal, optim: { lr: -1 } }), /optim\.lr/);
    assert.throws(() => validateConfig({ ...minimal, typo: 1 }), /typo/);
  });
  it("applies --set overrides as YAML scalars on nested paths", () => {
    const raw = applyOverrides(minimal, ["optim.lr=3e-4", "task.hindsight=true", "name=x y"]);
    const c = validateConfig(raw);
    assert.equal(c.optim.lr, 3e-4);
    assert.equal(c.task.hindsight, true);
    assert.equal(c.name, "x y");
    assert.throws(() => applyOverrides(minimal, ["novalue"]), /key=value/);
    assert.throws(() => applyOverrides(minimal, ["game.x=1"]), /not a section/);
  });
  it("every preset in configs/ validates", () => {
    const files = readdirSync("configs").filter((f) => f.endsWith(".yaml"));
    for (const f of files) loadConfig(`configs/${f}`);
  });
});
