import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { type TrialMetrics, trialsFromPatterns } from "../../src/evaluate/metrics.js";
import {
  binomial,
  HierarchicalBootstrap,
  multinomial,
  type SeedMetrics,
  seedValue,
} from "../../src/report/bootstrap.js";
import { metricsOf } from "./histograms.js";

/**
 * A seed whose trials are won at attempt 1 with probability p, else lost (-1) then won (+1) at
 * attempt 2 with probability q, else lost three times; counts are exact fractions of n.
 */
function seedOf(seed: number, n: number, p: number, q: number): SeedMetrics {
  const w1 = Math.round(n * p);
  const w2 = Math.round((n - w1) * q);
  return { seed, metrics: metricsOf({ W1: w1, "L-1 W1": w2, "L-1 L-1 L-1": n - w1 - w2 }) };
}

/** Seeds whose attempt-1 win rate varies between seeds (seed-level spread) around 0.4. */
function method(seeds: number, n: number, shift = 0): SeedMetrics[] {
  return Array.from({ length: seeds }, (_, s) =>
    seedOf(s, n, 0.4 + shift + 0.08 * Math.sin(1.7 * s + 0.3), 0.3),
  );
}

function logPmf(n: number, k: number, p: number): number {
  let c = 0;
  for (let i = 1; i <= k; i++) c += Math.log((n - k + i) / i);
  return c + k * Math.log(p) + (n - k) * Math.log(1 - p);
}

describe("exact binomial and multinomial draws", () => {
  for (const [n, p] of [
    [2000, 0.3],
    [2000, 0.004],
    [120, 0.5],
    [2000, 0.93],
  ] as const) {
    it(`Binomial(${n}, ${p}) matches its pmf (chi-square)`, () => {
      const rng = Rng.seeded(`binomial-${n}-${p}`);
      const N = 40000;
      const hist = new Map<number, number>();
      for (let i = 0; i < N; i++) {
        const x = binomial(rng, n, p);
        assert.ok(Number.isInteger(x) && x >= 0 && x <= n);
        hist.set(x, (hist.get(x) ?? 0) + 1);
      }
      let chi = 0;
      let df = -1;
      let restO = 0;
      let restE = 0;
      for (let k = 0; k <= n; k++) {
        const e = N * Math.exp(logPmf(n, k, p));
        const o = hist.get(k) ?? 0;
        if (e >= 5) {
          chi += (o - e) ** 2 / e;
          df++;
        } else {
          restO += o;
          restE += e;
        }
      }
      chi += (restO - restE) ** 2 / Math.max(restE, 1e-9);
      df++;
      // Mean df, sd sqrt(2 df): 5 standard deviations is a generous bound for a correct sampler.
      assert.ok(
        chi < df + 5 * Math.sqrt(2 * df),
        `chi-square ${chi.toFixed(1)} with ${df} degrees of freedom`,
      );
    });
  }

  it("edge cases and a multinomial draw that sums to n", () => {
    const rng = Rng.seeded(1);
    assert.equal(binomial(rng, 0, 0.5), 0);
    assert.equal(binomial(rng, 50, 0), 0);
    assert.equal(binomial(rng, 50, 1), 50);
    assert.throws(() => binomial(rng, -1, 0.5), RangeError);
    assert.throws(() => binomial(rng, 5, 1.5), RangeError);
    const probs = [0.5, 0.2, 0.2, 0.1];
    const out = new Float64Array(4);
    const sums = [0, 0, 0, 0];
    for (let r = 0; r < 2000; r++) {
      multinomial(rng, 1000, probs, out);
      assert.equal(
        out.reduce((a, b) => a + b, 0),
        1000,
      );
      out.forEach((c, j) => {
        sums[j] += c;
      });
    }
    sums.forEach((s, j) => {
      assert.ok(Math.abs(s / 2000 / 1000 - probs[j]) < 0.003, `category ${j}: ${s / 2e6}`);
    });
  });
});

