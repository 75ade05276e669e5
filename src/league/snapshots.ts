/**
 * Snapshot weights on disk and in memory. A snapshot of the embedded model is a plain mage
 * checkpoint directory (weights, tokenizer, config, meta; no optimizer state) under the run's
 * `league/` folder, so `mage eval --checkpoint`, `mage league --checkpoint` and
 * `mage exploitability` read it like any other. Loaded snapshots are kept only while they are in
 * the pool, so memory holds at most `maxSnapshots` copies of the weights.
 */
import { readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { EmbeddedLearner } from "../learner/embedded.js";
import {
  CHECKPOINT_FILES,
  loadCheckpoint,
  RUN_CHECKPOINTS_DIR,
  saveCheckpoint,
} from "../model/checkpoint.js";
import type { Kernels } from "../model/kernels/types.js";
import { paramsFromMap, paramsToMap } from "../model/params-io.js";
import { EmbeddedPolicy } from "../policy/embedded.js";
import type { Policy } from "../policy/types.js";
import { LEAGUE_DIR, type SnapshotEntry } from "./pool.js";

/** Writes and reads a model's snapshots (one implementation per learner backend). */
export interface SnapshotStore {
  /** Saves the learner's current weights as the snapshot in `dir` (absolute), with `meta`. */
  save(dir: string, meta: Record<string, unknown>): Promise<void>;
  /** A policy sampling from the snapshot's weights in `dir`. */
  load(dir: string, name: string): Promise<Policy>;
}

/** Snapshots of the embedded transformer, sampled with the run's kernels. */
export function embeddedSnapshotStore(learner: EmbeddedLearner, kernels: Kernels): SnapshotStore {
  return {
    save: (dir, meta) =>
      saveCheckpoint(dir, {
        config: learner.learner.config,
        params: paramsToMap(learner.learner.params),
        tokenizer: learner.tokenizer,
        meta,
      }),
    load: (dir, name) => loadEmbeddedPolicy(dir, name, kernels),
  };
}

/** An embedded checkpoint directory as a policy (the weights copied out of the file). */
export async function loadEmbeddedPolicy(
  dir: string,
  name: string,
  kernels?: Kernels,
): Promise<EmbeddedPolicy> {
  const ck = await loadCheckpoint(dir, { trainingState: false });
  return new EmbeddedPolicy({
    params: paramsFromMap(ck.config, ck.params),
    tokenizer: ck.tokenizer,
    ...(kernels ? { kernels } : {}),
    name,
  });
}

/** The live snapshots' policies: loaded on first use, dropped once they leave the pool. */
export class SnapshotPolicies {
  private readonly loaded = new Map<string, Policy>();

  constructor(
    private readonly store: SnapshotStore,
    private readonly runDir: string,
  ) {}

  /** Loads every snapshot of `entries` not loaded yet and drops any loaded one not among them. */
  async keepOnly(entries: readonly SnapshotEntry[]): Promise<void> {
    const wanted = new Set(entries.map((e) => e.spec));
    for (const spec of [...this.loaded.keys()]) if (!wanted.has(spec)) this.loaded.delete(spec);
    for (const e of entries) {
      if (!this.loaded.has(e.spec))
        this.loaded.set(e.spec, await this.store.load(join(this.runDir, e.dir), e.spec));
    }
  }

  get(spec: string): Policy {
    const p = this.loaded.get(spec);
    if (!p) throw new Error(`league: snapshot ${spec} is not loaded (not in this iteration's pool)`);
    return p;
  }

  get size(): number {
    return this.loaded.size;
  }
}

/** The snapshot folders (relative to the run) that the pools of the run's kept checkpoints name. */
export async function snapshotDirsInCheckpoints(runDir: string): Promise<Set<string>> {
  const out = new Set<string>();
  const parent = join(runDir, RUN_CHECKPOINTS_DIR);
  let names: string[];
  try {
    names = (await readdir(parent)).filter((n) => /^iter-\d+$/.test(n));
  } catch {
    return out;
  }
  for (const n of names) {
    let state: { league?: { snapshots?: SnapshotEntry[] } } | null;
    try {
      state = JSON.parse(await readFile(join(parent, n, CHECKPOINT_FILES.trainingJson), "utf8"));
    } catch {
      continue;
    }
    for (const s of state?.league?.snapshots ?? []) out.add(s.dir);
  }
  return out;
}

/**
 * Deletes the snapshot folders under `<run>/league/` that neither the current pool nor any kept
 * checkpoint's pool names (a resumed run can then still load every snapshot its checkpoint names).
 */
export async function pruneSnapshotDirs(runDir: string, pool: readonly SnapshotEntry[]): Promise<string[]> {
  const keep = await snapshotDirsInCheckpoints(runDir);
  for (const s of pool) keep.add(s.dir);
  let names: string[];
  try {
    names = await readdir(join(runDir, LEAGUE_DIR));
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const n of names) {
    const rel = `${LEAGUE_DIR}/${n}`;
    if (!/^snapshot-\d+$/.test(n) || keep.has(rel)) continue;
    await rm(join(runDir, rel), { recursive: true, force: true });
    removed.push(rel);
  }
  return removed;
}
