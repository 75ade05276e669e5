/**
 * Issue 56, part 6: does learning hold with bf16 matrix products and LoRA on the upper layers only
 * (`configs/experiments/kuhn-real-bf16.yaml`)? The README's real quickstart trained two ways from
 * one warm start on paired seeds, and the warm start evaluated as it is (`base`). Learning holds
 * when the cheaper recipe's final chips beat the base's (paired interval above 0) and its
 * difference from float32 with every layer reaches 0; where float32 itself does not beat the base,
 * the check cannot judge. Each recipe's median iteration time is reported beside it.
 */
import type { HierarchicalBootstrap } from "./bootstrap.js";
import {
  type ExperimentGame,
  findMethod,
  type MethodRuns,
  pairedDifference,
  seedMetrics,
} from "./compare.js";
import { formatScore } from "./markdown.js";
import { clearlyAbove, EPS, formatInterval, notJudged, type TargetLine, type Verdict } from "./verdicts.js";

export const BF16_EXPERIMENT = "kuhn-real-bf16";
export const BF16_CONFIG = "configs/experiments/kuhn-real-bf16.yaml";
export const BF16_LABEL = "bf16 + upper-layer LoRA (real LLM, Kuhn)";
const CELL = { opponent: "cfr", seat: "second" } as const;
const WHERE = "vs unseen cfr, agent second";
export const BF16_RECIPES = { base: "base", reference: "f32-all", cheap: "bf16-upper" } as const;

export function isBf16Grid(g: ExperimentGame): boolean {
  const e = g.experiment;
  return e.name === BF16_EXPERIMENT || e.info?.name === BF16_EXPERIMENT || e.info?.file === BF16_CONFIG;
}

/** Median seconds between consecutive iterations of a method's runs (the first, with start-up, left out). */
export function medianIterationSeconds(m: MethodRuns): number | null {
  const gaps: number[] = [];
  for (const r of m.runs) {
    const walls = r.summary.history.map((h) => h.wall_s).filter((w): w is number => Number.isFinite(w));
    for (let i = 1; i < walls.length; i++) gaps.push(walls[i] - walls[i - 1]);
  }
  if (gaps.length === 0) return null;
  const sorted = gaps.sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const line = (target: string, measured: string, v: { verdict: Verdict; note?: string }): TargetLine =>
  v.note
    ? { game: BF16_LABEL, target, measured, verdict: v.verdict, note: v.note }
    : { game: BF16_LABEL, target, measured, verdict: v.verdict };

const score = (e: Parameters<typeof formatInterval>[0]) => formatInterval(e, "score");
const seconds = (m: MethodRuns) => {
  const s = medianIterationSeconds(m);
  return s === null ? "no iteration times" : `median iteration ${s.toFixed(1)} s`;
};

/** Met when the recipe's interval reaches 0 (it is not clearly worse). */
function notWorse(e: Parameters<typeof formatInterval>[0]): { verdict: Verdict; note?: string } {
  const unjudged = notJudged(e);
  if (unjudged) return unjudged;
  if (!Number.isFinite(e.mean)) return { verdict: "not run" };
  return e.hi >= -EPS ? { verdict: "met" } : { verdict: "missed", note: "the paired interval lies below 0" };
}

/** The part-6 lines: each recipe over the base, then whether learning holds with the cheaper one. */
export function bf16Targets(bs: HierarchicalBootstrap, games: readonly ExperimentGame[]): TargetLine[] {
  const overT = (name: string) =>
    `${WHERE}: ${name} final chips − the warm start's (${BF16_RECIPES.base}), paired interval above 0`;
  const holdsT = `${WHERE}: learning holds with bf16 and LoRA on layers 20-29 (${BF16_RECIPES.cheap} beats the base, and ${BF16_RECIPES.cheap} − ${BF16_RECIPES.reference} reaches 0)`;
  const targets = [overT(BF16_RECIPES.reference), overT(BF16_RECIPES.cheap), holdsT];
  const grid = games.find((g) => g.game === "kuhn" && isBf16Grid(g));
  const methods = grid ? Object.values(BF16_RECIPES).map((n) => findMethod(grid.methods, n)) : [];
  const [base, reference, cheap] = methods;
  const hasCell = (m: MethodRuns | undefined): m is MethodRuns =>
    m !== undefined && seedMetrics(m, CELL.opponent, CELL.seat, "final").length > 0;
  if (!hasCell(base) || !hasCell(reference) || !hasCell(cheap)) {
    const why = `no summaries of ${Object.values(BF16_RECIPES).join(", ")} with a cfr / second cell yet (${BF16_CONFIG})`;
    return targets.map((t) => line(t, why, { verdict: "not run" }));
  }
  const refOver = pairedDifference(bs, reference, base, CELL, "final");
  const cheapOver = pairedDifference(bs, cheap, base, CELL, "final");
  const between = pairedDifference(bs, cheap, reference, CELL, "final");
  const refV = clearlyAbove(refOver);
  const cheapV = clearlyAbove(cheapOver);
  return [
    line(targets[0], `${score(refOver)}; ${seconds(reference)}`, refV),
    line(targets[1], `${score(cheapOver)}; ${seconds(cheap)}`, cheapV),
    line(
      targets[2],
      `${BF16_RECIPES.cheap} − ${BF16_RECIPES.reference} ${score(between)}`,
      holds(refV, cheapV, between),
    ),
  ];
}

function holds(
  reference: { verdict: Verdict },
  cheap: { verdict: Verdict },
  between: Parameters<typeof formatInterval>[0],
): { verdict: Verdict; note?: string } {
  const close = notWorse(between);
  if (close.verdict === "not judged" || close.verdict === "not run") return close;
  if (reference.verdict !== "met")
    return {
      verdict: "not judged",
      note: `float32 with every layer does not beat the base here either, so the check cannot tell (difference ${formatScore(between.mean)})`,
    };
  if (cheap.verdict !== "met") return { verdict: "missed", note: "bf16-upper does not beat the base" };
  return close;
}
