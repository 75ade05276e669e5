/**
 * Evaluation cells against a run's league snapshots. A cell may name `snapshot:latest` (the
 * league's newest snapshot when the evaluation plays) or `snapshot:<iteration>`; the snapshot then
 * plays exactly as in training: the same `ModelOpponent`, prompted in the run's prompt style and
 * knobs, sampling with the run's rollout sampling and reply length, its draws from the trial's
 * opponent generator. Other cells play their scripted opponents as before.
 *
 * Where the snapshot comes from: in a training run's evaluations, the league's pool at that
 * moment; for `mage eval --checkpoint RUN`, the pool the checkpoint recorded. `snapshot:<N>` not
 * in the pool (evicted) still plays while its folder is on disk.
 */
import { readdir, readFile } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { UsageError } from "../core/errors.js";
import type { Rng } from "../core/rng.js";
import type { EvalCell } from "../evaluate/cell.js";
import type { Game } from "../games/types.js";
import { CHECKPOINT_FILES, isCheckpointDir, RUN_CHECKPOINTS_DIR } from "../model/checkpoint.js";
import { createOpponent } from "../opponents/registry.js";
import type { Opponent } from "../opponents/types.js";
import type { Policy, SamplingParams } from "../policy/types.js";
import type { TaskDefinition } from "../tasks/registry.js";
import type { PromptStyle, TaskOptions } from "../tasks/types.js";
import { ModelOpponent } from "./model-opponent.js";
import {
  isEvalSnapshotSpec,
  LATEST_SNAPSHOT,
  LEAGUE_DIR,
  newSnapshotEntry,
  SNAPSHOT_PREFIX,
  type SnapshotEntry,
} from "./pool.js";

export { isEvalSnapshotSpec, LATEST_SNAPSHOT };

/** How a run's snapshots play (the run's rollout settings). */
export interface SnapshotPlay {
  promptStyle: PromptStyle;
  sampling: SamplingParams;
  taskOptions: Pick<TaskOptions, "knobs">;
}

/** Where an evaluation finds a run's snapshots and how they play. */
export interface SnapshotEvalSource {
  runDir: string;
  /** The league's pool, oldest first (its last entry is `snapshot:latest`). */
  pool: readonly SnapshotEntry[];
  play: SnapshotPlay;
  game: Game<unknown, unknown>;
  task: TaskDefinition;
  /** A policy sampling from the snapshot weights in `dir` (absolute). */
  load: (dir: string, name: string) => Promise<Policy>;
}

/** The snapshot folders under `<run>/league/` that hold a complete checkpoint, oldest first. */
export async function snapshotsOnDisk(runDir: string): Promise<SnapshotEntry[]> {
  let names: string[];
  try {
    names = await readdir(join(runDir, LEAGUE_DIR));
  } catch {
    return [];
  }
  const out: SnapshotEntry[] = [];
  for (const n of names) {
    const m = /^snapshot-(\d+)$/.exec(n);
    if (!m) continue;
    const entry = newSnapshotEntry(Number(m[1]));
    if (await isCheckpointDir(join(runDir, entry.dir))) out.push(entry);
  }
  return out.sort((a, b) => a.iteration - b.iteration);
}

/**
 * The snapshot a cell's spec stands for: `snapshot:latest` the pool's newest; `snapshot:N` the
 * pool's entry of iteration N, else its folder when on disk. null when there is none (yet).
 */
export function resolveSnapshotSpec(
  spec: string,
  pool: readonly SnapshotEntry[],
  onDisk: readonly SnapshotEntry[],
): SnapshotEntry | null {
  if (spec === LATEST_SNAPSHOT) return pool.at(-1) ?? null;
  const iteration = Number(spec.slice(SNAPSHOT_PREFIX.length));
  return pool.find((s) => s.iteration === iteration) ?? onDisk.find((s) => s.iteration === iteration) ?? null;
}

export interface SnapshotCells {
  /** The cells that can play now, in the order given. */
  cells: EvalCell[];
  /** Snapshot cells whose snapshot does not exist (yet). */
  skipped: EvalCell[];
  /** The snapshot each playable snapshot cell's spec stands for. */
  resolved: Map<string, SnapshotEntry>;
  /** Builds every cell's opponent: snapshots as models, the rest from the registry; null without snapshot cells. */
  makeOpponent: NonNullable<TaskOptions["makeOpponent"]> | null;
}

/**
 * Resolves the snapshot cells of `cells` against `source` and loads their weights (each snapshot
 * once, however many cells name it). Without snapshot cells the cells come back unchanged.
 */
export async function snapshotCells(
  cells: readonly EvalCell[],
  source: SnapshotEvalSource | null,
): Promise<SnapshotCells> {
  const wanted = cells.filter((c) => isEvalSnapshotSpec(c.opponent));
  const resolved = new Map<string, SnapshotEntry>();
  if (wanted.length === 0) return { cells: [...cells], skipped: [], resolved, makeOpponent: null };
  if (!source)
    throw new UsageError(
      `evaluation cells ${wanted.map((c) => c.opponent).join(", ")} name league snapshots, but this run keeps none (population.league)`,
    );
  const onDisk = await snapshotsOnDisk(source.runDir);
  const skipped: EvalCell[] = [];
  for (const c of wanted) {
    const e = resolveSnapshotSpec(c.opponent!, source.pool, onDisk);
    if (e) resolved.set(c.opponent!, e);
    else skipped.push(c);
  }
  const policies = new Map<string, Policy>();
  for (const e of resolved.values()) {
    if (!policies.has(e.spec)) policies.set(e.spec, await source.load(join(source.runDir, e.dir), e.spec));
  }
  const makeOpponent = (spec: string, ctx: { rng: Rng; replay: boolean }): Opponent<unknown, unknown> => {
    const e = resolved.get(spec);
    if (!e) return createOpponent(source.task.name, spec, ctx);
    const player = { policy: policies.get(e.spec)!, ...source.play };
    return new ModelOpponent(spec, source.game, source.task, player, ctx.rng, ctx.replay);
  };
  return { cells: cells.filter((c) => !skipped.includes(c)), skipped, resolved, makeOpponent };
}

/** A cell's results with the snapshot `snapshot:latest` stood for (`snapshot`); other cells unchanged. */
export function withResolvedSnapshot<C extends { opponent: string }>(
  cell: C,
  resolved: ReadonlyMap<string, SnapshotEntry>,
): C & { snapshot?: string } {
  const e = cell.opponent === LATEST_SNAPSHOT ? resolved.get(cell.opponent) : undefined;
  return e ? { ...cell, snapshot: e.spec } : cell;
}

/**
 * The run directory a checkpoint belongs to: `<run>/checkpoints/iter-N` and a snapshot
 * `<run>/league/snapshot-N` both give `<run>`; null for a checkpoint outside a run.
 */
export function runDirOfCheckpoint(checkpointDir: string): string | null {
  const parent = dirname(resolve(checkpointDir));
  const kind = basename(parent);
  return kind === RUN_CHECKPOINTS_DIR || kind === LEAGUE_DIR ? dirname(parent) : null;
}

/** The league pool a run checkpoint recorded (its training state); null when it has none. */
export async function checkpointPool(checkpointDir: string): Promise<SnapshotEntry[] | null> {
  try {
    const state = JSON.parse(await readFile(join(checkpointDir, CHECKPOINT_FILES.trainingJson), "utf8")) as {
      league?: { snapshots?: SnapshotEntry[] } | null;
    } | null;
    const snaps = state?.league?.snapshots;
    return Array.isArray(snaps) ? snaps : null;
  } catch {
    return null;
  }
}
