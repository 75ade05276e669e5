import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { answerChoices, buildCorpus } from "../../src/train/pretrain/corpus.js";
import { splitWeights } from "../../src/train/pretrain/torch-sft.js";
import {
  cachedTokenizer,
  trialUnlikelyTokens,
  unlikelyAtDivergence,
} from "../../src/train/pretrain/unlikely.js";

/** One token per character: enough to see where answers part. */
const chars = (text: string) => [...text].map((c) => c.codePointAt(0)!);

describe("unlikely tokens of the torch warm start", () => {
  it("pushes down the token that starts an illegal answer, never one a legal answer shares", () => {
    const cell = (r: number, c: number) => chars(`(${r}, ${c})`);
    // Row 1 is full, row 2 has (2, 1) free, row 3 is free; the answer is (2, 1).
    const legal = [cell(2, 1), cell(3, 1), cell(3, 2), cell(3, 3)];
    const illegal = [cell(1, 1), cell(1, 2), cell(1, 3), cell(2, 2), cell(2, 3)];
    const at = unlikelyAtDivergence(cell(2, 1), legal, illegal);
    assert.deepEqual([...at.keys()].sort(), [1, 4]);
    assert.deepEqual(at.get(1), chars("1"), "the full row's digit at the row position");
    assert.deepEqual(at.get(4)?.sort(), chars("23"), "the taken columns of the answer's row");
    // An answer in row 3: row 2 is not full, so its digit is left alone; no column of row 3 is taken.
    assert.deepEqual([...unlikelyAtDivergence(cell(3, 3), legal, illegal)], [[1, chars("1")]]);
    // An illegal answer that is a prefix of the answer (or the other way round) tells nothing.
    assert.equal(unlikelyAtDivergence(chars("ab"), [], [chars("a"), chars("abc")]).size, 0);
  });

  it("finds them in a TicTacToe corpus trial at the scored answer tokens", async () => {
    const corpus = await buildCorpus({ game: "tictactoe", trials: 4, rng: Rng.seeded(3), malformedRate: 0 });
    const renders: string[][] = [];
    const tokenize = cachedTokenizer(async (texts) => {
      renders.push(texts);
      return texts.map(chars);
    });
    for (const trial of corpus.trials) {
      // A "rendering": each message's characters, the answers' spans where they stand.
      const ids: number[] = [];
      const spans: { start: number; end: number }[] = [];
      for (const m of trial.messages) {
        if (m.role === "assistant") spans.push({ start: ids.length, end: ids.length + m.content.length });
        ids.push(...chars(m.content), 0);
      }
      const at = await trialUnlikelyTokens("tictactoe", trial, ids, spans, tokenize);
      let k = 0;
      let expected = 0;
      for (let m = 0; m < trial.messages.length; m++) {
        if (trial.messages[m].role !== "assistant") continue;
        const span = spans[k];
        if (trial.kinds[k++] !== "action") continue;
        const choices = answerChoices("tictactoe", trial.messages.slice(0, m));
        if (choices === null) continue; // the empty board: nothing is illegal
        const [row, col] = [span.start + 9, span.start + 12]; // "<action>(r, c)": r at 9, c at 12
        const answer = trial.messages[m].content;
        const takenInRow = choices.illegal.filter((a) => a[9] === answer[9]).map((a) => a[12]);
        const fullRows = ["1", "2", "3"].filter((r) => !choices.legal.some((a) => a[9] === r));
        assert.deepEqual((at.get(col) ?? []).map((t) => String.fromCodePoint(t)).sort(), takenInRow.sort());
        assert.deepEqual((at.get(row) ?? []).map((t) => String.fromCodePoint(t)).sort(), fullRows);
        expected += (takenInRow.length > 0 ? 1 : 0) + (fullRows.length > 0 ? 1 : 0);
      }
      assert.equal(at.size, expected, "no position outside the play answers");
    }
    assert.ok(new Set(renders.flat()).size === renders.flat().length, "each answer text tokenized once");
    assert.ok(renders.flat().length <= 9);
  });

  it("in MineSweeper, names the revealed cells illegal and the closed ones legal", async () => {
    const corpus = await buildCorpus({
      game: "minesweeper",
      trials: 3,
      rng: Rng.seeded(5),
      malformedRate: 0,
    });
    let seen = 0;
    for (const trial of corpus.trials) {
      let k = 0;
      for (let m = 0; m < trial.messages.length; m++) {
        if (trial.messages[m].role !== "assistant" || trial.kinds[k++] !== "action") continue;
        const choices = answerChoices("minesweeper", trial.messages.slice(0, m));
        assert.ok(choices, "an opened start region: some cells are always revealed");
        const board = trial.messages[m - 1].content
          .split("\n")
          .filter((l) => /^\d+:\S+$/.test(l))
          .map((l) => l.split(":")[1]);
        const closed = board.flatMap((row, r) =>
          [...row].flatMap((x, c) => (x === "?" ? [`(${r + 1}, ${c + 1})`] : [])),
        );
        const tag = (a: string) => /\((\d+), (\d+)\)/.exec(a)![0];
        assert.deepEqual(choices.legal.map(tag).sort(), closed.sort());
        assert.equal(choices.legal.length + choices.illegal.length, board.length * board[0].length);
        assert.ok(choices.legal.includes(trial.messages[m].content), "the answer given is legal");
        seen++;
      }
    }
    assert.ok(seen > 3);
  });

  it("sends them as (scored-token index, token id) pairs", () => {
    const { weights, unlikely } = splitWeights({
      sequences: [Int32Array.of(1, 2, 3, 4), Int32Array.of(5, 6, 7)],
      lossMask: [Uint8Array.of(0, 4, 4, 0), Uint8Array.of(0, 1, 1)],
      unlikely: [
        new Map([
          [2, [9, 8]],
          [3, [7]], // not scored: dropped
        ]),
        new Map([[2, [6]]]),
      ],
    });
    assert.deepEqual([...weights], [4, 4, 1, 1]);
    assert.deepEqual([...unlikely.index], [1, 1, 3]);
    assert.deepEqual([...unlikely.token], [9, 8, 6]);
  });
});
