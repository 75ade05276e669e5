import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { assignCredit, type CreditRow } from "../../src/algo/credit.js";

const P = (attempt: number, reward: number): CreditRow => ({ phase: "play", attempt, reward });
const R = (attempt: number): CreditRow => ({ phase: "reflect", attempt, reward: 1 });
const MAGE = { mode: "differential", stepGamma: 0.95, trajGamma: 0.6, returnForm: "reference" } as const;

function close(actual: number[], expected: number[], tol = 1e-4): void {
  assert.equal(actual.length, expected.length);
  for (const [i, a] of actual.entries())
    assert.ok(Math.abs(a - expected[i]) <= tol, `index ${i}: ${a} vs ${expected[i]}`);
}

describe("credit assignment (reference §2 worked examples)", () => {
  it("lose then win", () => {
    const c = assignCredit([P(0, 0), P(0, 0), P(0, -10), R(1), P(1, 0), P(1, 0), P(1, 10)], MAGE);
    close(c.episodeRewards, [-10, -10, -10, 0, 20, 20, 20]);
    close(c.stepReturns, [0.7491, 0.7885, 0.83, 18.05, 18.05, 19.0, 20.0]);
    close(c.attemptReturns, [-10, 10]);
  });
  it("lose, lose, win", () => {
    const c = assignCredit([P(0, 0), P(0, -10), R(1), P(1, 0), P(1, -10), R(2), P(2, 0), P(2, 10)], MAGE);
    close(c.episodeRewards, [-10, -10, 0, 0, 0, 0, 20, 20]);
    close(c.stepReturns, [-3.3269, -3.502, 10.83, 10.83, 11.4, 19.0, 19.0, 20.0]);
  });
  it("immediate win", () => {
    const c = assignCredit([P(0, 0), P(0, 10)], MAGE);
    close(c.episodeRewards, [10, 10]);
    close(c.stepReturns, [9.5, 10.0]);
  });
  it("draw then loss", () => {
    const c = assignCredit([P(0, 0), P(0, 0), R(1), P(1, -10)], MAGE);
    close(c.episodeRewards, [0, 0, 0, -10]);
    close(c.stepReturns, [-5.7, -6.0, -10, -10]);
  });
  it("with both gammas 1 the first return telescopes to the final attempt's reward", () => {
    const rows = [P(0, 3), P(0, -1), R(1), P(1, 4), P(1, 2), R(2), P(2, -5), P(2, 1)];
    const c = assignCredit(rows, { ...MAGE, stepGamma: 1, trajGamma: 1 });
    close([c.stepReturns[0]], [-4]);
  });
  it("per-attempt (LaMer) mode pays C[k] and discounts raw rewards", () => {
    const c = assignCredit([P(0, 0), P(0, -10), R(1), P(1, 10)], {
      mode: "per-attempt",
      stepGamma: 0.5,
      trajGamma: 0.5,
      returnForm: "reference",
    });
    close(c.episodeRewards, [-10, -10, 0, 10]);
    // row1: -10 + 0.5*10 = -5; row0: 0 + 0.5*-5 = -2.5; reflect row inherits 10
    close(c.stepReturns, [-2.5, -5, 10, 10]);
  });
  it("paper cross-episode return differs from the reference recursion", () => {
    const rows = [P(0, 0), P(0, 0), P(0, -10), R(1), P(1, 0), P(1, 0), P(1, 10)];
    const c = assignCredit(rows, { ...MAGE, returnForm: "paper" });
    // g^(1)_0 = 0.95^2 * 20 = 18.05; attempt-0 rows: g_t + 0.6 * 18.05
    close(c.stepReturns, [0.95 ** 2 * -10 + 10.83, 0.95 * -10 + 10.83, -10 + 10.83, 18.05, 18.05, 19, 20]);
  });
  it("rejects rows out of attempt order", () => {
    assert.throws(() => assignCredit([P(1, 0), P(0, 0)], MAGE), /attempt order/);
  });
});
