import { kuhnCalibration } from "../evaluate/kuhn-calibration.js";
import { keyFacts } from "../evaluate/kuhn-calibration-text.js";
import { COIN_LABEL, coinGrid } from "./coin-targets.js";
import { COIN_V2_LABEL } from "./coin-v2-targets.js";
import { compareMethodNames, type ExperimentGame } from "./compare.js";
import type { Experiment } from "./experiments.js";
import { DASH, formatDuration, formatScore, shortCommit, table } from "./markdown.js";
import { MIN_PAIRED_SEEDS } from "./pairing.js";
import { isRealModelGame, realGrids } from "./real-targets.js";
import { gameTitle, mean, type ResultsOptions, renamedFrom, wallOf } from "./results-common.js";
import type { TargetSource } from "./results-summary.js";
import { mainExperiment, type TargetLine } from "./targets.js";

/** The results document's opening: how to reproduce it, the computed targets, the Kuhn reference points. */

// ---------------------------------------------------------------------------------------------
// Header

export function reproduceSection(experiments: readonly Experiment[], o: ResultsOptions, out: string[]): void {
  out.push("## Reproduce", "");
  reproduceCommands(experiments, o, out);
  out.push(
    "`mage experiment` runs the grid (methods × seeds, all methods of a seed from one pretrained base model; " +
      "resumable: an interrupted grid picks up where it stopped) and copies each finished run's summary to " +
      "`docs/results/experiments/<experiment>/<method>-s<seed>.json`. This document is rebuilt from those summaries alone.",
    "",
  );
  out.push(
    table(
      [
        "experiment",
        "game",
        "methods",
        "seeds",
        "summaries",
        "wall-clock (sum over runs)",
        "grid wall-clock",
        "wall-clock per run (mean)",
        "pretraining (sum)",
      ],
      experiments.map(experimentRow),
    ),
    "",
  );
  machinesNote(experiments, out);
  out.push(
    "**Statistics.** A method's number is the mean over its seeds of the per-seed metric; brackets are 95% " +
      "intervals of a hierarchical bootstrap (2,000 replicates, seeded): the seeds are resampled with " +
      "replacement, then each drawn seed's trials are resampled from its outcome histogram (a multinomial " +
      "draw). Differences A − B are paired: every replicate draws the seeds once and uses them for both " +
      "methods (the seeds share one pretrained base model). Within a seed every method plays the same held-out deals, " +
      "and where both summaries record each trial's outcome in trial order the trials are paired by deal too: a replicate " +
      "draws trial indices once and takes both methods' trials at them. Where a summary lacks that record (written before " +
      "it existed), the two methods' trials are redrawn independently within the seed and the difference errs on the wide " +
      "side; the note under each difference table says which differences were paired by deal. Bold differences have an interval that excludes 0. " +
      "Where a summary lacks its outcome histogram, only the seeds are resampled (said where it happens). " +
      "Every number is a claim about the method at small scale: the model is thousands of times smaller than the paper's.",
    "",
  );
}

/** The commands that rebuild every grid and this document. */
export function reproduceCommands(
  experiments: readonly Experiment[],
  o: ResultsOptions,
  out: string[],
): void {
  const lines: string[] = [];
  const assumed: string[] = [];
  for (const e of experiments) {
    if (renamedFrom(e)) lines.push(`# ${e.name}: ran as ${renamedFrom(e)}; see its section`);
    else if (e.info?.file) lines.push(`mage experiment ${e.info.file}`);
    else if (e.info?.command) lines.push(e.info.command);
    else {
      lines.push(`mage experiment configs/experiments/${e.name}.yaml`);
      assumed.push(e.name);
    }
  }
  lines.push(o.reportCommand ?? "mage report docs/results/experiments --out docs/results.md");
  out.push("```sh", ...lines, "```", "");
  if (assumed.length > 0) {
    out.push(
      `No experiment.json was found for ${assumed.join(", ")}: the experiment file name above is assumed from the folder name.`,
      "",
    );
  }
}

