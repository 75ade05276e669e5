import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { writeFileAtomic } from "../core/atomic-write.js";
import { EXPERIMENT_FORMAT } from "../core/file-formats.js";
import type { collectRunMeta } from "../train/run-meta.js";
import { type BaseTargets, readBaseSeconds, readBaseTargets } from "./base-targets.js";
import { type ExperimentPlan, gridCells, type PlannedRun } from "./spec.js";

/**
 * `experiment.json`: what a grid ran, on which machine, each run's status and wall time, and
 * each base model's pretraining time and targets. Rewritten after every job, so an interrupted
 * grid's record is never more than one job behind.
 */

/**
 * A run's status. "incomplete": finished, but `train.maxMinutes` stopped its training before the
 * method's `train.iterations`, so the report does not pair it with its seed's other runs.
 */
export type RunStatus = "done" | "skipped" | "incomplete" | "failed" | "pending" | "running" | "blocked";

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
  /**
   * Each seed's base model: its pretraining seconds (the grid's job, else the base's own report)
   * and whether it met its own targets (null: no report).
   */
  pretrained: { dir: string; seconds: number | null; targets: BaseTargets | null }[];
  /** This invocation's wall-clock seconds. */
  wallSeconds: number;
  /** Wall-clock seconds of every invocation of this grid so far, this one included. */
  totalWallSeconds: number;
}

/** What the grid's earlier invocations recorded, so a resumed grid keeps their times. */
export function readPreviousRecord(resultsDir: string): Partial<ExperimentRecord> | null {
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

type BaseRecord = ExperimentRecord["pretrained"][number];

/**
 * The bases of the whole grid: what an earlier invocation recorded, each replaced by this
 * invocation's record of the same folder, then this invocation's new ones. A grid run in parts
 * (`--seeds`, `--only`) keeps every seed's base and its checks; an earlier base that is no
 * longer one of the grid's (`gridDirs`: its settings changed since) is dropped.
 */
export function wholeGridBases(
  current: readonly BaseRecord[],
  previous: unknown,
  gridDirs: readonly string[],
): BaseRecord[] {
  const now = new Map(current.map((b) => [b.dir, b]));
  const earlier = Array.isArray(previous)
    ? previous.filter((b): b is BaseRecord => typeof b?.dir === "string" && gridDirs.includes(b.dir))
    : [];
  const kept = earlier.map((b) => now.get(b.dir) ?? b);
  const seen = new Set(kept.map((b) => b.dir));
  return [...kept, ...current.filter((b) => !seen.has(b.dir))];
}

export function isFinished(r: RunRecord): boolean {
  return r.status === "done" || r.status === "skipped";
}

/** This invocation's records and base timings, and the experiment.json they make. */
export class GridBook {
  readonly pretrainedSeconds = new Map<string, number>();
  private readonly previous: Partial<ExperimentRecord> | null;
  private readonly earlierWallSeconds: number;

  constructor(
    private readonly plan: ExperimentPlan,
    readonly records: RunRecord[],
    private readonly context: {
      command: string;
      machine: ReturnType<typeof collectRunMeta>;
      elapsed: () => number;
    },
  ) {
    this.previous = readPreviousRecord(plan.resultsDir);
    this.earlierWallSeconds = this.previous?.totalWallSeconds ?? this.previous?.wallSeconds ?? 0;
    for (const p of this.previous?.pretrained ?? []) {
      if (typeof p?.dir === "string" && typeof p.seconds === "number")
        this.pretrainedSeconds.set(p.dir, p.seconds);
    }
  }

  recordOf(run: PlannedRun): RunRecord {
    return this.records.find((r) => r.method === run.method && r.seed === run.seed)!;
  }

  finished(): number {
    return this.records.filter(isFinished).length;
  }

  incomplete(): number {
    return this.records.filter((r) => r.status === "incomplete").length;
  }

  failed(): number {
    return this.records.filter((r) => r.status === "failed" || r.status === "blocked").length;
  }

  record(): ExperimentRecord {
    const { plan, context } = this;
    const elapsed = context.elapsed();
    return {
      format: EXPERIMENT_FORMAT,
      name: plan.spec.name,
      file: plan.file,
      command: context.command,
      seeds: plan.spec.seeds,
      methods: plan.spec.methods.map((m) => ({
        method: m.name,
        config: m.config,
        set: m.set,
        seeds: m.seeds ?? plan.spec.seeds,
      })),
      machine: context.machine,
      runs: wholeGridRuns(plan, this.records, this.previous?.runs),
      pretrained: wholeGridBases(
        plan.pretrains.map((p) => ({
          dir: p.dir,
          seconds: this.pretrainedSeconds.get(p.dir) ?? readBaseSeconds(p.dir),
          targets: readBaseTargets(p.dir),
        })),
        this.previous?.pretrained,
        plan.gridBaseDirs,
      ),
      wallSeconds: elapsed,
      totalWallSeconds: this.earlierWallSeconds + elapsed,
    };
  }

  save(): Promise<void> {
    return writeFileAtomic(
      join(this.plan.resultsDir, "experiment.json"),
      `${JSON.stringify(this.record(), null, 1)}\n`,
    );
  }
}
