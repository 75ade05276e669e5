import type { RunSummary } from "../train/summary.js";
import type { BootstrapEstimate } from "./bootstrap.js";
import {
  ABLATION_METHODS,
  type CellRef,
  cellLabel,
  cellsOf,
  type ExperimentGame,
  findMethod,
  LAMER,
  MAGE,
  METHOD_DESCRIPTIONS,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
  seedMetrics,
} from "./compare.js";
import { DASH, scoreName, table } from "./markdown.js";
import { leftOutText } from "./pairing.js";
import {
  type Ctx,
  est,
  gameTitle,
  type Kind,
  leftOutNote,
  noteSeedOnly,
  seedOnlyNote,
  trialPairingNote,
} from "./results-common.js";
import { mainExperiment } from "./targets.js";

/** Ablations: variants paired with MAGE runs that started from the same base models. */

export interface BaseOfRun {
  seed: number;
  path: string;
  sha256: string | null;
}

/** The base model a run started from (null: it pretrained its own). */
export function baseOf(s: RunSummary): BaseOfRun | null {
  const path = s.config.model?.checkpoint ?? s.config.model?.torch?.path ?? null;
  return path === null ? null : { seed: s.seed, path, sha256: s.baseModel?.sha256 ?? null };
}

/**
 * Same seed and same path. A base pretrained again at that path on another machine (other weights by
 * the CPU's rounding, `--accept-rebuilt-bases`) still pairs: its checks matched the first build's
 * (docs/design.md), and `rebuiltSeeds` names the seeds where it happened.
 */
export function sameBase(a: BaseOfRun, b: BaseOfRun): boolean {
  return a.seed === b.seed && a.path === b.path;
}

/** Seeds where a variant's run and its reference's started from two builds (other recorded hashes). */
export function rebuiltSeeds(variants: readonly MethodRuns[], reference: MethodRuns): number[] {
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
export function sameBaseReference(
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
export interface AblationReference {
  mage: MethodRuns | undefined;
  lamer: MethodRuns | undefined;
  /** Empty when MAGE is in the same grid, else where it was taken from (or why there is none). */
  from: string;
}

export function ablationReference(ctx: Ctx, eg: ExperimentGame, variants: MethodRuns[]): AblationReference {
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

export function ablationSection(ctx: Ctx, eg: ExperimentGame): void {
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
export function ablationTable(
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
      trialPairingNote(pairing) +
      leftOutNote(pairing),
    "",
  );
}

/** Kuhn: whether a wider training pool raises attempt-1 chips against the unseen cfr. */
export function widePoolVerdict(
  ctx: Ctx,
  eg: ExperimentGame,
  variants: MethodRuns[],
  mage: MethodRuns,
): void {
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
      `(mage-wide-pool − mage = ${est(d, "score")}, ${d.seeds.length} paired seeds` +
      `${d.leftOut.length > 0 ? `; ${leftOutText(d.leftOut)}` : ""}).`,
    "",
  );
}
