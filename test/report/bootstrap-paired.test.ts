import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { encodeOutcomeOrder, type TrialMetrics } from "../../src/evaluate/metrics.js";
import { HierarchicalBootstrap, type SeedMetrics } from "../../src/report/bootstrap.js";
import type { Experiment } from "../../src/report/experiments.js";
import { buildResults } from "../../src/report/results.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";
import { metricsOf } from "./histograms.js";

/**
 * Trial pairing by deal in the hierarchical bootstrap's differences (`outcomeOrder`). Metrics
 * come from the patterns' histogram (`metricsOf`), with the order taken from the patterns as
 * given (the histogram alone does not keep it).
 */
function metricsFromTrials(patterns: readonly string[], attempts: number, withOrder = true): TrialMetrics {
  const outcomes: Record<string, number> = {};
  for (const p of patterns) outcomes[p] = (outcomes[p] ?? 0) + 1;
  const { outcomeOrder: _histogramOrder, ...metrics } = metricsOf(outcomes, attempts);
  return withOrder ? { ...metrics, outcomeOrder: encodeOutcomeOrder(patterns) } : metrics;
}

/**
 * Two methods on the same deals: each deal is good (+2 if played well) or bad (−1); method A plays
 * every deal "as dealt", method B the same except that a fraction `flip` of its trials go the other
 * way. Their per-trial outcomes are strongly correlated through the deal.
 */
function correlatedPair(seeds: number, n: number, flip: number): { a: SeedMetrics[]; b: SeedMetrics[] } {
  const a: SeedMetrics[] = [];
  const b: SeedMetrics[] = [];
  for (let s = 0; s < seeds; s++) {
    const rng = Rng.seeded(`deals-${s}`);
    // Half the deals are good in every seed, so the seeds agree on A − B's expectation (pairing
    // removes trial noise, not a real spread between seeds).
    const good = 0.5;
    const pa: string[] = [];
    const pb: string[] = [];
    for (let i = 0; i < n; i++) {
      const deal = rng.float() < good;
      pa.push(deal ? "W2" : "L-1");
      const other = rng.float() < flip ? !deal : deal;
      pb.push(other ? "W2" : "L-1");
    }
    a.push({ seed: s, metrics: metricsFromTrials(pa, 1) });
    b.push({ seed: s, metrics: metricsFromTrials(pb, 1) });
  }
  return { a, b };
}

const strip = (list: readonly SeedMetrics[], keep: (seed: number) => boolean = () => false): SeedMetrics[] =>
  list.map((s) => {
    if (keep(s.seed)) return s;
    const { outcomeOrder: _drop, ...rest } = s.metrics;
    return { seed: s.seed, metrics: rest };
  });

