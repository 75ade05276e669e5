import { spawn } from "node:child_process";
import { copyFileSync, createWriteStream, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { formatMissedTargets } from "../train/pretrain/target-text.js";
import { findBaseConflict, rebuiltBaseWarning, refusal } from "./base-check.js";
import { readBaseTargets } from "./base-targets.js";
import type { GridBook } from "./grid-record.js";
import { isMeasurement, type Job, wallSecondsOf } from "./jobs.js";
import { incompleteTraining, readFinalSummary } from "./plan-state.js";
import type { ExperimentPlan, PlannedPretrain } from "./spec.js";

/** What starting a grid's job and settling its end needs. */
export interface LaunchContext {
  plan: ExperimentPlan;
  book: GridBook;
  log: (line: string) => void;
  elapsed: () => number;
  /** The child's environment, and the CLI entry it runs. */
  env: NodeJS.ProcessEnv;
  entry: string;
  acceptRebuiltBases: boolean;
  /** Whether the grid was asked to stop (a job ended by it is stopped, not failed). */
  stopping: () => boolean;
}

export function formatClock(seconds: number): string {
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = String(Math.floor((s % 3600) / 60)).padStart(2, "0");
  const sec = String(s % 60).padStart(2, "0");
  return h > 0 ? `${h}:${m}:${sec}` : `${m}:${sec}`;
}

/** A base that missed its own targets is used all the same; the log says so once it exists. */
export function warnMissedTargets(p: PlannedPretrain, log: (line: string) => void): void {
  const targets = readBaseTargets(p.dir);
  if (targets === null || targets.met) return;
  log(
    `warning: the base model of seed ${p.seed} missed its own targets (${formatMissedTargets(targets.missed)}); ` +
      `the runs of seed ${p.seed} start from it anyway (${p.dir})`,
  );
}

/** Runs a job as a child `mage` process, its output appended to its log; resolves once it is settled and recorded. */
export function startJob(job: Job, ctx: LaunchContext): Promise<void> {
  const args = typeof job.args === "function" ? job.args() : job.args;
  if (args === null) {
    job.state = "failed";
    ctx.log(`skip ${job.id}: no checkpoint to measure (the run directory may have been removed)`);
    return Promise.resolve();
  }
  job.state = "running";
  job.started = performance.now();
  if (job.run) ctx.book.recordOf(job.run).status = "running";
  mkdirSync(dirname(job.logFile), { recursive: true });
  const out = createWriteStream(job.logFile, { flags: "a" });
  out.write(`\n$ mage ${args.join(" ")}\n`);
  const child = spawn(process.execPath, [...process.execArgv, ctx.entry, ...args], {
    env: ctx.env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  job.child = child;
  child.stdout.pipe(out, { end: false });
  child.stderr.pipe(out, { end: false });
  ctx.log(`[${formatClock(ctx.elapsed())}] start ${job.id}  (log: ${job.logFile})`);
  return new Promise((resolve) => {
    child.on("close", async (code, signal) => {
      out.end();
      job.seconds = (performance.now() - job.started!) / 1000;
      job.child = undefined;
      settle(job, code === 0, ctx);
      const stopped = ctx.stopping();
      const what =
        job.state === "done" ? doneWord(job, ctx) : stopped ? "stopped" : `FAILED (exit ${code ?? signal})`;
      ctx.log(`[${formatClock(ctx.elapsed())}] ${what} ${job.id} in ${formatClock(job.seconds)}`);
      if (job.state === "failed" && !stopped) ctx.log(`  see ${job.logFile}`);
      await ctx.book.save();
      resolve();
    });
  });
}

/** A job's state, and its run's record, once its process has ended. */
function settle(job: Job, ok: boolean, ctx: LaunchContext): void {
  if (!ok && ctx.stopping()) {
    job.state = "stopped";
    if (job.run) ctx.book.recordOf(job.run).status = "pending";
  } else if (isMeasurement(job)) {
    job.state = ok ? "done" : "failed";
  } else if (job.kind === "pretrain" && job.pretrain) {
    settlePretrain(job, job.pretrain, ok, ctx);
  } else if (job.run) {
    const rec = ctx.book.recordOf(job.run);
    const summary = join(job.run.runDir, "summary.json");
    const finished = ok ? readFinalSummary(summary) : null;
    if (finished) {
      copyFileSync(summary, job.run.summaryPath);
      job.state = "done";
      rec.status = incompleteTraining(finished, job.run) ? "incomplete" : "done";
      rec.wallSeconds = wallSecondsOf(finished) ?? job.seconds ?? null;
    } else {
      job.state = "failed";
      rec.status = "failed";
    }
  }
}

/** How a job that ended well is logged: a run the box stopped early says so. */
function doneWord(job: Job, ctx: LaunchContext): string {
  if (!job.run || ctx.book.recordOf(job.run).status !== "incomplete") return "done";
  const short = incompleteTraining(readFinalSummary(job.run.summaryPath) ?? {}, job.run);
  return short
    ? `INCOMPLETE (train.maxMinutes stopped it after ${short.done} of ${short.of} iterations)`
    : "INCOMPLETE";
}

/** A base just built must be the one its seed's finished runs used, unless rebuilt bases are accepted. */
function settlePretrain(job: Job, p: PlannedPretrain, ok: boolean, ctx: LaunchContext): void {
  job.state = ok ? "done" : "failed";
  if (ok) ctx.book.pretrainedSeconds.set(p.dir, job.seconds!);
  const conflict = ok ? findBaseConflict(ctx.plan, p.dir) : null;
  if (conflict && ctx.acceptRebuiltBases) {
    ctx.log(rebuiltBaseWarning(conflict));
  } else if (conflict) {
    job.state = "failed";
    ctx.log(`base model of seed ${p.seed} cannot be used: ${refusal(conflict)}`);
  }
  if (job.state === "done") warnMissedTargets(p, ctx.log);
}
