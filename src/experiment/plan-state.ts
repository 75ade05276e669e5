import { existsSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { SUMMARY_FORMAT, trainingOf } from "../train/summary.js";
import type { ExperimentPlan, PlannedPretrain, PlannedRun } from "./spec.js";
import { warmStartDone, warmStartProgress } from "./warm-start.js";

/**
 * Where each run of a plan stands on disk, so `mage experiment --dry-run` can say what rerunning
 * the grid would do: skip, copy a finished summary, resume from a checkpoint, or start afresh.
 */
export type RunState =
  | { kind: "committed" }
  | { kind: "finished" }
  | { kind: "incomplete"; iteration: number; of: number; copied: boolean; wallSeconds: number }
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
export function readFinalSummary(path: string): Record<string, unknown> | null {
  const s = readSummaryJson(path);
  return isFinal(s) ? s : null;
}

/**
 * A finished run that trained fewer iterations than the plan's (`train.maxMinutes` stopped it):
 * the iterations it did and those planned; null for a complete run.
 */
export function incompleteTraining(
  summary: Record<string, unknown>,
  run: PlannedRun,
): { done: number; of: number } | null {
  const done = summary.iterationsDone;
  if (typeof done !== "number") return null;
  const complete = summary.complete;
  const t = trainingOf({
    iterationsDone: done,
    ...(typeof complete === "boolean" ? { complete } : {}),
    config: { train: { iterations: run.config.train.iterations } },
  });
  return t.complete ? null : { done: t.done, of: t.planned };
}

/**
 * Whether rerunning the grid trains an incomplete run on: its run directory still has its
 * checkpoints, and the plan's box (`train.maxMinutes`, raised since, or dropped) is longer than the
 * wall-clock the run has spent. Under the same box it would stop again at once.
 */
export function resumesIncomplete(summary: Record<string, unknown>, run: PlannedRun): boolean {
  if (!incompleteTraining(summary, run) || !existsSync(join(run.runDir, "checkpoints"))) return false;
  const box = run.config.train.maxMinutes;
  const spent = typeof summary.wallSeconds === "number" ? summary.wallSeconds : Number.POSITIVE_INFINITY;
  return box === null || box * 60 > spent;
}

export function runState(run: PlannedRun): RunState {
  const committed = readFinalSummary(run.summaryPath);
  const inRunDir = readSummaryJson(join(run.runDir, "summary.json"));
  const finished = committed ?? (isFinal(inRunDir) ? inRunDir : null);
  if (finished) {
    const short = incompleteTraining(finished, run);
    if (!short) return { kind: committed ? "committed" : "finished" };
    if (!resumesIncomplete(finished, run)) {
      const wallSeconds = typeof finished.wallSeconds === "number" ? finished.wallSeconds : Number.NaN;
      return {
        kind: "incomplete",
        iteration: short.done,
        of: short.of,
        copied: committed !== null,
        wallSeconds,
      };
    }
    return { kind: "resumes", iteration: short.done, of: short.of };
  }
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
    case "incomplete":
      return (
        `incomplete: train.maxMinutes stopped it after iteration ${state.iteration}/${state.of}` +
        `${state.copied ? "" : "; its summary will be copied"}; ${continueHint(state, run)}`
      );
    case "resumes":
      return noTrain
        ? `left at iteration ${state.iteration}/${state.of} (--no-train)`
        : `resumes after iteration ${state.iteration}/${state.of}`;
    case "new":
      return noTrain ? "not started (--no-train)" : "to run";
  }
}

function continueHint(state: { wallSeconds: number }, run: PlannedRun): string {
  if (!existsSync(join(run.runDir, "checkpoints")))
    return "its run directory is gone, so it cannot be trained on";
  const spent = Number.isFinite(state.wallSeconds)
    ? ` past the ${Math.ceil(state.wallSeconds / 60)} minutes it has run`
    : "";
  return `a rerun trains it on once train.maxMinutes is raised${spent}, or dropped`;
}

function describePretrain(
  p: PlannedPretrain,
  plan: ExperimentPlan,
  states: Map<PlannedRun, RunState>,
): string {
  if (pretrainDone(p)) return "exists, reused";
  const settled = (r: PlannedRun) => ["committed", "incomplete"].includes(states.get(r)?.kind ?? "");
  const waiting = plan.runs.filter((r) => r.pretrainedDir === p.dir && !settled(r));
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
      `${count("incomplete") > 0 ? `${count("incomplete")} incomplete, ` : ""}` +
      `${count("resumes")} to resume, ${count("new")} to start; ${toPretrain} base model(s) to pretrain` +
      (noTrain ? `; --no-train leaves ${left} unfinished run(s) alone` : ""),
  );
  return lines;
}

/** True when the base model `p` builds is already there (a warm start: with its checks done). */
export function pretrainDone(p: PlannedPretrain): boolean {
  return p.warmStart ? warmStartDone(p.dir) : existsSync(join(p.dir, "config.json"));
}
