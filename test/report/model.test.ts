import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildReport } from "../../src/report/markdown.js";
import { modelDetails } from "../../src/report/model.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";
import { TORCH_SHA256, torchSummary } from "./torch-fixture.js";

/** The runs table of a report over `summaries`, as header → cell per run. */
function runsTable(summaries: RunSummary[]): Record<string, string>[] {
  const md = buildReport(
    summaries.map((summary, i) => ({ path: `s${i}.json`, summary })),
    { plotsLink: "plots" },
  ).markdown;
  const lines = md.split("\n");
  const start = lines.findIndex((l) => l.startsWith("| run |"));
  assert.ok(start >= 0, "the report has a runs table");
  const cells = (l: string) => l.slice(2, -2).split(" | ");
  const head = cells(lines[start]);
  const rows: Record<string, string>[] = [];
  for (let i = start + 2; lines[i]?.startsWith("|"); i++)
    rows.push(Object.fromEntries(cells(lines[i]).map((c, k) => [head[k], c])));
  return rows;
}

describe("report: which model a run trained", () => {
  it("names a torch run's model directory, backend, dtype, LoRA and weights hash instead of a preset", () => {
    const [row] = runsTable([torchSummary("mage", { device: "cpu", dtype: "float32", lora: { rank: 16 } })]);
    assert.equal(row.model, "smollm2-135m-instruct (torch cpu float32, LoRA r16) sha256:1a2b3c4d");
    assert.equal(row.preset, undefined, "no preset column: the run never used one");
  });

  it("says full fine-tuning, the device and the worker processes", () => {
    const [row] = runsTable([
      torchSummary("mage", { device: "cuda", dtype: "bfloat16", processes: 2, lora: null }),
    ]);
    assert.equal(
      row.model,
      "smollm2-135m-instruct (torch cuda bfloat16 ×2, full fine-tuning) sha256:1a2b3c4d",
    );
  });

  it("leaves the hash out when the run recorded none", () => {
    const s = { ...torchSummary("mage", {}), baseModel: { dir: "/models/sharded", sha256: null } };
    assert.equal(runsTable([s])[0].model, "smollm2-135m-instruct (torch cpu float32, full fine-tuning)");
  });

  it("keeps the preset column for embedded runs, and names both kinds side by side", () => {
    const [embedded] = runsTable([makeSummary({ name: "grpo" })]);
    assert.equal(embedded.preset, "tiny");
    assert.equal(embedded.model, undefined);
    const mixed = runsTable([makeSummary({ name: "grpo" }), torchSummary("mage", { lora: { rank: 8 } })]);
    assert.deepEqual(
      mixed.map((r) => r.model),
      ["embedded tiny", "smollm2-135m-instruct (torch cpu float32, LoRA r8) sha256:1a2b3c4d"],
    );
  });

  it("details every LoRA setting and the whole hash for a run's own page", () => {
    const lora = { rank: 16, alpha: 8, targetModules: ["q_proj", "v_proj"] };
    assert.deepEqual(modelDetails(torchSummary("mage", { lora })), [
      "smollm2-135m-instruct (/models/smollm2-135m-instruct/)",
      "torch, cpu, float32, 1 process",
      "LoRA rank 16, alpha 8, dropout 0, on q_proj, v_proj",
      `weights sha256 ${TORCH_SHA256}`,
    ]);
    assert.equal(
      modelDetails(torchSummary("mage", { lora: { rank: 4 } }))[2],
      "LoRA rank 4, alpha 8, dropout 0, on q_proj, k_proj, v_proj, o_proj",
      "alpha defaults to twice the rank",
    );
    assert.deepEqual(modelDetails(makeSummary({ name: "grpo" })), ["embedded model, preset tiny"]);
  });
});
