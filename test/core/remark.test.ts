import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  commandKey,
  echoedCommand,
  judgeRemark,
  observedTerms,
  STOP_WORDS,
  termIndex,
  wordStem,
} from "../../src/core/remark.js";
import { Rng } from "../../src/core/rng.js";

const COIN_COMMANDS = [
  "move south",
  "move north",
  "open door to east",
  "take coin",
  "look around",
  "inventory",
];

describe("judgeRemark: valid", () => {
  it("a normal remark passes", () => {
    const j = judgeRemark("<think>hm</think><remark>The coin was not in the kitchen.</remark>", {
      commands: COIN_COMMANDS,
    });
    assert.deepEqual(j, { valid: true, text: "The coin was not in the kitchen." });
  });

  it("an action tag inside the remark is invalid (the remarks of the coin grid's account)", () => {
    const j = judgeRemark("<remark><action>move south</action></remark>", { commands: COIN_COMMANDS });
    assert.equal(j.valid, false);
    assert.equal(j.failure, "markup");
    assert.equal(j.text, "");
  });

  it("a remark that repeats a played or legal command verbatim is an echo", () => {
    for (const text of [
      "move south",
      "Move South.",
      "  move   south!  ",
      '"move south"',
      "`take coin`",
      "Look around...",
      "move south. move north.",
      "move south, open door to east",
      "inventory; inventory",
    ]) {
      const j = judgeRemark(`<remark>${text}</remark>`, { commands: COIN_COMMANDS });
      assert.equal(j.valid, false, text);
      assert.equal(j.failure, "echo", text);
      assert.match(j.invalidReason ?? "", /only repeats action commands/, text);
    }
  });

  it("a remark that holds a command among other words is not an echo", () => {
    for (const text of [
      "I should move south first.",
      "move south was a dead end",
      "Next time: take coin in the pantry.",
      "Failed. I found nothing useful.",
    ]) {
      assert.equal(judgeRemark(`<remark>${text}</remark>`, { commands: COIN_COMMANDS }).valid, true, text);
    }
  });

  it("board cells and Kuhn moves echo in any spacing or case", () => {
    assert.equal(judgeRemark("<remark>(2,3)</remark>", { commands: ["(2, 3)", "(1, 1)"] }).failure, "echo");
    assert.equal(
      judgeRemark("<remark>(2, 3). (1, 1).</remark>", { commands: ["(2, 3)", "(1, 1)"] }).failure,
      "echo",
    );
    assert.equal(judgeRemark("<remark>bet</remark>", { commands: ["PASS", "BET"] }).failure, "echo");
    assert.equal(judgeRemark("<remark>BET BET</remark>", { commands: ["PASS", "BET"] }).failure, "echo");
    assert.equal(
      judgeRemark("<remark>Had K, bet, opp passed.</remark>", { commands: ["PASS", "BET"] }).valid,
      true,
    );
    assert.equal(judgeRemark("<remark>23</remark>", { commands: ["23", "11"] }).failure, "echo");
    assert.equal(
      judgeRemark("<remark>up, left.</remark>", { commands: ["up, left", "down"] }).failure,
      "echo",
    );
  });

  it("without commands there is no echo check", () => {
    assert.equal(judgeRemark("<remark>move south</remark>").valid, true);
    assert.equal(judgeRemark("<remark>move south</remark>", { commands: [""] }).valid, true);
  });

  it("commandKey and echoedCommand", () => {
    assert.equal(commandKey("  Open Door to East. "), "opendoortoeast");
    assert.equal(commandKey("(2, 3)"), "(2,3)");
    assert.equal(echoedCommand("Open door to east!", COIN_COMMANDS), "open door to east");
    assert.equal(echoedCommand("open the door to east", COIN_COMMANDS), null);
  });
});

describe("judgeRemark: informative", () => {
  it("is judged only with a rule, false for an invalid remark, and never throws", () => {
    const yes = () => true;
    assert.equal(judgeRemark("<remark>x</remark>").informative, undefined);
    assert.equal(judgeRemark("<remark>x</remark>", { informative: yes }).informative, true);
    assert.equal(judgeRemark("no tag", { informative: yes }).informative, false);
    assert.equal(
      judgeRemark("<remark>move south</remark>", { commands: COIN_COMMANDS, informative: yes }).informative,
      false,
    );
    const throws = () => {
      throw new Error("boom");
    };
    assert.deepEqual(judgeRemark("<remark>ok then</remark>", { informative: throws }), {
      valid: true,
      text: "ok then",
      informative: false,
    });
  });

  it("observedTerms: words of 4+ letters and adjacent pairs the observations hold and the rules do not", () => {
    const observed = termIndex(["You open the cabinet 3. In it, you see a mug 1 and two glasses."]);
    const rules = termIndex([
      "Your task is to: put a clean mug in coffeemachine. For example `open fridge 1`.",
    ]);
    assert.deepEqual(observedTerms("cabinet 3 held a mug 1", observed, rules), [
      "cabinet",
      "cabinet 3",
      "mug 1",
    ]);
    assert.deepEqual(observedTerms("the glass was there", observed, rules), ["glass"], "plural/singular");
    assert.deepEqual(observedTerms("open the fridge", observed, rules), [], "not observed");
    assert.deepEqual(observedTerms("cabinet", observed, rules, new Set(["cabinet"])), [], "ignored word");
    assert.ok(STOP_WORDS.has("nothing") && STOP_WORDS.has("south"));
    assert.equal(wordStem("drawers"), "drawer");
    assert.equal(wordStem("boxes"), "box");
    assert.equal(wordStem("glass"), "glass");
  });

  it("never throws on random strings", () => {
    const rng = Rng.seeded("remark-fuzz");
    const pieces = [
      "<remark>",
      "</remark>",
      "<action>",
      "</action>",
      "<think>",
      "</think>",
      "move south",
      " ",
      ".",
      "😀",
      "\ud800",
      "<",
      ">",
      "a",
      "(1, 2)",
    ];
    for (let i = 0; i < 3000; i++) {
      let s = "";
      for (let j = rng.int(10); j > 0; j--) s += rng.pick(pieces);
      const j = judgeRemark(s, { commands: COIN_COMMANDS, informative: (t) => t.length > 3 });
      assert.equal(typeof j.valid, "boolean");
      if (!j.valid) assert.ok(j.invalidReason && j.failure && j.text === "" && j.informative === false);
    }
  });
});
