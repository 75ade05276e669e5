import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { COMMANDS } from "../../src/cli/commands/index.js";
import { command } from "../../src/cli/commands/replay.js";
import { UsageError } from "../../src/core/errors.js";
import { countBackAndForth, countLosingMoveRepeats, walksBackAndForth } from "../../src/replay/outcomes.js";
import { readTrialLog, resolveTrialLog, type TrialRecord } from "../../src/replay/read.js";
import { renderTrial, trialLine } from "../../src/replay/render.js";
import { runCommand } from "../cli/run-command.js";
import { trial } from "./fixtures.js";

function writeLog(lines: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), "mage-replay-"));
  const file = join(dir, "transcripts.jsonl");
  writeFileSync(file, `${lines.join("\n")}\n`);
  return dir;
}

const runCli = (argv: string[]) => runCommand(command, argv);

describe("replay", () => {
  it("reads a trial log, keeping line numbers and skipping a partial last line", () => {
    const dir = writeLog([
      JSON.stringify(trial(0, ["lost", "won"])),
      "",
      JSON.stringify(trial(1, ["won"])),
      '{"trialId": 2, "att',
    ]);
    const log = readTrialLog(resolveTrialLog(dir));
    assert.deepEqual(
      log.records.map((r) => [r.line, r.trialId]),
      [
        [1, 0],
        [3, 1],
      ],
    );
    assert.deepEqual(log.skipped, [4]);
    assert.throws(() => resolveTrialLog(join(dir, "missing")), UsageError);
  });

  it("renders each attempt with its answers, invalid turns, outcome and the reflection before the next", () => {
    const [r] = readTrialLog(resolveTrialLog(writeLog([JSON.stringify(trial(0, ["lost", "won"]))]))).records;
    assert.equal(trialLine(r), "line 1: iteration 3 trial 0, vs mcts:100, agent first: lost -1, won +1");
    const text = renderTrial(r);
    const a1 = text.indexOf("── attempt 1: lost, score -1, reward -10, 2 turns, 1 invalid ──");
    const reflection = text.indexOf("reflection: attempt 1: block the diagonal");
    const a2 = text.indexOf("── attempt 2: won, score +1, reward +10");
    assert.ok(a1 > 0 && a1 < reflection && reflection < a2, text);
    assert.match(text, /1\. > <action>\(9, 9\)<\/action>\n +invalid: cell \(9, 9\) is off the board/);
    assert.match(text, /\(1, 1\) — the opponent played \(2, 2\)\n +X \. \.\n +\. O \./);
    assert.match(text, /outcome: You won\./);
    assert.ok(!text.includes("reflection: attempt 2"), "the last attempt has no reflection");
    assert.match(renderTrial(r, { compact: true }), /X 12 13/);
    const noMemory = { ...r, memory: undefined } as TrialRecord;
    assert.match(renderTrial(noMemory), /keeps outcomes only/);
  });

  it("counts the attempts after a lost one that play its losing move again", () => {
    type Memory = { attempts: { turns: { action: string; valid: boolean }[] }[] };
    const varied = trial(3, ["lost", "lost", "lost", "won"]);
    const moves = ["(1, 1)", "(2, 2)", "(1, 1)", "(3, 3)"];
    (varied.memory as Memory).attempts.forEach((a, k) => {
      a.turns[1].action = moves[k];
    });
    const records = readTrialLog(
      resolveTrialLog(writeLog([JSON.stringify(varied), JSON.stringify(trial(4, ["won"]))])),
    ).records;
    // Attempt 2 avoids (1, 1); attempt 3 plays it again; attempt 4 plays a new cell. The invalid
    // turn of every attempt (no action) counts for nothing.
    assert.deepEqual(countLosingMoveRepeats(records), { after: 3, repeated: 1 });
    const noPlay = records.map((r) => ({ ...r, memory: undefined }) as TrialRecord);
    assert.equal(countLosingMoveRepeats(noPlay), null, "no logged play, no count");
  });

  it("counts the attempts that walk back and forth (A B A B among their accepted moves)", () => {
    assert.equal(walksBackAndForth(["move west", "move east", "move west", "move east"]), true);
    assert.equal(
      walksBackAndForth(["open door", "move west", "move east", "move west", "move east", "x"]),
      true,
    );
    assert.equal(
      walksBackAndForth(["move west", "move east", "move west", "move north"]),
      false,
      "once back, then on",
    );
    assert.equal(
      walksBackAndForth(["wait", "wait", "wait", "wait"]),
      false,
      "one move repeated is not a walk between two",
    );
    assert.equal(walksBackAndForth(["a", "b", "a"]), false);
    type Memory = { attempts: { turns: { action: string; valid: boolean }[] }[] };
    const t = trial(5, ["lost", "won"]);
    const turns = ["move west", "move east", "move west", "bad", "move east"];
    (t.memory as Memory).attempts[0].turns = turns.map((action) => ({ action, valid: action !== "bad" }));
    const records = readTrialLog(resolveTrialLog(writeLog([JSON.stringify(t)]))).records;
    // The invalid answer between them does not break the walk: accepted moves only.
    assert.deepEqual(countBackAndForth(records), { attempts: 2, looping: 1 });
    const noPlay = records.map((r) => ({ ...r, memory: undefined }) as TrialRecord);
    assert.equal(countBackAndForth(noPlay), null);
  });

  it("lists by default and replays the trials a selection matches", async () => {
    assert.equal((await COMMANDS.replay.load()).name, "replay");
    const dir = writeLog([
      JSON.stringify(trial(0, ["lost", "won"])),
      JSON.stringify(trial(1, ["lost", "lost"], "random")),
      JSON.stringify(trial(2, ["won"])),
    ]);
    const listed = await runCli([dir]);
    assert.equal(listed.code, 0);
    assert.equal(listed.out.split("\n").filter((l) => l.startsWith("line ")).length, 3);
    assert.match(listed.out, /--line N/);

    const won = await runCli([dir, "--outcome", "won", "--opponent", "mcts:100"]);
    assert.equal(won.code, 0);
    assert.equal((won.out.match(/^tictactoe line /gm) ?? []).length, 2, won.out);
    assert.ok(!won.out.includes("vs random"));

    const one = await runCli([dir, "--line", "2", "--list"]);
    assert.equal(one.out.trim(), "line 2: iteration 3 trial 1, vs random, agent first: lost -1, lost -1");

    const limited = await runCli([dir, "--iteration", "3", "--limit", "1"]);
    assert.match(limited.out, /… 2 more/);

    const tactics = await runCli([dir, "--tactics"]);
    assert.match(
      tactics.out,
      /^3 TicTacToe trial\(s\): immediate wins taken 0\/0 \(n\/a\), threats blocked 0\/0/,
    );

    // Trials 0-2 end: lost then won; lost, lost; won. Attempt 1: 1 won, 2 lost; attempt 2: 1 won, 1 lost.
    const outcomes = await runCli([dir, "--outcomes"]);
    const rows = outcomes.out.split("\n");
    assert.equal(rows[0], "3 trial(s); 2 won (66.7%), by attempt:");
    assert.match(rows[2], /^1\s+3\s+1 \(33\.3%\)\s+0 \(0\.0%\)\s+2 \(66\.7%\)\s+0 \(0\.0%\)\s+-0\.333$/);
    assert.match(rows[3], /^2\s+2\s+1 \(50\.0%\)\s+0 \(0\.0%\)\s+1 \(50\.0%\)\s+0 \(0\.0%\)\s+\+0\.000$/);
    // Every fixture attempt's valid move is (1, 1): both attempts after a lost one play it again.
    assert.equal(
      rows[4],
      "attempts after a lost one: 2; 2 (100.0%) play again the last move of an earlier lost attempt (MineSweeper: the mine)",
    );
    // One valid move an attempt: none walks back and forth.
    assert.equal(
      rows[5],
      "attempts that walk back and forth (the same two moves twice in a row, A B A B): 0 of 5 (0.0%)",
    );
    assert.equal(rows.length, 6);
    const randomOnly = await runCli([dir, "--outcomes", "--opponent", "random"]);
    assert.match(randomOnly.out, /^1 trial\(s\); 0 won \(0\.0%\)/);

    const none = await runCli([dir, "--trial", "9"]);
    assert.equal(none.code, 1);
    assert.match(none.out, /no trial .* matches \(3 trial\(s\) in the file\)/);
    await assert.rejects(runCli([dir, "--outcome", "tie"]), /--outcome must be one of/);
    await assert.rejects(runCli([dir, "--line", "x"]), /--line must be a non-negative integer/);
  });
});
