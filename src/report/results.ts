import { keyFacts, kuhnCalibration } from "../evaluate/kuhn-calibration.js";
import { trialsFromPatterns } from "../evaluate/metrics.js";
import { formatMissedTargets } from "../train/pretrain/target-text.js";
import type { RunSummary } from "../train/summary.js";
import { type BootstrapEstimate, type BootstrapOptions, HierarchicalBootstrap } from "./bootstrap.js";
import {
  ABLATION_METHODS,
  allHaveOutcomes,
  type CellRef,
  cellLabel,
  cellsOf,
  compareMethodNames,
  type ExperimentGame,
  experimentGames,
  findMethod,
  LAMER,
  MAGE,
  METHOD_DESCRIPTIONS,
  type MethodRuns,
  methodEstimate,
  methodSettings,
  pairedDifference,
  RL_BASELINES,
  seedMetrics,
} from "./compare.js";
import type { DiversityFile, Experiment } from "./experiments.js";
import {
  autoWindow,
  DASH,
  formatDuration,
  formatPercent,
  formatScore,
  historyCurve,
  Plots,
  type Report,
  scoreFirst,
  scoreName,
  shortCommit,
  table,
} from "./markdown.js";
import { isTorchRun, modelColumn } from "./model.js";
import { isRealModelGame, realGrids } from "./real-targets.js";
import { summarySection, type TargetSource } from "./results-summary.js";
import { barChart, type LineSeries, lineChart, PALETTE } from "./svg.js";
import { computeTargets, kuhnBestPossible, mainExperiment, type TargetLine } from "./targets.js";

/**
 * The results document (`mage report DIR --results`, docs/results.md): from the committed
 * summaries of an experiment grid, how to reproduce it, the targets of the results issue met or
 * missed, and per experiment the tables (methods per cell with hierarchical-bootstrap intervals,
 * paired differences, ablations, test-time scaling, diversity, runs) and plots (training curves per
 * opponent, per-attempt bars, test-time scaling). Pure: the caller writes the files.
 */

export interface ResultsOptions {
  title?: string;
  /** Relative link from the markdown file to the plots folder. */
  plotsLink: string;
  /** How a file path is linked from the markdown (default: as given). */
  linkOf?: (path: string) => string;
  /** Link to the exact Kuhn calibration (docs/results/kuhn-calibration.md), when found. */
  calibrationLink?: string;
  /** The report command as the user typed it (printed under "Reproduce"). */
  reportCommand?: string;
  /** Skipped files etc., listed at the end. */
  notes?: readonly string[];
  /**
   * Hand-written markdown placed right after the computed targets: what the numbers mean and
   * what was tried (`ACCOUNT.md` in the experiments folder). Its headings should be level 3.
   */
  account?: string;
  bootstrap?: BootstrapOptions;
  /** Moving-average window for training curves (default: automatic). */
  smooth?: number;
}

type Kind = "score" | "rate";

function fmt(x: number, kind: Kind): string {
  return kind === "score" ? formatScore(x) : formatPercent(x);
}

