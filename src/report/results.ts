import { HierarchicalBootstrap } from "./bootstrap.js";
import { isCoinV2 } from "./coin-targets.js";
import {
  ABLATION_METHODS,
  type CellRef,
  cellLabel,
  cellsOf,
  type ExperimentGame,
  experimentGames,
  findMethod,
  MAGE,
  METHOD_DESCRIPTIONS,
  methodSettings,
} from "./compare.js";
import type { Experiment } from "./experiments.js";
import { Plots, type Report, scoreFirst } from "./markdown.js";
import { ratingSection } from "./ratings.js";
import { isRealModelGame } from "./real-targets.js";
import { ablationSection } from "./results-ablation.js";
import { coinV2Missing, coinV2Section } from "./results-coin-v2.js";
import { type Ctx, gameTitle, plural, type ResultsOptions, renamedFrom } from "./results-common.js";
import { referenceSection, reproduceSection, targetSources, targetsSection } from "./results-header.js";
import { diversitySection, runsTable } from "./results-runs.js";
import { scalingSection } from "./results-scaling.js";
import { summarySection } from "./results-summary.js";
import {
  attemptWinTable,
  differenceTable,
  harderSection,
  methodTable,
  perAttemptBars,
  puzzleSection,
  stepsToGoalSection,
  trainingCurves,
  wallClockSection,
} from "./results-tables.js";
import { computeTargets, kuhnBestPossible } from "./targets.js";

/**
 * The results document (`mage report DIR --results`, docs/results.md): from the committed
 * summaries of an experiment grid, how to reproduce it, the targets of the results issue met or
 * missed, and per experiment the tables (methods per cell with hierarchical-bootstrap intervals,
 * paired differences, ablations, test-time scaling, diversity, runs) and plots (training curves per
 * opponent, per-attempt bars, test-time scaling). Pure: the caller writes the files.
 *
 * This file puts the document together; its sections live beside it: `results-header.ts` (reproduce,
 * targets, reference points), `results-summary.ts`, `results-tables.ts`, `results-scaling.ts`,
 * `results-ablation.ts`, `results-runs.ts`, and what they share in `results-common.ts`.
 */

export type { ResultsOptions };

function experimentSection(ctx: Ctx, e: Experiment): void {
  ctx.out.push(`## Experiment \`${e.name}\``, "");
  const was = renamedFrom(e);
  if (was) {
    const commit = typeof e.info?.machine?.commit === "string" ? e.info.machine.commit.slice(0, 7) : null;
    ctx.out.push(
      `Ran as \`${was}\`${commit ? ` at commit ${commit}` : ""}, from \`${e.info?.file ?? "?"}\`; its ` +
        "results folder was renamed since, and that grid file may now describe another grid.",
      "",
    );
  } else if (e.info?.file) ctx.out.push(`Grid: \`${e.info.file}\`.`, "");
  const games = experimentGames(e);
  if (games.length === 0) ctx.out.push("No run summaries yet.", "");
  for (const eg of games) {
    if (games.length > 1) ctx.out.push(`### ${gameTitle(eg.game)}`, "");
    gameSection(ctx, e, eg);
  }
  runsTable(ctx, e);
}

/** Everything the report says about one game of a grid. */
function gameSection(ctx: Ctx, e: Experiment, eg: ExperimentGame): void {
  methodList(ctx, eg);
  const cells = cellsOf(eg.methods, "final");
  finalEvaluation(ctx, eg, cells);
  pairedDifferences(ctx, eg, cells);
  if (isCoinV2(eg)) coinV2Section(ctx, eg);
  ablationSection(ctx, eg);
  scalingSection(ctx, eg);
  if (eg.game === "sokoban" || eg.game === "minesweeper") puzzleSection(ctx, eg);
  else if (isServedGame(eg)) servedSection(ctx, eg);
  else if (isRealModelGame(eg)) wallClockSection(ctx, eg);
  diversitySection(ctx, e.diversity, eg.game);
  ratingSection(
    ctx.out,
    ctx.plots,
    eg.game,
    eg.methods.map((m) => ({ label: m.name, runs: m.runs.map((r) => r.summary) })),
  );
  trainingCurves(ctx, eg);
}

function isServedGame(eg: ExperimentGame): boolean {
  return eg.methods.some((m) => m.runs.some((r) => r.summary.config.game === "remote"));
}

/** A served environment's grid: its harder set when configured, turns to the goal, wall-clock. */
function servedSection(ctx: Ctx, eg: ExperimentGame): void {
  if (eg.methods.some((m) => m.runs.some((r) => r.summary.config.eval.harder))) harderSection(ctx, eg);
  stepsToGoalSection(ctx, eg);
  wallClockSection(ctx, eg);
}

/** What each method is, with the settings its runs used. */
function methodList(ctx: Ctx, eg: ExperimentGame): void {
  const described = eg.methods.filter((m) => METHOD_DESCRIPTIONS[m.name]);
  if (described.length === 0) return;
  ctx.out.push(
    ...described.map((m) => {
      const config = m.runs[0]?.summary.config;
      const settings = config ? methodSettings(config) : null;
      return `- \`${m.name}\`: ${METHOD_DESCRIPTIONS[m.name]}${settings ? ` (here: ${settings})` : ""}`;
    }),
    "",
  );
}

