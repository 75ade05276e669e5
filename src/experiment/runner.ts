import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { UsageError } from "../core/errors.js";
import { collectRunMeta, SOURCE_COMMIT_ENV, SOURCE_DIRTY_ENV } from "../train/run-meta.js";
import { findBaseConflict, rebuiltBaseWarning, refusal } from "./base-check.js";
import { type ExperimentRecord, GridBook } from "./grid-record.js";
import {
  diversityJobsOf,
  dropUnneededPretrains,
  exploitabilityJobsOf,
  isMeasurement,
  type Job,
  pretrainJobsOf,
  trainJobsOf,
} from "./jobs.js";
import { formatClock, type LaunchContext, startJob, warnMissedTargets } from "./launch.js";
import type { ExperimentPlan } from "./spec.js";
import { checkNoStaleRuns } from "./stale.js";

/**
 * `mage experiment`: runs a plan's jobs as child `mage` processes, `jobs` at a time. Resumable by
 * construction: a run whose summary is already in the results folder is skipped, a pretrained
 * model that exists is reused, and an interrupted run continues from its last checkpoint
 * (`mage train --resume`). Every finished run's summary is copied into the results folder at once,
 * so an interrupted grid loses at most the runs in flight.
 */
export interface RunExperimentOptions {
  jobs?: number;
  /** Where progress lines go (default stderr). */
  log?: (line: string) => void;
  /** Seconds between status lines while jobs run (0: never). */
  statusEverySeconds?: number;
  /** The command line to record in experiment.json. */
  command?: string;
  shouldStop?: () => boolean;
  /** Only the measurements of runs already finished (diversity): no pretraining, no training. */
  noTrain?: boolean;
  /**
   * Go on from a base model pretrained again whose weights differ from those the seed's finished
   * runs started from (another CPU rounds differently), with a warning; the summaries keep each
   * run's hash and the report lists the seed's runs by base. Default: refuse.
   */
  acceptRebuiltBases?: boolean;
}

/** The CLI entry beside this module (main.ts under tsx, main.js once built). */
function cliEntry(): string {
  const here = fileURLToPath(import.meta.url);
  return join(dirname(here), "..", "cli", `main${extname(here)}`);
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** One `mage experiment` per grid at a time: a lock file holding the owner's pid. */
function takeLock(path: string): () => void {
  mkdirSync(dirname(path), { recursive: true });
  if (existsSync(path)) {
    const pid = Number(readFileSync(path, "utf8").trim());
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && pidAlive(pid)) {
      throw new UsageError(
        `another mage experiment (pid ${pid}) is running this grid; wait for it or stop it (lock: ${path})`,
      );
    }
  }
  writeFileSync(path, `${process.pid}\n`);
  return () => rmSync(path, { force: true });
}

function metricsLines(runDir: string): number {
  const p = join(runDir, "metrics.jsonl");
  if (!existsSync(p)) return 0;
  return readFileSync(p, "utf8")
    .split("\n")
    .filter((l) => l.trim().length > 0).length;
}

export async function runExperiment(
  plan: ExperimentPlan,
  opts: RunExperimentOptions = {},
): Promise<{ record: ExperimentRecord; failed: number; stopped: boolean }> {
  const log = opts.log ?? ((l: string) => console.error(l));
  const jobsAtOnce = opts.jobs ?? plan.spec.jobs;
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  checkNoStaleRuns(plan);
  const releaseLock = takeLock(join(plan.spec.runsDir, plan.spec.name, ".lock"));
  try {
    return await runLocked(plan, opts, log, jobsAtOnce, elapsed);
  } finally {
    releaseLock();
  }
}

