import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { extractTag } from "../../src/core/tags.js";
import { TrialEnv } from "../../src/tasks/env.js";
import {
  MINESWEEPER_COMPACT_REPLY,
  MinesweeperTask,
  minesweeperCellFormatOfPrompt,
} from "../../src/tasks/minesweeper.js";
import { parseMinesweeperMove } from "../../src/tasks/parse.js";
import { checkBaseKnobs } from "../../src/train/base-knobs.js";
import { parseKnobsArg, taskKnobOptions, validateConfig } from "../../src/train/config.js";
import { answerChoices, buildCorpus, minesNamedInReflections } from "../../src/train/pretrain/corpus.js";

const DIGITS = { knobs: { cells: "digits" as const } };

async function compactEnv(options = {}) {
  const env = new TrialEnv(new MinesweeperTask(options), {
    style: "compact",
    reflectionType: "reflection_only",
  });
  await env.reset(Rng.seeded(3));
  return env;
}

/** The digits board's rows as tokens. */
function boardTokens(text: string): string[][] {
  return text
    .split("\n")
    .filter((l) => /^(?:\d\d|[.1-8*])(?: (?:\d\d|[.1-8*]))+$/.test(l))
    .map((l) => l.split(" "));
}

describe("MineSweeper cells as digits (task.minesweeper.cells)", () => {
  it("parses two digits in the digits format only, with off-board and revealed cells named", () => {
    const open = (r: number, c: number) => r === 1 && c === 1;
    assert.deepEqual(parseMinesweeperMove("<action>34</action>", 6, 6, open, "digits"), {
      ok: true,
      move: { row: 3, col: 4 },
    });
    assert.deepEqual(parseMinesweeperMove("<action>(3, 4)</action>", 6, 6, open, "digits"), {
      ok: true,
      move: { row: 3, col: 4 },
    });
    assert.equal(parseMinesweeperMove("<action>34</action>", 6, 6, open).ok, false, "pair refuses 34");
    assert.deepEqual(parseMinesweeperMove("<action>71</action>", 6, 6, open, "digits"), {
      ok: false,
      reason: "71 is off the board (rows 1-6, columns 1-6)",
    });
    assert.deepEqual(parseMinesweeperMove("<action>11</action>", 6, 6, open, "digits"), {
      ok: false,
      reason: "cell 11 is already revealed",
    });
  });

  it("shows closed cells as their digits and writes moves and the outcome in them", async () => {
    const env = await compactEnv(DIGITS);
    const rules = env.messages("play")[0].content;
    assert.ok(rules.includes(MINESWEEPER_COMPACT_REPLY.digits), rules);
    assert.equal(minesweeperCellFormatOfPrompt(rules), "digits");
    const opening = new MinesweeperTask(DIGITS);
    await opening.reset(Rng.seeded(3));
    const board = boardTokens(opening.compactObservation());
    assert.ok((env.messages("play").at(-1)?.content ?? "").includes(opening.compactObservation()));
    assert.equal(board.length, 6);
    const closed: string[] = [];
    board.forEach((row, r) => {
      assert.equal(row.length, 6);
      row.forEach((t, c) => {
        if (t.length === 2) {
          assert.equal(t, `${r + 1}${c + 1}`, "a closed cell shows its own row and column");
          closed.push(t);
        }
      });
    });
    assert.ok(closed.length > 0 && closed.length < 36);
    const task = new MinesweeperTask(DIGITS);
    await task.reset(Rng.seeded(3));
    const b = task.currentBoard;
    const mine = b.mines.findIndex((m) => m);
    const cell = `${Math.floor(mine / b.cols) + 1}${(mine % b.cols) + 1}`;
    const lost = await task.step(`<action>${cell}</action>`);
    assert.equal(lost.action, cell);
    assert.equal(lost.outcome, `You lost: ${cell} was a mine.`);
  });

  it("leaves the default format's prompts as they were", async () => {
    const env = await compactEnv();
    const rules = env.messages("play")[0].content;
    assert.ok(
      rules.endsWith(
        "Open every safe cell; a mine loses. Rows/cols from 1. Reply one closed cell: <action>(row, col)</action>",
      ),
      rules,
    );
    assert.equal(minesweeperCellFormatOfPrompt(rules), "pair");
    assert.match(env.messages("play").at(-1)?.content ?? "", /^1:[?.1-8]{6}$/m);
  });

  it("refuses digits on a board wider than 9, naming the field", () => {
    assert.throws(() => new MinesweeperTask({ knobs: { cells: "digits", cols: 10 } }), /up to 9x9/);
    assert.throws(
      () => parseKnobsArg("minesweeper", "cells: digits, rows: 12"),
      (e: unknown) =>
        e instanceof UsageError && /--knobs cells: digits name cells of boards up to 9x9/.test(e.message),
    );
    const config = validateConfig({
      game: "minesweeper",
      task: { minesweeper: { cells: "digits", mines: 4 } },
    });
    assert.deepEqual(taskKnobOptions("minesweeper", config.task), { knobs: { mines: 4, cells: "digits" } });
  });

  it("the corpus player plays the same games in either format, answering and reflecting in digits", async () => {
    const corpus = (cells: "pair" | "digits") =>
      buildCorpus({
        game: "minesweeper",
        trials: 24,
        rng: Rng.seeded(5),
        malformedRate: 0.05,
        tacticalRate: 0,
        epsilon: 0.25,
        reflectionMoves: 3,
        heedReflections: true,
        taskOptions: { knobs: { cells } },
      });
    const pair = await corpus("pair");
    const digits = await corpus("digits");
    assert.deepEqual(digits.stats, pair.stats);
    assert.ok(digits.stats.reflections > 0);
    let answers = 0;
    for (const t of digits.trials)
      t.messages
        .filter((m) => m.role === "assistant")
        .forEach((m, i) => {
          if (t.kinds[i] !== "action") return;
          const tag = extractTag(m.content, "action");
          assert.ok(tag.ok && /^[1-6][1-6]$/.test(tag.content), m.content);
          answers++;
        });
    assert.ok(answers > 0);
    const remarks = digits.trials.flatMap((t) => t.messages.filter((m) => m.content.startsWith("<remark>")));
    assert.ok(
      remarks.some((m) => /\b[1-6][1-6] was a mine/.test(m.content)),
      "reflections name cells in digits",
    );
    assert.ok(!remarks.some((m) => /\(\d, \d\)/.test(m.content)));
  });

  it("reads a digits reflection's mine, and gives the unlikelihood term every cell in digits", async () => {
    const named = minesNamedInReflections([
      { role: "assistant", content: "<remark>I opened 12, 35. 35 was a mine. Lost.</remark>" },
      { role: "assistant", content: "<remark>(2, 4) was a mine.</remark>" },
    ]);
    assert.deepEqual([...named].sort(), ["2,4", "3,5"]);
    const env = await compactEnv(DIGITS);
    const choices = answerChoices("minesweeper", env.messages("play"));
    assert.ok(choices);
    assert.equal(choices.legal.length + choices.illegal.length, 36);
    for (const a of [...choices.legal, ...choices.illegal]) assert.match(a, /^<action>[1-6][1-6]<\/action>$/);
  });

  it("a run refuses a base warm-started in another MineSweeper cell format, naming the field", () => {
    const base = (taskKnobs: unknown) => {
      const dir = mkdtempSync(join(tmpdir(), "mage-ms-cells-"));
      writeFileSync(join(dir, "pretrain-report.json"), JSON.stringify({ taskKnobs }));
      return { backend: "torch", torch: { path: dir } };
    };
    const config = (model: unknown, cells?: string) =>
      validateConfig({ game: "minesweeper", model, task: { minesweeper: cells ? { cells } : {} } });
    const digitsBase = base({ minesweeper: { cells: "digits" } });
    assert.throws(
      () => checkBaseKnobs(config(digitsBase)),
      (e: Error) => e instanceof UsageError && /set task\.minesweeper\.cells: digits/.test(e.message),
    );
    checkBaseKnobs(config(digitsBase, "digits"));
    // A warm start that recorded no cells played the default format.
    const pairBase = base({});
    assert.throws(() => checkBaseKnobs(config(pairBase, "digits")), /cells: pair/);
    checkBaseKnobs(config(pairBase));
  });
});
