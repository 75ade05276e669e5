import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { formatChecks } from "../../src/cli/commands/pretrain.js";
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
    // Served Sokoban declares no informative rule: valid remarks only.
    assert.equal(e.validRemarks, e.reflections);
    assert.deepEqual(e.remarkInvalidReasons, {});
    assert.equal(e.remarkInformativeRate, undefined);
  });

  it("count valid and informative remarks by the environment's declared rule, and why others failed", async () => {
    const def = await openRemoteTask({
      url: server.url,
      name: "kuhn",
      config: {},
      timeoutMs: 5000,
      retries: 1,
    });
    assert.deepEqual(def.env.remarks, { informative: "kuhn-cards" });
    // Passes every hand; reflects with the card it held after attempt 1, with the move alone after attempt 2.
    const policy: Policy = {
      name: "pass",
      generate: async (requests) =>
        requests.map((r) => {
          const card = /Card: ([JQK])\./.exec(r.messages.map((m) => m.content).join("\n"))?.[1] ?? "?";
          const remark =
            r.trial?.attempt === 0 ? `<remark>Had ${card} and passed.</remark>` : "<remark>PASS</remark>";
          return {
            text: r.trial?.phase === "reflect" ? remark : "<action>PASS</action>",
            tokenIds: [1],
            logprobs: [0],
            finishReason: "stop" as const,
            promptTokens: 1,
          };
        }),
    };
    const e = await evaluateServed({
      def,
      policy,
      rng: Rng.seeded(2),
      trials: 12,
      maxBatch: 12,
      targets: { playValid: 0.95, remarkValid: 0.95, kuhnFirstDecisionBits: 0, tictactoeFirstMoveBits: 0 },
    });
    assert.ok(e.reflections > 0);
    assert.equal(e.validRemarks + (e.remarkInvalidReasons?.echo ?? 0), e.reflections);
    assert.ok((e.remarkInvalidReasons?.echo ?? 0) > 0, "the echoed moves");
    assert.ok(e.validRemarks > 0, "the remarks naming a card");
    assert.equal(e.informativeRemarks, e.validRemarks, "every valid remark named its card");
    assert.equal(e.remarkInformativeRate, e.validRemarks / e.reflections);
    assert.deepEqual(
      e.targets.map((t) => t.name),
      ["play answers well-formed and legal", "reflections a valid <remark>"],
    );
    const printed = formatChecks(e, 0).join("\n");
    assert.match(
      printed,
      new RegExp(`${e.validRemarks}/${e.reflections} remarks valid, ${e.informativeRemarks} informative`),
    );
    assert.match(printed, /invalid remarks: \d+× echo/);
    assert.match(printed, /informative remarks \(of those judged\): [\d.]+%/);
  });
});
