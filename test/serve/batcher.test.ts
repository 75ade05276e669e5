/**
 * `mage serve`'s batcher over a recording backend: when a batch starts, and how requests that
 * announced themselves (`expect`) while their prompts render elsewhere are waited for.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Batcher } from "../../src/serve/batcher.js";
import type { GenJob, GenResult } from "../../src/serve/protocol.js";

function recordingBackend() {
  const batches: number[][] = [];
  return {
    batches,
    async runAsync(jobs: readonly GenJob[]): Promise<GenResult[]> {
      batches.push(jobs.map((j) => j.seed));
      return jobs.map((j) => ({
        tokenIds: [j.seed],
        logprobs: [0],
        finishReason: "length" as const,
        stopString: null,
        promptTokens: j.promptIds.length,
        top: null,
      }));
    },
  };
}

const job = (seed: number): GenJob => ({
  promptIds: [1],
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 1, stop: [] },
  seed,
  stopIds: [],
  topLogprobs: 0,
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("Batcher", () => {
  it("without announcements, a job arriving after the quiet gap starts the next batch", async () => {
    const backend = recordingBackend();
    const batcher = new Batcher(backend, { windowMs: 5, maxWaitMs: 1000 });
    const first = batcher.submit(job(1));
    await sleep(60);
    await Promise.all([first, batcher.submit(job(2))]);
    assert.deepEqual(backend.batches, [[1], [2]]);
  });

  it("waits for an announced request, then runs it with the jobs already queued", async () => {
    const backend = recordingBackend();
    const batcher = new Batcher(backend, { windowMs: 5, maxWaitMs: 1000 });
    const ready = batcher.expect();
    const first = batcher.submit(job(1));
    await sleep(60);
    assert.deepEqual(backend.batches, [], "the batch waits for the announced request");
    ready();
    const second = batcher.submit(job(2));
    assert.deepEqual(
      (await Promise.all([first, second])).map((r) => r.tokenIds[0]),
      [1, 2],
    );
    assert.deepEqual(backend.batches, [[1, 2]]);
  });

  it("waits no longer than maxWaitMs, and an announced request that fails releases the batch", async () => {
    const backend = recordingBackend();
    const batcher = new Batcher(backend, { windowMs: 5, maxWaitMs: 80 });
    const never = batcher.expect();
    const t0 = performance.now();
    await batcher.submit(job(1));
    const waited = performance.now() - t0;
    assert.ok(waited >= 70 && waited < 1000, `waited ${waited.toFixed(0)} ms for a request that never came`);
    never();

    const failing = batcher.expect();
    const t1 = performance.now();
    const second = batcher.submit(job(2));
    await sleep(20);
    failing();
    failing();
    await second;
    const ms = performance.now() - t1;
    assert.ok(ms < 70, `the batch ran ${ms.toFixed(0)} ms after the request failed (not at maxWaitMs)`);
    assert.deepEqual(backend.batches, [[1], [2]]);

    // Releasing twice counts once: a later announcement still holds its batch back.
    const later = batcher.expect();
    const third = batcher.submit(job(3));
    await sleep(30);
    assert.equal(backend.batches.length, 2);
    later();
    await third;
    assert.deepEqual(backend.batches.at(-1), [3]);
  });
});
