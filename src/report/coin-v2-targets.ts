/**
 * Issue 56's targets on the coin collector's second grid (`configs/experiments/coin-real-v2.yaml`:
 * 8 rooms, where a first attempt often fails and what it saw decides the second). First what memory
 * adds: each model with memory against the same model retried independently (its `independentEval`,
 * the final evaluation's cells and seeds with no memory between attempts), paired within each run.
 * Then issue 45's lines on this grid: in-trial gain, and MAGE and LaMer-style against GiGPO and
 * zero-shot at success@3, on the test seeds and on the harder set. Every line asks for an interval
 * above 0 over the grid's seeds; a seed whose run `train.maxMinutes` stopped early is left out.
 */
import type { BootstrapEstimate, HierarchicalBootstrap } from "./bootstrap.js";
import {
  COIN_CELL,
  COIN_V2_CONFIG,
  COIN_V2_EXPERIMENT,
  type CoinSpec,
  coinGrid,
  coinLine,
  coinNotRun,
  coinSourceTargets,
  hasSource,
  isCoinV2,
  META_METHODS,
  rate,
} from "./coin-targets.js";
import {
  completeRuns,
  type ExperimentGame,
  findMethod,
  LAMER,
  MAGE,
  type MethodRuns,
  methodEstimate,
  withinRunDifference,
} from "./compare.js";
import { DASH, formatPercent } from "./markdown.js";
import type { PairedEstimate } from "./pairing.js";
import { clearlyAbove, type TargetLine } from "./verdicts.js";

export const COIN_V2_LABEL = "coin collector v2 (real LLM, 8 rooms)";
const V2: CoinSpec = { label: COIN_V2_LABEL, config: COIN_V2_CONFIG };

/** The grid's methods evaluated with memory between attempts (each also retried independently). */
export const MEMORY_METHODS: readonly string[] = [MAGE, "mage-history", "mage-both", LAMER, "reflexion"];
/** MAGE in each memory mode: reflection_only, history_only, history_and_reflection. */
export const MEMORY_MODES: readonly string[] = [MAGE, "mage-history", "mage-both"];

/** What a method's evaluation keeps between attempts (`eval.reflection`, else `task.reflection`). */
export function memoryOf(m: MethodRuns): string {
  const c = m.runs[0]?.summary.config;
  return c?.eval?.reflection ?? c?.task?.reflection ?? "?";
}

/** success@3 with memory − the same model retried independently, paired within each run. */
export function memoryDifference(bs: HierarchicalBootstrap, m: MethodRuns): PairedEstimate {
  return withinRunDifference(bs, m, COIN_CELL, "success@3", "final", "independent");
}

/** success@3 of a method's evaluation over the seeds a within-run difference kept. */
export function onKeptSeeds(
  bs: HierarchicalBootstrap,
  m: MethodRuns,
  d: BootstrapEstimate,
  source: "final" | "independent",
): BootstrapEstimate {
  const kept = { ...m, runs: completeRuns(m).runs.filter((r) => d.seeds.includes(r.summary.seed)) };
  return methodEstimate(bs, kept, COIN_CELL, "success@3", source);
}

function memoryTarget(
  bs: HierarchicalBootstrap,
  grid: ExperimentGame | null,
  meta: { name: string; label: string },
  absent: string,
): TargetLine {
  const t =
    `test seeds: ${meta.label} with its memory − the same model retried independently, ` +
    "success@3 > 0 (paired within each run, interval above 0)";
  if (!grid) return coinNotRun(V2, t, absent);
  const m = findMethod(grid.methods, meta.name);
  if (!hasSource(m, "final") || !hasSource(m, "independent"))
    return coinNotRun(
      V2,
      t,
      `no ${meta.name} summaries with both a final and an independent evaluation (\`eval.independent\`, ${COIN_V2_CONFIG})`,
    );
  const d = memoryDifference(bs, m!);
  const levels = Number.isFinite(d.mean)
    ? `with memory ${rate1(onKeptSeeds(bs, m!, d, "final"))}, retried independently ${rate1(onKeptSeeds(bs, m!, d, "independent"))}; `
    : "";
  return coinLine(V2, t, `${levels}difference ${rate(d)}`, clearlyAbove(d));
}

/** A rate's mean alone ("45.0%"). */
function rate1(e: BootstrapEstimate): string {
  return Number.isFinite(e.mean) ? formatPercent(e.mean) : DASH;
}

/** Issue 56's coin-collector targets: what memory adds, then issue 45's lines on the test seeds and the harder set. */
export function coinV2Targets(bs: HierarchicalBootstrap, games: readonly ExperimentGame[]): TargetLine[] {
  const grid = coinGrid(games, true);
  const absent = games.some(isCoinV2)
    ? `no ${MAGE} summaries of ${COIN_V2_EXPERIMENT} yet (${COIN_V2_CONFIG})`
    : `not run yet: no ${COIN_V2_EXPERIMENT} summaries (${COIN_V2_CONFIG})`;
  return [
    ...META_METHODS.map((meta) => memoryTarget(bs, grid, meta, absent)),
    ...coinSourceTargets(bs, grid, "final", "test seeds", V2, absent),
    ...coinSourceTargets(bs, grid, "harder", "harder set (more rooms)", V2, absent),
  ];
}
