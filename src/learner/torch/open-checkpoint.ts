/**
 * A torch run checkpoint (`checkpoints/iter-N` of a `model.backend: torch` run) as a policy, for
 * `mage eval --checkpoint`: full weights load straight from the checkpoint's `learner/` directory;
 * a LoRA adapter loads on top of the base model the run started from. A league snapshot (the
 * adapter alone) is sampled as an adapter swapped in on that base model, not restored.
 */
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { UsageError } from "../../core/errors.js";
import { TORCH_CHECKPOINT_FILES } from "../../model/checkpoint.js";
import type { TorchModelConfig } from "../../train/config.js";
import { type TorchCheckpointInfo, TorchLearner } from "./learner.js";
import { TorchPolicy } from "./policy.js";
import type { TorchWorkerOptions } from "./worker.js";

export interface OpenedTorchCheckpoint {
  learner: TorchLearner;
  policy: TorchPolicy;
  info: TorchCheckpointInfo;
  close(): Promise<void>;
}

export interface OpenCheckpointOptions {
  python?: string | null;
  device?: string;
  dtype?: TorchModelConfig["dtype"];
  /** The worker's prefix store (`model.torch.prefixCacheMB`); absent: the run's own setting. */
  prefixCacheMB?: number;
  worker?: Partial<TorchWorkerOptions>;
}

/** A torch checkpoint directory's `torch.json`. */
export async function readTorchCheckpointInfo(dir: string): Promise<TorchCheckpointInfo> {
  const info = JSON.parse(
    await readFile(join(dir, TORCH_CHECKPOINT_FILES.torch), "utf8"),
  ) as TorchCheckpointInfo;
  if (info.format !== "mage-torch-checkpoint")
    throw new UsageError(
      `${join(dir, TORCH_CHECKPOINT_FILES.torch)} is not a mage torch checkpoint description`,
    );
  return info;
}

/**
 * A worker that samples what a checkpoint saved: the full weights in `learnerDir`, or, for an
 * adapter, the run's base model with a fresh adapter of the run's shape (the checkpoint's adapter
 * is then restored into it or swapped in per call). One process, no server.
 */
export function openCheckpointWorker(
  info: TorchCheckpointInfo,
  learnerDir: string,
  opts: OpenCheckpointOptions & { maxAdapters?: number } = {},
): Promise<TorchLearner> {
  const adapter = info.saved === "peft-adapter";
  const torch: TorchModelConfig = {
    ...info.torch,
    processes: 1,
    rollout: "worker",
    ...(opts.python !== undefined ? { python: opts.python } : {}),
    ...(opts.device !== undefined ? { device: opts.device } : {}),
    ...(opts.dtype !== undefined ? { dtype: opts.dtype } : {}),
    ...(opts.prefixCacheMB !== undefined ? { prefixCacheMB: opts.prefixCacheMB } : {}),
    lora: adapter ? info.torch.lora : null,
    path: adapter ? info.basePath : learnerDir,
  };
  return TorchLearner.open({
    torch,
    optimizer: { lr: 1e-6, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
    ...(opts.maxAdapters !== undefined ? { maxAdapters: opts.maxAdapters } : {}),
    ...(opts.worker ? { worker: opts.worker } : {}),
  });
}

export async function openTorchCheckpoint(
  dir: string,
  opts: OpenCheckpointOptions = {},
): Promise<OpenedTorchCheckpoint> {
  const info = await readTorchCheckpointInfo(dir);
  const learnerDir = resolve(join(dir, TORCH_CHECKPOINT_FILES.learner));
  const adapter = info.saved === "peft-adapter";
  const learner = await openCheckpointWorker(info, learnerDir, opts);
  try {
    if (adapter && !info.adapterOnly) await learner.restoreWeights(learnerDir);
  } catch (err) {
    await learner.close();
    throw err;
  }
  return {
    learner,
    policy: new TorchPolicy(learner, `torch:${dir}`, info.adapterOnly ? learnerDir : undefined),
    info,
    close: () => learner.close(),
  };
}
