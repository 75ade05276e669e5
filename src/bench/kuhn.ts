import { type CfrVariant, KuhnCfrSolver } from "../opponents/kuhn/cfr.js";
import { nashConvTree } from "../opponents/kuhn/tree.js";

/**
 * Kuhn poker solvers: exact CFR and CFR+ iterations per second, and the iterations and time each
 * needs before the average strategy's NashConv first drops below 1e-3 (checked after every
 * iteration, capped at 10^6 iterations). If the cap would take longer than the time budget, the
 * run stops early and the remaining time to the cap is extrapolated from the measured rate
 * (printed as such).
 */

const TARGET = 1e-3;
const CAP = 1_000_000;
const SEARCH_BUDGET_MS = 20_000;

function rate(variant: CfrVariant): number {
  const solver = new KuhnCfrSolver(variant);
  solver.iterate(500); // warm-up
  let n = 1000;
  for (;;) {
    const t0 = performance.now();
    solver.iterate(n);
    const ms = performance.now() - t0;
    if (ms > 500) return (n / ms) * 1000;
    n *= 2;
  }
}

const fmtSeconds = (s: number) => (s < 1 ? `${(s * 1000).toFixed(2)} ms` : `${s.toFixed(2)} s`);

function nashConvOf(solver: KuhnCfrSolver): number {
  const avg = solver.averageArray();
  return nashConvTree(avg, avg).nashConv;
}

function iterationsToTarget(variant: CfrVariant, itersPerSec: number): string {
  const solver = new KuhnCfrSolver(variant);
  const t0 = performance.now();
  while (solver.iterations < CAP) {
    solver.iterate(1);
    if (nashConvOf(solver) < TARGET) {
      const first = solver.iterations;
      const wall = (performance.now() - t0) / 1000;
      // NashConv of the average is not monotone: also find where it stays below, up to 4x the first hit.
      let lastAbove = 0;
      while (solver.iterations < 4 * first) {
        solver.iterate(1);
        if (nashConvOf(solver) >= TARGET) lastAbove = solver.iterations;
      }
      const stays =
        lastAbove === 0
          ? `stays below through iteration ${4 * first}`
          : `last above at iteration ${lastAbove} (checked up to ${4 * first})`;
      return `first at iteration ${first} = ${fmtSeconds(first / itersPerSec)} of solving at the measured rate (${fmtSeconds(wall)} with a NashConv check after every iteration); ${stays}`;
    }
    if (performance.now() - t0 > SEARCH_BUDGET_MS) {
      const done = solver.iterations;
      return `not reached within ${done} iterations (NashConv ${nashConvOf(solver).toExponential(2)}, ${SEARCH_BUDGET_MS / 1000} s budget); reaching the ${CAP}-iteration cap would take about ${fmtSeconds(CAP / itersPerSec)} of solving (extrapolated from the rate, not run)`;
    }
  }
  return `not reached within the cap of ${CAP} iterations`;
}

export async function run(): Promise<void> {
  const rows: [string, number][] = [];
  for (const variant of ["cfr", "cfr+"] as const) {
    const r = rate(variant);
    rows.push([variant, r]);
    console.log(
      `${variant.padEnd(4)}  ${Math.round(r).toLocaleString("en-US")} iterations/s (exact, 6 deals, both players per iteration)`,
    );
    console.log(`      NashConv < ${TARGET}: ${iterationsToTarget(variant, r)}`);
  }
  console.log(`cfr+ / cfr iteration-rate ratio: ${(rows[1][1] / rows[0][1]).toFixed(2)}x`);
}
