import { trialsFromPatterns } from "../evaluate/metrics.js";
import type { BootstrapEstimate } from "./bootstrap.js";
import {
  type CellRef,
  cellLabel,
  type ExperimentGame,
  findMethod,
  LAMER,
  MAGE,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
  seedMetrics,
} from "./compare.js";
import {
  autoWindow,
  DASH,
  formatDuration,
  formatPercent,
  historyCurve,
  scoreFirst,
  scoreName,
  table,
} from "./markdown.js";
import {
  type Ctx,
  est,
  gameTitle,
  type Kind,
  leftOutNote,
  mean,
  methodAttempts,
  noteSeedOnly,
  seedOnlyNote,
  trialPairingNote,
  wallOf,
} from "./results-common.js";
import { barChart, type LineSeries, lineChart, PALETTE } from "./svg.js";

/** Per game of an experiment: the methods table, per-attempt bars, paired differences, training curves, puzzles' harder set and wall-clock. */

/**
 * Puzzles (issue 18): the harder held-out set (pass@k per method, LaMer − each method paired),
 * and each method's wall-clock per training iteration with the share spent inside the
 * environment (`env_ms` against `rollout_ms + update_ms`).
 */
export function puzzleSection(ctx: Ctx, eg: ExperimentGame): void {
  harderSection(ctx, eg);
  wallClockSection(ctx, eg);
}

/** What the harder set changed: the puzzles' knobs, or a served environment's config. */
function harderSetting(eg: ExperimentGame): string {
  const first = eg.methods.flatMap((m) => m.runs).find((r) => r.summary.harderEval)?.summary;
  const harder = first?.config.eval.harder;
  const trials = `${first?.harderEval?.trialsPerCell ?? "?"} trials per seed`;
  if (first?.config.game === "remote") {
    const over = harder?.env ? `\`${JSON.stringify(harder.env.config)}\`` : "?";
    return `The served environment with ${over} laid over the evaluation's config, ${trials}.`;
  }
  const knobs = harder
    ? `\`${JSON.stringify(eg.game === "sokoban" ? harder.sokoban : harder.minesweeper)}\``
    : "?";
  return `Levels from the harder seed range [2^32, 2^33), knobs ${knobs} over the training ones, ${trials}.`;
}

/** The harder held-out set (`eval.harder`): pass@k per method and LaMer − each method, paired. */
export function harderSection(ctx: Ctx, eg: ExperimentGame): void {
  const cell: CellRef = { opponent: "none", seat: "none", unseen: true };
  const harder = eg.methods.filter((m) => seedMetrics(m, "none", "none", "harder").length > 0);
  ctx.out.push("### Harder held-out set", "");
  if (harder.length === 0) {
    ctx.out.push("Not run: no run has finished its harder-set evaluation (`eval.harder`).", "");
    return;
  }
  const K = Math.max(...harder.flatMap((m) => m.runs.map((r) => r.summary.harderEval?.attempts ?? 0)));
  const ks = Array.from({ length: K }, (_, i) => i + 1);
  ctx.out.push(harderSetting(eg), "");
  const lamer = findMethod(eg.methods, LAMER);
  const pairing: { label: string; estimates: BootstrapEstimate[] }[] = [];
  const versusLamer = (m: MethodRuns) => {
    if (!lamer || m === lamer) return DASH;
    const d = pairedDifference(ctx.bs, lamer, m, cell, `success@${K}`, "harder");
    pairing.push({ label: `${LAMER} − ${m.name}`, estimates: [d] });
    return est(d, "rate", true);
  };
  const rows = harder.map((m) => [
    m.name,
    String(seedMetrics(m, "none", "none", "harder").length),
    ...ks.map((k) => est(methodEstimate(ctx.bs, m, cell, `success@${k}`, "harder"), "rate")),
    versusLamer(m),
  ]);
  ctx.out.push(
    table(["method", "seeds", ...ks.map((k) => `pass@${k}`), `LaMer − method, pass@${K}`], rows) +
      leftOutNote(pairing),
    "",
  );
}

/**
 * Served single-agent tasks: the turns an attempt took when it won, per attempt, pooled over
 * seeds (the coin collector's steps to the coin, which a remembered map shortens).
 */
export function stepsToGoalSection(ctx: Ctx, eg: ExperimentGame): void {
  const rows = eg.methods.flatMap((m) => {
    const per = m.runs.flatMap((r) => {
      const cell = r.summary.finalEval?.cells[0];
      return cell?.metrics.wonTurnsAt ? [cell.metrics.wonTurnsAt] : [];
    });
    if (per.length === 0) return [];
    const K = Math.max(...per.map((p) => p.length));
    return [
      [
        m.name,
        ...Array.from({ length: K }, (_, k) => {
          const won = per.map((p) => p[k]).filter((e) => e && e.n > 0);
          const n = won.reduce((a, e) => a + e.n, 0);
          return n > 0 ? `${(won.reduce((a, e) => a + e.mean * e.n, 0) / n).toFixed(1)} (${n})` : DASH;
        }),
      ],
    ];
  });
  if (rows.length === 0) return;
  const K = Math.max(...rows.map((r) => r.length - 1));
  ctx.out.push(
    "### Turns to the goal per attempt",
    "",
    "Mean turns of the final evaluation's attempts that won, by attempt, pooled over seeds (in brackets: how many won there).",
    "",
    table(["method", ...Array.from({ length: K }, (_, k) => `attempt ${k + 1}`)], rows),
    "",
  );
}

export const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Each trained method's wall-clock per training iteration: rollout and update, the share spent
 * inside the environment, and, where the PyTorch worker ran (real models), how much of the
 * rollout was its sampling and of the update its scoring (`logprobs`) and optimizer step.
 */
export function wallClockSection(ctx: Ctx, eg: ExperimentGame): void {
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

export function methodTable(ctx: Ctx, eg: ExperimentGame, cell: CellRef): string {
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

export function perAttemptBars(ctx: Ctx, eg: ExperimentGame, cell: CellRef): string {
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
export function attemptWinTable(eg: ExperimentGame, cell: CellRef): string {
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

export const DIFF_STATS = (K: number, game: string): { stat: string; label: string; kind: Kind }[] => [
  { stat: "gain", label: "Δ in-trial gain", kind: "score" },
  { stat: "final", label: `Δ final ${scoreName(game)}`, kind: "score" },
  { stat: "score@1", label: `Δ ${scoreName(game)}@1`, kind: "score" },
  { stat: `success@${K}`, label: `Δ success@${K}`, kind: "rate" },
];

export function differenceTable(
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
    trialPairingNote(pairing) +
    leftOutNote(pairing)
  );
}

export function trainingCurves(ctx: Ctx, eg: ExperimentGame): void {
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
          // League snapshots come and go: their ratings are in the league section, not a curve each.
          if (o !== null && !o.startsWith("snapshot:") && !opponents.includes(o)) opponents.push(o);
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
