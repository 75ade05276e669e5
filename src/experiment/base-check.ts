import { join } from "node:path";
import { weightsSha256 } from "../model/checkpoint.js";
import { readSummaryJson } from "./plan-state.js";
import type { ExperimentPlan } from "./spec.js";

/**
 * Whether the base model in `dir` still holds the weights the seed's finished runs started from.
 * A base pretrained again (a fresh clone, another CPU whose OpenBLAS rounds differently) has the
 * same path but other weights; runs on it would be paired with runs made on the old one. Returns
 * what is wrong and what to do, or null. Summaries without a recorded hash are not judged.
 */
export function baseConflict(plan: ExperimentPlan, dir: string): string | null {
  const now = weightsSha256(dir);
  if (now === null) return null;
  const differing: string[] = [];
  let recorded = "";
  for (const run of plan.runs) {
    if (run.pretrainedDir !== dir) continue;
    for (const file of [run.summaryPath, join(run.runDir, "summary.json")]) {
      const summary = readSummaryJson(file);
      if (!summary) continue;
      const sha = (summary.baseModel as { sha256?: unknown } | undefined)?.sha256;
      if (typeof sha === "string" && sha !== now) {
        differing.push(file);
        recorded = sha;
      }
      break;
    }
  }
  if (differing.length === 0) return null;
  return (
    `base model ${dir} holds other weights (sha256 ${now.slice(0, 12)}…) than ${differing.join(", ")} ` +
    `started from (${recorded.slice(0, 12)}…): it was pretrained again, e.g. on a CPU whose OpenBLAS ` +
    "rounds differently. Finish this seed where its base was built, or move those summaries aside and rerun the whole seed."
  );
}
