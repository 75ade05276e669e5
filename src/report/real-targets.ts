import type { BootstrapEstimate, HierarchicalBootstrap } from "./bootstrap.js";
import {
  type ExperimentGame,
  findMethod,
  LAMER,
  MAGE,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
  RL_BASELINES,
  seedMetrics,
  snapshotOf,
} from "./compare.js";
import { formatPercent, formatScore } from "./markdown.js";
import { isTorchRun } from "./model.js";
import { hasLeftOut } from "./pairing.js";
import { clearlyAbove, formatInterval, type TargetLine, type Verdict } from "./verdicts.js";

/**
 * The targets of the real-LLM grids (issue 26: SmolLM2-135M-Instruct, warm-started, LoRA on the
 * CPU), computed from the summaries of grids whose runs trained a real model
 * (`model.backend: torch`). They differ from the stand-in's: every comparison asks for a paired
 * interval above 0, and "the base" is the warm-started model playing MAGE's own protocol without
 * updates (the Reflexion-style method), so the difference isolates what training added.
 */
export const REAL_TARGETS = {
  /** MAGE's final score in the game's main cell − the base's. */
  finalOverBase: 0.1,
  /** Invalid answers after training, every method and cell. */
  maxInvalidRate: 0.01,
};

/** One game's real-model targets: where they are measured and in what unit. */
export interface RealGameSpec {
  game: string;
  /** The game column of the targets table. */
  label: string;
  /** The main cell: in-trial gain, MAGE − RL and final over the base. */
  cell: { opponent: string; seat: string };
  /** How the main cell reads in a target, e.g. "vs unseen cfr, agent second". */
  where: string;
  /** The cell of the 5-attempt scaling evaluation. */
  scalingCell: { opponent: string; seat: string };
  scalingWhere: string;
  /** What a score counts: chips in Kuhn, the game score (win 1, draw 0, loss −1) in TicTacToe. */
  unit: string;
  config: string;
}

/**
 * Kuhn against the unseen CFR player as second to act (the paper's cell); TicTacToe against
 * MCTS-100 with the agent first (the paper's cell), its scaling against `preferred:1`, a
 * fixed-preference bot the warm start can learn to beat within a trial (MCTS-100 beats it in every
 * attempt, so scaling there is flat for every method); Sokoban on held-out levels (one cell, no
 * opponent; a solved attempt scores 1).
 */
export const REAL_GAMES: readonly RealGameSpec[] = [
  {
    game: "kuhn",
    label: "kuhn (real LLM)",
    cell: { opponent: "cfr", seat: "second" },
    where: "vs unseen cfr, agent second",
    scalingCell: { opponent: "cfr", seat: "second" },
    scalingWhere: "vs cfr (agent second)",
    unit: "chips",
    config: "configs/experiments/kuhn-real-main.yaml",
  },
  {
    game: "tictactoe",
    label: "tictactoe (real LLM)",
    cell: { opponent: "mcts:100", seat: "first" },
    where: "vs mcts:100, agent first",
    scalingCell: { opponent: "preferred:1", seat: "first" },
    scalingWhere: "vs preferred:1 (agent first)",
    unit: "score",
    config: "configs/experiments/tictactoe-real-main.yaml",
  },
  {
    game: "sokoban",
    label: "sokoban (real LLM)",
    cell: { opponent: "none", seat: "none" },
    where: "on held-out levels",
    scalingCell: { opponent: "none", seat: "none" },
    scalingWhere: "on held-out levels",
    unit: "score",
    config: "configs/experiments/sokoban-real-main.yaml",
  },
];

const BASE_METHOD = "reflexion";
const ZERO_SHOT = "zeroshot";

/** True when the game's runs trained a real model through the PyTorch worker. */
export function isRealModelGame(g: ExperimentGame): boolean {
  return g.methods.some((m) => m.runs.some((r) => isTorchRun(r.summary)));
}

