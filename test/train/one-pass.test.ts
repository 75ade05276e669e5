import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { presetConfig } from "../../src/model/config.js";
import { selectKernels } from "../../src/model/kernels/select.js";
import { initParams } from "../../src/model/params.js";
import { trainTokenizer } from "../../src/model/tokenizer.js";
import { scoreBatch } from "../../src/model/transformer.js";
import { EmbeddedPolicy } from "../../src/policy/embedded.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import { buildTokenBatch } from "../../src/train/batch.js";

describe("one-pass transcript scoring", () => {
  for (const reflection of ["history_and_reflection", "reflection_only"] as const)
    it(`${reflection}: scores every row's sampled tokens in one pass per trial with the sampler's log-probs (≤ 1e-4)`, async () => {
      const corpus = [
        "Kuhn poker. Cards J<Q<K, ante 1. PASS = check/fold, BET = bet/call 1 chip. You act first. Card: K. Opp: BET. Your move?",
        "<action>PASS</action> <action>BET</action> <remark>the opponent bet with a king</remark> Attempt 2. Showdown: you J, opp Q. Lost -1.",
      ];
      const tok = trainTokenizer(corpus, { vocabSize: 320 });
      const config = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 512, nLayers: 2 });
      const params = initParams(config, Rng.seeded(8), { std: 0.08 });
      const kernels = await selectKernels("auto");
      const policy = new EmbeddedPolicy({ params, tokenizer: tok, kernels });
      const def = await loadTask("kuhn");
      const specs: TrialSpec[] = Array.from({ length: 6 }, (_, i) => ({
        trialId: i,
        groupId: i,
        taskSeed: i,
        opponent: "aggressive",
        seat: i % 2 === 0 ? "first" : "second",
      }));
      const trials = await runTrials(
        specs,
        (s) => def.create({ opponent: s.opponent!, seat: s.seat! }),
        policy,
        Rng.seeded(3),
        {
          attempts: 2,
          maxTurns: 2,
          reflection,
          promptStyle: "compact",
          hindsight: false,
          sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6, stop: [] },
          maxBatch: 16,
          concurrency: 1,
        },
      );
      const rows = trials.flatMap((t) => t.rows);
      assert.ok(rows.length >= 12, `enough rows (${rows.length})`);
      assert.ok(
        trials.some((t) => t.rows.length >= 3),
        "some trial has several calls in one transcript",
      );
      const tb = buildTokenBatch(
        tok,
        trials,
        rows.map(() => 1),
        true,
      );
      // The history modes keep a trial as one token stream; reflection_only starts each attempt anew.
      const expected =
        reflection === "history_and_reflection"
          ? trials.length
          : trials.reduce((n, t) => n + t.attempts.length, 0);
      assert.equal(
        tb.batch.sequences.length,
        expected,
        "one sequence per trial (per attempt in reflection_only)",
      );
      const stats = scoreBatch(params, tb.batch, kernels);
      assert.equal(stats.logp.length, tb.oldLogp.length);
      let maxDiff = 0;
      for (let i = 0; i < stats.logp.length; i++)
        maxDiff = Math.max(maxDiff, Math.abs(stats.logp[i] - tb.oldLogp[i]));
      assert.ok(maxDiff <= 1e-4, `max |one-pass logp − sampler logp| = ${maxDiff}`);
    });
});
