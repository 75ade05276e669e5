import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DIVERSITY_FORMAT } from "../../src/core/file-formats.js";
import {
  type DiversityResult,
  entropyBits,
  INVALID_SYMBOL,
  measureDiversity,
} from "../../src/evaluate/diversity.js";
import { ScriptedPolicy } from "../../src/policy/scripted.js";
import type { ChatMessage } from "../../src/policy/types.js";

const action = (a: string) => `<action>${a}</action>`;

/** The card the agent is shown (compact Kuhn prompts say "Card: Q."). */
function cardInPrompt(messages: readonly ChatMessage[]): string {
  for (const m of messages) {
    const hit = /Card: ([JQK])\./.exec(m.content);
    if (hit) return hit[1];
  }
  throw new Error("no card in the prompt");
}

const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

describe("entropyBits", () => {
  it("is the plug-in Shannon entropy in bits", () => {
    assert.equal(entropyBits([7]), 0);
    assert.equal(entropyBits([5, 5]), 1);
    assert.equal(entropyBits([1, 1, 1, 1]), 2);
    assert.ok(Math.abs(entropyBits([3, 1]) - (-(0.75 * Math.log2(0.75)) - 0.25 * Math.log2(0.25))) < 1e-12);
    assert.equal(entropyBits([]), 0);
    assert.equal(entropyBits([0, 4]), 0);
  });
});

describe("measureDiversity on Kuhn poker", () => {
  it("a policy that always gives the same answer has 0 bits in every cell", async () => {
    // BET ends the agent's part of any Kuhn hand, so its sequence is always the single "BET".
    const policy = new ScriptedPolicy(() => action("BET"));
    const r = await measureDiversity(policy, { game: "kuhn", samples: 40, seed: 1 });
    assert.equal(r.format, DIVERSITY_FORMAT);
    assert.equal(r.opponent, "cfr");
    assert.deepEqual(
      r.cells.map((c) => `${c.seat}/${c.card}`),
      ["first/J", "first/Q", "first/K", "second/J", "second/Q", "second/K"],
    );
    for (const c of r.cells) {
      assert.equal(c.samples, 40);
      assert.equal(sum(c.distribution), 40);
      assert.deepEqual(c.distribution, { BET: 40 }, `${c.seat}/${c.card}`);
      assert.equal(c.entropyBits, 0);
      assert.equal(c.firstActionEntropyBits, 0);
    }
    assert.equal(r.summary.meanEntropyBits, 0);
    assert.deepEqual(r.summary.bySeat, { first: 0, second: 0 });
  });

  it("a constant PASS has 0 bits of first action; its sequences vary only where the opponent bets", async () => {
    const r = await measureDiversity(new ScriptedPolicy(() => action("PASS")), {
      game: "kuhn",
      samples: 40,
      seed: 1,
    });
    for (const c of r.cells) {
      assert.equal(c.firstActionEntropyBits, 0);
      for (const seq of Object.keys(c.distribution)) assert.match(seq, /^PASS(,PASS)?$/);
      // The second player acts once per hand; only the first player meets a bet after its check.
      if (c.seat === "second") assert.equal(c.entropyBits, 0);
    }
    // cfr bets the King after a check, so a first-seat Jack sometimes has to answer a bet.
    const firstJ = r.cells.find((c) => c.seat === "first" && c.card === "J")!;
    assert.ok(firstJ.entropyBits > 0 && (firstJ.distribution["PASS,PASS"] ?? 0) > 0);
  });

  it("a policy choosing PASS or BET uniformly has about 1 bit of first-action entropy", async () => {
    const policy = new ScriptedPolicy((_m, ctx) => action(ctx.rng.pick(["PASS", "BET"])));
    const r = await measureDiversity(policy, { game: "kuhn", samples: 200, seed: 2 });
    for (const c of r.cells) {
      assert.equal(sum(c.distribution), 200);
      assert.ok(
        c.firstActionEntropyBits > 0.95 && c.firstActionEntropyBits <= 1,
        `${c.seat}/${c.card}: ${c.firstActionEntropyBits}`,
      );
      // The first action is a function of the sequence, so the sequence has at least as much entropy.
      assert.ok(c.entropyBits >= c.firstActionEntropyBits - 1e-12);
      if (c.seat === "second") {
        // The second player acts exactly once in a Kuhn hand: the sequence is the first action.
        assert.deepEqual(Object.keys(c.distribution).sort(), ["BET", "PASS"]);
        assert.ok(c.entropyBits > 0.95 && c.entropyBits <= 1, `${c.seat}/${c.card}: ${c.entropyBits}`);
      }
    }
    // First seat: a PASS that cfr answers with a bet leads to a second decision, so more than 1 bit somewhere.
    assert.ok(r.cells.some((c) => c.seat === "first" && c.entropyBits > 1.05));
    const firsts = r.cells.filter((c) => c.seat === "first").map((c) => c.entropyBits);
    assert.ok(Math.abs(r.summary.bySeat.first! - firsts.reduce((a, b) => a + b) / 3) < 1e-12);
    assert.ok(
      Math.abs(r.summary.meanEntropyBits - r.cells.reduce((a, c) => a + c.entropyBits, 0) / 6) < 1e-12,
    );
  });

  it("every game of a cell deals the agent the cell's card", async () => {
    const seen = new Map<string, Set<string>>();
    // Bets only the King, so each cell's first actions reveal the card the agent was shown.
    const policy = new ScriptedPolicy((messages) => {
      const card = cardInPrompt(messages);
      const seat = messages[0].content.includes("You act first") ? "first" : "second";
      const key = `${seat}/${card}`;
      if (!seen.has(key)) seen.set(key, new Set());
      seen.get(key)!.add(messages.map((m) => m.content).join("|"));
      return action(card === "K" ? "BET" : "PASS");
    });
    const r = await measureDiversity(policy, { game: "kuhn", samples: 30, seed: 3 });
    for (const c of r.cells) {
      assert.deepEqual(c.firstActionDistribution, c.card === "K" ? { BET: 30 } : { PASS: 30 });
    }
    // The prompts show each seat every card (and no others).
    assert.deepEqual([...seen.keys()].sort(), [
      "first/J",
      "first/K",
      "first/Q",
      "second/J",
      "second/K",
      "second/Q",
    ]);
  });

  it("the same seed gives identical JSON; another seed gives other games", async () => {
    const make = () => new ScriptedPolicy((_m, ctx) => action(ctx.rng.pick(["PASS", "BET", "RAISE"])));
    const run = (seed: number) =>
      measureDiversity(make(), { game: "kuhn", samples: 25, seed, policyLabel: "uniform" });
    const a = JSON.stringify(await run(5));
    const b = JSON.stringify(await run(5));
    const c = JSON.stringify(await run(6));
    assert.equal(a, b);
    assert.notEqual(a, c);
    const parsed = JSON.parse(a) as DiversityResult;
    assert.equal(parsed.policy, "uniform");
    assert.equal(parsed.seed, 5);
    assert.deepEqual(parsed.sampling, { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] });
    // "RAISE" is no Kuhn move: it is recorded as the invalid symbol.
    assert.ok(parsed.cells.some((x) => Object.keys(x.distribution).some((k) => k.includes(INVALID_SYMBOL))));
  });
});