async function runLocked(
  plan: ExperimentPlan,
  opts: RunExperimentOptions,
  log: (line: string) => void,
  jobsAtOnce: number,
  elapsed: () => number,
): Promise<{ record: ExperimentRecord; failed: number; stopped: boolean }> {
  mkdirSync(plan.resultsDir, { recursive: true });
  const { pretrainJobs, trains, jobs } = gridJobs(plan, opts.noTrain ?? false);
  checkBuiltBases(plan, pretrainJobs, jobs, opts.acceptRebuiltBases ?? false, log);

  // Once per grid: it runs git, and the record is rewritten after every job.
  const machine = collectRunMeta(jobsAtOnce > 1 ? `auto, ${jobsAtOnce} runs in parallel` : "auto");
  const book = new GridBook(plan, trains.records, {
    command: opts.command ?? `mage experiment ${plan.file}`,
    machine,
    elapsed,
  });
  const measurements = jobs.filter((j) => j.kind === "diversity").length;
  const exploitability = jobs.filter((j) => j.kind === "exploitability").length;
  log(
    `experiment ${plan.spec.name}: ${book.records.length} runs (${book.finished()} already done${incompleteText(book)}), ` +
      `${pretrainJobs.size} base model(s) to pretrain, ${measurements} diversity measurement(s), ${exploitability > 0 ? `${exploitability} exploitability measurement(s), ` : ""}` +
      `${jobsAtOnce} at a time; results in ${plan.resultsDir}`,
  );
  await book.save();

  const stopped = await runJobs(jobs, jobsAtOnce, opts, {
    plan,
    book,
    log,
    elapsed,
    env: childEnv(machine, jobsAtOnce),
    entry: cliEntry(),
    acceptRebuiltBases: opts.acceptRebuiltBases ?? false,
  });
  await book.save();
  const failedMeasures = jobs.filter(
    (j) => isMeasurement(j) && (j.state === "failed" || j.state === "blocked"),
  ).length;
  const failed = book.failed() + failedMeasures;
  log(
    `experiment ${plan.spec.name}: ${book.finished()}/${book.records.length} runs done${incompleteText(book)}, ${failed} failed` +
      `${failedMeasures > 0 ? ` (${failedMeasures} measurement(s) not done)` : ""}` +
      `${stopped ? ", stopped early" : ""} in ${formatClock(elapsed())}; summaries in ${plan.resultsDir}`,
  );
  return { record: book.record(), failed, stopped };
}

/** ", N incomplete (…)" when `train.maxMinutes` stopped some finished runs early; "" otherwise. */
function incompleteText(book: GridBook): string {
  const n = book.incomplete();
  return n > 0 ? `, ${n} incomplete (stopped by train.maxMinutes before their iterations)` : "";
}

/** The grid's jobs: bases to pretrain (only those a pending job needs), runs and measurements. */
function gridJobs(plan: ExperimentPlan, noTrain: boolean) {
  const pretrainJobs = pretrainJobsOf(plan, noTrain);
  const trains = trainJobsOf(plan, pretrainJobs, noTrain);
  const jobs: Job[] = [...pretrainJobs.values(), ...trains.jobs];
  jobs.push(...diversityJobsOf(plan, pretrainJobs, trains.jobs, noTrain));
  jobs.push(...exploitabilityJobsOf(plan, trains.jobs));
  dropUnneededPretrains(pretrainJobs, jobs);
  return { pretrainJobs, trains, jobs };
}

/**
 * Runs the jobs, logging a status line every `statusEverySeconds`; a stop request (`shouldStop`)
 * lets the runs in flight checkpoint and stop. Returns whether it stopped early.
 */
async function runJobs(
  jobs: Job[],
  jobsAtOnce: number,
  opts: RunExperimentOptions,
  context: Omit<LaunchContext, "stopping">,
): Promise<boolean> {
  let stopped = false;
  const launch: LaunchContext = { ...context, stopping: () => stopped };
  const onStop = () => {
    if (stopped) return;
    stopped = true;
    context.log("stopping: runs in flight checkpoint and stop; rerun the same command to continue");
    for (const j of jobs) if (j.child) j.child.kill("SIGINT");
  };
  const every = (opts.statusEverySeconds ?? 60) * 1000;
  const status = () => context.log(statusLine(jobs, context.book, context.elapsed));
  const timer = every > 0 ? setInterval(status, every) : null;
  try {
    await schedule(jobs, jobsAtOnce, launch, () => {
      if (!stopped && opts.shouldStop?.()) onStop();
      return stopped;
    });
  } finally {
    if (timer) clearInterval(timer);
  }
  return stopped;
}