/** `mean [lo, hi]`; bold when `signal` and the interval excludes 0. */
function est(e: BootstrapEstimate, kind: Kind, signal = false): string {
  if (!Number.isFinite(e.mean)) return DASH;
  const text =
    Number.isFinite(e.lo) && Number.isFinite(e.hi)
      ? `${fmt(e.mean, kind)} [${fmt(e.lo, kind)}, ${fmt(e.hi, kind)}]`
      : fmt(e.mean, kind);
  return signal && (e.lo > 1e-9 || e.hi < -1e-9) ? `**${text}**` : text;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function mean(xs: readonly number[]): number {
  const ok = xs.filter(Number.isFinite);
  return ok.length > 0 ? ok.reduce((a, b) => a + b, 0) / ok.length : Number.NaN;
}

const GAME_TITLES: Record<string, string> = {
  kuhn: "Kuhn poker",
  tictactoe: "TicTacToe",
  sokoban: "Sokoban",
  minesweeper: "MineSweeper",
};

function gameTitle(game: string): string {
  return GAME_TITLES[game] ?? game;
}

/**
 * Puzzles (issue 18): the harder held-out set (pass@k per method, LaMer − each method paired),
 * and each method's wall-clock per training iteration with the share spent inside the
 * environment (`env_ms` against `rollout_ms + update_ms`).
 */
function puzzleSection(ctx: Ctx, eg: ExperimentGame): void {
  const cell: CellRef = { opponent: "none", seat: "none", unseen: true };
  const harder = eg.methods.filter((m) => seedMetrics(m, "none", "none", "harder").length > 0);
  ctx.out.push("### Harder held-out set", "");
  if (harder.length === 0) {
    ctx.out.push("Not run: no run has finished its harder-set evaluation (`eval.harder`).", "");
  } else {
    const first = harder[0].runs.find((r) => r.summary.harderEval)?.summary;
    const knobs = first?.config.eval.harder;
    const K = Math.max(...harder.flatMap((m) => m.runs.map((r) => r.summary.harderEval?.attempts ?? 0)));
    const ks = Array.from({ length: K }, (_, i) => i + 1);
    ctx.out.push(
      `Levels from the harder seed range [2^32, 2^33), knobs ${knobs ? `\`${JSON.stringify(eg.game === "sokoban" ? knobs.sokoban : knobs.minesweeper)}\`` : "?"} ` +
        `over the training ones, ${first?.harderEval?.trialsPerCell ?? "?"} trials per seed.`,
      "",
    );
    const lamer = findMethod(eg.methods, LAMER);
    const rows = harder.map((m) => [
      m.name,
      String(seedMetrics(m, "none", "none", "harder").length),
      ...ks.map((k) => est(methodEstimate(ctx.bs, m, cell, `success@${k}`, "harder"), "rate")),
      lamer && m !== lamer
        ? est(pairedDifference(ctx.bs, lamer, m, cell, `success@${K}`, "harder"), "rate", true)
        : DASH,
    ]);
    ctx.out.push(
      table(["method", "seeds", ...ks.map((k) => `pass@${k}`), `LaMer − method, pass@${K}`], rows),
      "",
    );
  }
  wallClockSection(ctx, eg);
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Each trained method's wall-clock per training iteration: rollout and update, the share spent
 * inside the environment, and, where the PyTorch worker ran (real models), how much of the
 * rollout was its sampling and of the update its scoring (`logprobs`) and optimizer step.
 */
function wallClockSection(ctx: Ctx, eg: ExperimentGame): void {
  const trained = eg.methods.filter((m) => m.runs.some((r) => r.summary.history.length > 0));
  ctx.out.push("### Wall-clock per iteration", "");
  if (trained.length === 0) {
    ctx.out.push("No training iterations in these summaries.", "");
    return;
  }
  const worker = trained.some((m) =>
    m.runs.some((r) => r.summary.history.some((h) => "worker_generate_ms" in h)),
  );
  const rows = trained.map((m) => {
    const its = m.runs.flatMap((r) => r.summary.history);
    const part = (key: string) => mean(its.map((h) => h[key] ?? Number.NaN));
    const total = its.map((h) => (h.rollout_ms ?? 0) + (h.update_ms ?? 0));
    const env = its.map((h) => h.env_ms);
    const withEnv = its.filter((h) => Number.isFinite(h.env_ms));
    const share =
      withEnv.length > 0
        ? withEnv.reduce((a, h) => a + h.env_ms, 0) /
          withEnv.reduce((a, h) => a + (h.rollout_ms ?? 0) + (h.update_ms ?? 0), 0)
        : Number.NaN;
    const rollout = seconds(part("rollout_ms"));
    const update = seconds(part("update_ms"));
    return [
      m.name,
      String(its.length),
      seconds(mean(total)),
      worker ? `${rollout} (sampling ${seconds(part("worker_generate_ms"))})` : rollout,
      worker
        ? `${update} (scoring ${seconds(part("worker_logprobs_ms"))}, step ${seconds(part("worker_update_ms"))})`
        : update,
      Number.isFinite(share) ? `${(100 * share).toFixed(2)}% (${(mean(env) / 1000).toFixed(2)} s)` : DASH,
    ];
  });
  ctx.out.push(
    table(["method", "iterations", "per iteration", "rollout", "update", "in the environment"], rows),
    "",
  );
  if (worker)
    ctx.out.push(
      "Sampling, scoring and step are the PyTorch worker's own time (`worker_generate_ms`, `worker_logprobs_ms`, " +
        "`worker_update_ms`); scoring is the reference model's log-probs of the update's tokens for the KL term (and the policy's own when a vLLM server sampled the rollout).",
      "",
    );
}

function methodAttempts(m: MethodRuns): number {
  return Math.max(1, ...m.runs.map((r) => r.summary.finalEval?.attempts ?? 0));
}

function wallOf(s: RunSummary): number {
  return Number.isFinite(s.wallSeconds) ? s.wallSeconds : Number.NaN;
}

// ---------------------------------------------------------------------------------------------
// Header

function reproduceSection(experiments: readonly Experiment[], o: ResultsOptions, out: string[]): void {
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
function reproduceCommands(experiments: readonly Experiment[], o: ResultsOptions, out: string[]): void {
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
function experimentRow(e: Experiment): string[] {
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
function machinesNote(experiments: readonly Experiment[], out: string[]): void {
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
function targetSources(all: readonly ExperimentGame[]): (TargetSource & { phrase: string })[] {
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
  return sources;
}

function targetsSection(lines: readonly TargetLine[], all: readonly ExperimentGame[], out: string[]): void {
  out.push("## Targets", "");
  const count = (v: string) => lines.filter((l) => l.verdict === v).length;
  const sources = targetSources(all).map((s) => s.phrase);
  out.push(
    `${count("met")} met, ${count("missed")} missed, ${count("not run")} not run — each computed from the summaries` +
      `${sources.length > 0 ? ` of the main comparison: ${sources.join(", ")}` : ""}. ` +
      "Point targets compare the mean with the threshold; comparisons need the paired interval above 0.",
    "",
  );
  const mark = (v: string) => (v === "met" ? "**met**" : v === "missed" ? "**missed**" : "not run");
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

function referenceSection(o: ResultsOptions, out: string[]): void {
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

// ---------------------------------------------------------------------------------------------
// Per experiment

interface Ctx {
  bs: HierarchicalBootstrap;
  plots: Plots;
  out: string[];
  linkOf: (p: string) => string;
  smooth?: number;
  /** Every experiment's games (for the ablation reference and notes). */
  all: readonly ExperimentGame[];
  /** "experiment: method" → cells whose intervals resample seeds only. */
  seedOnly: Map<string, Set<string>>;
}

/** Records (and returns) whether a method's intervals in a cell resample seeds only. */
function noteSeedOnly(
  ctx: Ctx,
  m: MethodRuns,
  cell: CellRef,
  source: "final" | "scaling" = "final",
): boolean {
  if (allHaveOutcomes(seedMetrics(m, cell.opponent, cell.seat, source))) return false;
  const key = `${m.experiment}: ${m.name}`;
  const set = ctx.seedOnly.get(key) ?? new Set<string>();
  set.add(cellLabel(cell));
  ctx.seedOnly.set(key, set);
  return true;
}

/** The note under a table whose intervals for some methods resample seeds only. */
function seedOnlyNote(names: readonly string[]): string {
  return names.length === 0
    ? ""
    : `\n\n_Intervals of ${names.join(", ")} resample seeds only: ${names.length === 1 ? "its" : "their"} summaries carry no outcome histograms, so trials within seeds are not resampled._`;
}

/**
 * The note under a table of differences saying which were paired by deal within seeds (trial
 * pairing, `outcomeOrder`) and which redraw the two methods' trials independently.
 */
function trialPairingNote(
  diffs: readonly { label: string; estimates: readonly BootstrapEstimate[] }[],
): string {
  const full: string[] = [];
  const part: string[] = [];
  const none: string[] = [];
  for (const d of diffs) {
    const ok = d.estimates.filter((e) => Number.isFinite(e.mean) && e.trials);
    if (ok.length === 0) continue;
    // The seeds and their pairing are the same for every statistic of a row; take the widest.
    const e = ok.reduce((a, b) => (b.seeds.length > a.seeds.length ? b : a));
    const paired = e.trialPairedSeeds.length;
    if (paired === e.seeds.length) full.push(d.label);
    else if (paired > 0)
      part.push(`${d.label} (seeds ${e.trialPairedSeeds.join(", ")} of ${e.seeds.length})`);
    else none.push(d.label);
  }
  if (full.length + part.length + none.length === 0) return "";
  if (part.length === 0 && none.length === 0) {
    return `\n\n_Trials paired by deal within every seed in ${full.length === 1 ? "this difference" : "these differences"}._`;
  }
  if (full.length === 0 && part.length === 0) {
    return "\n\n_Trials not paired by deal within seeds here (the summaries lack their per-trial order): they are redrawn independently per method, so the intervals err wide._";
  }
  const bits: string[] = [];
  if (full.length > 0) bits.push(`paired by deal within every seed: ${full.join(", ")}`);
  if (part.length > 0) bits.push(`paired by deal within some seeds: ${part.join(", ")}`);
  if (none.length > 0)
    bits.push(
      `not paired within seeds (a summary lacks its per-trial order, so trials are redrawn independently and the interval errs wide): ${none.join(", ")}`,
    );
  return `\n\n_Trials ${bits.join("; ")}._`;
}

function methodTable(ctx: Ctx, eg: ExperimentGame, cell: CellRef): string {
  const game = eg.game;
  const present = eg.methods.filter((m) => seedMetrics(m, cell.opponent, cell.seat, "final").length > 0);
  const K = Math.max(1, ...present.map(methodAttempts));
  const ks = Array.from({ length: K }, (_, i) => i + 1);
  const sn = scoreName(game);
  const head = scoreFirst(game)
    ? [
        "method",
        "seeds",
        ...ks.map((k) => `${sn}@${k}`),
        "final",
        "in-trial gain",
        `success@${K}`,
        "wall-clock per run",
      ]
    : [
        "method",
        "seeds",
        ...ks.map((k) => `success@${k}`),
        `non-loss@${K}`,
        `final ${sn}`,
        "in-trial gain",
        "wall-clock per run",
      ];
  const seedsOnly = present.filter((m) => noteSeedOnly(ctx, m, cell)).map((m) => m.name);
  const rows = present.map((m) => {
    const e = (stat: string, kind: Kind) => est(methodEstimate(ctx.bs, m, cell, stat), kind);
    const n = seedMetrics(m, cell.opponent, cell.seat, "final").length;
    const wall = formatDuration(mean(m.runs.map((r) => wallOf(r.summary))));
    return scoreFirst(game)
      ? [
          m.name,
          String(n),
          ...ks.map((k) => e(`score@${k}`, "score")),
          e("final", "score"),
          e("gain", "score"),
          e(`success@${K}`, "rate"),
          wall,
        ]
      : [
          m.name,
          String(n),
          ...ks.map((k) => e(`success@${k}`, "rate")),
          e(`nonloss@${K}`, "rate"),
          e("final", "score"),
          e("gain", "score"),
          wall,
        ];
  });
  return table(head, rows) + seedOnlyNote(seedsOnly);
}

function perAttemptBars(ctx: Ctx, eg: ExperimentGame, cell: CellRef): string {
  const game = eg.game;
  const present = eg.methods.filter((m) => seedMetrics(m, cell.opponent, cell.seat, "final").length > 0);
  const K = Math.max(1, ...present.map(methodAttempts));
  const ks = Array.from({ length: K }, (_, i) => i + 1);
  const byScore = scoreFirst(game);
  const label = byScore ? `${scoreName(game)}@k` : "success@k";
  const series = present.map((m, i) => ({
    name: m.name,
    color: PALETTE[i % PALETTE.length],
    values: ks.map((k) => {
      const e = methodEstimate(ctx.bs, m, cell, byScore ? `score@${k}` : `success@${k}`);
      return Number.isFinite(e.mean) ? { mean: e.mean, lo: e.lo, hi: e.hi } : null;
    }),
  }));
  const svg = barChart({
    title: `${label} per attempt — ${gameTitle(game)}, ${cellLabel(cell)}`,
    subtitle: `${eg.experiment.name}: mean over seeds, 95% hierarchical-bootstrap intervals`,
    categories: ks.map((k) => `attempt ${k}`),
    series,
    y: byScore ? { label, zeroLine: true } : { label, percent: true, min: 0, max: 1 },
  });
  return ctx.plots.add(
    [eg.experiment.name, game, "attempts", cell.opponent, cell.seat],
    svg,
    `${label} per attempt, ${cellLabel(cell)}`,
  );
}

/**
 * Wins among the trials that played attempt k (one is played only when the earlier ones were not
 * won), pooled over seeds from the outcome histograms. A rate that rises with k is adaptation within
 * the trial; a flat one means success@k grows only because more attempts are played.
 */
function attemptWinTable(eg: ExperimentGame, cell: CellRef): string {
  const present = eg.methods.filter((m) => seedMetrics(m, cell.opponent, cell.seat, "final").length > 0);
  const K = Math.max(1, ...present.map(methodAttempts));
  const ks = Array.from({ length: K }, (_, i) => i + 1);
  const rows: string[][] = [];
  for (const m of present) {
    const seeds = seedMetrics(m, cell.opponent, cell.seat, "final").filter((sm) => sm.metrics.outcomes);
    if (seeds.length === 0) continue;
    const played = new Array<number>(K).fill(0);
    const won = new Array<number>(K).fill(0);
    const drawn = new Array<number>(K).fill(0);
    for (const sm of seeds) {
      for (const t of trialsFromPatterns(sm.metrics.outcomes ?? {})) {
        t.attempts.forEach((a, k) => {
          if (k >= K) return;
          played[k] += 1;
          if (a.won) won[k] += 1;
          else if (a.draw) drawn[k] += 1;
        });
      }
    }
    rows.push([
      m.name,
      String(seeds.length),
      ...ks.map((k) =>
        played[k - 1] > 0
          ? `${formatPercent(won[k - 1] / played[k - 1])} won, ${formatPercent(drawn[k - 1] / played[k - 1])} drawn (of ${played[k - 1]})`
          : DASH,
      ),
    ]);
  }
  if (rows.length === 0) return "";
  return (
    "Each attempt's result among the trials that played it (an attempt is played only when the earlier ones " +
    "were not won), pooled over seeds: a win rate that rises with the attempt is adaptation within the trial; " +
    "a flat one means success@k grows only because more attempts are played.\n\n" +
    table(["method", "seeds", ...ks.map((k) => `attempt ${k}`)], rows)
  );
}

const DIFF_STATS = (K: number, game: string): { stat: string; label: string; kind: Kind }[] => [
  { stat: "gain", label: "Δ in-trial gain", kind: "score" },
  { stat: "final", label: `Δ final ${scoreName(game)}`, kind: "score" },
  { stat: "score@1", label: `Δ ${scoreName(game)}@1`, kind: "score" },
  { stat: `success@${K}`, label: `Δ success@${K}`, kind: "rate" },
];

function differenceTable(
  ctx: Ctx,
  eg: ExperimentGame,
  cell: CellRef,
  mage: MethodRuns,
  others: readonly MethodRuns[],
): string | null {
  const K = Math.min(3, methodAttempts(mage));
  const stats = DIFF_STATS(K, eg.game);
  const rows: string[][] = [];
  const seedsOnly: string[] = [];
  const pairing: { label: string; estimates: BootstrapEstimate[] }[] = [];
  for (const b of others) {
    const d = stats.map((s) => pairedDifference(ctx.bs, mage, b, cell, s.stat));
    if (!d.some((x) => Number.isFinite(x.mean))) continue;
    if (d.some((x) => Number.isFinite(x.mean) && !x.trials)) seedsOnly.push(`${MAGE} − ${b.name}`);
    pairing.push({ label: `${MAGE} − ${b.name}`, estimates: d });
    rows.push([
      `${MAGE} − ${b.name}`,
      String(d[0].seeds.length),
      ...d.map((x, i) => est(x, stats[i].kind, true)),
    ]);
  }
  if (rows.length === 0) return null;
  return (
    table(["difference", "paired seeds", ...stats.map((s) => s.label)], rows) +
    seedOnlyNote(seedsOnly) +
    trialPairingNote(pairing)
  );
}

function trainingCurves(ctx: Ctx, eg: ExperimentGame): void {
  const methods = eg.methods.filter((m) => m.runs.some((r) => r.summary.history.length > 0));
  if (methods.length === 0) return;
  const longest = Math.max(...methods.flatMap((m) => m.runs.map((r) => r.summary.history.length)));
  const window = ctx.smooth ?? autoWindow(longest);
  const opponents: string[] = [];
  for (const m of methods) {
    for (const r of m.runs) {
      for (const h of r.summary.history) {
        for (const k of Object.keys(h)) {
          const o = k.startsWith("final_score/") ? k.slice(12) : k.startsWith("success/") ? k.slice(8) : null;
          if (o !== null && !opponents.includes(o)) opponents.push(o);
        }
      }
    }
  }
  if (opponents.length === 0) return;
  const sn = scoreName(eg.game);
  const fams = [
    { prefix: "final_score/", label: `final ${sn}`, percent: false },
    { prefix: "success/", label: "success (any attempt)", percent: true },
  ];
  if (!scoreFirst(eg.game)) fams.reverse();
  const images: string[] = [];
  // With more than two methods the seed spread would bury the lines: means only.
  const spread = methods.length <= 2;
  for (const o of opponents) {
    for (const f of fams) {
      const series: LineSeries[] = methods
        .map((m) => ({
          name: m.runs.length > 1 ? `${m.name} (${m.runs.length} seeds)` : m.name,
          color: PALETTE[eg.methods.indexOf(m) % PALETTE.length],
          points: historyCurve(
            m.runs.map((r) => r.summary),
            `${f.prefix}${o}`,
            window,
          ).map((p) => (spread ? p : { x: p.x, y: p.y })),
        }))
        .filter((s) => s.points.some((p) => Number.isFinite(p.y)));
      if (series.length === 0) continue;
      images.push(
        ctx.plots.add(
          [eg.experiment.name, eg.game, "train", f.prefix.replace("/", ""), o],
          lineChart({
            title: `${f.label} vs ${o} over training`,
            subtitle: `${eg.experiment.name}: training rollouts, mean over seeds${spread ? " (min–max shaded)" : ""}${window > 1 ? `, moving average over ${window}` : ""}`,
            x: { label: "iteration", integer: true },
            y: f.percent
              ? { label: f.label, percent: true, min: 0, max: 1 }
              : { label: f.label, zeroLine: true },
            series,
          }),
          `${f.label} vs ${o} over training`,
        ),
      );
    }
  }
  if (images.length === 0) return;
  ctx.out.push(
    "### Metrics over training, per opponent",
    "",
    `Training rollouts per iteration (\`history\`: \`final_score/<opponent>\`, \`success/<opponent>\`); methods without training have no curves.`,
    "",
    images.join("\n"),
    "",
  );
}

/** The attempts of a test-time scaling evaluation: evaluated with `Ks`, trained with `Kt`. */
interface ScalingPlan {
  ks: number[];
  Ks: number;
  Kt: number;
  /** The game's score name. */
  sn: string;
  /** The success and score gains of attempts Kt+1..Ks (null when Ks ≤ Kt). */
  extra: string | null;
  extraScore: string | null;
}

function scalingSection(ctx: Ctx, eg: ExperimentGame): void {
  const methods = eg.methods.filter((m) =>
    m.runs.some((r) => (r.summary.scalingEval?.cells.length ?? 0) > 0),
  );
  ctx.out.push("### Test-time scaling", "");
  if (methods.length === 0) {
    ctx.out.push("No test-time scaling evaluation (`scalingEval`) in these summaries.", "");
    return;
  }
  const Ks = Math.max(...methods.flatMap((m) => m.runs.map((r) => r.summary.scalingEval?.attempts ?? 0)));
  const Kt = Math.max(1, ...methods.map(methodAttempts));
  const p: ScalingPlan = {
    ks: Array.from({ length: Ks }, (_, i) => i + 1),
    Ks,
    Kt,
    sn: scoreName(eg.game),
    extra: Ks > Kt ? `success@${Ks}-success@${Kt}` : null,
    extraScore: Ks > Kt ? `score@${Ks}-score@${Kt}` : null,
  };
  ctx.out.push(
    `The trained models evaluated again with ${Ks} attempts (training used ${Kt}), same held-out seeds. ` +
      `Gain of attempts ${Kt + 1}–${Ks}: success@${Ks} − success@${Kt} and ${p.sn}@${Ks} − ${p.sn}@${Kt}, per seed, bootstrapped.`,
    "",
  );
  for (const cell of cellsOf(methods, "scaling")) {
    const present = methods.filter((m) => seedMetrics(m, cell.opponent, cell.seat, "scaling").length > 0);
    ctx.out.push(
      `#### ${gameTitle(eg.game)}: ${cellLabel(cell)}`,
      "",
      scalingTable(ctx, present, cell, p),
      "",
    );
    scalingDifferences(ctx, present, cell, p);
    ctx.out.push(scalingCharts(ctx, eg, present, cell, p).join("\n"), "");
  }
}

/** Per method: success@k and score@k with k attempts, and the gain of the attempts beyond training's. */
function scalingTable(ctx: Ctx, present: MethodRuns[], cell: CellRef, p: ScalingPlan): string {
  const seedsOnly = present.filter((m) => noteSeedOnly(ctx, m, cell, "scaling")).map((m) => m.name);
  const rows = present.map((m) => {
    const e = (stat: string, kind: Kind) => est(methodEstimate(ctx.bs, m, cell, stat, "scaling"), kind);
    const val = (stat: string, kind: Kind) => {
      const x = methodEstimate(ctx.bs, m, cell, stat, "scaling");
      return Number.isFinite(x.mean) ? fmt(x.mean, kind) : DASH;
    };
    return [
      m.name,
      String(seedMetrics(m, cell.opponent, cell.seat, "scaling").length),
      ...p.ks.map((k) => val(`success@${k}`, "rate")),
      ...p.ks.map((k) => val(`score@${k}`, "score")),
      p.extra ? e(p.extra, "rate") : DASH,
      p.extraScore ? e(p.extraScore, "score") : DASH,
    ];
  });
  return (
    table(
      [
        "method",
        "seeds",
        ...p.ks.map((k) => `success@${k}`),
        ...p.ks.map((k) => `${p.sn}@${k}`),
        `success gain ${p.Kt + 1}–${p.Ks}`,
        `${p.sn} gain ${p.Kt + 1}–${p.Ks}`,
      ],
      rows,
    ) + seedOnlyNote(seedsOnly)
  );
}

/** MAGE against the single-episode RL baselines, paired: the gain of the attempts beyond training's. */
function scalingDifferences(ctx: Ctx, present: MethodRuns[], cell: CellRef, p: ScalingPlan): void {
  const mage = findMethod(present, MAGE);
  const { extra, extraScore } = p;
  if (!mage || !extra || !extraScore) return;
  const pairing: { label: string; estimates: BootstrapEstimate[] }[] = [];
  const diffs = present
    .filter((m) => m !== mage && RL_BASELINES.includes(m.name))
    .map((m) => {
      const ds = [
        pairedDifference(ctx.bs, mage, m, cell, extra, "scaling"),
        pairedDifference(ctx.bs, mage, m, cell, extraScore, "scaling"),
      ];
      pairing.push({ label: `${MAGE} − ${m.name}`, estimates: ds });
      return [`${MAGE} − ${m.name}`, est(ds[0], "rate", true), est(ds[1], "score", true)];
    });
  if (diffs.length === 0) return;
  ctx.out.push(
    `MAGE against the single-episode RL baselines (paired), gain of attempts ${p.Kt + 1}–${p.Ks}:`,
    "",
    table(["difference", `Δ success gain ${p.Kt + 1}–${p.Ks}`, `Δ ${p.sn} gain ${p.Kt + 1}–${p.Ks}`], diffs) +
      trialPairingNote(pairing),
    "",
  );
}

/** success@k and score@k against k, one line per method, with 95% intervals. */
function scalingCharts(
  ctx: Ctx,
  eg: ExperimentGame,
  present: MethodRuns[],
  cell: CellRef,
  p: ScalingPlan,
): string[] {
  return [
    { prefix: "success@", label: "success@k", percent: true },
    { prefix: "score@", label: `${p.sn}@k`, percent: false },
  ].map((f) => {
    const series: LineSeries[] = present.map((m) => ({
      name: m.name,
      color: PALETTE[eg.methods.indexOf(m) % PALETTE.length],
      points: p.ks.map((k) => {
        const x = methodEstimate(ctx.bs, m, cell, `${f.prefix}${k}`, "scaling");
        return { x: k, y: x.mean, lo: x.lo, hi: x.hi };
      }),
    }));
    return ctx.plots.add(
      [eg.experiment.name, eg.game, "scaling", f.prefix.replace("@", ""), cell.opponent, cell.seat],
      lineChart({
        title: `Test-time scaling: ${f.label}, ${cellLabel(cell)}`,
        subtitle: `${eg.experiment.name}: trained with ${p.Kt} attempts, evaluated with ${p.Ks}; 95% intervals`,
        x: { label: "attempts k", integer: true, min: 1, max: p.Ks },
        y: f.percent ? { label: f.label, percent: true, min: 0, max: 1 } : { label: f.label, zeroLine: true },
        series,
        intervals: "bars",
      }),
      `test-time scaling, ${f.label}`,
    );
  });
}

interface BaseOfRun {
  seed: number;
  path: string;
  sha256: string | null;
}

/** The base model a run started from (null: it pretrained its own). */
function baseOf(s: RunSummary): BaseOfRun | null {
  const path = s.config.model?.checkpoint ?? s.config.model?.torch?.path ?? null;
  return path === null ? null : { seed: s.seed, path, sha256: s.baseModel?.sha256 ?? null };
}

/**
 * Same seed and same path. A base pretrained again at that path on another machine (other weights by
 * the CPU's rounding, `--accept-rebuilt-bases`) still pairs: its checks matched the first build's
 * (docs/design.md), and `rebuiltSeeds` names the seeds where it happened.
 */
function sameBase(a: BaseOfRun, b: BaseOfRun): boolean {
  return a.seed === b.seed && a.path === b.path;
}

/** Seeds where a variant's run and its reference's started from two builds (other recorded hashes). */
function rebuiltSeeds(variants: readonly MethodRuns[], reference: MethodRuns): number[] {
  const seeds = new Set<number>();
  for (const v of variants) {
    for (const r of v.runs) {
      const a = baseOf(r.summary);
      const b = reference.runs
        .map((m) => baseOf(m.summary))
        .find((x) => x !== null && a !== null && sameBase(a, x));
      if (a?.sha256 && b?.sha256 && a.sha256 !== b.sha256) seeds.add(a.seed);
    }
  }
  return [...seeds].sort((x, y) => x - y);
}

/**
 * MAGE runs of another experiment to pair ablations with: only seeds whose MAGE run started from the
 * same base model as a variant's run of that seed (a rerun on new bases must not pair with old
 * ablations). The experiment sharing the most such seeds wins; ties go to the main experiment. Its
 * LaMer-style runs on the same bases come along: with `lamer-agent-scope` and `mage-task-scope`
 * they complete the two-by-two of credit and normalisation scope.
 */
function sameBaseReference(
  all: readonly ExperimentGame[],
  game: string,
  variants: readonly MethodRuns[],
): { mage: MethodRuns; lamer: MethodRuns | null; experiment: string } | null {
  const bases = variants.flatMap((v) => v.runs.map((r) => baseOf(r.summary)).filter((b) => b !== null));
  const onBases = (m: MethodRuns): MethodRuns => ({
    ...m,
    runs: m.runs.filter((r) => {
      const base = baseOf(r.summary);
      return base !== null && bases.some((b) => sameBase(b, base));
    }),
  });
  const main = mainExperiment(all, game);
  let best: { mage: MethodRuns; lamer: MethodRuns | null; experiment: string } | null = null;
  for (const g of all) {
    if (g.game !== game) continue;
    const m = findMethod(g.methods, MAGE);
    if (!m) continue;
    const mage = onBases(m);
    if (mage.runs.length === 0) continue;
    const better =
      !best ||
      mage.runs.length > best.mage.runs.length ||
      (mage.runs.length === best.mage.runs.length && g === main);
    if (!better) continue;
    const lamer = findMethod(g.methods, LAMER);
    const lamerOnBases = lamer ? onBases(lamer) : null;
    best = { mage, lamer: lamerOnBases?.runs.length ? lamerOnBases : null, experiment: g.experiment.name };
  }
  return best;
}

/** The MAGE (and LaMer-style) runs the ablation variants are paired with, and where they come from. */
interface AblationReference {
  mage: MethodRuns | undefined;
  lamer: MethodRuns | undefined;
  /** Empty when MAGE is in the same grid, else where it was taken from (or why there is none). */
  from: string;
}

function ablationReference(ctx: Ctx, eg: ExperimentGame, variants: MethodRuns[]): AblationReference {
  const mage = findMethod(eg.methods, MAGE);
  // LaMer-style beside its one-change variant, so that both halves of MAGE's recipe are in the table.
  const withCreditVariant = variants.some((v) => v.name === "lamer-agent-scope");
  const lamer = withCreditVariant ? findMethod(eg.methods, LAMER) : undefined;
  if (mage) return { mage, lamer, from: "" };
  const reference = sameBaseReference(ctx.all, eg.game, variants);
  if (!reference)
    return {
      mage: undefined,
      lamer,
      from: " (no MAGE run of another experiment started from these runs' base models, so there is no paired reference)",
    };
  const rebuilt = rebuiltSeeds(variants, reference.mage);
  const across =
    rebuilt.length > 0
      ? `; on seed${rebuilt.length > 1 ? "s" : ""} ${rebuilt.join(", ")} some pairs started from two builds of ` +
        "the base, with other weights from another machine's rounding"
      : "";
  return {
    mage: reference.mage,
    lamer: withCreditVariant ? (lamer ?? reference.lamer ?? undefined) : undefined,
    from: ` (MAGE taken from experiment ${reference.experiment}, paired on the seeds whose runs started from the same pretrained base model${across})`,
  };
}

function ablationSection(ctx: Ctx, eg: ExperimentGame): void {
  const variants = eg.methods.filter((m) => ABLATION_METHODS.includes(m.name));
  if (variants.length === 0) return;
  const ref = ablationReference(ctx, eg, variants);
  const { mage, lamer } = ref;
  ctx.out.push(
    "### Ablations",
    "",
    `MAGE with one change each${ref.from}. Δ = variant − MAGE, paired over seeds.`,
    "",
    ...variants.map((v) => `- \`${v.name}\`: ${METHOD_DESCRIPTIONS[v.name] ?? "a MAGE variant"}`),
    ...(lamer
      ? [`- \`${LAMER}\`: both changes (per-attempt reward and task scope), from the same grid as MAGE`]
      : []),
    "",
  );
  const list = [...(mage ? [mage] : []), ...variants, ...(lamer ? [lamer] : [])];
  for (const cell of cellsOf(variants, "final")) ablationTable(ctx, eg, list, mage, cell);
  if (mage) widePoolVerdict(ctx, eg, variants, mage);
}

/** One cell's table: each method's score@1, final and gain, and its paired difference to MAGE. */
function ablationTable(
  ctx: Ctx,
  eg: ExperimentGame,
  list: MethodRuns[],
  mage: MethodRuns | undefined,
  cell: CellRef,
): void {
  const rows: string[][] = [];
  const seedsOnly: string[] = [];
  const pairing: { label: string; estimates: BootstrapEstimate[] }[] = [];
  for (const m of list) {
    const n = seedMetrics(m, cell.opponent, cell.seat, "final").length;
    if (n === 0) continue;
    if (noteSeedOnly(ctx, m, cell)) seedsOnly.push(m.name);
    const e = (stat: string, kind: Kind) => est(methodEstimate(ctx.bs, m, cell, stat), kind);
    const diffs: BootstrapEstimate[] = [];
    if (mage && m !== mage) pairing.push({ label: `${m.name} − ${MAGE}`, estimates: diffs });
    const d = (stat: string, kind: Kind) => {
      if (!mage || m === mage) return DASH;
      const x = pairedDifference(ctx.bs, m, mage, cell, stat);
      diffs.push(x);
      return est(x, kind, true);
    };
    rows.push([
      m === mage ? `${m.name} (reference)` : m.name,
      String(n),
      e("score@1", "score"),
      e("final", "score"),
      e("gain", "score"),
      d("score@1", "score"),
      d("final", "score"),
      d("gain", "score"),
    ]);
  }
  if (rows.length === 0) return;
  const sn = scoreName(eg.game);
  ctx.out.push(
    `#### ${gameTitle(eg.game)}: ${cellLabel(cell)}`,
    "",
    table(
      ["method", "seeds", `${sn}@1`, "final", "in-trial gain", `Δ ${sn}@1`, "Δ final", "Δ in-trial gain"],
      rows,
    ) +
      seedOnlyNote(seedsOnly) +
      trialPairingNote(pairing),
    "",
  );
}

/** Kuhn: whether a wider training pool raises attempt-1 chips against the unseen cfr. */
function widePoolVerdict(ctx: Ctx, eg: ExperimentGame, variants: MethodRuns[], mage: MethodRuns): void {
  const wide = findMethod(variants, "mage-wide-pool");
  if (!wide || eg.game !== "kuhn") return;
  const d = pairedDifference(ctx.bs, wide, mage, { opponent: "cfr", seat: "second" }, "score@1");
  if (!Number.isFinite(d.mean)) return;
  const verdict =
    d.lo > 1e-9
      ? "yes: it raises"
      : d.hi < -1e-9
        ? "no: it lowers"
        : "not clearly: the interval includes 0 for";
  ctx.out.push(
    `Does the wider pool raise attempt-1 chips against the unseen cfr (agent second)? ${verdict} chips@1 ` +
      `(mage-wide-pool − mage = ${est(d, "score")}, ${d.seeds.length} paired seeds).`,
    "",
  );
}

function diversitySection(ctx: Ctx, files: readonly DiversityFile[], game: string): void {
  const mine = files.filter((d) => d.game === undefined || d.game === game);
  ctx.out.push("### Diversity", "");
  if (mine.length === 0) {
    ctx.out.push("Not run: no diversity measurements (`mage diversity`) in this experiment.", "");
    return;
  }
  const labels = [...new Set(mine.map((d) => d.label))].sort((a, b) =>
    a === "pretrained" ? -1 : b === "pretrained" ? 1 : compareMethodNames(a, b),
  );
  const range = (xs: number[]) => {
    const ok = xs.filter(Number.isFinite);
    if (ok.length === 0) return DASH;
    const m = mean(ok);
    return ok.length > 1
      ? `${m.toFixed(3)} [${Math.min(...ok).toFixed(3)}, ${Math.max(...ok).toFixed(3)}]`
      : m.toFixed(3);
  };
  const rows = labels.map((l) => {
    const list = mine.filter((d) => d.label === l);
    const samples = [...new Set(list.map((d) => d.samples).filter((s) => s !== undefined))];
    return [
      l,
      list.map((d) => (d.seed === null ? "?" : String(d.seed))).join(", "),
      range(list.map((d) => d.meanEntropyBits)),
      range(list.map((d) => d.bySeat.first ?? Number.NaN)),
      range(list.map((d) => d.bySeat.second ?? Number.NaN)),
      range(list.map((d) => d.meanFirstActionEntropyBits ?? Number.NaN)),
      list.some((d) => d.invalidRate !== undefined)
        ? formatPercent(mean(list.map((d) => d.invalidRate ?? Number.NaN)))
        : DASH,
      samples.length > 0 ? samples.join(", ") : DASH,
    ];
  });
  ctx.out.push(
    "Entropy (bits) of the distribution of attempt-1 action sequences (one attempt, no reflection, " +
      "temperature 1), per task cell (Kuhn: seat × card), averaged over cells; mean over seeds [min, max over seeds]. " +
      "A policy writing only malformed answers also reads 0 bits: see the invalid-answer column.",
    "",
    table(
      [
        "policy",
        "seeds",
        "mean entropy",
        "agent first",
        "agent second",
        "first action only",
        "invalid answers",
        "samples per task",
      ],
      rows,
    ),
    "",
  );
}

type ModelColumn = ReturnType<typeof modelColumn>;

/** One row per run with a summary, then one per run the grid lists without one. */
function runRows(ctx: Ctx, e: Experiment, model: ModelColumn | null): string[][] {
  const status = new Map((e.info?.runs ?? []).map((r) => [`${r.method}\u0000${r.seed}`, r]));
  const have = new Set(e.runs.map((r) => `${r.summary.name}\u0000${r.summary.seed}`));
  const rows: string[][] = e.runs
    .slice()
    .sort((a, b) => compareMethodNames(a.summary.name, b.summary.name) || a.summary.seed - b.summary.seed)
    .map(({ path, summary: s }) => {
      const st = status.get(`${s.name}\u0000${s.seed}`);
      return [
        s.name,
        String(s.seed),
        gameTitle(s.game),
        ...(model ? [model.cell(s)] : []),
        // A run with a summary is done; "skipped" in experiment.json only says that the grid's
        // last invocation found it done and did not rerun it.
        st?.status === "failed" ? "failed" : "done",
        `${s.iterationsDone}/${s.config?.train?.iterations ?? "?"}`,
        formatDuration(wallOf(s)),
        s.pretrainSeconds > 0 ? formatDuration(s.pretrainSeconds) : DASH,
        s.meta?.kernels ?? DASH,
        shortCommit(s),
        `[json](${ctx.linkOf(path)})`,
      ];
    });
  for (const r of e.info?.runs ?? []) {
    if (have.has(`${r.method}\u0000${r.seed}`)) continue;
    rows.push([
      r.method,
      String(r.seed),
      DASH,
      ...(model ? [DASH] : []),
      r.status ?? "no summary",
      DASH,
      r.wallSeconds !== undefined ? formatDuration(r.wallSeconds) : DASH,
      DASH,
      DASH,
      DASH,
      "no summary",
    ]);
  }
  return rows;
}

function runsTable(ctx: Ctx, e: Experiment): void {
  // Grids of the embedded model leave the model out, as they always did; torch runs name theirs.
  const model = e.runs.some((r) => isTorchRun(r.summary)) ? modelColumn(e.runs.map((r) => r.summary)) : null;
  const head = ["method", "seed", "game", ...(model ? [model.head] : [])];
  const tail = ["status", "iterations", "wall-clock", "pretraining", "kernels", "commit", "summary"];
  ctx.out.push("### Runs", "", table([...head, ...tail], runRows(ctx, e, model)), "");
  baseNotes(ctx, e);
}

/** Bases rebuilt under a seed, and bases that missed their own pretraining targets. */
function baseNotes(ctx: Ctx, e: Experiment): void {
  const mixed = seedsOnRebuiltBases(e);
  if (mixed.length > 0) {
    ctx.out.push(
      "Seeds whose runs started from bases with other weights at the same path (pretrained again, e.g. on " +
        "another machine, and used with `--accept-rebuilt-bases`); their methods are paired by seed all the same:",
      "",
      ...mixed,
      "",
    );
  }
  const missed = (e.info?.pretrained ?? []).filter((p) => (p.missed ?? []).length > 0);
  if (missed.length > 0) {
    ctx.out.push(
      "Base models that missed their own pretraining targets (the grid trained from them all the same):",
      "",
      ...missed.map((p) => `- \`${p.dir ?? "?"}\`: ${formatMissedTargets(p.missed ?? [])}`),
      "",
    );
  }
}

/** One line per seed whose summaries record more than one base hash: each hash and its methods. */
function seedsOnRebuiltBases(e: Experiment): string[] {
  const bySeed = new Map<number, Map<string, string[]>>();
  for (const { summary } of e.runs) {
    const sha = summary.baseModel?.sha256;
    if (!sha) continue;
    const hashes = bySeed.get(summary.seed) ?? new Map<string, string[]>();
    hashes.set(sha, [...(hashes.get(sha) ?? []), summary.name]);
    bySeed.set(summary.seed, hashes);
  }
  return [...bySeed.entries()]
    .filter(([, hashes]) => hashes.size > 1)
    .sort(([a], [b]) => a - b)
    .map(
      ([seed, hashes]) =>
        `- seed ${seed}: ${[...hashes.entries()].map(([sha, names]) => `\`${sha.slice(0, 12)}…\` (${names.join(", ")})`).join(", ")}`,
    );
}

/** The name a grid ran under, when its results folder has since been renamed. */
function renamedFrom(e: Experiment): string | null {
  return e.info?.name && e.info.name !== e.name ? e.info.name : null;
}

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
  ablationSection(ctx, eg);
  scalingSection(ctx, eg);
  if (eg.game === "sokoban" || eg.game === "minesweeper") puzzleSection(ctx, eg);
  else if (isRealModelGame(eg)) wallClockSection(ctx, eg);
  diversitySection(ctx, e.diversity, eg.game);
  trainingCurves(ctx, eg);
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
