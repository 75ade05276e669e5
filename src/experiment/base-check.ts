import { existsSync, readdirSync } from "node:fs";
import { basename, join } from "node:path";
import { hfWeightsSha256Sync, weightsSha256 } from "../model/checkpoint.js";
import { readSummaryJson } from "./plan-state.js";
import type { ExperimentPlan } from "./spec.js";

/**
 * Whether the base model in `dir` still holds the weights the seed's finished runs started from.
 * A base pretrained again (a fresh clone, another CPU whose OpenBLAS rounds differently) has the
 * same path but other weights; runs on it would be paired with runs made on the old one. The runs
 * judged are the plan's and every committed summary of the grid that started from this base, so
 * `--only` or `--seeds` cannot hide the methods they leave out. Returns what is wrong and what to
 * do, or null. Summaries without a recorded hash are not judged.
 */
export function baseConflict(plan: ExperimentPlan, dir: string): string | null {
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
  if (differing.length === 0) return null;
  return (
    `base model ${dir} holds other weights (sha256 ${now.slice(0, 12)}…) than ${differing.join(", ")} ` +
    `started from (${recorded.slice(0, 12)}…): it was pretrained again, e.g. on a CPU whose OpenBLAS ` +
    "rounds differently. Finish this seed where its base was built, or move those summaries aside and rerun the whole seed."
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
