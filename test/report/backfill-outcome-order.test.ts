import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Rng } from "../../src/core/rng.js";
import { computeTrialMetrics, type TrialOutcome } from "../../src/evaluate/metrics.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";

/**
 * scripts/backfill-outcome-order.ts on a synthetic experiments folder: a summary without
 * `outcomeOrder` and its run directory's eval-trials.jsonl (written in completion order).
 */
const SCRIPT = fileURLToPath(new URL("../../scripts/backfill-outcome-order.ts", import.meta.url));
const roots: string[] = [];
after(() => {
  for (const d of roots) rmSync(d, { recursive: true, force: true });
});

const CELLS = [
  { opponent: "cfr", seat: "second" },
  { opponent: "conservative", seat: "first" },
];
const T = 40;

function trialsOf(seed: number): TrialOutcome[] {
  const rng = Rng.seeded(`backfill-${seed}`);
  return CELLS.flatMap((c) =>
    Array.from({ length: T }, (_, i) => {
      const attempts: TrialOutcome["attempts"] = [];
      for (let k = 0; k < 3; k++) {
        const won = rng.float() < 0.4;
        const score = won ? rng.pick([1, 2]) : rng.pick([-1, -2]);
        attempts.push({ won, draw: false, score, reward: score, turns: 2, invalidActions: 0 });
        if (won) break;
      }
      return { opponent: c.opponent, seat: c.seat, taskId: String(i), attempts };
    }),
  );
}

/** An experiments folder with one summary (mage, seed 0) and its run directory under `root`. */
function setup(): { root: string; folder: string; file: string; trials: TrialOutcome[] } {
  const root = mkdtempSync(join(tmpdir(), "mage-backfill-test-"));
  roots.push(root);
  const trials = trialsOf(0);
  const base = makeSummary({ name: "mage", seed: 0, iterations: 2, evalEvery: 0, finalTrials: 2 });
  const cells = CELLS.map((c, ci) => {
    const metrics = computeTrialMetrics(trials.slice(ci * T, (ci + 1) * T), 3, 0);
    delete metrics.outcomeOrder;
    return { ...c, unseen: false, metrics };
  });
  const summary: RunSummary = { ...base, finalEval: { iteration: 2, attempts: 3, trialsPerCell: T, cells } };
  const folder = join(root, "docs", "experiments");
  mkdirSync(join(folder, "exp"), { recursive: true });
  writeFileSync(
    join(folder, "exp", "experiment.json"),
    JSON.stringify({
      format: "mage-experiment-v1",
      name: "exp",
      runs: [{ method: "mage", seed: 0, runDir: "runs/exp/mage-s0" }],
    }),
  );
  const file = join(folder, "exp", "mage-s0.json");
  writeFileSync(file, `${JSON.stringify(summary, null, 1)}\n`);
  mkdirSync(join(root, "runs", "exp", "mage-s0"), { recursive: true });
  // Completion order, not trial order.
  const ids = Array.from({ length: trials.length }, (_, i) => i);
  Rng.seeded("completion").shuffle(ids);
  const lines = ids.map((id) =>
    JSON.stringify({
      iteration: 2,
      trialId: id,
      opponent: trials[id].opponent,
      seat: trials[id].seat,
      attempts: trials[id].attempts,
    }),
  );
  writeFileSync(join(root, "runs", "exp", "mage-s0", "eval-trials.jsonl"), `${lines.join("\n")}\n`);
  return { root, folder, file, trials };
}

function run(folder: string, root: string, ...extra: string[]) {
  const r = spawnSync(process.execPath, ["--import", "tsx", SCRIPT, folder, "--root", root, ...extra], {
    encoding: "utf8",
    // `--import tsx` resolves from the working directory: the repository's.
    cwd: fileURLToPath(new URL("../../", import.meta.url)),
  });
  return { code: r.status, out: r.stdout + r.stderr };
}

describe("scripts/backfill-outcome-order.ts", () => {
  it("writes each final-evaluation cell's order in trial order, changing nothing else", () => {
    const { root, folder, file, trials } = setup();
    const before = readFileSync(file, "utf8");
    const dry = run(folder, root, "--dry-run");
    assert.equal(dry.code, 0, dry.out);
    assert.match(dry.out, /checks pass \(dry run/);
    assert.equal(readFileSync(file, "utf8"), before, "a dry run writes nothing");
    const r = run(folder, root);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /exp\/mage-s0\.json: outcomeOrder written: 2 cells, 80 trials/);
    const s = JSON.parse(readFileSync(file, "utf8")) as RunSummary;
    s.finalEval!.cells.forEach((c, ci) => {
      const want = computeTrialMetrics(trials.slice(ci * T, (ci + 1) * T), 3, 0).outcomeOrder;
      assert.equal(c.metrics.outcomeOrder, want);
      delete c.metrics.outcomeOrder;
    });
    assert.equal(`${JSON.stringify(s, null, 1)}\n`, before, "only outcomeOrder was added");
    assert.match(run(folder, root).out, /already has the same outcomeOrder/);
  });

  it("refuses, leaving the summary as it was, when the rebuilt histogram differs", () => {
    const { root, folder, file } = setup();
    const s = JSON.parse(readFileSync(file, "utf8")) as RunSummary;
    const o = s.finalEval!.cells[1].metrics.outcomes!;
    const [k0, k1] = Object.keys(o);
    o[k0]++;
    o[k1]--;
    const text = `${JSON.stringify(s, null, 1)}\n`;
    writeFileSync(file, text);
    const r = run(folder, root);
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /REFUSED: cell 1 \(conservative, seat first\): rebuilt histogram differs/);
    assert.equal(readFileSync(file, "utf8"), text);
  });

  it("refuses a trial file with a missing or foreign trial, and skips a summary without run directory", () => {
    const { root, folder, file } = setup();
    const path = join(root, "runs", "exp", "mage-s0", "eval-trials.jsonl");
    const lines = readFileSync(path, "utf8").trim().split("\n");
    writeFileSync(path, `${lines.slice(1).join("\n")}\n`);
    assert.match(run(folder, root).out, /REFUSED: 1 of 80 trials missing/);
    const other = JSON.parse(lines[0]);
    other.iteration = 1;
    writeFileSync(path, `${[JSON.stringify(other), ...lines.slice(1)].join("\n")}\n`);
    assert.match(run(folder, root).out, /REFUSED: trial \d+ is of iteration 1/);
    const before = readFileSync(file, "utf8");
    rmSync(join(root, "runs"), { recursive: true });
    const r = run(folder, root);
    assert.equal(r.code, 0);
    assert.match(r.out, /skipped: no .*eval-trials\.jsonl/);
    assert.equal(readFileSync(file, "utf8"), before);
  });
});
