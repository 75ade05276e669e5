import assert from "node:assert/strict";
import { PassThrough, Readable } from "node:stream";
import { describe, it } from "node:test";
import { humanShorthand, runPlay } from "../../src/cli/commands/play.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { TicTacToeTask } from "../../src/tasks/tictactoe.js";

async function play(argv: string[], lines: string[]) {
  const output = new PassThrough();
  let text = "";
  output.on("data", (d: Buffer) => {
    text += d.toString();
  });
  const summary = await runPlay(argv, { input: Readable.from(lines.map((l) => `${l}\n`)), output });
  return { summary, text };
}

describe("mage play", () => {
  it("plays TicTacToe from stdin lines, bare or tagged, showing the agent's observation", async () => {
    // preferred:3 answers (1,2), (2,1), ...: X takes the diagonal and wins on the third move.
    const { summary, text } = await play(
      ["--game", "tictactoe", "--opponent", "preferred:3", "--seed", "5", "--seat", "first"],
      ["(1, 1)", "<think>centre</think><action>(2, 2)</action>", "(3, 3)"],
    );
    assert.deepEqual(summary.attempts, [{ won: true, score: 1, reward: 10, turns: 3 }]);
    const task = new TicTacToeTask({ opponent: "preferred:3" });
    await task.reset(Rng.seeded(5));
    assert.ok(text.includes(task.observation()));
    assert.ok(text.includes(task.promptText().rules));
    assert.match(text, /X O \.\nO X \.\n\. \. X/);
    assert.match(text, /You won\./);
  });

  it("replays the same start for several attempts and takes reflections", async () => {
    const { summary, text } = await play(
      ["--game", "kuhn", "--opponent", "always-bet", "--seed", "3", "--seat", "second", "--attempts", "2"],
      ["nonsense", "pass", "call it next time", "BET"],
    );
    assert.equal(summary.attempts.length, 2);
    assert.match(text, /Invalid \(turn used\)/);
    assert.match(text, /Attempt 2 of 2: the same start again/);
    const starts = [...text.matchAll(/Your card: \w+ \| Actions: Player 0 \(opponent\): BET\n/g)].map(
      (m) => m[0],
    );
    assert.ok(starts.length >= 2 && starts.every((s) => s === starts[0]));
    assert.equal(summary.attempts[0].score, -1); // folded to the bet
    assert.equal(Math.abs(summary.attempts[1].score), 2); // called: showdown for 2
  });

  it("plays the puzzles", async () => {
    const s = await play(
      ["--game", "sokoban", "--seed", "1", "--attempts", "1"],
      ["up", "left, left", "quit"],
    );
    assert.match(s.text, /0: # # # # # #/);
    assert.equal(s.summary.attempts[0].turns, 2);
    // Letters are spelled out for people: the same level played as "u" then "l l" moves the same.
    const short = await play(["--game", "sokoban", "--seed", "1", "--attempts", "1"], ["u", "l l", "quit"]);
    assert.equal(short.text, s.text);
    const m = await play(["--game", "minesweeper", "--seed", "1", "--attempts", "1"], ["(1, 1)", "quit"]);
    assert.match(m.text, /Row 1: /);
  });

  it("spells out Sokoban letters for people and leaves everything else alone", () => {
    assert.equal(humanShorthand("sokoban", "u l"), "up, left");
    assert.equal(humanShorthand("sokoban", "UDR"), "up, down, right");
    assert.equal(humanShorthand("sokoban", "u, r"), "up, right");
    assert.equal(humanShorthand("sokoban", "up, left"), "up, left");
    assert.equal(humanShorthand("sokoban", "ux"), "ux");
    assert.equal(humanShorthand("minesweeper", "(1, 2)"), "(1, 2)");
    assert.equal(humanShorthand("kuhn", "r"), "r");
  });

  it("rejects unknown games, opponents and flags with a usage error listing the choices", async () => {
    for (const [argv, pattern] of [
      [["--game", "chess"], /valid choices: tictactoe, kuhn, sokoban, minesweeper/],
      [["--game", "kuhn", "--opponent", "shark"], /valid specs: .*conservative/],
      [["--game", "tictactoe", "--seat", "middle"], /valid choices: first, second/],
      [["--game", "sokoban", "--opponent", "random"], /single-player/],
      [["--game", "kuhn", "--colour", "red"], /usage: mage play/],
      [[], /--game is required/],
    ] as const) {
      await assert.rejects(
        play([...argv], []),
        (err: unknown) => err instanceof UsageError && err.exitCode === 2 && pattern.test(err.message),
        argv.join(" "),
      );
    }
  });
});