describe("hierarchical bootstrap: differences paired by trial (same deal)", () => {
  const { a, b } = correlatedPair(5, 2000, 0.05);

  it("a difference of strongly correlated methods gets a much narrower interval when paired", () => {
    const paired = new HierarchicalBootstrap().difference(a, b, "final");
    const unpaired = new HierarchicalBootstrap().difference(strip(a), strip(b), "final");
    assert.deepEqual(paired.trialPairedSeeds, [0, 1, 2, 3, 4]);
    assert.deepEqual(unpaired.trialPairedSeeds, []);
    assert.ok(paired.trials && unpaired.trials);
    // The point estimate does not depend on the pairing.
    assert.ok(Math.abs(paired.mean - unpaired.mean) < 1e-12, `${paired.mean} vs ${unpaired.mean}`);
    const wp = paired.hi - paired.lo;
    const wu = unpaired.hi - unpaired.lo;
    assert.ok(wp > 0, "a paired interval still has width when the methods differ");
    // Per-trial variance of A − B is 9·0.05 = 0.45 paired, 2·2.25 = 4.5 unpaired; the seed level adds
    // the spread of the observed per-seed differences (≈ 0.45/n) to both, so paired/unpaired width
    // ≈ √((0.45 + 0.45) / (0.45 + 4.5)) ≈ 0.43. Without pairing the ratio would be ~1.
    assert.ok(wp < 0.5 * wu, `paired width ${wp.toFixed(4)} vs unpaired ${wu.toFixed(4)}`);
    assert.ok(paired.lo <= paired.mean && paired.mean <= paired.hi);
  });

  it("a method minus itself is exactly 0, with and without the order", () => {
    for (const side of [a, strip(a)]) {
      const d = new HierarchicalBootstrap().difference(side, side, "final");
      assert.equal(d.mean, 0);
      assert.equal(d.lo, 0);
      assert.equal(d.hi, 0);
    }
    // A copy of the same data (other objects) pairs the same way.
    const copy = a.map((s) => ({ seed: s.seed, metrics: structuredClone(s.metrics) }));
    const d = new HierarchicalBootstrap().difference(a, copy, "gain");
    assert.deepEqual([d.mean, d.lo, d.hi], [0, 0, 0]);
    assert.deepEqual(d.trialPairedSeeds, [0, 1, 2, 3, 4]);
  });

  it("pairs by the recorded order: the same histogram in another trial order is not a zero difference", () => {
    const shuffled = a.map((s) => {
      const d = s.metrics.outcomeOrder!.split("");
      Rng.seeded(`shuffle-${s.seed}`).shuffle(d);
      return { seed: s.seed, metrics: { ...s.metrics, outcomeOrder: d.join("") } };
    });
    const d = new HierarchicalBootstrap().difference(a, shuffled, "final");
    assert.equal(d.mean, 0);
    assert.ok(d.hi - d.lo > 0.05, `[${d.lo}, ${d.hi}]`);
  });

  it("falls back to independent draws for a seed where one side lacks the order or the trial counts differ", () => {
    // All of B without order: exactly today's behaviour (same numbers as with no order anywhere).
    const none = new HierarchicalBootstrap().difference(a, strip(b), "final");
    const old = new HierarchicalBootstrap().difference(strip(a), strip(b), "final");
    assert.deepEqual(none, old);
    // Seed 2 of B without order: the other four seeds are paired.
    const some = new HierarchicalBootstrap().difference(
      a,
      strip(b, (s) => s !== 2),
      "final",
    );
    assert.deepEqual(some.trialPairedSeeds, [0, 1, 3, 4]);
    const wSome = some.hi - some.lo;
    const full = new HierarchicalBootstrap().difference(a, b, "final");
    assert.ok(wSome > full.hi - full.lo && wSome < old.hi - old.lo);
    // Different trial counts in seed 0: not paired there.
    const short = correlatedPair(1, 1500, 0.05).b;
    const mixed = [short[0], ...b.slice(1)];
    assert.deepEqual(
      new HierarchicalBootstrap().difference(a, mixed, "final").trialPairedSeeds,
      [1, 2, 3, 4],
    );
  });

  it("a single method's estimate ignores the order", () => {
    assert.deepEqual(
      new HierarchicalBootstrap().estimate(a, "final"),
      new HierarchicalBootstrap().estimate(strip(a), "final"),
    );
    assert.deepEqual(new HierarchicalBootstrap().estimate(a, "final").trialPairedSeeds, []);
  });

  it("is deterministic, and cached banks give the same numbers as fresh ones", () => {
    const bs = new HierarchicalBootstrap({ seed: 7 });
    const first = bs.difference(a, b, "final");
    bs.difference(b, a, "final");
    assert.deepEqual(bs.difference(a, b, "final"), first);
    assert.deepEqual(new HierarchicalBootstrap({ seed: 7 }).difference(a, b, "final"), first);
    const other = new HierarchicalBootstrap({ seed: 8 }).difference(a, b, "final");
    assert.notEqual(other.lo, first.lo);
  });

  it("joint-histogram draws have the spread of resampling trial indices directly (one seed)", () => {
    const one = { a: a.slice(0, 1), b: b.slice(0, 1) };
    const R = 2000;
    const bs = new HierarchicalBootstrap({ resamples: R });
    const d = bs.difference(one.a, one.b, "final");
    // Direct: draw n trial indices with replacement, both methods at the same indices.
    const score = (p: string) => (p === "W2" ? 2 : -1);
    const decode = (m: TrialMetrics) => {
      const keys = Object.keys(m.outcomes!).sort();
      return m.outcomeOrder!.split("").map((c) => score(keys[Number.parseInt(c, 36)]));
    };
    const va = decode(one.a[0].metrics);
    const vb = decode(one.b[0].metrics);
    const n = va.length;
    const rng = Rng.seeded("direct");
    const reps: number[] = [];
    for (let r = 0; r < R; r++) {
      let s = 0;
      for (let i = 0; i < n; i++) {
        const j = rng.int(n);
        s += va[j] - vb[j];
      }
      reps.push(s / n);
    }
    reps.sort((x, y) => x - y);
    const directWidth = reps[Math.ceil(0.975 * R) - 1] - reps[Math.floor(0.025 * R)];
    const width = d.hi - d.lo;
    assert.ok(
      Math.abs(width / directWidth - 1) < 0.15,
      `joint-multinomial width ${width.toFixed(4)}, index resampling ${directWidth.toFixed(4)}`,
    );
  });

  it("works for a statistic that is itself a difference of metrics, on attempts beyond the first", () => {
    const rng = Rng.seeded("two-attempts");
    const pa: string[] = [];
    const pb: string[] = [];
    for (let i = 0; i < 600; i++) {
      const hard = rng.float() < 0.5;
      pa.push(hard ? "L-1 W1" : "W2");
      pb.push(hard ? (rng.float() < 0.5 ? "L-1 L-1" : "L-1 W1") : "W2");
    }
    const A = [{ seed: 0, metrics: metricsFromTrials(pa, 2) }];
    const B = [{ seed: 0, metrics: metricsFromTrials(pb, 2) }];
    const p = new HierarchicalBootstrap().difference(A, B, "success@2-success@1");
    const u = new HierarchicalBootstrap().difference(strip(A), strip(B), "success@2-success@1");
    assert.ok(Math.abs(p.mean - u.mean) < 1e-12);
    assert.ok(p.mean > 0.15 && p.mean < 0.35, `${p.mean}`);
    assert.ok(p.hi - p.lo < u.hi - u.lo);
  });
});

