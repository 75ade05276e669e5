import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import type { ChatMessage, GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { runTrials } from "../../src/rollout/runner.js";
import { TrialEnv } from "../../src/tasks/env.js";
import type { TrialMemory } from "../../src/tasks/memory.js";
import { buildPrompt } from "../../src/tasks/prompts.js";
import { TicTacToeTask } from "../../src/tasks/tictactoe.js";
import type { PromptStyle, ReflectionType } from "../../src/tasks/types.js";
import { prefixChains } from "../../src/train/batch.js";
import { stepResult } from "./step-fixture.js";

/**
 * What each memory mode (LaMer's `reflection_type`) shows of an earlier attempt, in both prompt
 * styles: attempt 1 plays two distinctive invalid moves and reflects with a marker, then attempt 2
 * begins.
 */
async function secondAttempt(style: PromptStyle, reflectionType: ReflectionType): Promise<TrialEnv> {
  const env = new TrialEnv(new TicTacToeTask({ opponent: "preferred:1", seat: "first" }), {
    style,
    reflectionType,
  });
  await env.reset(Rng.seeded(0));
  await env.play("<action>(7, 7)</action>");
  await env.play("<action>(8, 8)</action>");
  if (env.reflectCallExpected) env.reflect("<remark>MARKER-REFLECTION cell 22 was open</remark>");
  env.restart();
  return env;
}

const allText = (msgs: readonly ChatMessage[]) => msgs.map((m) => m.content).join("\n");
const showsTurns = (text: string) => text.includes("(7, 7)") && text.includes("(8, 8)");

describe("memory modes in compact prompts", () => {
  it("reflection_only: each earlier attempt is one outcome line and its reflection, none of its turns", async () => {
    const env = await secondAttempt("compact", "reflection_only");
    const msgs = env.messages("play");
    assert.deepEqual(
      msgs.map((m) => m.role),
      ["system", "user"],
    );
    const lead = msgs[1].content;
    assert.match(lead, /^Attempt 1: .+\nYour reflection: MARKER-REFLECTION cell 22 was open\nAttempt 2\./);
    assert.equal(showsTurns(allText(msgs)), false, "no turn of attempt 1 is replayed");
  });

  it("reflection_only: the reflect call sees the attempt that just ended, after the earlier notes", async () => {
    const env = await secondAttempt("compact", "reflection_only");
    await env.play("<action>(9, 9)</action>");
    const msgs = env.messages("reflect");
    const text = allText(msgs);
    assert.match(text, /MARKER-REFLECTION/);
    assert.match(text, /\(9, 9\)/);
    assert.equal(showsTurns(text), false);
    assert.match(msgs[msgs.length - 1].content, /<remark><\/remark>/);
  });

  it("history_only: every earlier turn, no reflection and no reflect call", async () => {
    const env = await secondAttempt("compact", "history_only");
    assert.equal(env.reflectCallExpected, false);
    const text = allText(env.messages("play"));
    assert.equal(showsTurns(text), true);
    assert.doesNotMatch(text, /MARKER-REFLECTION|Reflect:/);
    assert.throws(() => env.messages("reflect"), /history_only/);
  });

  it("history_and_reflection: every earlier turn and the reflect exchange", async () => {
    const env = await secondAttempt("compact", "history_and_reflection");
    const msgs = env.messages("play");
    const text = allText(msgs);
    assert.equal(showsTurns(text), true);
    assert.ok(msgs.some((m) => m.role === "assistant" && m.content.includes("MARKER-REFLECTION")));
  });

  it("an invalid reflection is shown as missing in reflection_only", async () => {
    const env = new TrialEnv(new TicTacToeTask({ opponent: "preferred:1", seat: "first" }), {
      style: "compact",
      reflectionType: "reflection_only",
    });
    await env.reset(Rng.seeded(0));
    await env.play("<action>(7, 7)</action>");
    env.reflect("no tags at all");
    env.restart();
    assert.match(env.messages("play")[1].content, /Your reflection: \(no reflection was written\)/);
  });

  it("drop-oldest leaves out the oldest notes and keeps the true attempt numbers", async () => {
    const env = await secondAttempt("compact", "reflection_only");
    await env.play("<action>(9, 9)</action>");
    env.reflect("<remark>SECOND-NOTE</remark>");
    env.restart();
    const { buildPrompt } = await import("../../src/tasks/prompts.js");
    const msgs = buildPrompt(env.memory, env.task.promptText(), "play", { ...env.options, dropOldest: 1 });
    const text = allText(msgs);
    assert.doesNotMatch(text, /MARKER-REFLECTION/);
    assert.match(text, /Attempt 2: .+\nYour reflection: SECOND-NOTE\nAttempt 3\./);
  });
});

describe("the end of an attempt in compact prompts", () => {
  /** A served-style attempt: no feedback lines, everything in the observations. */
  function servedAttempt(lastFeedback: string): TrialMemory {
    const turn = (action: string, obs: string, done: boolean) => ({
      ...stepResult(
        action,
        obs,
        done ? { done, compactFeedback: lastFeedback, compactOutcome: "Not done." } : {},
      ),
      response: `<action>${action}</action>`,
    });
    return {
      task: "served",
      opponent: null,
      seat: null,
      attempts: [
        {
          index: 0,
          initialObservation: "START-ROOM",
          compactInitialObservation: "START-ROOM",
          turns: [
            turn("move south", "MIDDLE-ROOM", false),
            turn("move west", "END-ROOM with a closed door", true),
          ],
        },
      ],
    };
  }

  for (const reflectionType of ["reflection_only", "history_and_reflection"] as const) {
    it(`${reflectionType}: the reflect call sees the state the last action left when the task writes no feedback`, async () => {
      const text = new TicTacToeTask({ opponent: "preferred:1", seat: "first" }).promptText();
      const msgs = buildPrompt(servedAttempt(""), text, "reflect", { style: "compact", reflectionType });
      const lead = msgs[msgs.length - 1].content;
      assert.match(lead, /^END-ROOM with a closed door\nNot done\.\nReflect:/);
    });
  }

  it("a task's feedback line stays the whole account of the last turn", async () => {
    const text = new TicTacToeTask({ opponent: "preferred:1", seat: "first" }).promptText();
    const msgs = buildPrompt(servedAttempt("FEEDBACK-LINE"), text, "reflect", {
      style: "compact",
      reflectionType: "reflection_only",
    });
    const lead = msgs[msgs.length - 1].content;
    assert.match(lead, /^FEEDBACK-LINE\nNot done\./);
    assert.doesNotMatch(lead, /END-ROOM/);
  });

  it("history_only: the next attempt opens with the state the last one ended in", async () => {
    const text = new TicTacToeTask({ opponent: "preferred:1", seat: "first" }).promptText();
    const memory = servedAttempt("");
    memory.attempts.push({
      index: 1,
      initialObservation: "START-ROOM",
      compactInitialObservation: "START-ROOM",
      turns: [],
    });
    const msgs = buildPrompt(memory, text, "play", { style: "compact", reflectionType: "history_only" });
    assert.match(msgs[msgs.length - 1].content, /^END-ROOM with a closed door\nNot done\.\nAttempt 2\./);
  });
});

describe("memory modes in full prompts", () => {
  it("history_only makes no reflect call in the full style either", async () => {
    const env = await secondAttempt("full", "history_only");
    assert.equal(env.reflectCallExpected, false);
    assert.throws(() => env.messages("reflect"));
    assert.equal(showsTurns(env.messages("play")[0].content), true);
  });
});

/** Answers every call with an off-board move or a marked remark. */
class OffBoardPolicy implements Policy {
  readonly name = "off-board";
  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return requests.map((r) => {
      const text = r.trial?.phase === "reflect" ? "<remark>NOTE</remark>" : "<action>(9, 9)</action>";
      return { text, tokenIds: [1, 2, 3], logprobs: [-1, -1, -1], finishReason: "stop", promptTokens: 0 };
    });
  }
}

describe("memory modes in the trial runner", () => {
  async function trialRows(reflection: ReflectionType) {
    const [record] = await runTrials(
      [{ trialId: 1, groupId: 1, taskSeed: 3, opponent: null, seat: null }],
      () => new TicTacToeTask({ opponent: "preferred:1", seat: "first" }),
      new OffBoardPolicy(),
      Rng.seeded(0),
      {
        attempts: 3,
        maxTurns: 3,
        reflection,
        promptStyle: "compact",
        hindsight: false,
        sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 16, stop: [] },
        maxBatch: 8,
        concurrency: 1,
      },
    );
    return record.rows;
  }

  it("reflection_only trials are one prefix chain per attempt; the history modes one per trial", async () => {
    const only = await trialRows("reflection_only");
    assert.equal(only.filter((r) => r.phase === "reflect").length, 2);
    assert.equal(prefixChains(only).length, 3);
    assert.equal(prefixChains(await trialRows("history_and_reflection")).length, 1);
    const history = await trialRows("history_only");
    assert.equal(history.filter((r) => r.phase === "reflect").length, 0);
    assert.equal(prefixChains(history).length, 1);
  });
});
