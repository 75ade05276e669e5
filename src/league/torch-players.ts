/**
 * Torch checkpoints and snapshots as `mage league` players. Those that hold a LoRA adapter of the
 * same base model (run checkpoints of LoRA runs, league snapshots) share one worker: each plays
 * its own adapter, swapped in for each of its moves, and the worker holds them all. A checkpoint
 * of full fine-tuning gets a worker of its own.
 */
import { resolve } from "node:path";
import type { TorchCheckpointInfo, TorchLearner } from "../learner/torch/learner.js";
import { openCheckpointWorker, readTorchCheckpointInfo } from "../learner/torch/open-checkpoint.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import type { TorchWorkerOptions } from "../learner/torch/worker.js";
import type { Policy } from "../policy/types.js";
import { snapshotAdapterDir } from "./torch-snapshots.js";

export interface TorchPlayerEntry {
  name: string;
  /** A torch checkpoint directory (`checkpoints/iter-N`, `league/snapshot-N`). */
  dir: string;
}

export interface TorchPlayers {
  /** Each entry's policy, by name. */
  policies: Map<string, Policy>;
  /** Workers started (one per base model of the adapters, one per full-weight checkpoint). */
  workers: number;
  close(): Promise<void>;
}

/** What decides whether two adapters can share a worker: the base and how it is loaded and adapted. */
function baseKey(info: TorchCheckpointInfo): string {
  const t = info.torch;
  return JSON.stringify([resolve(info.basePath), t.lora, t.dtype, t.device, t.python]);
}

interface Described extends TorchPlayerEntry {
  info: TorchCheckpointInfo;
  learnerDir: string;
}

async function describe(entries: readonly TorchPlayerEntry[]): Promise<Described[]> {
  return Promise.all(
    entries.map(async (e) => ({
      ...e,
      info: await readTorchCheckpointInfo(e.dir),
      learnerDir: resolve(snapshotAdapterDir(e.dir)),
    })),
  );
}

/** Groups the adapters by base model (in first-seen order); full-weight checkpoints alone. */
function groupByBase(entries: readonly Described[]): Described[][] {
  const groups = new Map<string, Described[]>();
  const alone: Described[][] = [];
  for (const e of entries) {
    if (e.info.saved !== "peft-adapter") {
      alone.push([e]);
      continue;
    }
    const key = baseKey(e.info);
    groups.set(key, [...(groups.get(key) ?? []), e]);
  }
  return [...groups.values(), ...alone];
}

export async function openTorchPlayers(
  entries: readonly TorchPlayerEntry[],
  opts: { worker?: Partial<TorchWorkerOptions> } = {},
): Promise<TorchPlayers> {
  const learners: TorchLearner[] = [];
  const policies = new Map<string, Policy>();
  const close = async () => {
    for (const l of learners) await l.close();
  };
  try {
    for (const group of groupByBase(await describe(entries))) {
      const first = group[0];
      const learner = await openCheckpointWorker(first.info, first.learnerDir, {
        maxAdapters: group.length,
        ...(opts.worker ? { worker: opts.worker } : {}),
      });
      learners.push(learner);
      for (const e of group) {
        const adapter = e.info.saved === "peft-adapter" ? e.learnerDir : undefined;
        policies.set(e.name, new TorchPolicy(learner, e.name, adapter));
      }
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { policies, workers: learners.length, close };
}