describe("results report: which differences were paired by deal", () => {
  function experiment(stripFrom: readonly string[]): Experiment {
    const runs = ["mage", "lamer", "grpo"].flatMap((name, mi) =>
      [0, 1].map((seed) => {
        const rng = Rng.seeded(`report-${seed}`);
        const rng2 = Rng.seeded(`report-${name}-${seed}`);
        const patterns = Array.from({ length: 300 }, () => {
          const good = rng.float() < 0.5;
          return (rng2.float() < 0.1 * mi ? !good : good) ? "W2" : "L-1 L-1 L-1";
        });
        const metrics = metricsFromTrials(patterns, 3, !stripFrom.includes(name));
        const base = makeSummary({
          name,
          seed,
          iterations: 2,
          evalEvery: 0,
          finalTrials: 2,
          opponents: ["conservative"],
          cells: [{ opponent: "cfr", seat: "second", unseen: true }],
        });
        const summary: RunSummary = {
          ...base,
          finalEval: {
            iteration: 2,
            attempts: 3,
            trialsPerCell: 300,
            cells: [{ opponent: "cfr", seat: "second", unseen: true, metrics }],
          },
        };
        return { path: `/x/main/${name}-s${seed}.json`, summary };
      }),
    );
    return { name: "main", dir: "/x/main", info: null, runs, diversity: [] };
  }

  it("notes full pairing, and names the differences that could not be paired", () => {
    const all = buildResults([experiment([])], { plotsLink: "." }).markdown;
    assert.match(all, /_Trials paired by deal within every seed in these differences\._/);
    const some = buildResults([experiment(["grpo"])], { plotsLink: "." }).markdown;
    assert.match(
      some,
      /_Trials paired by deal within every seed: mage − lamer; not paired within seeds \(.*\): mage − grpo\._/,
    );
    const none = buildResults([experiment(["mage"])], { plotsLink: "." }).markdown;
    assert.match(
      none,
      /_Trials not paired by deal within seeds here \(the summaries lack their per-trial order\)/,
    );
    assert.ok(!none.includes("_Trials paired by deal"));
  });
});
