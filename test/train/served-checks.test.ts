import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import type { EvalProgress } from "../../src/evaluate/progress.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { type EnvServerHandle, startEnvServer } from "../../src/serve/env-server.js";
import { openRemoteTask } from "../../src/tasks/remote.js";
import { evaluateServed } from "../../src/train/pretrain/served-checks.js";

/** Always pushes up; reflects with a remark. */
const upPolicy: Policy = {
  name: "up",
  generate: async (requests: readonly GenerateRequest[]): Promise<Generation[]> =>
    requests.map((r) => {
      const reflect = JSON.stringify(r).includes("remark");
      return {
        text: reflect ? "<remark>Try another way.</remark>" : "<action>up</action>",
        tokenIds: [1],
        logprobs: [0],
        finishReason: "stop" as const,
        promptTokens: 1,
      };
    }),
};

let server: EnvServerHandle;
before(async () => {
  server = await startEnvServer();
});
after(async () => {
  await server.close();
});

describe("a served warm start's checks", () => {
  it("report their progress: answers as they come, every trial done at the end", async () => {
    const def = await openRemoteTask({
      url: server.url,
      name: "sokoban",
      config: {},
      timeoutMs: 5000,
      retries: 1,
    });
    const seen: EvalProgress[] = [];
    const e = await evaluateServed({
      def,
      policy: upPolicy,
      rng: Rng.seeded(5),
      trials: 3,
      maxBatch: 3,
      targets: { playValid: 0.95, remarkValid: 0.95, kuhnFirstDecisionBits: 0, tictactoeFirstMoveBits: 0 },
      maxTurns: 2,
      onProgress: (p) => seen.push(p),
    });
    assert.equal(e.trials, 3);
    assert.equal(seen[0].done, 0, "a first line before any answer");
    const last = seen[seen.length - 1];
    assert.equal(last.done, 3);
    assert.equal(last.total, 3);
    assert.equal(last.answers, e.playAnswers + e.reflections, "every answer counted once");
    assert.ok(
      seen.some((p) => p.done < 3 && p.answers > 0),
      "answers show before trials end",
    );
  });
});
