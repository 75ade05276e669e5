import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import {
  type Cell,
  type Parsed,
  parseKuhnMove,
  parseMinesweeperMove,
  parseSokobanMoves,
  parseTicTacToeMove,
} from "../../src/tasks/parse.js";
import { createTask } from "../../src/tasks/registry.js";
import type { TextTask } from "../../src/tasks/types.js";

/**
 * Structural cases shared by every task: `{A}` is replaced by a valid action of the task and `{B}`
 * by another valid action; the expected result is "A" (parses to A), "B", or null (invalid).
 */
const STRUCTURE: readonly [string, "A" | "B" | null][] = [
  ["<action>{A}</action>", "A"],
  ["  <action>  {A}  </action>  ", "A"],
  ["<ACTION>{A}</ACTION>", "A"],
  ["<Action>{A}</action>", "A"],
  ["<think>hmm</think><action>{A}</action>", "A"],
  ["<think>maybe <action>{B}</action></think><action>{A}</action>", "A"],
  ["<think>x</think><think>y <action>{B}</action></think> <action>{A}</action>", "A"],
  ["<think>unclosed <action>{A}</action>", null],
  ["<action>{A}</action><think>later thoughts", null],
  ["</think><action>{A}</action>", "A"],
  ["reasoning </think> more </think><action>{A}</action>", "A"],
  ["<action>{A}</action><action>{B}</action>", "A"],
  ["<action>{A}</action> and then <action>{B}</action>", "A"],
  ["<action><action>{A}</action>", "A"],
  ["<action>{A}", null],
  ["{A}</action>", null],
  ["{A}", null],
  ["", null],
  ["<action></action>", null],
  ["<action>   </action>", null],
  ["</action>{A}<action>", null],
  ["</action><action>{A}</action>", "A"],
  ["<action>\n{A}\n</action>", "A"],
  ["<think></think>\n\n<action>{A}</action>\n", "A"],
  ["Final answer: <action>{A}</action>.", "A"],
  ["<actions>{A}</actions>", null],
  ["< action >{A}</ action >", null],
  ["<action>{A}</action ", null],
  ["<think><action>{A}</action></think>", null],
  ["<THINK>x</THINK><action>{A}</action>", "A"],
  ["<think>a</think>so <action>{B}</action> wait no <action>{A}</action>", "B"],
  ["<remark>{A}</remark>", null],
];

interface TaskCases<M> {
  parse(response: string): Parsed<M>;
  a: string;
  aMove: M;
  b: string;
  bMove: M;
  /** Task-specific cases: [content of the action tag (or a whole response), expected move or null]. */
  own: readonly [string, M | null][];
}

function check<M>(name: string, c: TaskCases<M>): void {
  describe(`${name} action parsing`, () => {
    it(`handles ${STRUCTURE.length + c.own.length} hand-written cases`, () => {
      assert.ok(STRUCTURE.length + c.own.length >= 50);
      for (const [template, exp] of STRUCTURE) {
        const response = template.replaceAll("{A}", c.a).replaceAll("{B}", c.b);
        const r = c.parse(response);
        const want = exp === "A" ? c.aMove : exp === "B" ? c.bMove : null;
        if (want === null) {
          assert.equal(r.ok, false, `expected invalid: ${JSON.stringify(response)}`);
          assert.ok(!r.ok && r.reason.length > 0);
        } else {
          assert.ok(r.ok, `expected valid: ${JSON.stringify(response)} (${!r.ok ? r.reason : ""})`);
          assert.deepEqual(r.move, want, JSON.stringify(response));
        }
      }
      for (const [text, want] of c.own) {
        const response = text.includes("<action>") ? text : `<action>${text}</action>`;
        const r = c.parse(response);
        if (want === null) {
          assert.equal(r.ok, false, `expected invalid: ${JSON.stringify(response)}`);
          assert.ok(!r.ok && r.reason.length > 0);
        } else {
          assert.ok(r.ok, `expected valid: ${JSON.stringify(response)} (${!r.ok ? r.reason : ""})`);
          assert.deepEqual(r.move, want, JSON.stringify(response));
        }
      }
    });
  });
}

