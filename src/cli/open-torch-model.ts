/**
 * A local Hugging Face model directory (a base, a warm start, an `export-hf` output) as a policy
 * sampled by the PyTorch worker, for measurements and `mage serve` (no training): full weights, no LoRA,
 * no reference copy, one plain process.
 */
import { resolve } from "node:path";
import { TorchLearner } from "../learner/torch/learner.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import type { TorchWorkerOptions } from "../learner/torch/worker.js";
import { type TorchModelConfig, TorchModelSchema } from "../train/config.js";

export interface OpenedTorchModel {
  learner: TorchLearner;
  policy: TorchPolicy;
  close(): Promise<void>;
}

export interface OpenTorchModelOptions {
  python?: string | null;
  device?: string;
  dtype?: TorchModelConfig["dtype"];
  /** The worker's prefix store (`model.torch.prefixCacheMB`); absent: the config's default. */
  prefixCacheMB?: number;
  /** The worker's CPU threads (OMP_NUM_THREADS); 0 or absent: torch's default, one per core. */
  threads?: number;
  worker?: Partial<TorchWorkerOptions>;
}

/** The worker's options with `threads` set as OMP_NUM_THREADS (as `mage pretrain --threads` does). */
export function workerWithThreads(
  threads: number | undefined,
  given: Partial<TorchWorkerOptions> = {},
): Partial<TorchWorkerOptions> {
  if (!threads) return given;
  return { ...given, env: { ...given.env, OMP_NUM_THREADS: String(threads) } };
}

export async function openTorchModelDir(
  dir: string,
  opts: OpenTorchModelOptions = {},
): Promise<OpenedTorchModel> {
  const torch = TorchModelSchema.parse({
    path: resolve(dir),
    lora: null,
    ...(opts.python !== undefined ? { python: opts.python } : {}),
    ...(opts.device !== undefined ? { device: opts.device } : {}),
    ...(opts.dtype !== undefined ? { dtype: opts.dtype } : {}),
    ...(opts.prefixCacheMB !== undefined ? { prefixCacheMB: opts.prefixCacheMB } : {}),
  });
  const learner = await TorchLearner.open({
    torch,
    optimizer: { lr: 1e-6, weightDecay: 0, gradClip: 1 },
    seed: 0,
    reference: false,
    worker: workerWithThreads(opts.threads, opts.worker),
  });
  return { learner, policy: new TorchPolicy(learner, `torch:${dir}`), close: () => learner.close() };
}
