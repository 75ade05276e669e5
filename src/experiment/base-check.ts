import { existsSync, readdirSync } from "node:fs";
import { basename, join } from "node:path";
import { hfWeightsSha256Sync, weightsSha256 } from "../model/checkpoint.js";
import { pretrainDone, readSummaryJson } from "./plan-state.js";
import type { ExperimentPlan } from "./spec.js";

/** A base model whose weights differ from those some of its seed's finished runs started from. */
export interface BaseConflict {
  dir: string;
  /** The weights' hash now. */
  sha256: string;
  /** The hash those runs recorded. */
  recorded: string;
  /** Their summaries. */
  files: string[];
}

/**
 * Whether the base model in `dir` still holds the weights the seed's finished runs started from.
 * A base pretrained again (a fresh clone, another CPU whose kernels round differently) has the
 * same path but other weights; runs on it would be paired with runs made on the old one. The runs
 * judged are the plan's and every committed summary of the grid that started from this base, so
 * `--only` or `--seeds` cannot hide the methods they leave out. Summaries without a recorded hash
 * are not judged.
 */
export function findBaseConflict(plan: ExperimentPlan, dir: string): BaseConflict | null {
  const now = weightsSha256(dir) ?? hfWeightsSha256Sync(dir);
  if (now === null) return null;
  const differing: string[] = [];
  let recorded = "";
  const judge = (file: string, summary: Record<string, unknown>): void => {
    const sha = (summary.baseModel as { sha256?: unknown } | undefined)?.sha256;
    if (typeof sha === "string" && sha !== now) {
      differing.push(file);
      recorded = sha;
    }
  };
  const judged = new Set<string>();
  for (const run of plan.runs) {
    if (run.pretrainedDir !== dir) continue;
    judged.add(run.summaryPath);
    for (const file of [run.summaryPath, join(run.runDir, "summary.json")]) {
      const summary = readSummaryJson(file);
      if (!summary) continue;
      judge(file, summary);
      break;
    }
  }
  for (const file of committedSummaries(plan.resultsDir)) {
    if (judged.has(file)) continue;
    const summary = readSummaryJson(file);
    const from = (summary?.baseModel as { dir?: unknown } | undefined)?.dir;
    if (summary && typeof from === "string" && basename(from) === basename(dir)) judge(file, summary);
  }
  return differing.length === 0 ? null : { dir, sha256: now, recorded, files: differing };
}

function describeDifference(c: BaseConflict): string {
  return (
    `base model ${c.dir} holds other weights (sha256 ${c.sha256.slice(0, 12)}…) than ${c.files.join(", ")} ` +
    `started from (${c.recorded.slice(0, 12)}…)`
  );
}

/** What is wrong and what to do, or null: `findBaseConflict` as the message that stops a grid. */
export function baseConflict(plan: ExperimentPlan, dir: string): string | null {
  const c = findBaseConflict(plan, dir);
  return c === null ? null : refusal(c);
}

/** The message that stops a grid on a rebuilt base. */
export function refusal(c: BaseConflict): string {
  return (
    `${describeDifference(c)}: it was pretrained again, e.g. on a CPU whose kernels round differently ` +
    "(OpenBLAS; PyTorch's AVX2 and AVX-512 paths). Finish this seed where its base was built, move those " +
    "summaries aside and rerun the whole seed, or pass --accept-rebuilt-bases to go on from this base " +
    "(the report then lists the seed's runs by base)."
  );
}

/** The warning a grid logs when it goes on from a rebuilt base (`--accept-rebuilt-bases`). */
export function rebuiltBaseWarning(c: BaseConflict): string {
  return (
    `warning: ${describeDifference(c)}; going on from it (--accept-rebuilt-bases): the summaries record ` +
    "each run's base hash and the report lists the seed's runs by base"
  );
}

/**
 * For `--dry-run`: one line per base model already built whose weights differ from those some of
 * its seed's finished runs started from, saying what the grid will do with it.
 */
export function rebuiltBaseLines(plan: ExperimentPlan, acceptRebuiltBases: boolean): string[] {
  return plan.pretrains
    .filter((p) => pretrainDone(p))
    .map((p) => findBaseConflict(plan, p.dir))
    .filter((c): c is BaseConflict => c !== null)
    .map(
      (c) =>
        `${describeDifference(c)}: ` +
        (acceptRebuiltBases
          ? "the grid goes on from it (--accept-rebuilt-bases)"
          : "the grid refuses it (pass --accept-rebuilt-bases to go on from it)"),
    );
}

/** The run summaries committed for a grid (`<method>-s<seed>.json`). */
function committedSummaries(resultsDir: string): string[] {
  if (!existsSync(resultsDir)) return [];
  return readdirSync(resultsDir)
    .filter((f) => /-s\d+\.json$/.test(f))
    .sort()
    .map((f) => join(resultsDir, f));
}
