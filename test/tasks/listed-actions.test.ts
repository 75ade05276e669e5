import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ProtocolError, parseCreateReply } from "../../src/env/protocol.js";
import { categoryMetrics, type TrialOutcome } from "../../src/evaluate/metrics.js";
import { newTrialMemory, recordTurn, startAttempt } from "../../src/tasks/memory.js";
import { buildPrompt } from "../../src/tasks/prompts.js";
import type { StepResult, TaskPromptText } from "../../src/tasks/types.js";
import { stepResult } from "./step-fixture.js";

/**
 * What served ALFWorld adds to the shared prompt builder, protocol reader and measures: a task may
 * ask full prompts to list the current legal actions and to use its own history window, and may
 * put its instances in categories that evaluation breaks success@k down by.
 */

const TEXT: TaskPromptText = {
  rules: "RULES",
  playInstruction: "ANSWER",
  compactRules: "C",
  compactAsk: "?",
  actionWord: "Action",
  legalActionsHeading: "Admissible:",
  history: { turns: 15, playObservations: 15, reflectObservations: 15 },
};

function step(i: number, legal: string[]): StepResult {
  return stepResult(`go to place ${i}`, `You arrive at place ${i}.`, {
    compactObservation: `place ${i}`,
    legalActions: legal,
  });
}

describe("full prompts of tasks that list their legal actions", () => {
  it("list the current state's actions before the instruction and keep the task's 15 observed steps", () => {
    const mem = newTrialMemory("alfworld", null, null);
    startAttempt(mem, "INITIAL", "initial", ["go to a", "look"]);
    let p = buildPrompt(mem, TEXT, "play", { style: "full", reflectionType: "reflection_only" })[0].content;
    assert.ok(p.endsWith("Admissible: [go to a, look]\n\nANSWER"), p);
    for (let i = 1; i <= 17; i++)
      recordTurn(mem, step(i, [`take x ${i}`, "look"]), `<action>go to place ${i}</action>`);
    p = buildPrompt(mem, TEXT, "play", { style: "full", reflectionType: "reflection_only" })[0].content;
    assert.ok(p.includes("Admissible: [take x 17, look]"));
    assert.ok(
      !p.includes("Step 2 - Action:") &&
        p.includes("Step 3 - Action: go to place 3\nObservation:\nYou arrive at place 3."),
    );
    // explicit options still win over the task's window
    const q = buildPrompt(mem, TEXT, "play", {
      style: "full",
      reflectionType: "reflection_only",
      historyLength: 2,
    })[0].content;
    assert.ok(!q.includes("Step 15 - Action:") && q.includes("Step 16 - Action:"));
  });

  it("tasks without a heading get the prompts they always had", () => {
    const { legalActionsHeading: _h, history: _w, ...plain } = TEXT;
    const mem = newTrialMemory("x", null, null);
    startAttempt(mem, "INITIAL", "initial");
    for (let i = 1; i <= 9; i++) recordTurn(mem, step(i, []), "r");
    const p = buildPrompt(mem, plain, "play", { style: "full", reflectionType: "reflection_only" })[0]
      .content;
    assert.ok(!p.includes("Admissible") && !p.includes("Step 2 - Action:") && p.includes("Step 3 - Action:"));
    assert.equal((p.match(/Observation:/g) ?? []).length, 2);
  });
});

describe("categories", () => {
  const trial = (category: string | undefined, won: boolean[]): TrialOutcome => ({
    opponent: "none",
    seat: "none",
    taskId: "t",
    ...(category ? { category } : {}),
    attempts: won.map((w) => ({
      won: w,
      draw: false,
      score: w ? 1 : 0,
      reward: w ? 10 : 0,
      turns: 3,
      invalidActions: 0,
    })),
  });

  it("a category a/b counts in a and in a/b; success@k per group", () => {
    const by = categoryMetrics(
      [
        trial("seen/heat", [false, true]),
        trial("seen/heat", [true]),
        trial("seen/cool", [false, false]),
        trial(undefined, [true]),
      ],
      2,
    );
    assert.deepEqual(Object.keys(by), ["seen", "seen/cool", "seen/heat"]);
    assert.equal(by.seen.trials, 3);
    assert.deepEqual(
      by["seen/heat"].successAt.map((e) => e.mean),
      [0.5, 1],
    );
    assert.deepEqual(
      by["seen/cool"].successAt.map((e) => e.mean),
      [0, 0],
    );
    assert.deepEqual(categoryMetrics([trial(undefined, [true])], 1), {});
  });

  it("the create reply carries the category, the legal-actions heading and the history window", () => {
    const body = {
      session: "s-1",
      fingerprint: "f",
      observation: "o",
      toMove: "agent",
      done: false,
      category: "valid_seen/pick_and_place_simple",
      prompt: {
        rules: "r",
        playInstruction: "p",
        legalActionsHeading: "H:",
        history: { turns: 15, playObservations: 15, reflectObservations: 15 },
      },
    };
    const r = parseCreateReply(body);
    assert.equal(r.category, "valid_seen/pick_and_place_simple");
    assert.equal(r.prompt.legalActionsHeading, "H:");
    assert.deepEqual(r.prompt.history, { turns: 15, playObservations: 15, reflectObservations: 15 });
    assert.equal(
      "history" in parseCreateReply({ ...body, prompt: { rules: "r", playInstruction: "p" } }).prompt,
      false,
    );
    assert.throws(
      () =>
        parseCreateReply({
          ...body,
          prompt: {
            rules: "r",
            playInstruction: "p",
            history: { turns: -1, playObservations: 1, reflectObservations: 1 },
          },
        }),
      (e: unknown) => e instanceof ProtocolError && /turns/.test(e.message),
    );
  });
});
