import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type AttemptOutcome,
  bootstrapMean,
  computeTrialMetrics,
  decodeOutcomeOrder,
  encodeOutcomeOrder,
  inTrialGain,
  metricsByOpponent,
  nonLossAt,
  outcomeOrderWidth,
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
  it("wonTurnsAt: the turns of the attempts that won, per attempt (steps to the goal)", () => {
    const T = (score: number, turns: number): AttemptOutcome => ({ ...A(score), turns });
    const trials = [
      trial(T(1, 9)),
      trial(T(1, 5)),
      trial(T(-1, 12), T(1, 3)),
      trial(T(-1, 12), T(-1, 12), T(-1, 12)),
    ];
    const m = computeTrialMetrics(trials, 3);
    assert.deepEqual(
      m.wonTurnsAt!.map((e) => [e.mean, e.n]),
      [
        [7, 2],
        [3, 1],
        [Number.NaN, 0],
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

describe("outcomeOrder: the trials' patterns in trial order", () => {
  it("computeTrialMetrics records each trial's pattern in the order the trials came", () => {
    const trials = [
      trial(A(2)),
      trial(A(-1), A(-2), A(1)),
      trial(A(0), A(0), A(-1)),
      trial(A(2)),
      trial(A(-1), A(-2), A(1)),
    ];
    const m = computeTrialMetrics(trials, 3);
    // Sorted keys: "D0 D0 L-1" (0), "L-1 L-2 W1" (1), "W2" (2).
    assert.equal(m.outcomeOrder, "21021");
    const d = decodeOutcomeOrder(m)!;
    assert.deepEqual(d.patterns, ["D0 D0 L-1", "L-1 L-2 W1", "W2"]);
    assert.deepEqual(
      [...d.order].map((j) => d.patterns[j]),
      trials.map(outcomePattern),
    );
    // Reversing the trials reverses the record, not the histogram.
    const r = computeTrialMetrics([...trials].reverse(), 3);
    assert.deepEqual(r.outcomes, m.outcomes);
    assert.equal(r.outcomeOrder, "12012");
  });

  it("the width grows past 36 patterns, and round-trips at every width", () => {
    assert.equal(outcomeOrderWidth(0), 1);
    assert.equal(outcomeOrderWidth(36), 1);
    assert.equal(outcomeOrderWidth(37), 2);
    assert.equal(outcomeOrderWidth(1296), 2);
    assert.equal(outcomeOrderWidth(1297), 3);
    for (const distinct of [1, 36, 37, 1300]) {
      // Trials of `distinct` different scores, in a scrambled order, each score at least once.
      const n = distinct + 50;
      const trials = Array.from({ length: n }, (_, i) => trial(A(((i * 7919) % n) % distinct)));
      const m = computeTrialMetrics(trials, 1);
      assert.equal(Object.keys(m.outcomes!).length, distinct);
      assert.equal(m.outcomeOrder!.length, n * outcomeOrderWidth(distinct));
      const d = decodeOutcomeOrder(m)!;
      assert.deepEqual(
        [...d.order].map((j) => d.patterns[j]),
        trials.map(outcomePattern),
      );
    }
  });

  it("2,000 trials of a few patterns cost 2,000 characters", () => {
    const trials = Array.from({ length: 2000 }, (_, i) => trial(A(i % 3 === 0 ? 2 : -1)));
    assert.equal(encodeOutcomeOrder(trials.map(outcomePattern)).length, 2000);
  });

  it("decoding gives null without the record and refuses one that contradicts the histogram", () => {
    assert.equal(decodeOutcomeOrder({ outcomes: { W1: 2 } }), null);
    assert.equal(decodeOutcomeOrder({ outcomeOrder: "00" }), null);
    assert.deepEqual(
      [...decodeOutcomeOrder({ outcomes: { W1: 2, "L-1": 1 }, outcomeOrder: "101" })!.order],
      [1, 0, 1],
    );
    assert.throws(
      () => decodeOutcomeOrder({ outcomes: { W1: 2, "L-1": 1 }, outcomeOrder: "10" }),
      /3 trials/,
    );
    assert.throws(
      () => decodeOutcomeOrder({ outcomes: { W1: 2, "L-1": 1 }, outcomeOrder: "102" }),
      /code "2"/,
    );
    assert.throws(
      () => decodeOutcomeOrder({ outcomes: { W1: 2, "L-1": 1 }, outcomeOrder: "100" }),
      /occurs 2 times/,
    );
    assert.throws(
      () => decodeOutcomeOrder({ outcomes: { W1: 2, "L-1": 1 }, outcomeOrder: "1-1" }),
      /code "-"/,
    );
  });
});
