import { spawn } from "node:child_process";
import {
  copyFileSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeFileAtomic } from "../core/atomic-write.js";
import { UsageError } from "../core/errors.js";
import { formatMissedTargets } from "../train/pretrain/target-text.js";
import { collectRunMeta, SOURCE_COMMIT_ENV, SOURCE_DIRTY_ENV } from "../train/run-meta.js";
import { findBaseConflict, rebuiltBaseWarning, refusal } from "./base-check.js";
import { type BaseTargets, readBaseTargets } from "./base-targets.js";
import { pretrainDone, readFinalSummary } from "./plan-state.js";
import {
  type ExperimentPlan,
  gridCells,
  type PlannedPretrain,
  type PlannedRun,
  pretrainArgs,
  taskKnobsText,
} from "./spec.js";
import { checkNoStaleRuns } from "./stale.js";

/**
 * `mage experiment`: runs a plan's jobs as child `mage` processes, `jobs` at a time. Resumable by
 * construction: a run whose summary is already in the results folder is skipped, a pretrained
 * model that exists is reused, and an interrupted run continues from its last checkpoint
 * (`mage train --resume`). Every finished run's summary is copied into the results folder at once,
 * so an interrupted grid loses at most the runs in flight.
 */
export const EXPERIMENT_FORMAT = "mage-experiment-v1";

export type RunStatus = "done" | "skipped" | "failed" | "pending" | "running" | "blocked";

export interface RunRecord {
  method: string;
  seed: number;
  status: RunStatus;
  wallSeconds: number | null;
  runDir: string;
}

export interface ExperimentRecord {
  format: typeof EXPERIMENT_FORMAT;
  name: string;
  file: string;
  command: string;
  seeds: number[];
  methods: { method: string; config: string; set: string[]; seeds: number[] }[];
  machine: ReturnType<typeof collectRunMeta>;
  runs: RunRecord[];
  /** Each seed's base model: its pretraining seconds and whether it met its own targets (null: no report). */
  pretrained: { dir: string; seconds: number | null; targets: BaseTargets | null }[];
  /** This invocation's wall-clock seconds. */
  wallSeconds: number;
  /** Wall-clock seconds of every invocation of this grid so far, this one included. */
  totalWallSeconds: number;
}

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

