import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { type EvalCell, evaluate } from "../../src/evaluate/evaluate.js";
import {
  type CellProgress,
  cellMetrics,
  type EvalProgress,
  EvalProgressBar,
} from "../../src/evaluate/progress.js";
import { ScriptedPolicy } from "../../src/policy/scripted.js";
import { EVAL_SAMPLING, type Policy } from "../../src/policy/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

/** Kuhn replies: a remark when asked to reflect, else PASS or BET, and one answer in five unreadable. */
function kuhnPlayer(): ScriptedPolicy {
  return new ScriptedPolicy((messages, { rng }) => {
    const last = messages.at(-1)?.content ?? "";
    if (last.includes("<remark>")) return "<remark>bet with K</remark>";
    if (rng.bernoulli(0.2)) return "I am not sure";
    return rng.bernoulli(0.5) ? "<action>PASS</action>" : "<action>BET</action>";
  });
}

const CELLS: EvalCell[] = [
  { opponent: "aggressive", seat: "first", unseen: true },
  { opponent: "aggressive", seat: "second", unseen: true },
  { opponent: "conservative", seat: "second", unseen: false },
];

/** A backend that reuses 3 of every 4 prompt tokens it is fed, with counts running from before the evaluation. */
function reusingPlayer(): Policy {
  const inner = kuhnPlayer();
  const counts = { reused: 1000, prefilled: 0 };
  return {
    name: "reusing",
    generate: async (requests) => {
      counts.reused += 3 * requests.length;
      counts.prefilled += requests.length;
      return inner.generate(requests);
    },
    promptTokens: () => ({ ...counts }),
  };
}

async function evaluateKuhn(onProgress?: (p: EvalProgress) => void, player: Policy = kuhnPlayer()) {
  return evaluate(player, {
    task: await loadTask("kuhn"),
    cells: CELLS,
    trials: 5,
    attempts: 3,
    reflection: "reflection_only",
    promptStyle: "compact",
    maxTurns: 4,
    sampling: { ...EVAL_SAMPLING, maxTokens: 16 },
    seed: 7,
    // Small batches, so that answers arrive in several steps.
    maxBatch: 4,
    ...(onProgress ? { onProgress } : {}),
  });
}

describe("evaluate: progress", () => {
  it("reports every finished trial per cell, counts answers and the valid rate, and ends at the total", async () => {
    const seen: EvalProgress[] = [];
    const result = await evaluateKuhn((p) => seen.push(p));
    const total = CELLS.length * 5;
    assert.equal(seen[0].done, 0, "a first report before any answer");
    assert.equal(seen[0].answers, 0);
    for (let i = 1; i < seen.length; i++) {
      assert.ok(seen[i].done >= seen[i - 1].done, "trials done never go back");
      assert.ok(seen[i].answers >= seen[i - 1].answers, "answers never go back");
      for (const [k, c] of seen[i].cells.entries()) assert.ok(c.done >= seen[i - 1].cells[k].done);
      assert.equal(
        seen[i].done,
        seen[i].cells.reduce((s, c) => s + c.done, 0),
        "the total is the sum of the cells",
      );
    }
    assert.deepEqual(
      [...new Set(seen.map((p) => p.done))],
      Array.from({ length: total + 1 }, (_, i) => i),
      "one report per finished trial, counting up by one",
    );
    const last = seen.at(-1)!;
    assert.equal(last.done, total);
    assert.equal(last.total, total);
    assert.deepEqual(
      last.cells.map((c) => [c.cell.opponent, c.cell.seat, c.done, c.total]),
      CELLS.map((c) => [c.opponent, c.seat, 5, 5]),
    );
    assert.ok(
      seen.some((p) => p.done === 0 && p.answers > 0),
      "answers are counted while no trial has finished yet",
    );
    const rows = result.trials.reduce((s, t) => s + t.rows.length, 0);
    assert.equal(last.answers, rows, "every answer the trials used was counted");
    const turns = result.trials.flatMap((t) => t.attempts).reduce((s, a) => s + a.turns, 0);
    const invalid = result.trials.flatMap((t) => t.attempts).reduce((s, a) => s + a.invalidActions, 0);
    assert.ok(invalid > 0 && invalid < turns, "the script answers some turns unreadably");
    assert.equal(last.validRate, 1 - invalid / turns);
    assert.ok(Number.isNaN(seen[0].validRate), "no rate before a trial finished");

    const without = await evaluateKuhn();
    assert.deepEqual(without.cells, result.cells, "watching the progress changes no result");
    assert.ok(
      seen.every((p) => Number.isNaN(p.promptReuse)),
      "no reuse share from a policy that does not count prompt tokens",
    );
  });

  it("reports the share of prompt tokens the policy reused during the evaluation, not before it", async () => {
    const seen: EvalProgress[] = [];
    await evaluateKuhn((p) => seen.push(p), reusingPlayer());
    assert.ok(Number.isNaN(seen[0].promptReuse), "nothing fed before the first answer");
    assert.equal(seen.at(-1)!.promptReuse, 0.75);
    const stream = fakeStream(false);
    const bar = new EvalProgressBar({ label: "eval", stream, tickMs: 0 });
    bar.update(seen.at(-1)!);
    bar.finish();
    assert.match(stream.text, /reuse 75%/);
  });
});

