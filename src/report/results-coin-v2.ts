import type { BootstrapEstimate } from "./bootstrap.js";
import { COIN_CELL, COIN_V2_CONFIG, COIN_V2_EXPERIMENT, hasSource, isCoinV2 } from "./coin-targets.js";
import {
  COIN_V2_LABEL,
  MEMORY_METHODS,
  MEMORY_MODES,
  memoryDifference,
  memoryOf,
  onKeptSeeds,
} from "./coin-v2-targets.js";
import {
  type ExperimentGame,
  findMethod,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
} from "./compare.js";
import { DASH, formatPercent, table } from "./markdown.js";
import { leftOutText } from "./pairing.js";
import { type Ctx, est, leftOutNote, trialPairingNote } from "./results-common.js";
import { EPS, formatInterval } from "./verdicts.js";

/**
 * Issue 56's coin-collector grid (`coin-real-v2`) in the results document: what memory adds (each
 * model with memory against the same model retried independently) and which memory mode wins
 * (MAGE with reflections, with the history of past attempts, with both). Its targets are in
 * coin-v2-targets.ts; without its summaries the document says so in a short section of its own.
 */

const present = (eg: ExperimentGame, names: readonly string[]): MethodRuns[] =>
  names.flatMap((n) => {
    const m = findMethod(eg.methods, n);
    return m ? [m] : [];
  });

/** The grid's two memory tables (its experiment section). */
export function coinV2Section(ctx: Ctx, eg: ExperimentGame): void {
  memoryTable(ctx, eg);
  memoryModes(ctx, eg);
}

/** success@3 with memory, retried independently, and the difference paired within each run. */
function memoryTable(ctx: Ctx, eg: ExperimentGame): void {
  ctx.out.push("### What memory adds", "");
  const methods = present(eg, MEMORY_METHODS);
  const measured = methods.filter((m) => hasSource(m, "final") && hasSource(m, "independent"));
  const lacking = methods.filter((m) => !measured.includes(m)).map((m) => m.name);
  if (measured.length === 0) {
    ctx.out.push(
      "Not run: no run with memory has finished its independent evaluation (`eval.independent`).",
      "",
    );
    return;
  }
  ctx.out.push(
    "Each run with memory was evaluated twice on the same test seeds: with its memory between attempts " +
      "(the final evaluation) and with none (`eval.independent`: the same model retried independently, " +
      "each attempt seeing only itself). The difference, paired within each run, is what learning within " +
      "the context adds. success@3, mean over seeds with 95% hierarchical-bootstrap intervals; bold: the " +
      "interval excludes 0.",
    "",
  );
  const diffs: { label: string; estimates: BootstrapEstimate[] }[] = [];
  const leftOut: string[] = [];
  const rows = measured.map((m) => {
    const d = memoryDifference(ctx.bs, m);
    diffs.push({ label: m.name, estimates: [d] });
    if (d.leftOut.length > 0) leftOut.push(`- ${m.name}: ${leftOutText(d.leftOut)}`);
    const finite = Number.isFinite(d.mean);
    return [
      m.name,
      memoryOf(m),
      String(d.seeds.length),
      finite ? est(onKeptSeeds(ctx.bs, m, d, "final"), "rate") : DASH,
      finite ? est(onKeptSeeds(ctx.bs, m, d, "independent"), "rate") : DASH,
      est(d, "rate", true),
    ];
  });
  const notes = [
    ...(lacking.length > 0 ? [`_No independent evaluation in the summaries of ${lacking.join(", ")}._`] : []),
    ...(leftOut.length > 0
      ? [
          "_Seeds left out: a run that `train.maxMinutes` stopped before its planned iterations is not " +
            `the method as the grid trains it._\n\n${leftOut.join("\n")}`,
        ]
      : []),
  ];
  ctx.out.push(
    table(
      ["method", "memory", "seeds", "success@3 with memory", "retried independently", "memory − independent"],
      rows,
    ) +
      trialPairingNote(diffs) +
      notes.map((n) => `\n\n${n}`).join(""),
    "",
  );
}

