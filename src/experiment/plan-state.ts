import { existsSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { SUMMARY_FORMAT } from "../train/summary.js";
import type { ExperimentPlan, PlannedPretrain, PlannedRun } from "./spec.js";
import { warmStartDone, warmStartProgress } from "./warm-start.js";

/**
 * Where each run of a plan stands on disk, so `mage experiment --dry-run` can say what rerunning
 * the grid would do: skip, copy a finished summary, resume from a checkpoint, or start afresh.
 */
export type RunState =
  | { kind: "committed" }
  | { kind: "finished" }
  | { kind: "resumes"; iteration: number; of: number }
  | { kind: "new" };

/** A run summary's JSON, finished or not, or null when it is missing or unreadable. */
export function readSummaryJson(path: string): Record<string, unknown> | null {
  if (!existsSync(path)) return null;
  try {
    const s = JSON.parse(readFileSync(path, "utf8"));
    return typeof s === "object" && s !== null ? s : null;
  } catch {
    return null;
  }
}

function isFinal(s: Record<string, unknown> | null): boolean {
  return s?.format === SUMMARY_FORMAT && s.finalEval !== null && s.finalEval !== undefined;
}

/** A summary with its final evaluation, or null (missing, unreadable or from an unfinished run). */
export function readFinalSummary(path: string): { wallSeconds?: unknown } | null {
  const s = readSummaryJson(path);
  return isFinal(s) ? s : null;
}

export function runState(run: PlannedRun): RunState {
  if (readFinalSummary(run.summaryPath)) return { kind: "committed" };
  const inRunDir = readSummaryJson(join(run.runDir, "summary.json"));
  if (isFinal(inRunDir)) return { kind: "finished" };
  const iteration = inRunDir?.iterationsDone;
  if (typeof iteration === "number" && existsSync(join(run.runDir, "checkpoints")))
    return { kind: "resumes", iteration, of: run.config.train.iterations };
  return { kind: "new" };
}

function describeRun(state: RunState, run: PlannedRun, noTrain: boolean): string {
  switch (state.kind) {
    case "committed":
      return `done (${run.summaryPath})`;
    case "finished":
      return "finished; its summary will be copied";
    case "resumes":
      return noTrain
        ? `left at iteration ${state.iteration}/${state.of} (--no-train)`
        : `resumes after iteration ${state.iteration}/${state.of}`;
    case "new":
      return noTrain ? "not started (--no-train)" : "to run";
  }
}

function describePretrain(
  p: PlannedPretrain,
  plan: ExperimentPlan,
  states: Map<PlannedRun, RunState>,
): string {
  if (pretrainDone(p)) return "exists, reused";
  const waiting = plan.runs.filter((r) => r.pretrainedDir === p.dir && states.get(r)?.kind !== "committed");
  if (waiting.length === 0) return "not needed (its runs are done)";
  if (!p.warmStart) return "to pretrain";
  const progress = warmStartProgress(p.dir);
  return progress ? `to warm-start (${progress})` : "to warm-start";
}

const isPending = (state: string) => state === "to pretrain" || state.startsWith("to warm-start");

/**
 * One line per base model and run, then a tally. With `noTrain` (`--no-train`) nothing is
 * pretrained, trained or resumed: only finished runs are copied and measured.
 */
export function describePlan(plan: ExperimentPlan, opts: { noTrain?: boolean } = {}): string[] {
  const noTrain = opts.noTrain ?? false;
  const states = new Map(plan.runs.map((r) => [r, runState(r)] as const));
  const bases = plan.pretrains.map((p) => {
    const state = describePretrain(p, plan, states);
    const pending = isPending(state);
    return [p, noTrain && pending ? "not pretrained (--no-train)" : state] as const;
  });
  const idle = (s: RunState) => noTrain && (s.kind === "new" || s.kind === "resumes");
  const lines: string[] = [];
  for (const [p, state] of bases) {
    const what = p.warmStart
      ? `warm-start ${p.game} ${basename(p.warmStart.base)}`
      : `pretrain ${p.game} ${p.preset}`;
    lines.push(`${what} seed ${p.seed} → ${p.dir}: ${state}`);
  }
  for (const r of plan.runs)
    lines.push(
      `train ${r.method} seed ${r.seed}: ${r.configPath} ${r.overrides.join(" ")} → ${r.runDir}: ${describeRun(states.get(r)!, r, noTrain)}`,
    );
  const count = (kind: RunState["kind"]) =>
    [...states.values()].filter((s) => s.kind === kind && !idle(s)).length;
  const toPretrain = bases.filter(([, state]) => isPending(state)).length;
  const left = [...states.values()].filter(idle).length;
  lines.push(
    `${plan.runs.length} runs: ${count("committed")} done, ${count("finished")} finished but not copied, ` +
      `${count("resumes")} to resume, ${count("new")} to start; ${toPretrain} base model(s) to pretrain` +
      (noTrain ? `; --no-train leaves ${left} unfinished run(s) alone` : ""),
  );
  return lines;
}

/** True when the base model `p` builds is already there (a warm start: with its checks done). */
export function pretrainDone(p: PlannedPretrain): boolean {
  return p.warmStart ? warmStartDone(p.dir) : existsSync(join(p.dir, "config.json"));
}
