import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { formatChecks } from "../../src/cli/commands/pretrain.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { extractTag } from "../../src/core/tags.js";
import { countTactics, pairCellText } from "../../src/evaluate/tictactoe-tactics.js";
import { taskKnobsText, warmStartKnobs } from "../../src/experiment/spec.js";
import { warmStartArgs, warmStartKey } from "../../src/experiment/warm-start.js";
import { readCheckpointMeta } from "../../src/model/checkpoint.js";
import { TrialEnv } from "../../src/tasks/env.js";
import { parseTicTacToeMove } from "../../src/tasks/parse.js";
import { cellFormatOfPrompt, TicTacToeTask, tictactoeCellFormat } from "../../src/tasks/tictactoe.js";
import { checkBaseKnobs } from "../../src/train/base-knobs.js";
import { parseKnobsArg, taskKnobOptions, validateConfig } from "../../src/train/config.js";
import { answerChoices, buildCorpus } from "../../src/train/pretrain/corpus.js";
import { openingStates, type PretrainEvaluation } from "../../src/train/pretrain/evaluate.js";
import { recordedKnobs, runPretrain } from "../../src/train/pretrain/run.js";
import { resolveTorchKnobs } from "../../src/train/pretrain/torch-run.js";

const ALL = [0, 1, 2, 3, 4, 5, 6, 7, 8];
const DIGITS = { knobs: { cells: "digits" } };
const POOL = { opponents: [{ spec: "random" }] };

/** A TicTacToe config with a training pool and the given sections. */
function tictactoeConfig(raw: Record<string, unknown> = {}) {
  return validateConfig({ game: "tictactoe", population: POOL, ...raw });
}

