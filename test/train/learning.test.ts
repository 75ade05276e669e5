import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { makePpoLoss } from "../../src/algo/ppo-loss.js";
import { Rng } from "../../src/core/rng.js";
import { presetConfig } from "../../src/model/config.js";
import { Learner } from "../../src/model/learner.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";
import { EmbeddedPolicy } from "../../src/policy/embedded.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { computeRowCredit } from "../../src/train/advantage-pipeline.js";
import { buildTokenBatch } from "../../src/train/batch.js";
import { validateConfig } from "../../src/train/config.js";
import { AsciiTask } from "./ascii-task.js";

const config = validateConfig({
  game: "kuhn",
  population: { opponents: [{ spec: "random" }] },
  task: { attempts: 1, reflection: "none" },
  rollout: { maxResponseTokens: 1 },
  credit: { mode: "differential" },
  advantage: { estimator: "grpo", scope: "agent", mode: "mean_std_norm" },
  penalties: { invalidAction: 0, length: 0 },
});

async function asciiRate(sign: 1 | -1, iterations: number): Promise<{ before: number; after: number }> {
  const tok = byteTokenizer();
  const model = presetConfig("tiny", {
    vocabSize: tok.vocabSize,
    contextLength: 64,
    nLayers: 1,
    dModel: 64,
    dFf: 128,
  });
  const learner = Learner.create(model, Rng.seeded(3), { schedule: { kind: "constant", lr: 2e-2 } });
  const policy = new EmbeddedPolicy({ params: learner.params, tokenizer: tok });
  const rate = (trials: { attempts: { won: boolean }[] }[]) =>
    trials.filter((t) => t.attempts[0].won).length / trials.length;
  let before = Number.NaN;
  let after = Number.NaN;
  for (let it = 0; it <= iterations; it++) {
    const specs: TrialSpec[] = Array.from({ length: 64 }, (_, i) => ({
      trialId: i,
      groupId: Math.floor(i / 16),
      taskSeed: Math.floor(i / 16),
      opponent: null,
      seat: null,
    }));
    const trials = await runTrials(specs, () => new AsciiTask(), policy, Rng.seeded(11).derive("it", it), {
      attempts: 1,
      maxTurns: 1,
      reflection: "none",
      promptStyle: "compact",
      hindsight: false,
      sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 1, stop: [] },
      maxBatch: 64,
      concurrency: 1,
    });
    if (it === 0) before = rate(trials);
    if (it === iterations) {
      after = rate(trials);
      break;
    }
    const credit = computeRowCredit(trials, config);
    const tb = buildTokenBatch(
      tok,
      trials,
      credit.advantage.map((a) => sign * a),
      true,
    );
    learner.update(tb.batch, makePpoLoss({ oldLogp: tb.oldLogp, advantages: tb.advantages }));
  }
  return { before, after };
}

describe("learning through the whole loop (runner → credit → advantages → PPO → learner → sampler)", () => {
  it("raises the reward with the real loss and lowers it when the advantage sign is flipped", async () => {
    const real = await asciiRate(1, 12);
    const flipped = await asciiRate(-1, 12);
    if (process.env.MAGE_TEST_VERBOSE) console.log(real, flipped);
    assert.ok(real.before > 0.3 && real.before < 0.7, `start near chance: ${real.before}`);
    assert.ok(real.after > real.before + 0.25, `real loss improves: ${real.before} → ${real.after}`);
    assert.ok(
      flipped.after < flipped.before - 0.2,
      `flipped sign gets worse: ${flipped.before} → ${flipped.after}`,
    );
  });
});