/** A grid's row: its games, methods, seeds, summaries against those planned, and its times. */
export function experimentRow(e: Experiment): string[] {
  const runs = e.runs.map((r) => r.summary);
  const seeds = [...new Set([...(e.info?.seeds ?? []), ...runs.map((s) => s.seed)])].sort((a, b) => a - b);
  const methods = [...new Set(runs.map((s) => s.name))].sort(compareMethodNames);
  const planned =
    e.info?.runs?.length ??
    (e.info?.methods && e.info.seeds ? e.info.methods.length * e.info.seeds.length : undefined);
  const walls = runs.map(wallOf).filter(Number.isFinite);
  // Pretraining: the grid's shared base models (experiment.json), else what the runs did themselves.
  const shared = (e.info?.pretrained ?? []).map((p) => p.seconds ?? Number.NaN).filter(Number.isFinite);
  const pre =
    shared.length > 0
      ? shared
      : runs.map((s) => s.pretrainSeconds).filter((x) => Number.isFinite(x) && x > 0);
  return [
    e.name,
    [...new Set(runs.map((s) => gameTitle(s.game)))].join(", ") || DASH,
    methods.join(", ") || DASH,
    seeds.join(", ") || DASH,
    planned !== undefined ? `${runs.length} / ${planned}` : String(runs.length),
    walls.length > 0 ? formatDuration(walls.reduce((a, b) => a + b, 0)) : DASH,
    e.info?.wallSeconds !== undefined ? formatDuration(e.info.wallSeconds) : DASH,
    walls.length > 0 ? formatDuration(mean(walls)) : DASH,
    pre.length > 0 ? formatDuration(pre.reduce((a, b) => a + b, 0)) : DASH,
  ];
}

/** The machines and backends the runs name in their meta (and experiment.json), and their commits. */
export function machinesNote(experiments: readonly Experiment[], out: string[]): void {
  const machines = new Map<string, number>();
  const commits = new Set<string>();
  for (const e of experiments) {
    for (const r of e.runs) {
      const m = r.summary.meta;
      if (!m) continue;
      const key = `${m.cpu ?? "?"}, ${m.cores ?? "?"} cores, ${m.memoryGiB ?? "?"} GiB; Node ${m.node ?? "?"}; ${m.platform ?? "?"}; kernels \`${m.kernels ?? "?"}\``;
      machines.set(key, (machines.get(key) ?? 0) + 1);
      commits.add(shortCommit(r.summary));
    }
    const mm = e.info?.machine;
    if (mm && e.runs.length === 0) {
      const key = `${mm.cpu ?? "?"}, ${mm.cores ?? "?"} cores; Node ${mm.node ?? "?"}; kernels \`${mm.kernels ?? "?"}\` (experiment.json)`;
      machines.set(key, (machines.get(key) ?? 0) + 0);
    }
  }
  if (machines.size > 0) {
    out.push(
      "Machine and backend (from the summaries):",
      "",
      ...[...machines.entries()].map(([k, n]) => `- ${k}${n > 0 ? ` — ${n} run${n === 1 ? "" : "s"}` : ""}`),
      "",
    );
  }
  if (commits.size > 0) out.push(`Commits of the runs: ${[...commits].sort().join(", ")}.`, "");
}

// ---------------------------------------------------------------------------------------------
// Targets and reference points

/** The grids the targets are computed from, with their phrase in the targets' opening sentence. */
export function targetSources(all: readonly ExperimentGame[]): (TargetSource & { phrase: string })[] {
  const embedded = all.filter((g) => !isRealModelGame(g));
  const sources = [...new Set(embedded.map((g) => g.game))]
    .sort()
    .map((game) => [game, mainExperiment(embedded, game)?.experiment.name] as const)
    .filter((x): x is readonly [string, string] => x[1] !== undefined)
    .map(([game, name]) => ({ key: game, grid: name, phrase: `${gameTitle(game)} from \`${name}\`` }));
  for (const { spec, grid } of realGrids(all)) {
    const name = grid.experiment.name;
    sources.push({
      key: spec.label,
      grid: name,
      phrase: `${gameTitle(spec.game)} on a real LLM from \`${name}\``,
    });
  }
  const coin = coinGrid(all);
  if (coin) {
    const name = coin.experiment.name;
    sources.push({
      key: COIN_LABEL,
      grid: name,
      phrase: `the coin collector on a real LLM from \`${name}\``,
    });
  }
  const v2 = coinGrid(all, true);
  if (v2) {
    const name = v2.experiment.name;
    sources.push({
      key: COIN_V2_LABEL,
      grid: name,
      phrase: `the coin collector with 8 rooms on a real LLM from \`${name}\``,
    });
  }
  return sources;
}