function finalEvaluation(ctx: Ctx, eg: ExperimentGame, cells: readonly CellRef[]): void {
  const missingFinal = eg.methods.flatMap((m) =>
    m.runs.filter((r) => !r.summary.finalEval).map((r) => `${m.name} seed ${r.summary.seed}`),
  );
  ctx.out.push("### Final evaluation", "");
  if (missingFinal.length > 0)
    ctx.out.push(`No final evaluation (unfinished): ${missingFinal.join(", ")}.`, "");
  const first = eg.methods.flatMap((m) => m.runs).find((r) => r.summary.finalEval)?.summary.finalEval;
  if (first) {
    ctx.out.push(
      `Held-out task seeds, ${first.trialsPerCell} trials per cell and seed, ${first.attempts} attempts per trial. ` +
        `Mean over seeds with 95% hierarchical-bootstrap intervals.`,
      "",
    );
  }
  const bars = scoreFirst(eg.game) ? cells.filter((c) => c.unseen) : cells;
  for (const cell of cells) {
    ctx.out.push(`#### ${gameTitle(eg.game)}: ${cellLabel(cell)}`, "", methodTable(ctx, eg, cell), "");
    if (bars.includes(cell)) ctx.out.push(perAttemptBars(ctx, eg, cell), "");
    if (!scoreFirst(eg.game)) {
      const byAttempt = attemptWinTable(eg, cell);
      if (byAttempt !== "") ctx.out.push(byAttempt, "");
    }
  }
}

function pairedDifferences(ctx: Ctx, eg: ExperimentGame, cells: readonly CellRef[]): void {
  const mage = findMethod(eg.methods, MAGE);
  const others = eg.methods.filter((m) => m !== mage && !ABLATION_METHODS.includes(m.name));
  if (!mage || others.length === 0) return;
  ctx.out.push(
    "### Paired differences: MAGE minus each method",
    "",
    "Per cell, over the seeds both methods have; bold: the 95% interval excludes 0.",
    "",
  );
  for (const cell of cells) {
    const t = differenceTable(ctx, eg, cell, mage, others);
    if (t) ctx.out.push(`#### ${gameTitle(eg.game)}: ${cellLabel(cell)}`, "", t, "");
  }
}

/** Builds the results document. The same inputs and options always give the same bytes. */
export function buildResults(input: readonly Experiment[], o: ResultsOptions): Report {
  // Experiments holding a main comparison (MAGE and a baseline) first, then by name.
  const isMain = (e: Experiment) =>
    e.runs.some((r) => r.summary.name === MAGE) &&
    e.runs.some((r) => r.summary.name !== MAGE && !ABLATION_METHODS.includes(r.summary.name));
  const experiments = [...input].sort(
    (a, b) => Number(isMain(b)) - Number(isMain(a)) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  const bs = new HierarchicalBootstrap(o.bootstrap);
  const plots = new Plots(o.plotsLink, true);
  const out: string[] = [];
  const all = experiments.flatMap(experimentGames);
  const ctx: Ctx = {
    bs,
    plots,
    out,
    linkOf: o.linkOf ?? ((p) => p),
    all,
    seedOnly: new Map(),
    ...(o.smooth !== undefined ? { smooth: o.smooth } : {}),
  };
  const games = new Set(all.map((g) => g.game));
  out.push(`# ${o.title ?? "mage results"}`, "");
  out.push(
    `Rebuilt by \`mage report\` from the committed run summaries of ${experiments.length} experiment${experiments.length === 1 ? "" : "s"} ` +
      `(${plural(
        experiments.reduce((a, e) => a + e.runs.length, 0),
        "run",
      )}). Kuhn scores are chips per deal (3 decimals), rates are percentages.`,
    "",
  );
  const targets = computeTargets({
    bootstrap: bs,
    games: all,
    diversity: experiments.flatMap((e) => e.diversity),
    ...(games.has("kuhn") ? { kuhnBestPossible: kuhnBestPossible() } : { kuhnBestPossible: () => undefined }),
  });
  summarySection(targets, targetSources(all), gameTitle, out);
  reproduceSection(experiments, o, out);
  targetsSection(targets, all, out);
  if (o.account?.trim()) out.push("## Account (hand-written)", "", o.account.trim(), "");
  if (games.has("kuhn")) referenceSection(o, out);
  for (const e of experiments) experimentSection(ctx, e);
  for (const g of ["kuhn", "tictactoe", "sokoban", "minesweeper"]) {
    if (!games.has(g)) out.push(`## ${gameTitle(g)}`, "", "Not run: no summaries of this game yet.", "");
  }
  coinV2Missing(all, out);
  const notes = [
    ...[...ctx.seedOnly].map(
      ([k, cells]) =>
        `${k}: no outcome histograms in its summaries (${cells.size} cell${cells.size === 1 ? "" : "s"}), so its intervals resample seeds only.`,
    ),
    ...(o.notes ?? []),
  ];
  if (notes.length > 0) out.push("## Notes", "", ...notes.map((n) => `- ${n}`), "");
  return {
    markdown: `${out
      .join("\n")
      .replace(/\n{3,}/g, "\n\n")
      .trimEnd()}\n`,
    plots: plots.list,
  };
}
