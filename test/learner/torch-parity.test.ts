/**
 * Parity of the two learners on identical weights: an embedded `tiny` model with random weights,
 * exported with `exportHf`, loaded by the PyTorch worker (float32, CPU) through the real protocol
 * (`TorchLearner`). Teacher-forced log-probs, the PPO loss on one batch and the weights after one
 * AdamW step must agree with the TypeScript learner's.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { makePpoLoss, type PpoLossOptions } from "../../src/algo/ppo-loss.js";
import { Rng } from "../../src/core/rng.js";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import { renderChat } from "../../src/model/chat-template.js";
import { presetConfig } from "../../src/model/config.js";
import { exportHf, importHf } from "../../src/model/hf-export.js";
import { Learner } from "../../src/model/learner.js";
import { cloneParams, initParams, type ModelParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";
import { type Batch, scoreBatch } from "../../src/model/transformer.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { TorchModelSchema } from "../../src/train/config.js";
import { magePython } from "../model/hf-python.js";

const SKIP = magePython() ? false : "needs MAGE_PYTHON (npm test sets it)";

const config = presetConfig("tiny", { vocabSize: 512, contextLength: 128 });
const OPTIM = {
  lr: 3e-4,
  weightDecay: 0.01,
  betas: [0.9, 0.999] as [number, number],
  eps: 1e-8,
  gradClip: 1,
};
const LOSS: PpoLossOptions = {
  clipLow: 0.2,
  clipHigh: 0.28,
  dualClip: 3,
  entropyCoef: 0.01,
  klCoef: 0.05,
  klClamp: 10,
};

let dir: string;
let params: ModelParams;
let tok: Tokenizer;
let torch: TorchLearner | undefined;

/** Sequences of 20–60 random ids, scored from a random point on (ids a tokenizer of 420 could give). */
function makeBatch(rng: Rng): Batch {
  const sequences: Int32Array[] = [];
  const lossMask: Uint8Array[] = [];
  for (let s = 0; s < 6; s++) {
    const n = rng.intBetween(20, 60);
    const seq = Int32Array.from({ length: n }, () => rng.int(420));
    const mask = new Uint8Array(n);
    const from = 1 + rng.int(Math.floor(n / 2));
    for (let t = from; t < n; t++) mask[t] = rng.bernoulli(0.8) ? 1 : 0;
    sequences.push(seq);
    lossMask.push(mask);
  }
  return { sequences, lossMask };
}

function relNorm(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  let n = 0;
  for (let i = 0; i < a.length; i++) {
    d += (a[i] - b[i]) ** 2;
    n += b[i] ** 2;
  }
  return Math.sqrt(d / n);
}

