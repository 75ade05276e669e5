import { basename, join, resolve } from "node:path";
import { UsageError } from "../../core/errors.js";
import type { MageConfig } from "../config.js";
import type { EvalSnapshot, RunSummary } from "../summary.js";
import {
  evalRecord,
  evalTable,
  historyRecords,
  type ScalarKind,
  type ScalarRecord,
  trainRecord,
} from "./scalars.js";
import { TensorBoardWriter, type TimedRecord } from "./tensorboard.js";
import { WandbSidecar } from "./wandb.js";

/**
 * Where a run's scalars go besides metrics.jsonl (`logging` in the config): a TensorBoard event
 * file and a W&B run, each optional. The trainer tells it about every iteration and evaluation;
 * it never stops training: a TensorBoard write that fails and anything W&B does wrong become one
 * warning each, and that destination is dropped.
 */

/**
 * Time the training thread spent handing records to TensorBoard (encoding, writing) and to the W&B
 * sidecar (serialising, writing to its pipe), and the sidecar's pid, for `npm run bench -- logging`.
 */
export const LOGGING_TOTALS = {
  tensorboardMs: 0,
  wandbMs: 0,
  records: 0,
  sidecarPid: undefined as number | undefined,
};

export interface RunLoggerOptions {
  config: MageConfig;
  outDir: string;
  /** The run continues from a checkpoint (its history replays; W&B continues its run). */
  resumed: boolean;
  history: readonly Record<string, number>[];
  periodicEval: readonly EvalSnapshot[];
  /** Seconds the run trained before this process started (dates the replayed records). */
  wallBefore: number;
  log: (message: string) => void;
  /** The W&B sidecar's environment (tests). */
  env?: NodeJS.ProcessEnv;
}

/** The run's name in both tools: the run directory's name (a grid's runs: `<method>-s<seed>`). */
export function runLabel(outDir: string): string {
  return basename(resolve(outDir));
}

/** The run's TensorBoard folder: `<tensorboard>/[<group>/]<run label>`. */
export function tensorboardRunDir(logging: MageConfig["logging"], outDir: string): string | null {
  if (logging.tensorboard === null) return null;
  return join(logging.tensorboard, ...(logging.group !== null ? [logging.group] : []), runLabel(outDir));
}

/** Dates replayed records: a metrics line's `wall_s` is seconds since the run started. */
function timedHistory(records: readonly ScalarRecord[], wallBefore: number): TimedRecord[] {
  const start = Date.now() / 1000 - wallBefore;
  let last = start;
  return records.map((record) => {
    const wall = record.kind === "train" ? record.values["train/wall_s"] : undefined;
    if (wall !== undefined) last = start + wall;
    return { record, wallTime: last };
  });
}

export class RunLogger {
  private tensorboard: TensorBoardWriter | null;
  private wandb: WandbSidecar | null;
  private readonly log: (message: string) => void;

  private constructor(
    tb: TensorBoardWriter | null,
    wandb: WandbSidecar | null,
    log: (message: string) => void,
  ) {
    this.tensorboard = tb;
    this.wandb = wandb;
    this.log = log;
  }

  static open(opts: RunLoggerOptions): RunLogger {
    const { config, outDir } = opts;
    const replay = historyRecords(opts.history, opts.periodicEval);
    let tb: TensorBoardWriter | null = null;
    const tbDir = tensorboardRunDir(config.logging, outDir);
    if (tbDir !== null) {
      try {
        tb = TensorBoardWriter.open(tbDir, timedHistory(replay, opts.wallBefore));
      } catch (err) {
        throw new UsageError(`logging.tensorboard: cannot write ${tbDir}: ${(err as Error).message}`);
      }
      opts.log(`TensorBoard: ${tbDir} (tensorboard --logdir ${config.logging.tensorboard})`);
      if (tb.replaced > 0 && !opts.resumed) {
        opts.log(
          `TensorBoard: ${tbDir} held ${tb.replaced} event file(s) of an earlier run; this run replaced them`,
        );
      }
    }
    const w = config.logging.wandb;
    let wandb: WandbSidecar | null = null;
    if (w !== null && w.mode !== "disabled") {
      wandb = WandbSidecar.start(
        {
          project: w.project,
          entity: w.entity,
          name: w.name ?? runLabel(outDir),
          group: config.logging.group,
          mode: w.mode,
          dir: resolve(outDir),
          resume: opts.resumed,
          config: JSON.parse(JSON.stringify(config)),
        },
        { log: opts.log, ...(opts.env ? { env: opts.env } : {}) },
      );
      LOGGING_TOTALS.sidecarPid = wandb.pid;
      for (const r of replay) wandb.record(r.kind, r.step, r.values);
    }
    return new RunLogger(tb, wandb, opts.log);
  }

  /** One iteration's metrics (the line just appended to metrics.jsonl). */
  iteration(metrics: Record<string, number>): void {
    this.emit(trainRecord(metrics));
  }

  /** A periodic evaluation (or the one before training), or the final one and its companions. */
  evaluation(snapshot: EvalSnapshot, kind: Exclude<ScalarKind, "train"> = "eval"): void {
    this.emit(evalRecord(snapshot, kind));
  }

  /** The finished run: its evaluations as scalars, and for W&B the final table and the summary. */
  finished(summary: RunSummary): void {
    if (summary.finalEval) this.emit(evalRecord(summary.finalEval, "eval"));
    if (summary.scalingEval) this.emit(evalRecord(summary.scalingEval, "eval_scaling"));
    if (summary.harderEval) this.emit(evalRecord(summary.harderEval, "eval_harder"));
    if (this.wandb && summary.finalEval) {
      const t0 = performance.now();
      const final = evalRecord(summary.finalEval, "eval").values;
      this.wandb.final(
        { key: "final_eval", ...evalTable(summary.finalEval) },
        {
          ...final,
          iterations_done: summary.iterationsDone,
          wall_seconds: summary.wallSeconds,
          pretrain_seconds: summary.pretrainSeconds,
        },
      );
      LOGGING_TOTALS.wandbMs += performance.now() - t0;
    }
  }

  async close(): Promise<void> {
    this.tensorboard?.close();
    this.tensorboard = null;
    const wandb = this.wandb;
    this.wandb = null;
    await wandb?.close();
  }

  private emit(record: ScalarRecord): void {
    const t0 = performance.now();
    LOGGING_TOTALS.records += 1;
    if (this.tensorboard) {
      try {
        this.tensorboard.write(record);
      } catch (err) {
        this.log(
          `warning: TensorBoard logging is off for the rest of this run: ${(err as Error).message}. Training goes on.`,
        );
        const broken = this.tensorboard;
        this.tensorboard = null;
        try {
          broken.close();
        } catch {
          // already reported
        }
      }
    }
    const t1 = performance.now();
    this.wandb?.record(record.kind, record.step, record.values);
    LOGGING_TOTALS.tensorboardMs += t1 - t0;
    LOGGING_TOTALS.wandbMs += performance.now() - t1;
  }
}
