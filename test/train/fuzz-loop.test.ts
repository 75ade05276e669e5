import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import { computeRowCredit } from "../../src/train/advantage-pipeline.js";
import { validateConfig } from "../../src/train/config.js";

const PIECES = [
  "<action>",
  "</action>",
  "<think>",
  "</think>",
  "<remark>",
  "</remark>",
  "BET",
  "pass",
  "(1, 2)",
  "(3,3)",
  "(0, 9)",
  "up, left",
  "down",
  "(2, 4)",
  "\u0000",
  "🙂",
  "  ",
  "\n",
  "<action></action>",
  "<<action>>",
  "<|end|>",
  "NaN",
];

/** Model outputs from a keyed generator: random pieces, random bytes and truncations. */
function fuzzPolicy(): Policy & { outputs: number } {
  const p = {
    name: "fuzz",
    outputs: 0,
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        p.outputs += 1;
        const rng = Rng.seeded(r.seed);
        let text = "";
        const n = rng.int(8);
        for (let i = 0; i < n; i++) {
          text +=
            rng.float() < 0.8
              ? rng.pick(PIECES)
              : String.fromCharCode(...Array.from({ length: 1 + rng.int(6) }, () => rng.int(0x3000)));
        }
        if (rng.float() < 0.1) text = text.slice(0, rng.int(text.length + 1));
        const tokenIds = Array.from({ length: 1 + rng.int(4) }, () => rng.int(256));
        return {
          text,
          tokenIds,
          logprobs: tokenIds.map(() => -rng.float() * 5),
          finishReason: "stop",
          promptTokens: 1,
        };
      });
    },
  };
  return p;
}

describe("fuzzed model outputs through the whole loop", () => {
  it("10,000 outputs never crash; every invalid action is flagged and penalised", async () => {
    const policy = fuzzPolicy();
    const games = ["kuhn", "tictactoe", "sokoban", "minesweeper"] as const;
    let round = 0;
    let invalid = 0;
    let rowsSeen = 0;
    while (policy.outputs < 10_000) {
      const game = games[round % games.length];
      const def = await loadTask(game);
      const specs: TrialSpec[] = Array.from({ length: 32 }, (_, i) => ({
        trialId: i,
        groupId: Math.floor(i / 4),
        taskSeed: round * 100 + Math.floor(i / 4),
        opponent: def.twoPlayer ? (game === "kuhn" ? "aggressive" : "random") : null,
        seat: def.twoPlayer ? (i % 8 < 4 ? "first" : "second") : null,
      }));
      const trials = await runTrials(
        specs,
        (s) =>
          def.create({
            ...(s.opponent ? { opponent: s.opponent } : {}),
            ...(s.seat ? { seat: s.seat } : {}),
          }),
        policy,
        Rng.seeded(round),
        {
          attempts: 3,
          maxTurns: def.maxTurns,
          reflection: "reflection_only",
          promptStyle: round % 2 === 0 ? "compact" : "full",
          hindsight: false,
          sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 8, stop: [] },
          maxBatch: 64,
          concurrency: 1,
        },
      );
      const config = validateConfig({
        game,
        population: { opponents: [{ spec: "random" }] },
        penalties: { invalidAction: 2 },
      });
      const credit = computeRowCredit(trials, config);
      const rows = trials.flatMap((t) => t.rows);
      rows.forEach((row, i) => {
        assert.ok(Number.isFinite(credit.advantage[i]));
        if (!row.valid) {
          invalid += 1;
          assert.ok(row.invalidReason && row.invalidReason.length > 0, "an invalid row says why");
          assert.equal(credit.score[i], credit.episodeReward[i] - 2, "invalid rows lose the penalty");
        } else {
          assert.equal(credit.score[i], credit.episodeReward[i]);
        }
      });
      // Invalid actions are counted per attempt, and agree with the rows.
      for (const t of trials) {
        const counted = t.attempts.reduce((s, a) => s + a.invalidActions, 0);
        const flagged = t.rows.filter((r) => r.phase === "play" && !r.valid).length;
        assert.equal(counted, flagged);
      }
      rowsSeen += rows.length;
      round += 1;
    }
    assert.ok(policy.outputs >= 10_000);
    assert.ok(invalid > rowsSeen / 2, `most fuzzed outputs are invalid (${invalid} of ${rowsSeen})`);
  });
});
