import { formatMissedTargets } from "../train/pretrain/target-text.js";
import { type RunSummary, trainingOf } from "../train/summary.js";
import { compareMethodNames } from "./compare.js";
import type { DiversityFile, Experiment } from "./experiments.js";
import { DASH, formatDuration, formatPercent, shortCommit, table } from "./markdown.js";
import { isTorchRun, modelColumn } from "./model.js";
import { type Ctx, gameTitle, mean, wallOf } from "./results-common.js";

/** Diversity, the runs table and the notes on the base models a grid started from. */

export function diversitySection(ctx: Ctx, files: readonly DiversityFile[], game: string): void {
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

export type ModelColumn = ReturnType<typeof modelColumn>;

/** One row per run with a summary, then one per run the grid lists without one. */
export function runRows(ctx: Ctx, e: Experiment, model: ModelColumn | null): string[][] {
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
        // A run with a summary is done, or incomplete when the box stopped it early (judged from
        // the summary, so older records say so too); "skipped" in experiment.json only says that
        // the grid's last invocation found it finished and did not rerun it.
        st?.status === "failed" ? "failed" : trainingOf(s).complete ? "done" : "incomplete",
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

export function runsTable(ctx: Ctx, e: Experiment): void {
  // Grids of the embedded model leave the model out, as they always did; torch runs name theirs.
  const model = e.runs.some((r) => isTorchRun(r.summary)) ? modelColumn(e.runs.map((r) => r.summary)) : null;
  const head = ["method", "seed", "game", ...(model ? [model.head] : [])];
  const tail = ["status", "iterations", "wall-clock", "pretraining", "kernels", "commit", "summary"];
  ctx.out.push("### Runs", "", table([...head, ...tail], runRows(ctx, e, model)), "");
  baseNotes(ctx, e);
}

/** Bases rebuilt under a seed, and bases that missed their own pretraining targets. */
export function baseNotes(ctx: Ctx, e: Experiment): void {
  const unequal = seedsOfUnequalTraining(e);
  if (unequal.length > 0) {
    const incomplete = e.runs.some((r) => !trainingOf(r.summary).complete);
    ctx.out.push(
      "Seeds whose trained runs stopped after different numbers of iterations. " +
        (incomplete
          ? "A run short of its planned iterations is incomplete (`train.maxMinutes` stops a run by " +
            "wall-clock time, which depends on the machine's load): paired comparisons leave out the " +
            "seeds where either side is incomplete, and name them:"
          : "Each trained as many as its method planned, so they are paired as they are:"),
      "",
      ...unequal,
      "",
    );
  }
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

/** One line per seed whose trained runs (`train.iterations` > 0) did not all train as many iterations. */
export function seedsOfUnequalTraining(e: Experiment): string[] {
  const bySeed = new Map<number, RunSummary[]>();
  for (const { summary } of e.runs) {
    if ((summary.config?.train?.iterations ?? 0) === 0) continue;
    bySeed.set(summary.seed, [...(bySeed.get(summary.seed) ?? []), summary]);
  }
  return [...bySeed.entries()]
    .filter(([, runs]) => new Set(runs.map((s) => s.iterationsDone)).size > 1)
    .sort(([a], [b]) => a - b)
    .map(([seed, runs]) => {
      const sorted = runs.slice().sort((a, b) => compareMethodNames(a.name, b.name));
      const each = sorted.map((s) => `${s.name} ${s.iterationsDone}/${s.config?.train?.iterations ?? "?"}`);
      return `- seed ${seed}: ${each.join(", ")}`;
    });
}

/** One line per seed whose summaries record more than one base hash: each hash and its methods. */
export function seedsOnRebuiltBases(e: Experiment): string[] {
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