before(async () => {
  if (SKIP) return;
  dir = await mkdtemp(join(tmpdir(), "mage-parity-"));
  tok = trainTokenizer(
    Array.from({ length: 200 }, (_, i) => `Player ${i % 5} moves to ${i % 9}; the board is full.`),
    { vocabSize: 420 },
  );
  // std 0.1: a sharper model than the default init, so the loss terms (clips, KL) all matter.
  params = initParams(config, Rng.seeded("parity"), { std: 0.1 });
  await exportHf(join(dir, "hf"), { config, params: paramsToMap(params), tokenizer: tok });
  torch = await TorchLearner.open({
    torch: TorchModelSchema.parse({ path: join(dir, "hf") }),
    optimizer: OPTIM,
    seed: 0,
    reference: false,
    worker: { env: { OMP_NUM_THREADS: "1" } },
  });
});
after(async () => {
  await torch?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("embedded ↔ PyTorch worker parity (exported tiny model, float32, CPU)", { skip: SKIP }, () => {
  it("teacher-forced log-probs and entropies agree within 1e-4", async (t) => {
    const batch = makeBatch(Rng.seeded("logp"));
    const ours = scoreBatch(params, batch);
    const theirs = await torch!.logprobs(batch);
    assert.equal(theirs.logp.length, ours.logp.length);
    let dl = 0;
    let de = 0;
    for (let i = 0; i < ours.logp.length; i++) {
      dl = Math.max(dl, Math.abs(theirs.logp[i] - ours.logp[i]));
      de = Math.max(de, Math.abs(theirs.entropy[i] - ours.entropy[i]));
    }
    t.diagnostic(
      `${ours.logp.length} tokens: max |Δlogp| ${dl.toExponential(2)}, max |Δentropy| ${de.toExponential(2)}`,
    );
    assert.ok(dl < 1e-4, `log-probs differ by ${dl}`);
    assert.ok(de < 1e-4, `entropies differ by ${de}`);
  });

  it("the worker renders chats token-exactly as renderChat (sampled ids verbatim, spans included)", async () => {
    const sampled = [...tok.encode(" moves to 7"), tok.endId];
    const chats: ChatMessage[][] = [
      [
        { role: "system", content: "Player 3 moves first.\n" },
        { role: "user", content: "The board is full?  café ☕ 12345" },
      ],
      [
        { role: "user", content: "Your move." },
        { role: "assistant", content: " moves to 7", tokenIds: sampled },
        { role: "user", content: "again" },
        // Ids no tokenizer would produce for this text: the worker must keep them as they are.
        { role: "assistant", content: "xy", tokenIds: [tok.encode("x")[0], tok.encode("y")[0]] },
      ],
    ];
    const theirs = await torch!.render(chats);
    chats.forEach((messages, i) => {
      const ours = renderChat(tok, messages);
      assert.deepEqual(theirs[i].ids, ours.ids, `conversation ${i}`);
      assert.deepEqual(
        theirs[i].assistantSpans,
        ours.assistantSpans.map((s) => ({ start: s.start, end: s.end })),
      );
    });
  });

  it("one update: the PPO loss within 1e-5 relative, the weights within 1e-4 relative", async (t) => {
    const rng = Rng.seeded("update");
    const batch = makeBatch(rng);
    const now = scoreBatch(params, batch);
    const n = now.logp.length;
    // Old and reference log-probs near the current ones, so ratios are clipped on both sides
    // and the dual clip, KL and entropy terms are all active.
    const oldLogp = Float64Array.from(now.logp, (x) => x + 0.3 * rng.normal());
    const refLogp = Float64Array.from(now.logp, (x) => x + 0.2 * rng.normal());
    const advantages = Float64Array.from({ length: n }, () => 2 * rng.normal());
    const inputs = { oldLogp, advantages, refLogp };

    const embedded = new Learner(cloneParams(params), {
      adamw: { beta1: OPTIM.betas[0], beta2: OPTIM.betas[1], eps: OPTIM.eps, weightDecay: OPTIM.weightDecay },
      schedule: { kind: "constant", lr: OPTIM.lr },
      maxGradNorm: OPTIM.gradClip,
    });
    // The worker splits the batch into micro-batches of at most 80 tokens (gradient accumulation).
    const ours = embedded.update(batch, makePpoLoss(inputs, LOSS));
    const theirs = await torch!.update(batch, inputs, LOSS, { microBatchTokens: 80 });
    assert.ok(ours.metrics.clipfrac > 0 && ours.metrics.clipfrac < 1, `clipfrac ${ours.metrics.clipfrac}`);
    assert.equal(theirs.skipped, false);

    const lossRel = Math.abs(theirs.loss - ours.loss) / Math.abs(ours.loss);
    t.diagnostic(
      `loss ${ours.loss.toFixed(6)} vs ${theirs.loss.toFixed(6)}: relative ${lossRel.toExponential(2)}`,
    );
    assert.ok(lossRel < 1e-5, `PPO loss differs by ${lossRel} (relative)`);
    for (const k of ["pg_loss", "kl", "entropy", "ppo_kl", "ratio_dev"]) {
      const a = ours.metrics[k];
      const b = theirs.metrics[k];
      assert.ok(Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(a)), `${k}: ${a} vs ${b}`);
    }
    assert.equal(theirs.metrics.clipfrac, ours.metrics.clipfrac, "same tokens clipped");
    const gradRel = Math.abs(theirs.gradNorm - ours.gradNorm) / ours.gradNorm;
    assert.ok(gradRel < 1e-4, `grad norm ${ours.gradNorm} vs ${theirs.gradNorm}`);
    assert.equal(theirs.clipped, ours.clipped);

    await torch!.saveWeights(join(dir, "after"));
    const after = await importHf(join(dir, "after"));
    let worstW = 0;
    let worstStep = 0;
    let moved = 0;
    embedded.params.specs.forEach((spec, i) => {
      const mine = embedded.params.tensors[i];
      const w = after.params.get(spec.name)!;
      worstW = Math.max(worstW, relNorm(w, mine));
      const start = params.tensors[i];
      const stepOurs = mine.map((x, j) => x - start[j]);
      const stepTheirs = w.map((x, j) => x - start[j]);
      moved = Math.max(moved, relNorm(mine, start));
      worstStep = Math.max(worstStep, relNorm(stepTheirs, stepOurs));
    });
    t.diagnostic(
      `weights: worst tensor relative difference ${worstW.toExponential(2)} (the step moved them by up to ` +
        `${moved.toExponential(2)}); the steps themselves differ by ${worstStep.toExponential(2)} (relative); ` +
        `grad norm ${ours.gradNorm.toFixed(4)}, relative difference ${gradRel.toExponential(2)}`,
    );
    assert.ok(moved > 10 * 1e-4, `the step (${moved}) is large enough for the comparison to mean something`);
    assert.ok(worstW < 1e-4, `weights differ by ${worstW} (relative)`);
    // Adam's first step is about lr·sign(g): a gradient element within rounding of 0 could flip
    // one element's step on another CPU, hence the looser bound on the steps themselves.
    assert.ok(worstStep < 5e-2, `the update steps differ by ${worstStep} (relative)`);
  });
});
