/**
 * Trial metrics straight from an outcome-pattern histogram, for the report tests (not a test file
 * itself). Small histograms go through `computeTrialMetrics`; large ones get the same means with
 * point intervals, skipping its per-trial bootstrap (2,000 resamples per measure), which would
 * dominate the tests' time. The hierarchical bootstrap reads only the histogram and the means.
 */
import {
  computeTrialMetrics,
  type Estimate,
  nonLossAt,
  scoreAt,
  successAt,
  type TrialMetrics,
  type TrialOutcome,
  trialsFromPatterns,
} from "../../src/evaluate/metrics.js";

export function metricsOf(outcomes: Record<string, number>, attempts = 3): TrialMetrics {
  const trials = trialsFromPatterns(outcomes);
  if (trials.length <= 150) return computeTrialMetrics(trials, attempts, 0);
  const point = (f: (t: TrialOutcome) => number): Estimate => {
    const m = trials.reduce((a, t) => a + f(t), 0) / trials.length;
    return { mean: m, lo: m, hi: m, n: trials.length };
  };
  const ks = Array.from({ length: attempts }, (_, i) => i + 1);
  return {
    trials: trials.length,
    attempts,
    successAt: ks.map((k) => point((t) => (successAt(t, k) ? 1 : 0))),
    nonLossAt: ks.map((k) => point((t) => (nonLossAt(t, k) ? 1 : 0))),
    scoreAt: ks.map((k) => point((t) => scoreAt(t, k))),
    final: point((t) => t.attempts[t.attempts.length - 1].score),
    gain: point((t) => t.attempts[t.attempts.length - 1].score - t.attempts[0].score),
    invalidRate: 0,
    meanAttemptsPlayed: trials.reduce((a, t) => a + t.attempts.length, 0) / trials.length,
    outcomes: { ...outcomes },
  };
}
