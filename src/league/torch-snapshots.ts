/**
 * Snapshots of a torch LoRA policy: adapters on the one base model. A snapshot is the LoRA
 * adapter alone (the worker's `save_adapter`: no optimizer, no RNG state), in
 * `<run>/league/snapshot-N/learner/` beside `torch.json` (`adapterOnly: true`), `training.json`
 * and `meta.json`, so the folder reads as a torch checkpoint (`mage eval --checkpoint`,
 * `mage league --snapshots`). A snapshot plays through the run's own worker: each of its moves is a
 * `generate` with the snapshot's adapter swapped in for the call, and the worker keeps at most its
 * `maxAdapters` adapters in memory, reading an evicted one again from disk (docs/learner-protocol.md).
 */
import { join } from "node:path";
import type { TorchLearner } from "../learner/torch/learner.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import { TORCH_CHECKPOINT_FILES, writeDirAtomic } from "../model/checkpoint.js";
import type { SnapshotStore } from "./snapshots.js";

/** The snapshot's adapter folder inside a torch snapshot (or LoRA checkpoint) directory. */
export function snapshotAdapterDir(dir: string): string {
  return join(dir, TORCH_CHECKPOINT_FILES.learner);
}

/** A policy sampling the adapter saved in the torch snapshot `dir`, on `learner`'s base model. */
export function torchSnapshotPolicy(learner: TorchLearner, dir: string, name: string): TorchPolicy {
  return new TorchPolicy(learner, name, snapshotAdapterDir(dir));
}

export function torchSnapshotStore(learner: TorchLearner): SnapshotStore {
  return {
    save: (dir, meta) =>
      writeDirAtomic(dir, async (tmp) => {
        await learner.saveAdapter(snapshotAdapterDir(tmp));
        const info = { ...learner.checkpointInfo("peft-adapter"), adapterOnly: true };
        return {
          [TORCH_CHECKPOINT_FILES.torch]: `${JSON.stringify(info, null, 2)}\n`,
          [TORCH_CHECKPOINT_FILES.trainingJson]: `${JSON.stringify({ learnerStep: learner.step, snapshot: meta.snapshot }, null, 2)}\n`,
          [TORCH_CHECKPOINT_FILES.meta]: meta,
        };
      }),
    load: async (dir, name) => torchSnapshotPolicy(learner, dir, name),
  };
}
