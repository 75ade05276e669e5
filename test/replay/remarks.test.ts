import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command } from "../../src/cli/commands/replay.js";
import { readTrialLog, resolveTrialLog } from "../../src/replay/read.js";
import { collectRemarks, remarkStats, spreadEvenly } from "../../src/replay/remarks.js";
import { runCommand } from "../cli/run-command.js";
import { trial } from "./fixtures.js";

type Reflection = Record<string, unknown>;

/** A fixture trial whose reflections are replaced by `reflections` (one per attempt but the last). */
function trialWith(id: number, outcomes: ("won" | "lost")[], reflections: Reflection[]) {
  const t = trial(id, outcomes) as { memory: { attempts: Record<string, unknown>[] } };
  t.memory.attempts.forEach((a, k) => {
    if (k < reflections.length) a.reflection = reflections[k];
  });
  return t;
}

const informative = (text: string) => ({
  valid: true,
  text,
  informative: true,
  response: `<remark>${text}</remark>`,
});
const vague = (text: string) => ({
  valid: true,
  text,
  informative: false,
  response: `<remark>${text}</remark>`,
});
const echo = {
  valid: false,
  text: "",
  failure: "echo",
  invalidReason: "the remark repeats an action",
  informative: false,
  response: "<remark>move south</remark>",
};

function runDir(root: string, name: string, file: string, trials: unknown[]): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, file), `${trials.map((t) => JSON.stringify(t)).join("\n")}\n`);
  return dir;
}

describe("replay --remarks", () => {
  const root = mkdtempSync(join(tmpdir(), "mage-remarks-"));
  // Seed 0: trial 0 lost, lost, won (an informative remark, then a vague one); trial 1 lost, lost
  // (an echo, then an informative one). Seed 1: trial 0 lost, won after an informative remark.
  const s0 = runDir(root, "mage-s0", "eval-transcripts.jsonl", [
    trialWith(0, ["lost", "lost", "won"], [informative("coin not in the kitchen"), vague("try again")]),
    trialWith(1, ["lost", "lost"], [echo, informative("east door of the pantry untried")]),
  ]);
  const s1 = runDir(root, "mage-s1", "eval-transcripts.jsonl", [
    trialWith(0, ["lost", "won"], [informative("coin not in the garden")]),
  ]);

  it("collects each reflection with what came before and after it", () => {
    const log = readTrialLog(resolveTrialLog(s0, true));
    const rows = collectRemarks(log.records, "s0");
    assert.deepEqual(
      rows.map((r) => [r.trialId, r.attempt, r.valid, r.informative, r.nextWon, r.text]),
      [
        [0, 1, true, true, false, "coin not in the kitchen"],
        [0, 2, true, false, true, "try again"],
        [1, 1, false, false, false, "<remark>move south</remark>"],
        [1, 2, true, true, null, "east door of the pantry untried"],
      ],
    );
    const stats = remarkStats(rows);
    assert.equal(stats.remarks, 4);
    assert.equal(stats.wellFormed, 3);
    assert.equal(stats.judged, 3);
    assert.equal(stats.informative, 2);
    assert.deepEqual(stats.failures, { echo: 1 });
    // The last informative remark has no next attempt; the vague one was followed by a win.
    assert.deepEqual(stats.afterInformative, { followed: 1, won: 0 });
    assert.deepEqual(stats.afterOther, { followed: 2, won: 1 });
  });

  it("says whether the next attempt opened with the same moves as the one the remark follows", () => {
    // Three attempts: the second opens as the first ("(1, 1)"), the third with another move.
    const t = trial(0, ["lost", "lost", "won"]) as {
      memory: { attempts: { turns: { action: string; valid: boolean }[] }[] };
    };
    t.memory.attempts[2].turns[1].action = "(3, 3)";
    // An attempt with no accepted action cannot be compared.
    const u = trial(1, ["lost", "won"]) as typeof t;
    for (const turn of u.memory.attempts[1].turns) turn.valid = false;
    const log = readTrialLog(resolveTrialLog(runDir(root, "openings", "transcripts.jsonl", [t, u])));
    const rows = collectRemarks(log.records, "x");
    assert.deepEqual(
      rows.map((r) => r.sameOpening),
      [true, false, null],
    );
    assert.deepEqual(remarkStats(rows).openings, { compared: 2, same: 1 });
  });

  it("reports no rule when the task judged none", () => {
    const rows = collectRemarks(
      readTrialLog(resolveTrialLog(runDir(root, "plain", "transcripts.jsonl", [trial(0, ["lost", "won"])])))
        .records,
      "x",
    );
    assert.equal(remarkStats(rows).judged, null);
  });

  it("spreads quotes evenly and deterministically", () => {
    const xs = Array.from({ length: 10 }, (_, i) => i);
    assert.deepEqual(spreadEvenly(xs, 4), [0, 2, 5, 7]);
    assert.deepEqual(spreadEvenly(xs, 20), xs);
  });

  it("counts over several run directories' evaluation transcripts and quotes them", async () => {
    const { out, code } = await runCommand(command, [s0, s1, "--eval", "--remarks", "--limit", "3"]);
    assert.equal(code, 0);
    const lines = out.trim().split("\n");
    assert.equal(
      lines[0],
      "3 trial(s), 5 remark(s): 4 well-formed (80.0%); invalid: echo 1; informative 3 of 4 well-formed (75.0%), 60.0% of all",
    );
    assert.equal(
      lines[1],
      "the next attempt won: after an informative remark 1 of 2 (50.0%); after any other 1 of 2 (50.0%)",
    );
    // Every attempt of the fixture opens with "(1, 1)"; 4 of the 5 remarks have a next attempt.
    assert.equal(
      lines[2],
      "the next attempt opened with the same 3 moves as the one before: 4 of 4 (100.0%)",
    );
    assert.equal(lines[3], "3 quoted, spread evenly over the remarks:");
    assert.equal(lines.length, 7);
    assert.match(
      lines[4],
      /mage-s0\/eval-transcripts\.jsonl:1 trial 0, after attempt 1 \(lost → lost\), informative: "coin not in the kitchen"$/,
    );
    // Five remarks, three quoted: the first, the second and the fourth (indices 0, 1, 3).
    assert.match(lines[5], /trial 0, after attempt 2 \(lost → won\), uninformative: "try again"$/);
    assert.match(
      lines[6],
      /mage-s0\/eval-transcripts\.jsonl:2 trial 1, after attempt 2 \(lost, no next attempt\), informative: "east door of the pantry untried"$/,
    );
  });

  it("refuses several files for a mode that prints trials, and names a missing eval log", async () => {
    await assert.rejects(
      runCommand(command, [s0, s1, "--eval"]),
      /several with --outcomes, --tactics or --remarks/,
    );
    const bare = join(root, "bare");
    mkdirSync(bare);
    await assert.rejects(
      runCommand(command, [bare, "--eval", "--remarks"]),
      /holds no eval-transcripts\.jsonl/,
    );
  });
});
