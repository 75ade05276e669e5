/**
 * The league's pool of snapshots: which saved copies of the agent are live opponents, as plain
 * data (a run checkpoint keeps it). A snapshot taken after `iteration` iterations is the opponent
 * spec `snapshot:<iteration>`, its weights in `<run>/league/snapshot-<iteration, 6 digits>`.
 */
import { UsageError } from "../core/errors.js";

export const SNAPSHOT_PREFIX = "snapshot:";
/** The run directory's folder of snapshot weights. */
export const LEAGUE_DIR = "league";

export interface SnapshotEntry {
  /** The opponent spec, `snapshot:<iteration>`. */
  spec: string;
  /** Iterations of training behind the snapshot's weights. */
  iteration: number;
  /** Its weights, relative to the run directory. */
  dir: string;
}

export function snapshotSpec(iteration: number): string {
  return `${SNAPSHOT_PREFIX}${iteration}`;
}

export function isSnapshotSpec(spec: string): boolean {
  return spec.startsWith(SNAPSHOT_PREFIX);
}

/** The iteration a `snapshot:N` spec names; a UsageError for anything else. */
export function snapshotIteration(spec: string): number {
  const arg = spec.slice(SNAPSHOT_PREFIX.length);
  if (!isSnapshotSpec(spec) || !/^\d+$/.test(arg))
    throw new UsageError(`"${spec}" is not a snapshot spec (snapshot:<iteration>)`);
  return Number(arg);
}

export function snapshotDirName(iteration: number): string {
  return `${LEAGUE_DIR}/snapshot-${String(iteration).padStart(6, "0")}`;
}

export function newSnapshotEntry(iteration: number): SnapshotEntry {
  return { spec: snapshotSpec(iteration), iteration, dir: snapshotDirName(iteration) };
}

/** Whether a snapshot is due after `done` iterations (`atStart`: also before the first). */
export function snapshotDue(done: number, every: number, atStart: boolean): boolean {
  return done === 0 ? atStart : done % every === 0;
}

/**
 * The pool after adding `entry`: appended (a snapshot of the same iteration is replaced), then
 * the oldest leave until at most `cap` remain. Returns the new pool and those that left.
 */
export function addSnapshot(
  pool: readonly SnapshotEntry[],
  entry: SnapshotEntry,
  cap: number,
): { pool: SnapshotEntry[]; evicted: SnapshotEntry[] } {
  const next = [...pool.filter((s) => s.iteration !== entry.iteration), entry].sort(
    (a, b) => a.iteration - b.iteration,
  );
  const evicted = next.length > cap ? next.splice(0, next.length - cap) : [];
  return { pool: next, evicted };
}

/** The cell opponent that stands for the league's newest snapshot. */
export const LATEST_SNAPSHOT = `${SNAPSHOT_PREFIX}latest`;

/** Whether an evaluation cell's opponent names a league snapshot (`snapshot:latest`, `snapshot:N`). */
export function isEvalSnapshotSpec(spec: string | null): spec is string {
  return spec !== null && (spec === LATEST_SNAPSHOT || /^snapshot:\d+$/.test(spec));
}

/** Why a `snapshot:…` cell spec is malformed, or null (also null for any other opponent). */
export function snapshotCellProblem(spec: string): string | null {
  if (!spec.startsWith(SNAPSHOT_PREFIX) || isEvalSnapshotSpec(spec)) return null;
  return `"${spec}" names no snapshot: use ${LATEST_SNAPSHOT} or snapshot:<iteration>`;
}