// TicTacToe board for these cases: X on (1, 1) = cell 0, O on (2, 2) = cell 4.
const FREE = [1, 2, 3, 5, 6, 7, 8];
check("TicTacToe", {
  parse: (s) => parseTicTacToeMove(s, FREE),
  a: "(1, 2)",
  aMove: 1,
  b: "(3, 3)",
  bMove: 8,
  own: [
    ["(1, 2)", 1],
    ["(1,2)", 1],
    ["( 3 , 3 )", 8],
    ["[2, 3]", 5],
    ["2,3", 5],
    ["2, 3", 5],
    ["(01, 2)", 1],
    ["(3, 1)", 6],
    ["(1, 3", 2],
    ["(1, 1)", null], // occupied by X
    ["(2, 2)", null], // occupied by O
    ["(0, 1)", null],
    ["(4, 1)", null],
    ["(1, 4)", null],
    ["(3, 0)", null],
    ["(10, 10)", null],
    ["(99999999, 1)", null],
    ["(-1, 2)", null],
    ["(1.5, 2)", null],
    ["(1, 2), (2, 3)", null],
    ["(1 2)", null],
    ["row 1 col 2", null],
    ["(a, b)", null],
    ["1", null],
    ["(1, 2, 3)", null],
    ["((1, 2))", null],
    ["１,２", null],
    ["center", null],
    ["<think>(1,1)</think><action>(2, 1)</action>", 3],
    ["<think>I'll take <action>(1, 1)</action></think> <action>(3, 2)</action>", 7],
  ],
});

check("Kuhn", {
  parse: parseKuhnMove,
  a: "BET",
  aMove: 1,
  b: "PASS",
  bMove: 0,
  own: [
    ["PASS", 0],
    ["pass", 0],
    ["Pass", 0],
    ["pAsS", 0],
    ["BET", 1],
    ["bet", 1],
    ["Bet", 1],
    [" bet ", 1],
    ["bEt", 1],
    ["\tPASS\n", 0],
    ["CHECK", null],
    ["FOLD", null],
    ["CALL", null],
    ["RAISE", null],
    ["PASS BET", null],
    ["PASS.", null],
    ["0", null],
    ["1", null],
    ["BETS", null],
    ["P", null],
    ["B", null],
    ["passs", null],
    ["pass!", null],
    ['"BET"', null],
    ["bet\nbet", null],
    ["PA SS", null],
    ["<think>I could BET</think><action>PASS</action>", 0],
    ["<think><action>BET</action></think><action>pass</action>", 0],
  ],
});

check("Sokoban", {
  parse: (s) => parseSokobanMoves(s, 3),
  a: "up, left",
  aMove: ["up", "left"],
  b: "down",
  bMove: ["down"],
  own: [
    ["up", ["up"]],
    ["up, left, left", ["up", "left", "left"]],
    ["UP,LEFT", ["up", "left"]],
    ["up left", ["up", "left"]],
    ["up,left,down", ["up", "left", "down"]],
    [" down , right ", ["down", "right"]],
    ["Left", ["left"]],
    ["up,,left", ["up", "left"]],
    ["right,\nright", ["right", "right"]],
    ["up, left, left, down", null],
    ["north", null],
    ["upp", null],
    ["up-left", null],
    ["go up", null],
    ["u", null],
    ["1", null],
    ["up;left", null],
    ["[up, left]", null],
    ["still", null],
    [",", null],
    ["up, left, (1,2)", null],
    ["<think>down down</think><action>right</action>", ["right"]],
  ],
});

// MineSweeper 6×6 where the first row is open.
check("MineSweeper", {
  parse: (s) => parseMinesweeperMove(s, 6, 6, (r) => r === 1),
  a: "(2, 3)",
  aMove: { row: 2, col: 3 } as Cell,
  b: "(6, 6)",
  bMove: { row: 6, col: 6 } as Cell,
  own: [
    ["(2, 3)", { row: 2, col: 3 }],
    ["(6,6)", { row: 6, col: 6 }],
    ["[4, 5]", { row: 4, col: 5 }],
    ["3,3", { row: 3, col: 3 }],
    ["( 5 , 1 )", { row: 5, col: 1 }],
    ["(1, 1)", null], // already open
    ["(1, 6)", null],
    ["(0, 3)", null],
    ["(7, 1)", null],
    ["(2, 7)", null],
    ["(2, 0)", null],
    ["(2 3)", null],
    ["(2, 3), (3, 3)", null],
    ["flag (2, 3)", null],
    ["(x, y)", null],
    ["2", null],
    ["(-2, 3)", null],
    ["<think>(1,1)?</think><action>(4, 4)</action>", { row: 4, col: 4 }],
  ],
});