/**
 * A base that exists must be the one the seed's finished runs used before more runs start on it
 * (refused, or with `--accept-rebuilt-bases` a warning); a base that missed its own targets is
 * named.
 */
function checkBuiltBases(
  plan: ExperimentPlan,
  pretrainJobs: ReadonlyMap<string, Job>,
  jobs: readonly Job[],
  acceptRebuiltBases: boolean,
  log: (line: string) => void,
): void {
  const built = plan.pretrains.filter(
    (p) => !pretrainJobs.has(p.dir) && jobs.some((j) => j.run?.pretrainedDir === p.dir),
  );
  const conflicts = built.map((p) => findBaseConflict(plan, p.dir)).filter((c) => c !== null);
  if (conflicts.length > 0 && !acceptRebuiltBases) throw new UsageError(conflicts.map(refusal).join("\n"));
  for (const c of conflicts) log(rebuiltBaseWarning(c));
  for (const p of built) warnMissedTargets(p, log);
}

/** The children's environment: this process's, the source commit, and one BLAS thread each when several run. */
function childEnv(machine: ReturnType<typeof collectRunMeta>, jobsAtOnce: number): NodeJS.ProcessEnv {
  const env = { ...process.env };
  if (machine.commit) {
    env[SOURCE_COMMIT_ENV] = machine.commit;
    env[SOURCE_DIRTY_ENV] = machine.dirty === null ? "" : machine.dirty ? "1" : "0";
  }
  if (jobsAtOnce > 1) {
    env.OPENBLAS_NUM_THREADS ??= "1";
    env.OMP_NUM_THREADS ??= "1";
  }
  return env;
}

function statusLine(jobs: readonly Job[], book: GridBook, elapsed: () => number): string {
  const now = jobs
    .filter((j) => j.state === "running")
    .map((j) => {
      if (j.kind !== "train") return j.id;
      const total = j.run!.config.train.iterations;
      const it = metricsLines(j.run!.runDir);
      return `${j.id} (${it < total ? `iteration ${it}/${total}` : "final evaluation"})`;
    });
  return `[${formatClock(elapsed())}] ${book.finished()}/${book.records.length} runs done${book.incomplete() > 0 ? `, ${book.incomplete()} incomplete` : ""} · running ${now.join(", ") || "nothing"}`;
}

/**
 * Starts ready jobs, `jobsAtOnce` at a time, until none is left or a stop is asked for
 * (`stopping`, polled every half second). A job whose dependency failed is blocked.
 */
async function schedule(
  jobs: readonly Job[],
  jobsAtOnce: number,
  launch: LaunchContext,
  stopping: () => boolean,
): Promise<void> {
  const running = new Set<Promise<void>>();
  for (;;) {
    const stopped = stopping();
    for (const j of jobs) blockIfDepsFailed(j, launch);
    while (!stopped && running.size < jobsAtOnce) {
      // Quick measurements first, so results land as soon as their run does; then runs whose base
      // model exists, so whole seeds finish early; a later seed's pretraining only when idle.
      const ready = jobs.filter((j) => j.state === "pending" && j.deps.every((d) => d.state === "done"));
      const next = ready.find(isMeasurement) ?? ready.find((j) => j.kind === "train") ?? ready[0];
      if (!next) break;
      const p = startJob(next, launch).then(() => {
        running.delete(p);
      });
      running.add(p);
    }
    if (running.size === 0) break;
    // Wake on a job's end, or soon to notice a stop request.
    await Promise.race([...running, new Promise((r) => setTimeout(r, 500))]);
  }
}

function blockIfDepsFailed(j: Job, launch: LaunchContext): void {
  if (j.state !== "pending" || !j.deps.some((d) => d.state === "failed" || d.state === "blocked")) return;
  j.state = "blocked";
  if (j.run) launch.book.recordOf(j.run).status = "blocked";
  launch.log(
    `skip ${j.id}: ${isMeasurement(j) ? "its run failed" : "its base model failed to pretrain or differs from the one its seed's finished runs used"}`,
  );
}