interface Job {
  id: string;
  kind: "pretrain" | "train" | "diversity";
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

/** A base that missed its own targets is used all the same; the log says so once it exists. */
function warnMissedTargets(p: PlannedPretrain, log: (line: string) => void): void {
  const targets = readBaseTargets(p.dir);
  if (targets === null || targets.met) return;
  log(
    `warning: the base model of seed ${p.seed} missed its own targets (${formatMissedTargets(targets.missed)}); ` +
      `the runs of seed ${p.seed} start from it anyway (${p.dir})`,
  );
}

/** The CLI entry beside this module (main.ts under tsx, main.js once built). */
function cliEntry(): string {
  const here = fileURLToPath(import.meta.url);
  return join(dirname(here), "..", "cli", `main${extname(here)}`);
}

/** What the grid's earlier invocations recorded, so a resumed grid keeps their times. */
function readPreviousRecord(resultsDir: string): Partial<ExperimentRecord> | null {
  const path = join(resultsDir, "experiment.json");
  if (!existsSync(path)) return null;
  try {
    const record = JSON.parse(readFileSync(path, "utf8"));
    return record.format === EXPERIMENT_FORMAT ? record : null;
  } catch {
    return null;
  }
}

/**
 * The runs of the whole grid: this invocation's records, and for cells it left out (`--only`,
 * `--seeds`) what an earlier invocation recorded, so experiment.json always lists every run.
 */
export function wholeGridRuns(
  plan: ExperimentPlan,
  current: readonly RunRecord[],
  previous: unknown,
): RunRecord[] {
  const key = (method: string, seed: number) => `${method}\u0000${seed}`;
  const known = new Map<string, RunRecord>();
  if (Array.isArray(previous)) {
    for (const r of previous) {
      if (typeof r?.method === "string" && typeof r.seed === "number") known.set(key(r.method, r.seed), r);
    }
  }
  for (const r of current) known.set(key(r.method, r.seed), r);
  return gridCells(plan.spec)
    .map(({ method, seed }) => known.get(key(method.name, seed)))
    .filter((r): r is RunRecord => r !== undefined);
}

function hasFinalSummary(path: string): boolean {
  return readFinalSummary(path) !== null;
}

function wallSecondsOf(summary: { wallSeconds?: unknown }): number | null {
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

function formatClock(seconds: number): string {
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = String(Math.floor((s % 3600) / 60)).padStart(2, "0");
  const sec = String(s % 60).padStart(2, "0");
  return h > 0 ? `${h}:${m}:${sec}` : `${m}:${sec}`;
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
  const noTrain = opts.noTrain ?? false;
  const previous = readPreviousRecord(plan.resultsDir);
  const earlierWallSeconds = previous?.totalWallSeconds ?? previous?.wallSeconds ?? 0;

  const pretrainJobs = new Map<string, Job>();
  for (const p of plan.pretrains) {
    if (noTrain || pretrainDone(p)) continue;
    mkdirSync(dirname(p.dir), { recursive: true });
    pretrainJobs.set(p.dir, {
      id: `${p.warmStart ? "warm-start" : "pretrain"} ${p.game} s${p.seed}`,
      kind: "pretrain",
      args: pretrainArgs(p),
      logFile: `${p.dir}.log`,
      deps: [],
      state: "pending",
      pretrain: p,
    });
  }
  const records: RunRecord[] = [];
  const jobs: Job[] = [...pretrainJobs.values()];
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
    if (committed) {
      record.status = "skipped";
      record.wallSeconds = wallSecondsOf(committed);
      continue;
    }
    const runSummary = join(run.runDir, "summary.json");
    const finished = readFinalSummary(runSummary);
    if (finished) {
      // Finished before an interruption kept it from being copied.
      copyFileSync(runSummary, run.summaryPath);
      record.status = "done";
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
  const diversity = plan.spec.diversity;
  if (diversity) {
    const dir = join(plan.resultsDir, "diversity");
    mkdirSync(dir, { recursive: true });
    const base = (
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
        args: [...base(p.game, p.dir, maxTokens, p.seed, p.knobs), "--out", out],
        logFile: `${p.dir}.diversity.log`,
        deps: dep ? [dep] : [],
        state: "pending",
      });
    }
    for (const run of plan.runs) {
      if (!run.config.train.updates) continue;
      const out = join(dir, `${run.method}-s${run.seed}.json`);
      if (existsSync(out)) continue;
      const trainJob = jobs.find((j) => j.run === run);
      if (!trainJob && !hasFinalSummary(run.summaryPath)) continue;
      jobs.push({
        id: `diversity ${run.method}-s${run.seed}`,
        kind: "diversity",
        args: () => {
          const ck = finalCheckpoint(run.runDir);
          if (!ck) return null;
          const knobs = taskKnobsText(run.config);
          return [
            ...base(run.config.game, ck, run.config.rollout.maxResponseTokens, run.seed, knobs),
            "--out",
            out,
          ];
        },
        logFile: join(run.runDir, "diversity.log"),
        deps: trainJob ? [trainJob] : [],
        state: "pending",
      });
    }
  }
  // A fresh clone holds the committed summaries but not the base models: pretrain only the bases
  // that some pending run or measurement still needs.
  for (const [dir, job] of pretrainJobs) {
    if (jobs.some((j) => j.deps.includes(job))) continue;
    pretrainJobs.delete(dir);
    jobs.splice(jobs.indexOf(job), 1);
  }
  // A base that exists must be the one the seed's finished runs used before more runs start on it.
  const built = plan.pretrains.filter(
    (p) => !pretrainJobs.has(p.dir) && jobs.some((j) => j.run?.pretrainedDir === p.dir),
  );
  const conflicts = built.map((p) => findBaseConflict(plan, p.dir)).filter((c) => c !== null);
  if (conflicts.length > 0 && !opts.acceptRebuiltBases)
    throw new UsageError(conflicts.map(refusal).join("\n"));
  for (const c of conflicts) log(rebuiltBaseWarning(c));
  for (const p of plan.pretrains) {
    if (!pretrainJobs.has(p.dir) && jobs.some((j) => j.run?.pretrainedDir === p.dir))
      warnMissedTargets(p, log);
  }
  const recordOf = (run: PlannedRun) => records.find((r) => r.method === run.method && r.seed === run.seed)!;

  const pretrainedSeconds = new Map<string, number>();
  for (const p of previous?.pretrained ?? []) {
    if (typeof p?.dir === "string" && typeof p.seconds === "number") pretrainedSeconds.set(p.dir, p.seconds);
  }
  // Once per grid: it runs git, and the record is rewritten after every job.
  const machine = collectRunMeta(jobsAtOnce > 1 ? `auto, ${jobsAtOnce} runs in parallel` : "auto");
  const experimentRecord = (): ExperimentRecord => ({
    format: EXPERIMENT_FORMAT,
    name: plan.spec.name,
    file: plan.file,
    command: opts.command ?? `mage experiment ${plan.file}`,
    seeds: plan.spec.seeds,
    methods: plan.spec.methods.map((m) => ({
      method: m.name,
      config: m.config,
      set: m.set,
      seeds: m.seeds ?? plan.spec.seeds,
    })),
    machine,
    runs: wholeGridRuns(plan, records, previous?.runs),
    pretrained: plan.pretrains.map((p) => ({
      dir: p.dir,
      seconds: pretrainedSeconds.get(p.dir) ?? null,
      targets: readBaseTargets(p.dir),
    })),
    wallSeconds: elapsed(),
    totalWallSeconds: earlierWallSeconds + elapsed(),
  });
  const saveRecord = () =>
    writeFileAtomic(
      join(plan.resultsDir, "experiment.json"),
      `${JSON.stringify(experimentRecord(), null, 1)}\n`,
    );

  const skipped = records.filter((r) => r.status === "skipped" || r.status === "done").length;
  log(
    `experiment ${plan.spec.name}: ${records.length} runs (${skipped} already done), ` +
      `${pretrainJobs.size} base model(s) to pretrain, ${jobs.filter((j) => j.kind === "diversity").length} diversity measurement(s), ` +
      `${jobsAtOnce} at a time; results in ${plan.resultsDir}`,
  );
  await saveRecord();

  const env = { ...process.env };
  if (machine.commit) {
    env[SOURCE_COMMIT_ENV] = machine.commit;
    env[SOURCE_DIRTY_ENV] = machine.dirty === null ? "" : machine.dirty ? "1" : "0";
  }
  if (jobsAtOnce > 1) {
    env.OPENBLAS_NUM_THREADS ??= "1";
    env.OMP_NUM_THREADS ??= "1";
  }
  const entry = cliEntry();
  let stopped = false;

  const start = (job: Job): Promise<void> => {
    const args = typeof job.args === "function" ? job.args() : job.args;
    if (args === null) {
      job.state = "failed";
      log(`skip ${job.id}: no checkpoint to measure (the run directory may have been removed)`);
      return Promise.resolve();
    }
    job.state = "running";
    job.started = performance.now();
    if (job.run) recordOf(job.run).status = "running";
    mkdirSync(dirname(job.logFile), { recursive: true });
    const out = createWriteStream(job.logFile, { flags: "a" });
    out.write(`\n$ mage ${args.join(" ")}\n`);
    const child = spawn(process.execPath, [...process.execArgv, entry, ...args], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    job.child = child;
    child.stdout.pipe(out, { end: false });
    child.stderr.pipe(out, { end: false });
    log(`[${formatClock(elapsed())}] start ${job.id}  (log: ${job.logFile})`);
    return new Promise((resolve) => {
      child.on("close", async (code, signal) => {
        out.end();
        job.seconds = (performance.now() - job.started!) / 1000;
        job.child = undefined;
        const ok = code === 0;
        if (!ok && stopped) {
          job.state = "stopped";
          if (job.run) recordOf(job.run).status = "pending";
        } else if (job.kind === "diversity") {
          job.state = ok ? "done" : "failed";
        } else if (job.kind === "pretrain" && job.pretrain) {
          job.state = ok ? "done" : "failed";
          if (ok) pretrainedSeconds.set(job.pretrain.dir, job.seconds);
          const conflict = ok ? findBaseConflict(plan, job.pretrain.dir) : null;
          if (conflict && opts.acceptRebuiltBases) {
            log(rebuiltBaseWarning(conflict));
          } else if (conflict) {
            job.state = "failed";
            log(`base model of seed ${job.pretrain.seed} cannot be used: ${refusal(conflict)}`);
          }
          if (job.state === "done") warnMissedTargets(job.pretrain, log);
        } else if (job.run) {
          const rec = recordOf(job.run);
          const summary = join(job.run.runDir, "summary.json");
          const finished = ok ? readFinalSummary(summary) : null;
          if (finished) {
            copyFileSync(summary, job.run.summaryPath);
            job.state = "done";
            rec.status = "done";
            rec.wallSeconds = wallSecondsOf(finished) ?? job.seconds;
          } else {
            job.state = "failed";
            rec.status = "failed";
          }
        }
        const what = job.state === "done" ? "done" : stopped ? "stopped" : `FAILED (exit ${code ?? signal})`;
        log(`[${formatClock(elapsed())}] ${what} ${job.id} in ${formatClock(job.seconds)}`);
        if (job.state === "failed" && !stopped) log(`  see ${job.logFile}`);
        await saveRecord();
        resolve();
      });
    });
  };

  const running = new Set<Promise<void>>();
  const status = () => {
    const done = records.filter((r) => r.status === "done" || r.status === "skipped").length;
    const now = jobs
      .filter((j) => j.state === "running")
      .map((j) => {
        if (j.kind !== "train") return j.id;
        const total = j.run!.config.train.iterations;
        const it = metricsLines(j.run!.runDir);
        return `${j.id} (${it < total ? `iteration ${it}/${total}` : "final evaluation"})`;
      });
    log(
      `[${formatClock(elapsed())}] ${done}/${records.length} runs done · running ${now.join(", ") || "nothing"}`,
    );
  };
  const every = (opts.statusEverySeconds ?? 60) * 1000;
  const timer = every > 0 ? setInterval(status, every) : null;
  const onStop = () => {
    if (stopped) return;
    stopped = true;
    log("stopping: runs in flight checkpoint and stop; rerun the same command to continue");
    for (const j of jobs) if (j.child) j.child.kill("SIGINT");
  };

  try {
    for (;;) {
      if (!stopped && opts.shouldStop?.()) onStop();
      for (const j of jobs) {
        if (j.state === "pending" && j.deps.some((d) => d.state === "failed" || d.state === "blocked")) {
          j.state = "blocked";
          if (j.run) recordOf(j.run).status = "blocked";
          log(
            `skip ${j.id}: ${j.kind === "diversity" ? "its run failed" : "its base model failed to pretrain or differs from the one its seed's finished runs used"}`,
          );
        }
      }
      while (!stopped && running.size < jobsAtOnce) {
        // Quick measurements first, so results land as soon as their run does; then runs whose base
        // model exists, so whole seeds finish early; a later seed's pretraining only when idle.
        const ready = jobs.filter((j) => j.state === "pending" && j.deps.every((d) => d.state === "done"));
        const next =
          ready.find((j) => j.kind === "diversity") ?? ready.find((j) => j.kind === "train") ?? ready[0];
        if (!next) break;
        const p = start(next).then(() => {
          running.delete(p);
        });
        running.add(p);
      }
      if (running.size === 0) break;
      // Wake on a job's end, or soon to notice a stop request.
      await Promise.race([...running, new Promise((r) => setTimeout(r, 500))]);
    }
  } finally {
    if (timer) clearInterval(timer);
  }
  await saveRecord();
  const failedMeasures = jobs.filter(
    (j) => j.kind === "diversity" && (j.state === "failed" || j.state === "blocked"),
  ).length;
  const failed =
    records.filter((r) => r.status === "failed" || r.status === "blocked").length + failedMeasures;
  const done = records.filter((r) => r.status === "done" || r.status === "skipped").length;
  log(
    `experiment ${plan.spec.name}: ${done}/${records.length} runs done, ${failed} failed` +
      `${failedMeasures > 0 ? ` (${failedMeasures} measurement(s) not done)` : ""}` +
      `${stopped ? ", stopped early" : ""} in ${formatClock(elapsed())}; summaries in ${plan.resultsDir}`,
  );
  return { record: experimentRecord(), failed, stopped };
}
