import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { lengthPenalty, penalisedScore } from "../../src/algo/penalties.js";
import { clippedPolicyTerm, k3Kl, makePpoLoss } from "../../src/algo/ppo-loss.js";
import type { TokenStats } from "../../src/model/loss-types.js";

const O = { clipLow: 0.2, clipHigh: 0.2, dualClip: 3 };
const near = (a: number, b: number, tol = 1e-12) => assert.ok(Math.abs(a - b) <= tol, `${a} vs ${b}`);

function stats(logp: number[], entropy: number[]): TokenStats {
  return {
    logp: Float64Array.from(logp),
    entropy: Float64Array.from(entropy),
    sequence: new Int32Array(logp.length),
    position: Int32Array.from(logp.map((_, i) => i)),
  };
}

describe("PPO clipped policy term", () => {
  it("inside the clip range: −A·ratio with gradient −A·ratio", () => {
    const t = clippedPolicyTerm(Math.log(1.1), 0, 2, O);
    near(t.value, -2.2);
    near(t.dLogp, -2.2);
    assert.equal(t.clipped, false);
  });
  it("upper edge, positive advantage: clipped at 1.2 with zero gradient", () => {
    const t = clippedPolicyTerm(Math.log(1.5), 0, 1, O);
    near(t.value, -1.2);
    assert.equal(t.dLogp, 0);
    assert.equal(t.clipped, true);
  });
  it("lower edge, positive advantage: the unclipped (larger) loss keeps its gradient", () => {
    const t = clippedPolicyTerm(Math.log(0.5), 0, 1, O);
    near(t.value, -0.5);
    near(t.dLogp, -0.5);
  });
  it("lower edge, negative advantage: clipped at 0.8", () => {
    const t = clippedPolicyTerm(Math.log(0.5), 0, -1, O);
    near(t.value, 0.8);
    assert.equal(t.dLogp, 0);
  });
  it("dual clip caps the loss of negative advantages at −A·c", () => {
    const t = clippedPolicyTerm(Math.log(5), 0, -2, O);
    near(t.value, 6);
    assert.equal(t.dLogp, 0);
    const below = clippedPolicyTerm(Math.log(2.5), 0, -2, O);
    near(below.value, 5);
    near(below.dLogp, 5);
  });
});

describe("k3 KL", () => {
  it("value and gradient, and the clamp", () => {
    const k = k3Kl(-1, -1.5, 10);
    const x = -0.5;
    near(k.value, Math.exp(x) - x - 1);
    near(k.dLogp, 1 - Math.exp(x));
    const clamped = k3Kl(-20, 0, 10);
    assert.equal(clamped.value, 10);
    assert.equal(clamped.dLogp, 0);
  });
});

describe("makePpoLoss", () => {
  it("token-mean over ragged responses, entropy bonus and KL, with exact gradients", () => {
    // Two rows: 3 tokens with A = 1, 1 token with A = -1; all ratios 1.
    const s = stats([-1, -2, -0.5, -3], [1, 2, 3, 4]);
    const loss = makePpoLoss(
      {
        oldLogp: Float64Array.from([-1, -2, -0.5, -3]),
        advantages: Float64Array.from([1, 1, 1, -1]),
        refLogp: Float64Array.from([-1, -2, -0.5, -3]),
      },
      { entropyCoef: 0.01, klCoef: 0.1 },
    );
    const r = loss(s);
    // pg: (-1 -1 -1 +1)/4 = -0.5; entropy mean 2.5; KL 0.
    near(r.loss, -0.5 - 0.01 * 2.5);
    near(r.metrics.pg_loss, -0.5);
    near(r.metrics.entropy, 2.5);
    assert.deepEqual(Array.from(r.dLogp), [-0.25, -0.25, -0.25, 0.25]);
    assert.deepEqual(Array.from(r.dEntropy), [-0.0025, -0.0025, -0.0025, -0.0025]);
  });
  it("matches a finite-difference derivative of its own value", () => {
    const logp = [-1.2, -0.3, -2.0, -0.7];
    const inputs = {
      oldLogp: Float64Array.from([-1.0, -0.5, -1.9, -0.7]),
      advantages: Float64Array.from([1.5, -0.7, 2.0, -1.0]),
      refLogp: Float64Array.from([-1.1, -0.4, -2.2, -0.9]),
    };
    const loss = makePpoLoss(inputs, { entropyCoef: 0.01, klCoef: 0.1 });
    const base = loss(stats(logp, [1, 1, 1, 1]));
    for (let i = 0; i < logp.length; i++) {
      const h = 1e-6;
      const up = [...logp];
      const dn = [...logp];
      up[i] += h;
      dn[i] -= h;
      const fd = (loss(stats(up, [1, 1, 1, 1])).loss - loss(stats(dn, [1, 1, 1, 1])).loss) / (2 * h);
      near(base.dLogp[i], fd, 1e-6);
    }
  });
  it("rejects misaligned inputs", () => {
    const loss = makePpoLoss({ oldLogp: new Float64Array(2), advantages: new Float64Array(2) });
    assert.throws(() => loss(stats([0], [0])), /scored tokens/);
  });
});

describe("penalties", () => {
  it("length penalty is linear between half and full length", () => {
    assert.equal(lengthPenalty(50, 2, 100), 0);
    near(lengthPenalty(75, 2, 100), 1);
    assert.equal(lengthPenalty(100, 2, 100), 2);
    assert.equal(lengthPenalty(500, 2, 100), 2);
    near(
      penalisedScore(10, false, 75, { invalidActionCoef: 0.5, lengthCoef: 2, maxResponseTokens: 100 }),
      8.5,
    );
  });
});
