/**
 * A torch run checkpoint (`checkpoints/iter-N` of a `model.backend: torch` run) as a policy, for
 * `mage eval --checkpoint`: full weights load straight from the checkpoint's `learner/` directory;
 * a LoRA adapter loads on top of the base model the run started from.
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

export async function openTorchCheckpoint(
  dir: string,
  opts: {
    python?: string | null;
    device?: string;
    dtype?: TorchModelConfig["dtype"];
    /** The worker's prefix store (`model.torch.prefixCacheMB`); absent: the run's own setting. */
    prefixCacheMB?: number;
    worker?: Partial<TorchWorkerOptions>;
  } = {},
): Promise<OpenedTorchCheckpoint> {
  const info = JSON.parse(
    await readFile(join(dir, TORCH_CHECKPOINT_FILES.torch), "utf8"),
  ) as TorchCheckpointInfo;
  if (info.format !== "mage-torch-checkpoint")
    throw new UsageError(
      `${join(dir, TORCH_CHECKPOINT_FILES.torch)} is not a mage torch checkpoint description`,
    );
  const learnerDir = resolve(join(dir, TORCH_CHECKPOINT_FILES.learner));
  const adapter = info.saved === "peft-adapter";
  const torch: TorchModelConfig = {
    ...info.torch,
    // Evaluation samples in this process's worker: one process, no server.
    processes: 1,
    rollout: "worker",
    ...(opts.python !== undefined ? { python: opts.python } : {}),
    ...(opts.device !== undefined ? { device: opts.device } : {}),
    ...(opts.dtype !== undefined ? { dtype: opts.dtype } : {}),
    ...(opts.prefixCacheMB !== undefined ? { prefixCacheMB: opts.prefixCacheMB } : {}),
    lora: adapter ? info.torch.lora : null,
    path: adapter ? info.basePath : learnerDir,
  };
  const learner = await TorchLearner.open({
    torch,
    optimizer: { lr: 1e-6, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
    ...(opts.worker ? { worker: opts.worker } : {}),
  });
  try {
    if (adapter) await learner.restoreWeights(learnerDir);
  } catch (err) {
    await learner.close();
    throw err;
  }
  return {
    learner,
    policy: new TorchPolicy(learner, `torch:${dir}`),
    info,
    close: () => learner.close(),
  };
}
