import type { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import type { RunRecord } from "./grid-record.js";
import { incompleteTraining, pretrainDone, readFinalSummary, resumesIncomplete } from "./plan-state.js";
import {
  type ExperimentPlan,
  type PlannedPretrain,
  type PlannedRun,
  pretrainArgs,
  taskKnobsText,
} from "./spec.js";

/**
 * The jobs of one `mage experiment` invocation, each a child `mage` process: base models to
 * pretrain, runs to train (or resume), and diversity measurements, with what each waits for.
 */
export interface Job {
  id: string;
  kind: "pretrain" | "train" | "diversity" | "exploitability";
  /** The `mage` arguments, or a function giving them when the job starts (null: nothing to do). */
  args: string[] | (() => string[] | null);
  logFile: string;
  deps: Job[];
  state: "pending" | "running" | "done" | "failed" | "blocked" | "stopped";
  run?: PlannedRun;
  pretrain?: PlannedPretrain;
  started?: number;
  seconds?: number;
  child?: ReturnType<typeof spawn>;
}

export function wallSecondsOf(summary: { wallSeconds?: unknown }): number | null {
  return typeof summary.wallSeconds === "number" ? summary.wallSeconds : null;
}

/** The newest checkpoint directory of a run (its final model once the run is done). */
export function finalCheckpoint(runDir: string): string | null {
  const dir = join(runDir, "checkpoints");
  if (!existsSync(dir)) return null;
  const names = readdirSync(dir)
    .filter((n) => /^iter-\d+$/.test(n))
    .sort();
  return names.length > 0 ? join(dir, names[names.length - 1]) : null;
}

/** A job per base model not built yet, keyed by the base's directory. */
export function pretrainJobsOf(plan: ExperimentPlan, noTrain: boolean): Map<string, Job> {
  const jobs = new Map<string, Job>();
  for (const p of plan.pretrains) {
    if (noTrain || pretrainDone(p)) continue;
    mkdirSync(dirname(p.dir), { recursive: true });
    jobs.set(p.dir, {
      id: `${p.warmStart ? "warm-start" : "pretrain"} ${p.game} s${p.seed}`,
      kind: "pretrain",
      args: pretrainArgs(p),
      logFile: `${p.dir}.log`,
      deps: [],
      state: "pending",
      pretrain: p,
    });
  }
  return jobs;
}

/**
 * Each run's record, and a job for each run not finished: a run whose summary is committed is
 * skipped, one that finished before its summary was copied is copied now, the others train (from
 * their last checkpoint, if any) once their base exists. A finished run that `train.maxMinutes`
 * stopped before its iterations is recorded incomplete, and trains on only where the plan's box
 * now leaves it time (`resumesIncomplete`).
 */
export function trainJobsOf(
  plan: ExperimentPlan,
  pretrainJobs: ReadonlyMap<string, Job>,
  noTrain: boolean,
): { records: RunRecord[]; jobs: Job[] } {
  const records: RunRecord[] = [];
  const jobs: Job[] = [];
  for (const run of plan.runs) {
    const record: RunRecord = {
      method: run.method,
      seed: run.seed,
      status: "pending",
      wallSeconds: null,
      runDir: run.runDir,
    };
    records.push(record);
    const committed = readFinalSummary(run.summaryPath);
    const runSummary = join(run.runDir, "summary.json");
    const finished = committed ?? readFinalSummary(runSummary);
    // An incomplete run (stopped by `train.maxMinutes`) trains on only where the plan's box allows.
    if (finished && (noTrain || !resumesIncomplete(finished, run))) {
      // A run that finished before an interruption kept it from being copied is copied now.
      if (!committed) copyFileSync(runSummary, run.summaryPath);
      record.status = incompleteTraining(finished, run) ? "incomplete" : committed ? "skipped" : "done";
      record.wallSeconds = wallSecondsOf(finished);
      continue;
    }
    if (noTrain) continue;
    mkdirSync(run.runDir, { recursive: true });
    const args = ["train", "--config", run.configPath, "--out", run.runDir, "--resume", "--no-progress"];
    for (const o of run.overrides) args.push("--set", o);
    const dep = run.pretrainedDir ? pretrainJobs.get(run.pretrainedDir) : undefined;
    jobs.push({
      id: `${run.method}-s${run.seed}`,
      kind: "train",
      args,
      logFile: join(run.runDir, "train.log"),
      deps: dep ? [dep] : [],
      state: "pending",
      run,
    });
  }
  return { records, jobs };
}

/** The grid's `diversity` measurements not taken yet: each base model's, and each trained run's final model's. */
export function diversityJobsOf(
  plan: ExperimentPlan,
  pretrainJobs: ReadonlyMap<string, Job>,
  trainJobs: readonly Job[],
  noTrain: boolean,
): Job[] {
  const diversity = plan.spec.diversity;
  if (!diversity) return [];
  const dir = join(plan.resultsDir, "diversity");
  mkdirSync(dir, { recursive: true });
  const measure = (
    game: string,
    checkpoint: string,
    maxTokens: number,
    seed: number,
    knobs?: string | null,
  ) => {
    const args = ["diversity", "--checkpoint", checkpoint, "--game", game, "--seed", String(seed)];
    args.push("--samples", String(diversity.samples), "--max-tokens", String(maxTokens));
    if (diversity.opponent) args.push("--opponent", diversity.opponent);
    // Puzzles: the levels the grid trains on, for the pretrained base and the trained models alike.
    if (knobs) args.push("--knobs", knobs);
    return args;
  };
  const jobs: Job[] = [];
  const seedsWithPretrain = plan.pretrains.map((p) => p.seed);
  for (const p of plan.pretrains) {
    const unique = seedsWithPretrain.filter((s) => s === p.seed).length === 1;
    const out = join(dir, `${unique ? "pretrained" : `pretrained-${p.game}-${p.preset}`}-s${p.seed}.json`);
    if (existsSync(out)) continue;
    const maxTokens =
      plan.runs.find((r) => r.pretrainedDir === p.dir)?.config.rollout.maxResponseTokens ?? 48;
    const dep = pretrainJobs.get(p.dir);
    if (noTrain && !pretrainDone(p)) continue;
    jobs.push({
      id: `diversity ${p.game} pretrained s${p.seed}`,
      kind: "diversity",
      args: [...measure(p.game, p.dir, maxTokens, p.seed, p.knobs), "--out", out],
      logFile: `${p.dir}.diversity.log`,
      deps: dep ? [dep] : [],
      state: "pending",
    });
  }
  for (const run of plan.runs) {
    const job = runMeasurementJob(run, trainJobs, dir, "diversity", (ck, out) => [
      ...measure(
        run.config.game,
        ck,
        run.config.rollout.maxResponseTokens,
        run.seed,
        taskKnobsText(run.config),
      ),
      "--out",
      out,
    ]);
    if (job) jobs.push(job);
  }
  return jobs;
}

/**
 * A measurement of a trained run's final model, written to `<dir>/<method>-s<seed>.json`, or null
 * when there is nothing to measure: an untrained baseline, a file already there for a run with no
 * training left, or a run neither training nor finished. A run still to train (an incomplete one
 * trained on, say) is measured again once it ends.
 */
function runMeasurementJob(
  run: PlannedRun,
  trainJobs: readonly Job[],
  dir: string,
  kind: "diversity" | "exploitability",
  argsFor: (checkpoint: string, out: string) => string[],
): Job | null {
  if (!run.config.train.updates) return null;
  const out = join(dir, `${run.method}-s${run.seed}.json`);
  const trainJob = trainJobs.find((j) => j.run === run);
  if (existsSync(out) && !trainJob) return null;
  if (!trainJob && readFinalSummary(run.summaryPath) === null) return null;
  return {
    id: `${kind} ${run.method}-s${run.seed}`,
    kind,
    args: () => {
      const ck = finalCheckpoint(run.runDir);
      return ck ? argsFor(ck, out) : null;
    },
    logFile: join(run.runDir, `${kind}.log`),
    deps: trainJob ? [trainJob] : [],
    state: "pending",
  };
}

/** Jobs that measure a finished run's model (no run record of their own). */
export function isMeasurement(j: Job): boolean {
  return j.kind === "diversity" || j.kind === "exploitability";
}

/** The grid's `exploitability` measurements not taken yet: each trained run's final model (Kuhn). */
export function exploitabilityJobsOf(plan: ExperimentPlan, trainJobs: readonly Job[]): Job[] {
  const spec = plan.spec.exploitability;
  if (!spec) return [];
  const dir = join(plan.resultsDir, "exploitability");
  mkdirSync(dir, { recursive: true });
  return plan.runs.flatMap((run) => {
    const job = runMeasurementJob(run, trainJobs, dir, "exploitability", (ck, out) => [
      "exploitability",
      "--checkpoint",
      ck,
      "--samples",
      String(spec.samples),
      "--seed",
      String(run.seed),
      "--max-tokens",
      String(run.config.rollout.maxResponseTokens),
      "--quiet",
      "--out",
      out,
    ]);
    return job ? [job] : [];
  });
}

/**
 * A fresh clone holds the committed summaries but not the base models: only the bases that some
 * pending run or measurement still needs are pretrained. Drops the others from both collections.
 */
export function dropUnneededPretrains(pretrainJobs: Map<string, Job>, jobs: Job[]): void {
  for (const [dir, job] of pretrainJobs) {
    if (jobs.some((j) => j.deps.includes(job))) continue;
    pretrainJobs.delete(dir);
    jobs.splice(jobs.indexOf(job), 1);
  }
}
