/**
 * Issue 45's targets on TextWorldExpress's coin collector with a real LLM
 * (`configs/experiments/coin-real-main.yaml`): in-trial gain as success@3 − success@1 for MAGE and
 * LaMer-style, both against GiGPO and against the untrained base resampled (zero-shot) at
 * success@3, and the same on the harder held-out set (more rooms). Every comparison asks for a
 * paired interval above 0, over the grid's seeds and trials. Issue 56's second grid
 * (`coin-real-v2`, 8 rooms) asks the same and more (coin-v2-targets.ts); each reads its own grid.
 */
import type { BootstrapEstimate, HierarchicalBootstrap } from "./bootstrap.js";
import {
  type EvalSource,
  type ExperimentGame,
  findMethod,
  LAMER,
  MAGE,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
  seedMetrics,
} from "./compare.js";
import { realGrid } from "./real-targets.js";
import { clearlyAbove, formatInterval, type TargetLine } from "./verdicts.js";

export const COIN_GAME = "twx-coin";
const COIN_CONFIG = "configs/experiments/coin-real-main.yaml";
export const COIN_LABEL = "coin collector (real LLM)";
/** Issue 56's grid: 8 rooms, every model with memory also retried independently. */
export const COIN_V2_EXPERIMENT = "coin-real-v2";
export const COIN_V2_CONFIG = "configs/experiments/coin-real-v2.yaml";
export const COIN_CELL = { opponent: "none", seat: "none" };
export const META_METHODS = [
  { name: MAGE, label: "MAGE" },
  { name: LAMER, label: "LaMer-style" },
];
const OTHERS = [
  { name: "gigpo", label: "GiGPO" },
  { name: "zeroshot", label: "zero-shot (the untrained base resampled)" },
];

/** Which coin grid a set of targets reads: its label in the targets table and its grid file. */
export interface CoinSpec {
  label: string;
  config: string;
}

const V1: CoinSpec = { label: COIN_LABEL, config: COIN_CONFIG };

/** True for the runs of issue 56's grid (by its name, the name it ran under, or its grid file). */
export function isCoinV2(g: ExperimentGame): boolean {
  const e = g.experiment;
  return (
    g.game === COIN_GAME &&
    (e.name === COIN_V2_EXPERIMENT || e.info?.name === COIN_V2_EXPERIMENT || e.info?.file === COIN_V2_CONFIG)
  );
}

/** The real-model coin grid of issue 45 (`v2` false) or issue 56 (`v2` true), or null. */
export function coinGrid(games: readonly ExperimentGame[], v2 = false): ExperimentGame | null {
  return realGrid(
    games.filter((g) => isCoinV2(g) === v2),
    COIN_GAME,
  );
}

export const rate = (e: BootstrapEstimate) => formatInterval(e, "rate");

export function coinLine(
  spec: CoinSpec,
  target: string,
  measured: string,
  v: ReturnType<typeof clearlyAbove>,
): TargetLine {
  const out: TargetLine = { game: spec.label, target, measured, verdict: v.verdict };
  return v.note ? { ...out, note: v.note } : out;
}

export function coinNotRun(spec: CoinSpec, target: string, why: string): TargetLine {
  return { game: spec.label, target, measured: why, verdict: "not run" };
}

export const hasSource = (m: MethodRuns | undefined, source: EvalSource) =>
  m !== undefined && seedMetrics(m, COIN_CELL.opponent, COIN_CELL.seat, source).length > 0;

/**
 * One evaluation's targets: the two methods' gains, then each against GiGPO and zero-shot. `absent`
 * is what a line says when the grid has no summaries at all (default: as when a method lacks them).
 */
export function coinSourceTargets(
  bs: HierarchicalBootstrap,
  grid: ExperimentGame | null,
  source: EvalSource,
  where: string,
  spec: CoinSpec = V1,
  absent?: string,
): TargetLine[] {
  const out: TargetLine[] = [];
  const missing = (names: string) =>
    !grid && absent ? absent : `no ${names} summaries with this evaluation (${spec.config})`;
  for (const meta of META_METHODS) {
    const gainT = `${where}: ${meta.label} in-trial gain success@3 − success@1 > 0 (interval above 0)`;
    const m = grid ? findMethod(grid.methods, meta.name) : undefined;
    if (!hasSource(m, source)) {
      out.push(coinNotRun(spec, gainT, missing(meta.name)));
    } else {
      const gain = methodEstimate(bs, m!, COIN_CELL, "success@3-success@1", source);
      out.push(coinLine(spec, gainT, rate(gain), clearlyAbove(gain)));
    }
    for (const other of OTHERS) {
      const t = `${where}: ${meta.label} − ${other.label} success@3 > 0 (paired interval above 0)`;
      const o = grid ? findMethod(grid.methods, other.name) : undefined;
      if (!hasSource(m, source) || !hasSource(o, source)) {
        out.push(coinNotRun(spec, t, missing(`${meta.name} and ${other.name}`)));
        continue;
      }
      const d = pairedDifference(bs, m!, o!, COIN_CELL, "success@3", source);
      out.push(coinLine(spec, t, rate(d), clearlyAbove(d)));
    }
  }
  return out;
}

/** Issue 45's coin-collector targets, on the test seeds and on the harder set. */
export function coinTargets(bs: HierarchicalBootstrap, games: readonly ExperimentGame[]): TargetLine[] {
  const grid = coinGrid(games);
  return [
    ...coinSourceTargets(bs, grid, "final", "test seeds"),
    ...coinSourceTargets(bs, grid, "harder", "harder set (more rooms)"),
  ];
}