describe("measureDiversity on TicTacToe", () => {
  it("one cell from the empty board; a constant answer is 0 bits, two openings about 1 bit", async () => {
    const constant = await measureDiversity(new ScriptedPolicy(() => action("(2, 2)")), {
      game: "tictactoe",
      samples: 20,
      seed: 1,
    });
    assert.equal(constant.opponent, "mcts:100");
    assert.equal(constant.cells.length, 1);
    const c0 = constant.cells[0];
    assert.equal(c0.seat, "first");
    assert.equal(c0.card, null);
    assert.equal(c0.entropyBits, 0);
    assert.equal(constant.summary.firstMoveEntropyBits, 0);
    // The centre, then the same (now taken) cell again and again until the turns run out.
    const [seq] = Object.keys(c0.distribution);
    assert.ok(seq.startsWith(`(2, 2),${INVALID_SYMBOL}`), seq);
    assert.deepEqual(constant.summary.bySeat, { first: 0 });

    const boards: string[] = [];
    const two = await measureDiversity(
      new ScriptedPolicy((messages, ctx) => {
        if (messages.length === 2) boards.push(messages[1].content);
        return action(ctx.rng.pick(["(1, 1)", "(3, 3)"]));
      }),
      { game: "tictactoe", samples: 200, seed: 1, opponent: "random" },
    );
    const c = two.cells[0];
    assert.equal(two.opponent, "random");
    assert.ok(
      c.firstActionEntropyBits > 0.95 && c.firstActionEntropyBits <= 1,
      String(c.firstActionEntropyBits),
    );
    assert.equal(two.summary.firstMoveEntropyBits, c.firstActionEntropyBits);
    assert.ok(c.entropyBits > c.firstActionEntropyBits, "later moves add variety");
    // Every game's first prompt is the same empty board.
    assert.equal(boards.length, 200);
    assert.equal(new Set(boards).size, 1);
  });
});
