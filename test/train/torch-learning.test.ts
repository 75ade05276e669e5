/**
 * The learning test of `learning.test.ts` with `model.backend: torch`: the same one-turn task, the
 * same starting weights (the embedded test's fixture, exported with `exportHf`), the same
 * optimizer, but rollouts sampled by the PyTorch worker, transcripts rendered by its tokenizer and
 * chat template, and the PPO update done by torch (`torchBackend`, as `mage train` builds it).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DEFAULT_PPO_OPTIONS } from "../../src/algo/ppo-loss.js";
import { Rng } from "../../src/core/rng.js";
import { presetConfig } from "../../src/model/config.js";
import { exportHf } from "../../src/model/hf-export.js";
import { initParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { computeRowCredit } from "../../src/train/advantage-pipeline.js";
import { torchBackend } from "../../src/train/backend.js";
import { buildTokenBatchWith } from "../../src/train/batch.js";
import { validateConfig } from "../../src/train/config.js";
import { magePython } from "../model/hf-python.js";
import { AsciiTask } from "./ascii-task.js";

const SKIP = magePython() ? false : "needs MAGE_PYTHON (npm test sets it)";

let dir: string;

before(async () => {
  if (SKIP) return;
  dir = await mkdtemp(join(tmpdir(), "mage-torch-learning-"));
  // learning.test.ts's model: Learner.create(model, Rng.seeded(3)) draws exactly these weights.
  const tok = byteTokenizer();
  const model = presetConfig("tiny", {
    vocabSize: tok.vocabSize,
    contextLength: 64,
    nLayers: 1,
    dModel: 64,
    dFf: 128,
  });
  await exportHf(join(dir, "base"), {
    config: model,
    params: paramsToMap(initParams(model, Rng.seeded(3))),
    tokenizer: tok,
  });
});
after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function asciiRate(sign: 1 | -1, iterations: number): Promise<{ before: number; after: number }> {
  const config = validateConfig({
    game: "kuhn",
    population: { opponents: [{ spec: "random" }] },
    task: { attempts: 1, reflection: "none" },
    rollout: { maxResponseTokens: 1 },
    credit: { mode: "differential" },
    advantage: { estimator: "grpo", scope: "agent", mode: "mean_std_norm" },
    penalties: { invalidAction: 0, length: 0 },
    // The embedded test's Learner defaults: AdamW weight decay 0.01, grad clip 1.
    optim: { lr: 2e-2, weightDecay: 0.01, gradClip: 1 },
    model: { backend: "torch", torch: { path: join(dir, "base") } },
  });
  const backend = await torchBackend(config, join(dir, `run-${sign}`), {
    worker: { env: { OMP_NUM_THREADS: "1" } },
  });
  try {
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
      const trials = await runTrials(
        specs,
        () => new AsciiTask(),
        backend.policy,
        Rng.seeded(11).derive("it", it),
        {
          attempts: 1,
          maxTurns: 1,
          reflection: "none",
          promptStyle: "compact",
          hindsight: false,
          sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 1, stop: [] },
          maxBatch: 64,
          concurrency: 1,
        },
      );
      if (it === 0) before = rate(trials);
      if (it === iterations) {
        after = rate(trials);
        break;
      }
      const credit = computeRowCredit(trials, config);
      const tb = await buildTokenBatchWith(
        (t) => backend.learner.render(t),
        trials,
        credit.advantage.map((a) => sign * a),
        true,
      );
      const m = await backend.learner.update(
        tb.batch,
        { oldLogp: tb.oldLogp, advantages: tb.advantages },
        DEFAULT_PPO_OPTIONS,
        { microBatchTokens: config.model.torch.microBatchTokens },
      );
      assert.equal(m.skipped, false);
    }
    return { before, after };
  } finally {
    await backend.close();
  }
}

describe("learning with model.backend: torch (worker rollouts → credit → advantages → torch PPO)", {
  skip: SKIP,
}, () => {
  it("raises the reward with the real loss and lowers it when the advantage sign is flipped", async (t) => {
    const real = await asciiRate(1, 12);
    const flipped = await asciiRate(-1, 12);
    t.diagnostic(
      `ASCII answers: real loss ${real.before.toFixed(3)} → ${real.after.toFixed(3)}, ` +
        `flipped sign ${flipped.before.toFixed(3)} → ${flipped.after.toFixed(3)}`,
    );
    assert.ok(real.before > 0.3 && real.before < 0.7, `start near chance: ${real.before}`);
    assert.ok(real.after > real.before + 0.25, `real loss improves: ${real.before} → ${real.after}`);
    assert.ok(
      flipped.after < flipped.before - 0.2,
      `flipped sign gets worse: ${flipped.before} → ${flipped.after}`,
    );
  });
});
