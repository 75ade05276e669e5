import { join, resolve } from "node:path";
import { EmbeddedLearner } from "../learner/embedded.js";
import { TorchLearner } from "../learner/torch/learner.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import { ServedRolloutPolicy } from "../learner/torch/served.js";
import type { TorchWorkerOptions } from "../learner/torch/worker.js";
import type { TrainLearner } from "../learner/types.js";
import { hfWeightsSha256Sync, type loadCheckpoint, weightsSha256 } from "../model/checkpoint.js";
import type { Kernels } from "../model/kernels/types.js";
import { Learner } from "../model/learner.js";
import { cloneParams } from "../model/params.js";
import { paramsFromMap } from "../model/params-io.js";
import { EmbeddedPolicy } from "../policy/embedded.js";
import type { Policy } from "../policy/types.js";
import type { MageConfig } from "./config.js";

export interface TrainBackend {
  learner: TrainLearner;
  /** Samples rollouts (and, unless `evalPolicy` differs, evaluations). */
  policy: Policy;
  evalPolicy: Policy;
  /** True when the sampler's log-probs are not the learner's: old log-probs are recomputed before updates. */
  recomputeOldLogp: boolean;
  /** Gives the sampler the learner's current weights (a served model); called after restore and after every iteration's updates. */
  syncPolicy(iteration: number): Promise<void>;
  baseModel: { dir: string; sha256: string | null };
  /** Recorded in meta.json: what computed the model. */
  describe: { backend: string; kernel: string; precision?: string };
  close(): Promise<void>;
}

export function embeddedBackend(
  config: MageConfig,
  base: Awaited<ReturnType<typeof loadCheckpoint>>,
  kernels: Kernels,
): TrainBackend {
  const baseParams = paramsFromMap(base.config, base.params);
  const reference = config.optim.klCoef > 0 ? cloneParams(baseParams) : null;
  const learner = new Learner(baseParams, {
    kernels,
    adamw: { weightDecay: config.optim.weightDecay },
    schedule: { kind: "constant", lr: config.optim.lr },
    maxGradNorm: config.optim.gradClip,
  });
  const policy = new EmbeddedPolicy({
    params: learner.params,
    tokenizer: base.tokenizer,
    kernels,
    name: `embedded:${config.name}`,
  });
  return {
    learner: new EmbeddedLearner(learner, base.tokenizer, reference, base.preset),
    policy,
    evalPolicy: policy,
    recomputeOldLogp: false,
    syncPolicy: async () => {},
    baseModel: { dir: base.dir, sha256: weightsSha256(base.dir) },
    describe: { backend: `cpu-${kernels.name}`, kernel: kernels.name },
    close: async () => {},
  };
}

export async function torchBackend(
  config: MageConfig,
  outDir: string,
  opts: { worker?: Partial<TorchWorkerOptions>; fetch?: typeof fetch } = {},
): Promise<TrainBackend> {
  const t = config.model.torch;
  const learner = await TorchLearner.open({
    torch: t,
    optimizer: {
      lr: config.optim.lr,
      weightDecay: config.optim.weightDecay,
      gradClip: config.optim.gradClip,
    },
    seed: config.seed,
    reference: config.optim.klCoef > 0,
    ...(opts.worker ? { worker: opts.worker } : {}),
  });
  try {
    const local = new TorchPolicy(learner, `torch:${config.name}`);
    let policy: Policy = local;
    let syncPolicy = async (_iteration: number) => {};
    if (t.rollout === "openai") {
      const served = new ServedRolloutPolicy({
        learner,
        baseUrl: t.rolloutUrl!,
        model: t.rolloutModel!,
        lora: t.lora !== null,
        adapterDir: join(resolve(outDir), "served"),
        weightsDir: t.rolloutWeightsDir,
        ...(opts.fetch ? { fetch: opts.fetch } : {}),
      });
      policy = served;
      syncPolicy = (iteration) => served.push(iteration);
    }
    return {
      learner,
      policy,
      evalPolicy: policy,
      recomputeOldLogp: t.rollout === "openai",
      syncPolicy,
      baseModel: { dir: resolve(t.path!), sha256: hfWeightsSha256Sync(t.path!) },
      describe: {
        backend: `torch-${t.device}-${t.dtype}${t.processes > 1 ? `-x${t.processes}` : ""}`,
        kernel: "torch",
        precision: `${learner.info.architecture}, ${learner.info.precision}`,
      },
      close: () => learner.close(),
    };
  } catch (err) {
    await learner.close();
    throw err;
  }
}
