import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type AttemptOutcome,
  bootstrapMean,
  computeTrialMetrics,
  inTrialGain,
  metricsByOpponent,
  nonLossAt,
  outcomePattern,
  scoreAt,
  successAt,
  type TrialOutcome,
  trialsFromPatterns,
} from "../../src/evaluate/metrics.js";

const A = (score: number, won = score > 0, draw = score === 0): AttemptOutcome => ({
  won,
  draw,
  score,
  reward: score,
  turns: 2,
  invalidActions: 0,
});
const trial = (...attempts: AttemptOutcome[]): TrialOutcome => ({
  opponent: "cfr",
  seat: "second",
  taskId: "t",
  attempts,
});

describe("trial metrics", () => {
  it("success@k is cumulative; outcome and score carry the last attempt forward", () => {
    const t = trial(A(-1), A(2)); // lost then won at attempt 2, stopped
    assert.deepEqual(
      [1, 2, 3].map((k) => successAt(t, k)),
      [false, true, true],
    );
    assert.deepEqual(
      [1, 2, 3].map((k) => scoreAt(t, k)),
      [-1, 2, 2],
    );
    assert.deepEqual(
      [1, 2, 3].map((k) => nonLossAt(t, k)),
      [false, true, true],
    );
    assert.equal(inTrialGain(t), 3);
  });
  it("a draw is a non-loss but not a success", () => {
    const t = trial(A(0), A(0), A(-1));
    assert.deepEqual(
      [1, 2, 3].map((k) => successAt(t, k)),
      [false, false, false],
    );
    assert.deepEqual(
      [1, 2, 3].map((k) => nonLossAt(t, k)),
      [true, true, false],
    );
  });
  it("aggregates with intervals and per-opponent cells", () => {
    const trials = [trial(A(-1), A(-1), A(1)), trial(A(2)), { ...trial(A(-2), A(-1), A(-1)), opponent: "x" }];
    const m = computeTrialMetrics(trials, 3);
    assert.deepEqual(
      m.successAt.map((e) => e.mean),
      [1 / 3, 1 / 3, 2 / 3],
    );
    assert.ok(Math.abs(m.gain.mean - (2 + 0 + 1) / 3) < 1e-12);
    assert.ok(m.gain.lo <= m.gain.mean && m.gain.mean <= m.gain.hi);
    const cells = metricsByOpponent(trials, 3);
    assert.deepEqual(
      cells.map((c) => [c.opponent, c.metrics.trials]),
      [
        ["cfr", 2],
        ["x", 1],
      ],
    );
  });
  it("outcome patterns compress trials without changing any score measure", () => {
    const trials = [
      trial(A(-1), A(-2), A(1)),
      trial(A(2)),
      trial(A(-1), A(-2), A(1)),
      trial(A(0), A(0), A(-1)),
    ];
    assert.equal(outcomePattern(trials[0]), "L-1 L-2 W1");
    assert.equal(outcomePattern(trials[3]), "D0 D0 L-1");
    const m = computeTrialMetrics(trials, 3);
    assert.deepEqual(m.outcomes, { "L-1 L-2 W1": 2, W2: 1, "D0 D0 L-1": 1 });
    const back = computeTrialMetrics(trialsFromPatterns(m.outcomes!), 3);
    for (const key of ["successAt", "nonLossAt", "scoreAt"] as const) {
      assert.deepEqual(
        back[key].map((e) => e.mean),
        m[key].map((e) => e.mean),
      );
    }
    assert.equal(back.gain.mean, m.gain.mean);
    assert.equal(back.final.mean, m.final.mean);
  });
  it("bootstrap intervals are deterministic and shrink with more data", () => {
    const small = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? 1 : -1));
    const big = Array.from({ length: 2000 }, (_, i) => (i % 2 === 0 ? 1 : -1));
    assert.deepEqual(bootstrapMean(small, 3), bootstrapMean(small, 3));
    const s = bootstrapMean(small);
    const b = bootstrapMean(big);
    assert.ok(b.hi - b.lo < s.hi - s.lo);
    assert.ok(b.lo < 0 && b.hi > 0);
  });
});