describe("hierarchical bootstrap", () => {
  it("the interval contains the mean, which is the mean over seeds of the per-seed metric", () => {
    const bs = new HierarchicalBootstrap();
    const a = method(5, 400);
    for (const stat of ["gain", "final", "score@1", "success@3", "nonloss@2", "success@3-success@1"]) {
      const e = bs.estimate(a, stat);
      const expected = a.reduce((s, x) => s + seedValue(x.metrics, stat), 0) / a.length;
      assert.ok(Math.abs(e.mean - expected) < 1e-12, `${stat}: ${e.mean} vs ${expected}`);
      assert.ok(e.lo <= e.mean && e.mean <= e.hi, `${stat}: ${e.lo} ≤ ${e.mean} ≤ ${e.hi}`);
      assert.ok(e.hi > e.lo, `${stat}: a real interval`);
      assert.deepEqual(e.seeds, [0, 1, 2, 3, 4]);
      assert.equal(e.trials, true);
    }
    // The stored estimates agree with the histogram (chips@k is score@k).
    assert.ok(Math.abs(bs.estimate(a, "chips@1").mean - bs.estimate(a, "score@1").mean) < 1e-12);
    assert.ok(Math.abs(seedValue(a[0].metrics, "gain") - a[0].metrics.gain.mean) < 1e-12);
  });

  it("narrows with more seeds and with more trials", () => {
    const bs = new HierarchicalBootstrap();
    const width = (s: SeedMetrics[]) => {
      const e = bs.estimate(s, "score@1");
      return e.hi - e.lo;
    };
    const few = width(method(3, 200));
    const moreSeeds = width(method(12, 200));
    const moreBoth = width(method(12, 2000));
    assert.ok(moreSeeds < few, `more seeds: ${moreSeeds} < ${few}`);
    assert.ok(moreBoth < moreSeeds, `more trials: ${moreBoth} < ${moreSeeds}`);
    // Trials alone (identical seeds, so no seed-level spread): 16× the trials ≈ a quarter of the width.
    const same = (n: number) => Array.from({ length: 4 }, (_, s) => seedOf(s, n, 0.4, 0.3));
    const w100 = width(same(100));
    const w1600 = width(same(1600));
    assert.ok(w1600 < 0.4 * w100 && w1600 > 0.12 * w100, `${w1600} vs ${w100}`);
  });

  it("agrees with a direct resampling of seeds and trials", () => {
    const data = method(4, 150);
    const bs = new HierarchicalBootstrap();
    const e = bs.estimate(data, "gain");
    // Direct: draw seeds, then every trial of every drawn seed, 2,000 times.
    const rng = Rng.seeded("direct");
    const trials = data.map((d) => trialsFromPatterns(d.metrics.outcomes!).map((t) => t.attempts));
    const gainOf = (a: (typeof trials)[0][0]) => a[a.length - 1].score - a[0].score;
    const reps: number[] = [];
    for (let r = 0; r < 2000; r++) {
      let s = 0;
      for (let i = 0; i < data.length; i++) {
        const t = trials[rng.int(data.length)];
        let g = 0;
        for (let j = 0; j < t.length; j++) g += gainOf(t[rng.int(t.length)]);
        s += g / t.length;
      }
      reps.push(s / data.length);
    }
    reps.sort((x, y) => x - y);
    const lo = reps[50];
    const hi = reps[1949];
    const w = hi - lo;
    assert.ok(Math.abs(e.hi - e.lo - w) < 0.15 * w, `width ${e.hi - e.lo} vs direct ${w}`);
    assert.ok(
      Math.abs(e.lo - lo) < 0.15 * w && Math.abs(e.hi - hi) < 0.15 * w,
      `[${e.lo}, ${e.hi}] vs [${lo}, ${hi}]`,
    );
  });

  it("a method minus itself is exactly 0 with a zero-width interval; differences are paired", () => {
    const bs = new HierarchicalBootstrap();
    const a = method(5, 300);
    for (const stat of ["gain", "final", "score@1", "success@3"]) {
      const d = bs.difference(a, a, stat);
      assert.equal(d.mean, 0);
      assert.equal(d.lo, 0);
      assert.equal(d.hi, 0);
    }
    // The same data under another name (a copy) is still exactly 0.
    const copy = a.map((s) => ({ seed: s.seed, metrics: structuredClone(s.metrics) }));
    const d0 = bs.difference(a, copy, "gain");
    assert.deepEqual([d0.mean, d0.lo, d0.hi], [0, 0, 0]);
    // A real difference: only the shared seeds, antisymmetric mean, interval away from 0 when the shift is large.
    const b = method(6, 300, 0.15).slice(1);
    const d = bs.difference(a, b, "score@1");
    assert.deepEqual(d.seeds, [1, 2, 3, 4]);
    const back = bs.difference(b, a, "score@1");
    assert.ok(Math.abs(d.mean + back.mean) < 1e-12);
    assert.ok(d.hi < 0, `a is clearly worse at attempt 1: ${d.lo}, ${d.hi}`);
    // Paired: the seed-level spread, shared by both methods, cancels; the unpaired spread does not.
    const single = bs.estimate(a, "score@1");
    assert.ok(d.hi - d.lo < single.hi - single.lo, `${d.hi - d.lo} < ${single.hi - single.lo}`);
  });

  it("without outcome histograms resamples seeds only and says so", () => {
    const bs = new HierarchicalBootstrap();
    const a = method(5, 300).map((s) => {
      const { outcomes: _, ...rest } = s.metrics;
      return { seed: s.seed, metrics: rest as TrialMetrics };
    });
    const e = bs.estimate(a, "gain");
    assert.equal(e.trials, false);
    const expected = a.reduce((s, x) => s + x.metrics.gain.mean, 0) / a.length;
    assert.ok(Math.abs(e.mean - expected) < 1e-12);
    assert.ok(e.lo <= e.mean && e.mean <= e.hi && e.hi > e.lo);
    // One seed, seeds only: nothing to resample, the interval is the point.
    const one = bs.estimate(a.slice(0, 1), "gain");
    assert.equal(one.lo, one.hi);
    // Mixed (one side with, one without): seeds only for the difference.
    assert.equal(bs.difference(method(5, 300), a, "gain").trials, false);
  });

  it("is deterministic, and handles missing cells and attempts", () => {
    const a = method(3, 200);
    const e1 = new HierarchicalBootstrap({ seed: 7 }).estimate(a, "final");
    const e2 = new HierarchicalBootstrap({ seed: 7 }).estimate(a, "final");
    assert.deepEqual(e1, e2);
    const bs = new HierarchicalBootstrap();
    const none = bs.estimate([], "gain");
    assert.ok(Number.isNaN(none.mean));
    assert.deepEqual(none.seeds, []);
    // success@5 does not exist with 3 attempts.
    assert.ok(Number.isNaN(bs.estimate(a, "success@5").mean));
    const five = [{ seed: 0, metrics: metricsOf({ "L-1 L-1 L-1 L-1 W1": 30, W1: 70 }, 5) }];
    const g = bs.estimate(five, "success@5-success@3");
    assert.ok(Math.abs(g.mean - 0.3) < 1e-12);
  });
});
