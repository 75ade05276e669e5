import type { BootstrapEstimate } from "./bootstrap.js";
import {
  type CellRef,
  cellLabel,
  cellsOf,
  type ExperimentGame,
  findMethod,
  MAGE,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
  RL_BASELINES,
  seedMetrics,
} from "./compare.js";
import { DASH, scoreName, table } from "./markdown.js";
import {
  type Ctx,
  est,
  fmt,
  gameTitle,
  type Kind,
  leftOutNote,
  methodAttempts,
  noteSeedOnly,
  seedOnlyNote,
  trialPairingNote,
} from "./results-common.js";
import { type LineSeries, lineChart, PALETTE } from "./svg.js";

/** Test-time scaling: methods trained with K attempts, evaluated with more. */

/** The attempts of a test-time scaling evaluation: evaluated with `Ks`, trained with `Kt`. */
export interface ScalingPlan {
  ks: number[];
  Ks: number;
  Kt: number;
  /** The game's score name. */
  sn: string;
  /** The success and score gains of attempts Kt+1..Ks (null when Ks ≤ Kt). */
  extra: string | null;
  extraScore: string | null;
}

export function scalingSection(ctx: Ctx, eg: ExperimentGame): void {
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
export function scalingTable(ctx: Ctx, present: MethodRuns[], cell: CellRef, p: ScalingPlan): string {
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
export function scalingDifferences(ctx: Ctx, present: MethodRuns[], cell: CellRef, p: ScalingPlan): void {
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
      trialPairingNote(pairing) +
      leftOutNote(pairing),
    "",
  );
}

/** success@k and score@k against k, one line per method, with 95% intervals. */
export function scalingCharts(
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