export function targetsSection(
  lines: readonly TargetLine[],
  all: readonly ExperimentGame[],
  out: string[],
): void {
  out.push("## Targets", "");
  const count = (v: string) => lines.filter((l) => l.verdict === v).length;
  const sources = targetSources(all).map((s) => s.phrase);
  const unjudged = count("not judged");
  out.push(
    `${count("met")} met, ${count("missed")} missed, ${count("not run")} not run` +
      `${unjudged > 0 ? `, ${unjudged} not judged` : ""} — each computed from the summaries` +
      `${sources.length > 0 ? ` of the main comparison: ${sources.join(", ")}` : ""}. ` +
      "Point targets compare the mean with the threshold; comparisons need the paired interval above 0. " +
      "A comparison pairs only runs that trained their planned iterations: a seed where either run was " +
      `stopped early by \`train.maxMinutes\` is left out, and a comparison that keeps fewer than ${MIN_PAIRED_SEEDS} ` +
      "paired seeds after that is not judged.",
    "",
  );
  const mark = (v: string) => (v === "met" ? "**met**" : v === "missed" ? "**missed**" : v);
  out.push(
    table(
      ["game", "target", "measured", "verdict"],
      lines.map((l) => [
        gameTitle(l.game),
        l.target,
        l.note ? `${l.measured} — _${l.note}_` : l.measured,
        mark(l.verdict),
      ]),
    ),
    "",
  );
}

export function referenceSection(o: ResultsOptions, out: string[]): void {
  const cal = kuhnCalibration();
  const f = keyFacts(cal);
  const link = o.calibrationLink
    ? `[the exact calibration](${o.calibrationLink})`
    : "the exact calibration (`mage kuhn-table`)";
  out.push(
    "## Reference points (Kuhn, exact)",
    "",
    `From ${link}, computed by enumeration (no sampling), in chips per deal against \`cfr\` with the agent second:`,
    "",
    table(
      ["agent", "final chips"],
      [
        ["best response to the training pool, no adaptation", formatScore(f.poolBr)],
        ["perfect adaptation after attempt 1", formatScore(f.oracleFinal)],
        ["realisable explorer (adapts from what it observes)", formatScore(f.explorerFinal)],
        ["knowing the opponent (best response to it)", formatScore(f.knows)],
        ["equilibrium play", formatScore(f.nash)],
        ["uniformly random", formatScore(f.uniform)],
        ["best response to the wider pool, no adaptation", formatScore(f.widePoolBr)],
      ],
    ),
    "",
    `So an in-trial gain of ${formatScore(f.oracleFinal - f.poolBr)} is the most an agent starting from the pool best response can show there. ` +
      `The agent can win ${f.winnable} of the 6 deals and every line wins ${f.forced} of them, so success@k vs cfr (agent second) is ` +
      `${f.winnable === f.forced ? "the same for every policy: chips, not success, separate methods there" : "policy-dependent"}.`,
    "",
    "Best possible final chips per seen-pool cell (the best response to that opponent), the bar of the pool target:",
    "",
    table(
      ["opponent", "seat", "best possible", "best response to the training pool"],
      cal.fixed
        .filter((r) => ["conservative", "aggressive", "intermediate"].includes(r.opponent))
        .map((r) => [r.opponent, `agent ${r.seat}`, formatScore(r.best), formatScore(r.poolBr)]),
    ),
    "",
  );
}