describe("TicTacToe cells as digits (task.tictactoe.cells)", () => {
  it("parses two digits only in the digits format, and (row, col) in both", () => {
    assert.deepEqual(parseTicTacToeMove("<action>23</action>", ALL, "digits"), { ok: true, move: 5 });
    assert.deepEqual(parseTicTacToeMove("<action>(2, 3)</action>", ALL, "digits"), { ok: true, move: 5 });
    // The reference's format keeps refusing "23", so runs of the default format score as before.
    assert.equal(parseTicTacToeMove("<action>23</action>", ALL).ok, false);
    const taken = parseTicTacToeMove("<action>11</action>", [1, 2], "digits");
    assert.deepEqual(taken, { ok: false, reason: "cell 11 is already taken" });
    const bad = parseTicTacToeMove("<action>34</action>", ALL, "digits");
    assert.deepEqual(bad, { ok: false, reason: "34 is off the board (rows 1-3, columns 1-3)" });
    const word = parseTicTacToeMove("<action>centre</action>", ALL, "digits");
    assert.ok(!word.ok && /two digits/.test(word.reason), JSON.stringify(word));
  });

  it("writes the rules, the agent's moves and the opponent's replies in the task's format", async () => {
    const task = new TicTacToeTask({ ...DIGITS, opponent: "random" });
    const env = new TrialEnv(task, { style: "compact", reflectionType: "reflection_only" });
    await env.reset(Rng.seeded(1));
    const rules = env
      .messages("play")
      .map((m) => m.content)
      .join("\n");
    assert.equal(cellFormatOfPrompt(rules), "digits");
    const step = await env.play("<action>22</action>");
    assert.ok(step.valid);
    const feedback = env.messages("play").at(-1)!.content;
    assert.match(feedback, /Opp: [1-3][1-3]\./);
    assert.doesNotMatch(feedback, /\(\d, \d\)/);
    const pair = new TicTacToeTask({ opponent: "random" });
    const pairEnv = new TrialEnv(pair, { style: "compact", reflectionType: "reflection_only" });
    await pairEnv.reset(Rng.seeded(1));
    assert.equal(cellFormatOfPrompt(pairEnv.messages("play")[0].content), "pair");
    assert.throws(() => tictactoeCellFormat({ cells: "hex" }), /cells must be one of pair, digits/);
    assert.throws(() => tictactoeCellFormat({ boxes: 2 }), /unknown tictactoe knob/);
  });

  it("is a config field that reaches the task only when set", () => {
    const unset = tictactoeConfig();
    assert.deepEqual(taskKnobOptions("tictactoe", unset.task), {});
    const set = tictactoeConfig({ task: { tictactoe: { cells: "digits" } } });
    assert.deepEqual(taskKnobOptions("tictactoe", set.task), DIGITS);
    assert.throws(
      () => tictactoeConfig({ task: { tictactoe: { cells: "letters" } } }),
      (e: Error) => e instanceof UsageError && /task\.tictactoe\.cells/.test(e.message),
    );
    assert.equal(taskKnobsText(set), '{cells: "digits"}');
    assert.equal(taskKnobsText(unset), null);
  });

  it("the corpus player answers, and names cells in reflections, in the prompt's format", async () => {
    const corpus = await buildCorpus({
      game: "tictactoe",
      trials: 24,
      rng: Rng.seeded(4),
      malformedRate: 0,
      taskOptions: DIGITS,
    });
    let answers = 0;
    let remarks = 0;
    for (const t of corpus.trials) {
      t.messages.forEach((m, i) => {
        if (m.role !== "assistant") return;
        const action = extractTag(m.content, "action");
        if (action.ok) {
          answers++;
          assert.match(action.content, /^[1-3][1-3]$/);
          const choices = answerChoices("tictactoe", t.messages.slice(0, i));
          if (choices) {
            assert.ok(choices.legal.includes(m.content), `${m.content} is one of the legal choices`);
            for (const a of [...choices.legal, ...choices.illegal])
              assert.match(a, /^<action>[1-3][1-3]<\/action>$/);
            assert.equal(choices.legal.length + choices.illegal.length, 9);
          }
        }
        const remark = extractTag(m.content, "remark");
        if (remark.ok) {
          remarks++;
          assert.doesNotMatch(remark.content, /\(\d, \d\)/);
        }
      });
    }
    assert.ok(answers > 60 && remarks > 10, `${answers} answers, ${remarks} remarks`);
    // Opponents' cells are read off the digits feedback: some remark names the opponent's last move.
    const named = corpus.trials.some((t) =>
      t.messages.some((m) => /Opp last played [1-3][1-3]\./.test(m.content)),
    );
    assert.ok(named);
  });

  it("scores the empty board's candidates in the digits format", async () => {
    const [digits] = await openingStates("tictactoe", DIGITS);
    assert.deepEqual(digits.candidates, ["11", "12", "13", "21", "22", "23", "31", "32", "33"]);
    assert.equal(cellFormatOfPrompt(digits.messages.map((m) => m.content).join("\n")), "digits");
    const [pair] = await openingStates("tictactoe");
    assert.equal(pair.candidates[5], "(2, 3)");
  });

  it("the checks warn when the scored first answers are not the ones the model gives", () => {
    const evaluation = (mass: number) =>
      ({
        trials: 1,
        playAnswers: 1,
        validPlayAnswers: 1,
        reflections: 1,
        validRemarks: 1,
        targets: [],
        invalidReasons: {},
        entropy: {
          states: [{ seat: "first", state: "", probs: {}, mass, bits: 2 }],
          bySeat: {},
          sampledBySeat: {},
        },
      }) as unknown as PretrainEvaluation;
    const low = formatChecks(evaluation(1.2e-11), 0).join("\n");
    assert.match(low, /warning: at 1 opening\(s\) the scored answers hold only 1\.2e-11/);
    assert.doesNotMatch(formatChecks(evaluation(0.97), 0).join("\n"), /warning/);
  });

  it("counts one-move tactics whichever format a move was logged in", () => {
    assert.equal(pairCellText("23"), "(2, 3)");
    assert.equal(pairCellText("(2, 3)"), "(2, 3)");
    const memory = (action: string) => ({
      task: "tictactoe",
      attempts: [
        {
          initialObservation: "X X .\nO O .\n. . .",
          turns: [{ valid: true, action, observation: "X X X\nO O .\n. . ." }],
        },
      ],
    });
    for (const action of ["13", "(1, 3)"]) {
      const n = countTactics([memory(action) as never]);
      assert.deepEqual([n.winChances, n.winsTaken], [1, 1], action);
    }
  });

  it("a real model's warm start defaults to digits; a grid passes its config's format and keys by it", () => {
    assert.deepEqual(resolveTorchKnobs("tictactoe"), { tictactoe: { cells: "digits" } });
    assert.deepEqual(resolveTorchKnobs("tictactoe", { tictactoe: { cells: "pair" } }), {
      tictactoe: { cells: "pair" },
    });
    assert.deepEqual(resolveTorchKnobs("kuhn"), {});
    assert.throws(() => resolveTorchKnobs("kuhn", { tictactoe: { cells: "pair" } }), /do not apply to kuhn/);
    const torch = { backend: "torch", torch: { path: "models/base" } };
    const unset = tictactoeConfig({ model: torch });
    const digits = tictactoeConfig({ model: torch, task: { tictactoe: { cells: "digits" } } });
    assert.equal(warmStartKnobs(unset), '{cells: "pair"}');
    assert.equal(warmStartKnobs(digits), '{cells: "digits"}');
    assert.notEqual(
      warmStartKey(unset, {}, warmStartKnobs(unset)),
      warmStartKey(digits, {}, warmStartKnobs(digits)),
    );
    const args = warmStartArgs("tictactoe", "models/base", 0, "out", {}, warmStartKnobs(digits));
    assert.deepEqual(args.slice(args.indexOf("--knobs"), args.indexOf("--knobs") + 2), [
      "--knobs",
      '{cells: "digits"}',
    ]);
    // MineSweeper's warm start defaults to digits too, and a grid passes its config's format.
    assert.deepEqual(resolveTorchKnobs("minesweeper"), { minesweeper: { cells: "digits" } });
    const mines = (task: object) => validateConfig({ game: "minesweeper", model: torch, task });
    assert.equal(warmStartKnobs(mines({})), '{cells: "pair"}');
    assert.equal(
      warmStartKnobs(mines({ minesweeper: { rows: 5, cells: "digits" } })),
      '{rows: 5, cells: "digits"}',
    );
    const kuhn = validateConfig({ game: "kuhn", model: torch, population: { opponents: [{ spec: "cfr" }] } });
    assert.equal(warmStartKnobs(kuhn), null);
    assert.equal(warmStartKey(kuhn, {}, null), warmStartKey(kuhn, {}));
  });

  it("a torch run refuses a base warm-started in another cell format, naming the field", () => {
    const dir = mkdtempSync(join(tmpdir(), "mage-cells-"));
    writeFileSync(
      join(dir, "pretrain-report.json"),
      JSON.stringify({ taskKnobs: { tictactoe: { cells: "digits" } } }),
    );
    const model = { backend: "torch", torch: { path: dir } };
    const unset = tictactoeConfig({ model });
    assert.throws(
      () => checkBaseKnobs(unset),
      (e: Error) => e instanceof UsageError && /set task\.tictactoe\.cells: digits/.test(e.message),
    );
    checkBaseKnobs(tictactoeConfig({ model, task: { tictactoe: { cells: "digits" } } }));
  });

  it("the embedded warm start records its cells, and a run from it checks them", async () => {
    assert.deepEqual(recordedKnobs("tictactoe"), { tictactoe: { cells: "pair" } });
    assert.deepEqual(recordedKnobs("kuhn", { tictactoe: { cells: "digits" } }), {});
    assert.deepEqual(recordedKnobs("minesweeper", { minesweeper: { mines: 4 } }), {
      minesweeper: { mines: 4 },
    });
    const out = join(mkdtempSync(join(tmpdir(), "mage-cells-")), "base");
    const report = await runPretrain({
      game: "tictactoe",
      out,
      steps: 1,
      corpusTrials: 4,
      batchTokens: 512,
      taskKnobs: parseKnobsArg("tictactoe", "cells: digits"),
      skipEvaluation: true,
      progress: null,
    });
    assert.deepEqual(report.taskKnobs, { tictactoe: { cells: "digits" } });
    const meta = await readCheckpointMeta(out);
    assert.deepEqual(meta.taskKnobs, { tictactoe: { cells: "digits" } });
    const model = { checkpoint: out };
    assert.throws(
      () => checkBaseKnobs(tictactoeConfig({ model })),
      (e: Error) => e instanceof UsageError && /set task\.tictactoe\.cells: digits/.test(e.message),
    );
    checkBaseKnobs(tictactoeConfig({ model, task: { tictactoe: { cells: "digits" } } }));
    // Without the report, a checkpoint's meta.json is read.
    rmSync(join(out, "pretrain-report.json"));
    assert.throws(() => checkBaseKnobs(tictactoeConfig({ model })), /cells: digits/);
  });
});