/** The real-model grid of `game` with the most MAGE seeds, or null. */
export function realGrid(games: readonly ExperimentGame[], game: string): ExperimentGame | null {
  const seedsOf = (g: ExperimentGame) => findMethod(g.methods, MAGE)?.runs.length ?? 0;
  const grids = games.filter((g) => g.game === game && isRealModelGame(g) && seedsOf(g) > 0);
  return grids.sort((a, b) => seedsOf(b) - seedsOf(a))[0] ?? null;
}

/** The main real-model grid of each game that has one, in `REAL_GAMES` order. */
export function realGrids(games: readonly ExperimentGame[]): { spec: RealGameSpec; grid: ExperimentGame }[] {
  return REAL_GAMES.flatMap((spec) => {
    const grid = realGrid(games, spec.game);
    return grid ? [{ spec, grid }] : [];
  });
}

function row(spec: RealGameSpec, target: string, measured: string, v: { verdict: Verdict; note?: string }) {
  const line: TargetLine = { game: spec.label, target, measured, verdict: v.verdict };
  return v.note ? { ...line, note: v.note } : line;
}

function notRun(spec: RealGameSpec, target: string, why: string): TargetLine {
  return { game: spec.label, target, measured: why, verdict: "not run" };
}

const score = (e: BootstrapEstimate) => formatInterval(e, "score");

/** Every real-model game's targets. */
export function realTargets(bs: HierarchicalBootstrap, games: readonly ExperimentGame[]): TargetLine[] {
  return REAL_GAMES.flatMap((spec) => realGameTargets(bs, games, spec));
}

function realGameTargets(
  bs: HierarchicalBootstrap,
  games: readonly ExperimentGame[],
  spec: RealGameSpec,
): TargetLine[] {
  const gainT = `${spec.where}: MAGE in-trial gain > 0 (paired interval above 0)`;
  const rlT = `MAGE − single-episode RL, in-trial gain ${spec.where}: paired interval above 0`;
  const baseT = `${spec.where}: MAGE final ${spec.unit} ≥ the warm-started base's + ${formatScore(REAL_TARGETS.finalOverBase)}, paired interval above 0`;
  const invalidT = `invalid answers ≤ ${formatPercent(REAL_TARGETS.maxInvalidRate)} after training, every method and cell`;
  const scaleT = `test-time scaling ${spec.scalingWhere}: MAGE's ${spec.unit} at attempts 4 and 5 above GRPO's (paired interval above 0)`;
  const grid = realGrid(games, spec.game);
  if (!grid) {
    const why = `no summaries of a real-model ${spec.game} grid yet (${spec.config})`;
    return [gainT, rlT, baseT, invalidT, scaleT].map((t) => notRun(spec, t, why));
  }
  const mage = findMethod(grid.methods, MAGE)!;
  const gain = methodEstimate(bs, mage, spec.cell, "gain");
  const out: TargetLine[] = [
    Number.isFinite(gain.mean)
      ? row(spec, gainT, score(gain), clearlyAbove(gain))
      : notRun(spec, gainT, `no ${spec.cell.opponent} / ${spec.cell.seat} cell`),
  ];
  out.push(...rlLines(bs, spec, grid, mage, rlT));
  out.push(baseLine(bs, spec, grid, mage, baseT));
  out.push(invalidLine(spec, grid, invalidT));
  out.push(...scalingLines(bs, spec, grid, mage, scaleT));
  return out;
}

