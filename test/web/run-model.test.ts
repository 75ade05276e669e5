import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type DashboardHandle, startDashboard } from "../../src/web/server.js";
import { makeSummary } from "../report/fixtures.js";
import { TORCH_SHA256, torchSummary } from "../report/torch-fixture.js";

describe("dashboard: which model a run trained", () => {
  let dash: DashboardHandle;
  let root: string;
  const page = async (id: string) => {
    const res = await fetch(new URL(`/run?id=${encodeURIComponent(id)}`, dash.url));
    assert.equal(res.status, 200);
    return res.text();
  };

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-dashboard-model-"));
    for (const [dir, summary] of [
      ["torch-run", torchSummary("mage-torch", { dtype: "bfloat16", device: "cuda", lora: { rank: 16 } })],
      ["embedded-run", makeSummary({ name: "mage" })],
    ] as const) {
      mkdirSync(join(root, dir));
      writeFileSync(join(root, dir, "summary.json"), JSON.stringify(summary));
    }
    dash = await startDashboard({ roots: [root], port: 0, cwd: root });
  });
  after(async () => {
    await dash.close();
    rmSync(root, { recursive: true, force: true });
  });

  it("a torch run's page names its model, backend, dtype, LoRA and weights hash", async () => {
    const text = await page("torch-run");
    assert.match(
      text,
      /<p class="model">model: smollm2-135m-instruct \(\/models\/smollm2-135m-instruct\/\) · torch, cuda, bfloat16, 1 process · LoRA rank 16, alpha 32, dropout 0, on q_proj, k_proj, v_proj, o_proj · weights sha256 1a2b3c4d/,
    );
    assert.ok(text.includes(TORCH_SHA256), "the whole hash");
    assert.match(text, /<th>model<\/th>/, "the runs table heads a model column");
    assert.match(text, /<td>smollm2-135m-instruct \(torch cuda bfloat16, LoRA r16\) sha256:1a2b3c4d<\/td>/);
    assert.doesNotMatch(text, /preset/, "no preset: the run never used one");
  });

  it("an embedded run's page keeps its preset", async () => {
    const text = await page("embedded-run");
    assert.match(text, /<p class="model">model: embedded model, preset tiny<\/p>/);
    assert.match(text, /<th>preset<\/th>/);
    assert.match(text, /<td>tiny<\/td>/);
  });
});