/** MAGE's memory modes side by side, and the best by mean against the other two, paired. */
function memoryModes(ctx: Ctx, eg: ExperimentGame): void {
  ctx.out.push("### Which memory mode wins", "");
  const modes = present(eg, MEMORY_MODES).filter((m) => hasSource(m, "final"));
  if (modes.length < 2) {
    ctx.out.push(
      `Not run: fewer than two of ${MEMORY_MODES.join(", ")} have a final evaluation in this grid.`,
      "",
    );
    return;
  }
  ctx.out.push(
    "MAGE trained and evaluated in each memory mode: `mage` keeps its reflections (reflection_only), " +
      "`mage-history` the history of its past attempts (history_only), `mage-both` both " +
      "(history_and_reflection). success@3 with 95% intervals; below the table, the best mode by mean " +
      "and its paired differences to the others: a statement, not a target (an interval that includes 0 " +
      "does not separate two modes).",
    "",
  );
  const sources = [
    { source: "final" as const, where: "test seeds" },
    { source: "harder" as const, where: "harder set" },
  ];
  const e = (m: MethodRuns, source: "final" | "harder") =>
    methodEstimate(ctx.bs, m, COIN_CELL, "success@3", source);
  const rows = modes.map((m) => [
    m.name,
    memoryOf(m),
    String(m.runs.length),
    ...sources.map((s) => est(e(m, s.source), "rate")),
  ]);
  ctx.out.push(
    table(["method", "memory", "seeds", ...sources.map((s) => `success@3, ${s.where}`)], rows),
    "",
  );
  const diffs: { label: string; estimates: BootstrapEstimate[] }[] = [];
  for (const { source, where } of sources) {
    const ranked = modes
      .map((m) => ({ m, e: e(m, source) }))
      .filter((x) => Number.isFinite(x.e.mean))
      .sort((a, b) => b.e.mean - a.e.mean);
    if (ranked.length < 2) {
      ctx.out.push(`- ${where}: fewer than two modes evaluated here.`);
      continue;
    }
    const best = ranked[0];
    const parts = ranked.slice(1).map(({ m }) => {
      const d = pairedDifference(ctx.bs, best.m, m, COIN_CELL, "success@3", source);
      diffs.push({ label: `${best.m.name} − ${m.name} (${where})`, estimates: [d] });
      const side = !Number.isFinite(d.mean)
        ? "not paired"
        : d.lo > EPS
          ? "above 0"
          : d.hi < -EPS
            ? "below 0"
            : "includes 0";
      return { name: m.name, text: `${best.m.name} − ${m.name} ${formatInterval(d, "rate")}`, side };
    });
    const open = parts.filter((p) => p.side !== "above 0").map((p) => p.name);
    const verdict =
      open.length === 0
        ? "its paired intervals lie above 0: it wins on these seeds"
        : `not separated from ${open.join(" and ")}`;
    ctx.out.push(
      `- ${where}: best by mean \`${best.m.name}\` (${memoryOf(best.m)}) at ${formatPercent(best.e.mean)}; ` +
        `${parts.map((p) => p.text).join("; ")} — ${verdict}.`,
    );
  }
  ctx.out.push("", `${trialPairingNote(diffs)}${leftOutNote(diffs)}`.trim(), "");
}

/** Where the grid has no summaries yet: a short section naming it. */
export function coinV2Missing(all: readonly ExperimentGame[], out: string[]): void {
  if (all.some(isCoinV2)) return;
  out.push(
    `## ${COIN_V2_LABEL[0].toUpperCase()}${COIN_V2_LABEL.slice(1)}`,
    "",
    `Not run: no summaries of \`${COIN_V2_EXPERIMENT}\` yet (\`mage experiment ${COIN_V2_CONFIG}\`, issue 56). ` +
      "Its targets are in the [targets](#targets) table as not run. Once it has run, its experiment section " +
      "shows what memory adds (success@3 of each model with memory against the same model retried " +
      "independently, paired within each run) and which memory mode wins (mage, mage-history, mage-both).",
    "",
  );
}