/** A stream that keeps what is written, as a terminal (`columns` wide) or not. */
function fakeStream(tty: boolean, columns = 80): NodeJS.WriteStream & { text: string } {
  const s = {
    text: "",
    isTTY: tty,
    columns,
    write(chunk: string) {
      s.text += chunk;
      return true;
    },
  };
  return s as unknown as NodeJS.WriteStream & { text: string };
}

function progressOf(
  doneByCell: number[],
  trials: number,
  answers: number,
  validRate: number,
  promptReuse = Number.NaN,
): EvalProgress {
  const cells: CellProgress[] = CELLS.map((cell, i) => ({ cell, done: doneByCell[i], total: trials }));
  return {
    done: doneByCell.reduce((a, b) => a + b, 0),
    total: trials * CELLS.length,
    cells,
    answers,
    validRate,
    promptReuse,
  };
}

describe("EvalProgressBar", () => {
  it("off a terminal prints plain lines at most every plainEveryMs, and always the last one", () => {
    let now = 0;
    const stream = fakeStream(false);
    const bar = new EvalProgressBar({ label: "eval", stream, plainEveryMs: 1000, tickMs: 0, now: () => now });
    bar.update(progressOf([0, 0, 0], 4, 0, Number.NaN));
    now = 300;
    bar.update(progressOf([0, 0, 0], 4, 6, Number.NaN));
    now = 1200;
    bar.update(progressOf([1, 2, 0], 4, 12, 0.875));
    now = 1500;
    bar.update(progressOf([4, 4, 4], 4, 30, 0.9));
    bar.finish();
    bar.finish();
    const lines = stream.text.split("\n").filter((l) => l.length > 0);
    assert.equal(lines.length, 3, stream.text);
    assert.ok(
      lines[0].startsWith("eval [------------------------] 0/12 00:00 eta --:--  answers 0  "),
      lines[0],
    );
    assert.ok(lines[0].includes("  aggressive first 0/4  "), lines[0]);
    assert.doesNotMatch(lines[0], /valid/, "no valid rate before a trial finished");
    assert.ok(
      lines[1].includes(" 3/12 ") &&
        lines[1].includes("answers 12  valid 87.5%  aggressive first 1/4  aggressive second 2/4"),
      lines[1],
    );
    assert.match(lines[1], /conservative second 0\/4$/);
    assert.match(lines[2], /^eval \[#+\] 12\/12 .*valid 90\.0%.*conservative second 4\/4$/);
  });

  it("on a terminal redraws one line that fits its width, counting the cells that do not fit", () => {
    const stream = fakeStream(true, 120);
    const bar = new EvalProgressBar({ label: "eval", stream, tickMs: 0, now: () => 0 });
    bar.update(progressOf([1, 2, 3], 4, 40, 0.95));
    const drawn = stream.text.split("\r\x1b[2K").filter((l) => l.length > 0);
    assert.equal(drawn.length, 1);
    assert.ok(drawn[0].length <= 119, `${drawn[0].length}: ${drawn[0]}`);
    assert.ok(drawn[0].endsWith("valid 95.0%  aggressive first 1/4  +2 more cells"), drawn[0]);
    bar.finish();
    assert.ok(stream.text.endsWith("\n"), "finish ends the line");
  });

  it("cellMetrics keeps whole cells in order within the room, and nothing for a single cell", () => {
    const cells = progressOf([1, 2, 3], 4, 0, 1).cells;
    assert.deepEqual(cellMetrics(cells, Infinity), {
      "aggressive first": "1/4",
      "aggressive second": "2/4",
      "conservative second": "3/4",
    });
    const two = "  aggressive first 1/4  aggressive second 2/4".length;
    assert.deepEqual(cellMetrics(cells, two + "  +1 more cell".length), {
      "aggressive first": "1/4",
      "aggressive second": "2/4",
      "+1": "more cell",
    });
    assert.deepEqual(cellMetrics(cells, "  +3 more cells".length), { "+3": "more cells" });
    assert.deepEqual(cellMetrics(cells, 5), {});
    assert.deepEqual(cellMetrics(cells.slice(0, 1), Infinity), {});
  });
});

function runMage(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("mage eval: progress on stderr", () => {
  it("--json keeps stdout one JSON object while stderr shows progress; --quiet shows none", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mage-eval-progress-"));
    try {
      const checkpoint = join(dir, "ck");
      await saveRandomCheckpoint(checkpoint, { contextLength: 256, seed: 1, meta: { game: "kuhn" } });
      const args = (file: string) => [
        ...["eval", "--checkpoint", checkpoint, "--opponent", "aggressive", "--seat", "both"],
        ...["--trials", "2", "--attempts", "1", "--max-tokens", "4", "--json", "--out", join(dir, file)],
      ];
      const [shown, quiet] = await Promise.all([
        runMage(args("a.jsonl")),
        runMage([...args("b.jsonl"), "--quiet"]),
      ]);
      assert.equal(shown.code, 0, shown.stderr);
      const parsed = JSON.parse(shown.stdout) as { cells: unknown[]; trialsFile: string };
      assert.equal(parsed.cells.length, 2);
      assert.equal(shown.stdout.trim().split("\n").length, 1, "nothing else on stdout");
      assert.match(shown.stderr, /^eval \[-+\] 0\/4 /m, "a first line before any answer");
      assert.match(shown.stderr, /^eval \[#+\] 4\/4 .*aggressive first 2\/2 {2}aggressive second 2\/2$/m);
      assert.equal(quiet.code, 0, quiet.stderr);
      JSON.parse(quiet.stdout);
      assert.doesNotMatch(quiet.stderr, /eval \[/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
