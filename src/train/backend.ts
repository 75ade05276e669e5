import { join, resolve } from "node:path";
import { EmbeddedLearner } from "../learner/embedded.js";
import { TorchLearner } from "../learner/torch/learner.js";
import { checkManagedVllm, managedRolloutPolicy, startManagedVllm } from "../learner/torch/managed-vllm.js";
import { TorchPolicy } from "../learner/torch/policy.js";
import { ServedRolloutPolicy } from "../learner/torch/served.js";
import type { VllmServerOptions } from "../learner/torch/vllm-server.js";
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

/** The managed vLLM server's output, in the run directory (`rollout: vllm`). */
export const VLLM_LOG_FILE = "vllm.log";

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
  /** The vLLM server mage started for the rollouts (`rollout: vllm`). */
  rolloutServer?: { url: string; pid: number; logFile: string | null };
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
  opts: {
    worker?: Partial<TorchWorkerOptions>;
    fetch?: typeof fetch;
    /** Options of the managed vLLM server (`rollout: vllm`; tests: a stand-in command). */
    vllm?: Partial<VllmServerOptions>;
  } = {},
): Promise<TrainBackend> {
  const t = config.model.torch;
  // A bad model path, a missing vLLM environment or a busy port fail before the worker loads.
  if (t.rollout === "vllm") await checkManagedVllm(t);
  // rollout: vllm: the server starts while the worker loads (both take a while; the server most).
  const starting = await Promise.allSettled([
    TorchLearner.open({
      torch: t,
      optimizer: {
        lr: config.optim.lr,
        weightDecay: config.optim.weightDecay,
        gradClip: config.optim.gradClip,
      },
      seed: config.seed,
      reference: config.optim.klCoef > 0,
      // A league's snapshots are adapters the worker holds: as many as the pool keeps.
      ...(config.population.league ? { maxAdapters: config.population.league.maxSnapshots } : {}),
      ...(opts.worker ? { worker: opts.worker } : {}),
    }),
    t.rollout === "vllm"
      ? startManagedVllm(t, {
          logFile: join(resolve(outDir), VLLM_LOG_FILE),
          ...(opts.vllm ? { overrides: opts.vllm } : {}),
        })
      : Promise.resolve(null),
  ]);
  const [opened, started] = starting;
  if (opened.status === "rejected" || started.status === "rejected") {
    if (opened.status === "fulfilled") await opened.value.close();
    if (started.status === "fulfilled") await started.value?.stop();
    throw opened.status === "rejected" ? opened.reason : (started as PromiseRejectedResult).reason;
  }
  const learner = opened.value;
  const server = started.value;
  const closeAll = async () => {
    try {
      await learner.close();
    } finally {
      await server?.stop();
    }
  };
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
    if (server) {
      const served = managedRolloutPolicy(server, learner, join(resolve(outDir), "served"), {
        concurrency: t.vllm.concurrency,
        ...(opts.fetch ? { fetch: opts.fetch } : {}),
      });
      policy = served;
      syncPolicy = (iteration) => served.push(iteration);
    }
    return {
      learner,
      policy,
      evalPolicy: policy,
      recomputeOldLogp: t.rollout !== "worker",
      syncPolicy,
      baseModel: { dir: resolve(t.path!), sha256: hfWeightsSha256Sync(t.path!) },
      describe: {
        backend: `torch-${t.device}-${t.dtype}${t.processes > 1 ? `-x${t.processes}` : ""}`,
        kernel: "torch",
        precision: `${learner.info.architecture}, ${learner.info.precision}`,
      },
      ...(server ? { rolloutServer: { url: server.baseUrl, pid: server.pid, logFile: server.logFile } } : {}),
      close: closeAll,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