function rlLines(
  bs: HierarchicalBootstrap,
  spec: RealGameSpec,
  grid: ExperimentGame,
  mage: MethodRuns,
  target: string,
): TargetLine[] {
  const lamer = findMethod(grid.methods, LAMER);
  const lamerD = lamer ? pairedDifference(bs, mage, lamer, spec.cell, "gain") : null;
  const lamerNote =
    lamerD && (Number.isFinite(lamerD.mean) || hasLeftOut(lamerD))
      ? `; MAGE − LaMer-style (reported, no target): ${score(lamerD)}`
      : "";
  const out: TargetLine[] = [];
  for (const name of RL_BASELINES) {
    const rl = findMethod(grid.methods, name);
    const t = `${target}: vs ${name}`;
    if (!rl || seedMetrics(rl, spec.cell.opponent, spec.cell.seat, "final").length === 0) {
      out.push(notRun(spec, t, `no ${name} summaries with a ${spec.cell.opponent} / ${spec.cell.seat} cell`));
      continue;
    }
    const d = pairedDifference(bs, mage, rl, spec.cell, "gain");
    out.push(row(spec, t, `MAGE − ${name} ${score(d)}${lamerNote}`, clearlyAbove(d)));
  }
  return out;
}

function baseLine(
  bs: HierarchicalBootstrap,
  spec: RealGameSpec,
  grid: ExperimentGame,
  mage: MethodRuns,
  target: string,
): TargetLine {
  const base = findMethod(grid.methods, BASE_METHOD);
  if (!base)
    return notRun(spec, target, `no ${BASE_METHOD} (the untrained base under MAGE's protocol) summaries`);
  const d = pairedDifference(bs, mage, base, spec.cell, "final");
  const zero = findMethod(grid.methods, ZERO_SHOT);
  const zeroD = zero ? pairedDifference(bs, mage, zero, spec.cell, "final") : null;
  const beside =
    zeroD && (Number.isFinite(zeroD.mean) || hasLeftOut(zeroD))
      ? `; beside it, MAGE − zero-shot ${score(zeroD)}`
      : "";
  return row(
    spec,
    target,
    `MAGE − base (${BASE_METHOD}) ${score(d)}${beside}`,
    clearlyAbove(d, REAL_TARGETS.finalOverBase),
  );
}

/** A cell as the invalid-answers line names it; a puzzle's one cell has no opponent or seat. */
function whereOf(c: { opponent: string; seat: string }): string {
  return c.opponent === "none" && c.seat === "none" ? "on all tasks" : `vs ${c.opponent} (agent ${c.seat})`;
}

function invalidLine(spec: RealGameSpec, grid: ExperimentGame, target: string): TargetLine {
  let worst: { rate: number; where: string } | null = null;
  for (const m of grid.methods) {
    for (const r of m.runs) {
      for (const c of snapshotOf(r, "final")?.cells ?? []) {
        const rate = c.metrics.invalidRate;
        if (worst === null || rate > worst.rate)
          worst = { rate, where: `${m.name} s${r.summary.seed} ${whereOf(c)}` };
      }
    }
  }
  if (worst === null) return notRun(spec, target, "no final evaluations");
  const met = worst.rate <= REAL_TARGETS.maxInvalidRate;
  return row(spec, target, `highest: ${formatPercent(worst.rate)} (${worst.where})`, {
    verdict: met ? "met" : "missed",
  });
}

function scalingLines(
  bs: HierarchicalBootstrap,
  spec: RealGameSpec,
  grid: ExperimentGame,
  mage: MethodRuns,
  target: string,
): TargetLine[] {
  const grpo = findMethod(grid.methods, "grpo");
  const attempts = Math.max(0, ...mage.runs.map((r) => snapshotOf(r, "scaling")?.attempts ?? 0));
  if (attempts < 5) return [notRun(spec, target, "no 5-attempt scaling evaluation in MAGE's summaries")];
  const { opponent, seat } = spec.scalingCell;
  if (!grpo || seedMetrics(grpo, opponent, seat, "scaling").length === 0)
    return [notRun(spec, target, `no GRPO scaling evaluation ${spec.scalingWhere}`)];
  return [4, 5].map((k) => {
    const d = pairedDifference(bs, mage, grpo, spec.scalingCell, `score@${k}`, "scaling");
    return row(spec, `${target}: attempt ${k}`, `MAGE − GRPO ${spec.unit}@${k} ${score(d)}`, clearlyAbove(d));
  });
}
