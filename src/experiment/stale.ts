import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { configDifferences, isRuntimeOnlyField } from "../core/config-diff.js";
import { UsageError } from "../core/errors.js";
import { readConfigFile } from "../train/config.js";
import type { ExperimentPlan, PlannedRun } from "./spec.js";

/** What a finished or started run was made with, from each file it left that records it. */
function storedConfigs(run: PlannedRun): { file: string; config: unknown }[] {
  const found: { file: string; config: unknown }[] = [];
  const fromJson = (file: string) => {
    if (!existsSync(file)) return;
    try {
      const config = JSON.parse(readFileSync(file, "utf8"))?.config;
      if (config !== undefined) found.push({ file, config });
    } catch {
      // An unreadable summary is not reused by the runner either; nothing to compare.
    }
  };
  fromJson(run.summaryPath);
  fromJson(join(run.runDir, "summary.json"));
  const yamlFile = join(run.runDir, "config.yaml");
  if (existsSync(yamlFile)) {
    try {
      found.push({ file: yamlFile, config: readConfigFile(yamlFile) });
    } catch {
      // Same: a run directory whose config cannot be read is left to the trainer to report.
    }
  }
  return found;
}

const MAX_LISTED = 8;

/**
 * Refuses to reuse results or resume runs made with another config than the plan's (a method's
 * config edited, a base model retrained, an override changed): the grid would otherwise report
 * the old runs as if they were the new ones. Nothing is deleted; the error names what to move.
 */
export function checkNoStaleRuns(plan: ExperimentPlan): void {
  const problems: string[] = [];
  for (const run of plan.runs) {
    const planned = JSON.parse(JSON.stringify(run.config));
    for (const { file, config } of storedConfigs(run)) {
      // Where a run's curves are logged, or how big the worker's prefix store is, changes none of its
      // results; nor does the wall-clock box, which only decides whether a run is complete (its
      // summary says so, and a raised box lets the grid train an incomplete run on).
      const diff = configDifferences(
        config,
        planned,
        (p) => isRuntimeOnlyField(p) || p === "train.maxMinutes",
      );
      if (diff.length === 0) continue;
      const shown = diff.slice(0, 3).join("; ") + (diff.length > 3 ? `; and ${diff.length - 3} more` : "");
      problems.push(`  ${run.method}-s${run.seed}: ${file} was made with another config (${shown})`);
      break;
    }
  }
  if (problems.length === 0) return;
  const shown = problems.slice(0, MAX_LISTED);
  if (problems.length > MAX_LISTED) shown.push(`  and ${problems.length - MAX_LISTED} more`);
  const baseHint = problems.some((p) => p.includes("model.checkpoint"))
    ? "(A changed model.checkpoint under the pretrained folder means the pretraining recipe or settings changed.)\n"
    : "";
  throw new UsageError(
    `experiment ${plan.spec.name}: ${problems.length} run(s) already on disk do not match the plan:\n` +
      `${shown.join("\n")}\n${baseHint}` +
      "Move those summaries and run directories aside (or rename the experiment) to run the new plan; " +
      "restore the old config to continue the old one.",
  );
}