/** Random strings and mutations of valid responses: the parser and the task's step never throw. */
function fuzz(
  name: string,
  valid: readonly string[],
  expectInvalidReward: number,
  fresh?: (task: TextTask, rng: Rng) => string,
): void {
  describe(`${name} on random and mutated strings`, () => {
    it("never throws on 10,000 strings (parser and task step)", async () => {
      const rng = Rng.seeded(`fuzz-${name}`);
      const task: TextTask = await createTask(
        name,
        name === "tictactoe" || name === "kuhn" ? { opponent: "random" } : {},
      );
      await task.reset(Rng.seeded(`fuzz-task-${name}`));
      const pieces = [
        "<think>",
        "</think>",
        "<action>",
        "</action>",
        "(",
        ")",
        ",",
        " ",
        "\n",
        "1",
        "2",
        "3",
        "7",
        "up",
        "left",
        "BET",
        "pass",
        "\u0000",
        "\ud83d",
        "é",
        "<",
        ">",
        "/",
      ];
      const alphabet = "<>/()[],. \n\t0123456789abcdefghijklmnopqrstuvwxyzABTPS-_!?";
      let nValid = 0;
      for (let i = 0; i < 10_000; i++) {
        let s: string;
        if (i % 2 === 0) {
          s = "";
          const n = rng.int(16);
          for (let j = 0; j < n; j++) s += rng.pick(pieces);
        } else if (i % 4 === 1) {
          // A valid response after random reasoning text (no tags in it).
          let noise = "";
          for (let j = rng.int(20); j > 0; j--)
            noise += alphabet[rng.int(alphabet.length)].replace(/[<>]/, "");
          s = `<think>${noise}</think>${fresh ? fresh(task, rng) : rng.pick(valid)}`;
        } else {
          const chars = [...(fresh && rng.int(2) === 0 ? fresh(task, rng) : rng.pick(valid))];
          const edits = 1 + rng.int(4);
          for (let e = 0; e < edits; e++) {
            const at = rng.int(chars.length + 1);
            const op = rng.int(3);
            if (op === 0) chars.splice(at, 0, alphabet[rng.int(alphabet.length)]);
            else if (op === 1 && chars.length > 0) chars.splice(Math.min(at, chars.length - 1), 1);
            else if (chars.length > 0)
              chars[Math.min(at, chars.length - 1)] = alphabet[rng.int(alphabet.length)];
          }
          s = chars.join("");
        }
        const r = await task.step(s);
        assert.equal(typeof r.valid, "boolean");
        if (!r.valid) {
          assert.equal(r.reward, expectInvalidReward);
          assert.equal(r.done, false);
          assert.ok(typeof r.invalidReason === "string" && r.invalidReason.length > 0);
        } else nValid++;
        assert.ok(Number.isFinite(r.reward));
        if (task.done) task.restart();
      }
      // The mutations keep some responses valid, so both branches were exercised.
      assert.ok(nValid > 500 && nValid < 9_500, `valid responses: ${nValid}`);
    });
  });
}

/** A response naming a random empty cell of the task's current board ('.' in TicTacToe, '?' in MineSweeper). */
function freeCellResponse(empty: string) {
  return (task: TextTask, rng: Rng): string => {
    const rows = task
      .observation()
      .split("\n")
      .map((l) => l.replace(/^Row \d+: /, "").split(" "));
    const cells: string[] = [];
    rows.forEach((r, i) => {
      r.forEach((c, j) => {
        if (c === empty) cells.push(`(${i + 1}, ${j + 1})`);
      });
    });
    return `<action>${cells.length > 0 ? rng.pick(cells) : "(1, 1)"}</action>`;
  };
}

fuzz(
  "tictactoe",
  ["<action>(1, 2)</action>", "<think>(2,2)</think><action>(3, 3)</action>", "<action>(2,1)</action>"],
  0,
  freeCellResponse("."),
);
fuzz("kuhn", ["<action>BET</action>", "<think>hmm</think><action>PASS</action>", "<action>pass</action>"], 0);
fuzz(
  "sokoban",
  [
    "<action>up, left</action>",
    "<think>x</think><action>down, right, right</action>",
    "<action>left</action>",
  ],
  -0.1,
);
fuzz(
  "minesweeper",
  [
    "<action>(2, 3)</action>",
    "<think>a</think><action>(6,6)</action>",
    "<action>(4, 1)</action>",
    "<action>(1, 5)</action>",
    "<action>(5, 2)</action>",
  ],
  -1,
  freeCellResponse("?"),
);
