/**
 * `TorchServeBackend` over a scripted stand-in for the worker's client (no Python): how it shares
 * render round trips, turns worker samples into generations, and stops. The real worker behind it
 * is serve-torch.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import type { TorchLearner } from "../../src/learner/torch/learner.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { ShutdownError } from "../../src/serve/batcher.js";
import { ApiError, type GenJob } from "../../src/serve/protocol.js";
import { firstStopString, TorchServeBackend } from "../../src/serve/torch-backend.js";

interface Sample {
  tokens: number[];
  logprobs: number[];
  text: string;
  finish: "stop" | "length";
}

/** A learner whose `generate` answers only when `release` is called; every call is logged. */
function scriptedLearner(samples: (prompt: readonly number[]) => Sample) {
  const log: string[] = [];
  let release: () => void = () => {};
  const learner = {
    info: {
      architecture: "Scripted",
      vocabSize: 100,
      contextLength: 64,
      parameters: 1,
      trainableParameters: 0,
      eosTokenIds: [2],
    },
    options: { torch: { device: "cpu" } },
    worker: {
      kill: async () => {
        log.push("kill");
      },
    },
    async renderMany(convs: readonly (readonly ChatMessage[])[]) {
      log.push(`render ${convs.length}`);
      if (convs.some((m) => m[0].content === "bad"))
        throw new UsageError("message 0: the template refused it");
      return convs.map((m) => ({ ids: [...m[0].content].map((c) => c.charCodeAt(0)), assistantSpans: [] }));
    },
    generate(prompts: readonly (readonly number[])[]) {
      log.push(`generate ${prompts.length}`);
      return new Promise<Sample[]>((resolve) => {
        release = () => resolve(prompts.map(samples));
      });
    },
  };
  const backend = new TorchServeBackend({
    learner: learner as unknown as TorchLearner,
    close: async () => {
      log.push("close");
    },
  });
  return { backend, log, release: () => release() };
}

const job = (promptIds: number[], stop: string[] = []): GenJob => ({
  promptIds,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 8, stop },
  seed: 1,
  stopIds: [2],
  topLogprobs: 0,
});
const user = (content: string): ChatMessage[] => [{ role: "user", content }];
const tick = () => new Promise((r) => setImmediate(r));

describe("TorchServeBackend", () => {
  it("renders the conversations that arrive during a batch in one round trip after it", async () => {
    const { backend, log, release } = scriptedLearner(() => ({
      tokens: [7],
      logprobs: [-1],
      text: "x",
      finish: "length",
    }));
    const running = backend.runAsync([job([1])], 64);
    assert.equal(backend.sampling, true);
    const a = backend.chatPrompt(user("ab"));
    const b = backend.chatPrompt(user("c"));
    await tick();
    assert.deepEqual(log, ["generate 1"], "nothing is rendered while the batch samples");
    release();
    await running;
    assert.deepEqual(await Promise.all([a, b]), [[97, 98], [99]]);
    assert.deepEqual(log, ["generate 1", "render 2"]);
    assert.equal(backend.sampling, false);
  });

  it("a conversation the template refuses fails alone, as a 400 naming messages", async () => {
    const { backend, log, release } = scriptedLearner(() => ({
      tokens: [],
      logprobs: [],
      text: "",
      finish: "length",
    }));
    const running = backend.runAsync([job([1])], 64);
    const good = backend.chatPrompt(user("ok"));
    const bad = backend.chatPrompt(user("bad"));
    release();
    await running;
    assert.deepEqual(await good, [111, 107]);
    await assert.rejects(
      bad,
      (e: unknown) => e instanceof ApiError && e.status === 400 && e.param === "messages",
    );
    assert.deepEqual(log, ["generate 1", "render 2", "render 1", "render 1"]);
  });

  it("turns samples into generations: the worker's text, prompt tokens, the stop string that ended it", async () => {
    const { backend, release } = scriptedLearner((p) =>
      p[0] === 1
        ? { tokens: [5, 6, 7], logprobs: [-1, -2, -3], text: "ab STOP cd", finish: "stop" }
        : p[0] === 2
          ? { tokens: [5, 2], logprobs: [-1, -0.5], text: "a", finish: "stop" }
          : { tokens: [5, 6], logprobs: [-1, -1], text: "ab", finish: "length" },
    );
    const running = backend.runAsync([job([1, 1], ["cd", "STOP"]), job([2], ["a"]), job([3, 3, 3])], 64);
    release();
    const [byString, byEos, byLength] = await running;
    assert.equal(byString.stopString, "STOP", "the stop string that occurs first");
    assert.equal(byString.text, "ab STOP cd");
    assert.equal(byString.promptTokens, 2);
    assert.deepEqual(byString.logprobs, [-1, -2, -3]);
    assert.equal(byEos.stopString, null, "ended by the end-of-sequence id");
    assert.equal(byLength.finishReason, "length");
    assert.equal(byLength.promptTokens, 3);
    assert.equal(backend.calls, 1);
    assert.equal(backend.largestBatch, 3);
  });

  it("gives up a batch when told to stop, and kills the worker on close only while it samples", async () => {
    const { backend, log } = scriptedLearner(() => ({
      tokens: [],
      logprobs: [],
      text: "",
      finish: "length",
    }));
    let stopping = false;
    const running = backend.runAsync([job([1])], 64, () => stopping);
    stopping = true;
    await assert.rejects(running, ShutdownError);
    await backend.close();
    assert.deepEqual(log, ["generate 1", "kill", "close"]);

    const idle = scriptedLearner(() => ({ tokens: [], logprobs: [], text: "", finish: "length" }));
    await idle.backend.close();
    assert.deepEqual(idle.log, ["close"]);
  });

  it("firstStopString picks the stop string that occurs first in the text", () => {
    assert.equal(firstStopString("one two three", ["three", "two"]), "two");
    assert.equal(firstStopString("one two", ["four"]), null);
    assert.equal(firstStopString("", []), null);
  });
});
