/**
 * Issue 45's targets on TextWorldExpress's coin collector with a real LLM
 * (`configs/experiments/coin-real-main.yaml`): in-trial gain as success@3 − success@1 for MAGE and
 * LaMer-style, both against GiGPO and against the untrained base resampled (zero-shot) at
 * success@3, and the same on the harder held-out set (more rooms). Every comparison asks for a
 * paired interval above 0, over the grid's seeds and trials.
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
const LABEL = COIN_LABEL;
const CELL = { opponent: "none", seat: "none" };
const META_METHODS = [
  { name: MAGE, label: "MAGE" },
  { name: LAMER, label: "LaMer-style" },
];
const OTHERS = [
  { name: "gigpo", label: "GiGPO" },
  { name: "zeroshot", label: "zero-shot (the untrained base resampled)" },
];

const rate = (e: BootstrapEstimate) => formatInterval(e, "rate");

function line(target: string, measured: string, v: ReturnType<typeof clearlyAbove>): TargetLine {
  const out: TargetLine = { game: LABEL, target, measured, verdict: v.verdict };
  return v.note ? { ...out, note: v.note } : out;
}

function notRun(target: string, why: string): TargetLine {
  return { game: LABEL, target, measured: why, verdict: "not run" };
}

const hasSource = (m: MethodRuns | undefined, source: EvalSource) =>
  m !== undefined && seedMetrics(m, CELL.opponent, CELL.seat, source).length > 0;

/** One evaluation's targets: the two methods' gains, then each against GiGPO and zero-shot. */
function sourceTargets(
  bs: HierarchicalBootstrap,
  grid: ExperimentGame | null,
  source: EvalSource,
  where: string,
): TargetLine[] {
  const out: TargetLine[] = [];
  for (const meta of META_METHODS) {
    const gainT = `${where}: ${meta.label} in-trial gain success@3 − success@1 > 0 (interval above 0)`;
    const m = grid ? findMethod(grid.methods, meta.name) : undefined;
    if (!hasSource(m, source)) {
      out.push(notRun(gainT, `no ${meta.name} summaries with this evaluation (${COIN_CONFIG})`));
    } else {
      const gain = methodEstimate(bs, m!, CELL, "success@3-success@1", source);
      out.push(line(gainT, rate(gain), clearlyAbove(gain)));
    }
    for (const other of OTHERS) {
      const t = `${where}: ${meta.label} − ${other.label} success@3 > 0 (paired interval above 0)`;
      const o = grid ? findMethod(grid.methods, other.name) : undefined;
      if (!hasSource(m, source) || !hasSource(o, source)) {
        out.push(
          notRun(t, `no ${meta.name} and ${other.name} summaries with this evaluation (${COIN_CONFIG})`),
        );
        continue;
      }
      const d = pairedDifference(bs, m!, o!, CELL, "success@3", source);
      out.push(line(t, rate(d), clearlyAbove(d)));
    }
  }
  return out;
}

/** Issue 45's coin-collector targets, on the test seeds and on the harder set. */
export function coinTargets(bs: HierarchicalBootstrap, games: readonly ExperimentGame[]): TargetLine[] {
  const grid = realGrid(games, COIN_GAME);
  return [
    ...sourceTargets(bs, grid, "final", "test seeds"),
    ...sourceTargets(bs, grid, "harder", "harder set (more rooms)"),
  ];
}
