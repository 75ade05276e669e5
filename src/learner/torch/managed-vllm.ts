/**
 * `model.torch.rollout: vllm`: the vLLM server mage starts on the run's model (`vllm-server.ts`)
 * and the rollout policy that samples from it and receives every update's weights
 * (`ServedRolloutPolicy`): whole weights reloaded by the server (`model.torch.vllm.push: merged`,
 * a LoRA adapter merged in; always for full fine-tuning), or the LoRA adapter itself
 * (`vllm.push: lora`).
 *
 *   const server = await startManagedVllm(config.model.torch, { logFile: "RUN/vllm.log" });
 *   const policy = managedRolloutPolicy(server, learner, "RUN/served");
 *   await policy.push(0);   // the learner's adapter, loaded by the server
 *   ...
 *   await server.stop();
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { UsageError } from "../../core/errors.js";
import { type TorchModelConfig, TorchVllmSchema } from "../../train/config.js";
import type { TorchLearner } from "./learner.js";
import type { OpenedTorchCheckpoint } from "./open-checkpoint.js";
import { ServedRolloutPolicy } from "./served.js";
import { checkVllmStart, type VllmPush, VllmServer, type VllmServerOptions } from "./vllm-server.js";

/** The name the managed server gives the base model (adapters are named per push). */
export const MANAGED_BASE_NAME = "base";

/** The model's context length from its config.json (0 when it does not say). */
function configContextLength(dir: string): number {
  try {
    const c = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
    const n = c.max_position_embeddings ?? c.n_positions ?? c.max_sequence_length;
    return typeof n === "number" && Number.isFinite(n) ? n : 0;
  } catch {
    return 0;
  }
}

/** How `torch`'s weights reach the managed server: adapters only for LoRA with `vllm.push: lora`. */
export function managedPush(torch: TorchModelConfig): VllmPush {
  return torch.lora !== null && torch.vllm.push === "lora" ? "lora" : "weights";
}

/** The model directory vLLM is to serve: a usage error naming it when it has no config.json. */
function checkServedModel(model: string): void {
  if (!existsSync(join(model, "config.json")))
    throw new UsageError(
      `model.torch.path: ${model} ${existsSync(model) ? "has no config.json" : "does not exist"}; ` +
        "the vLLM server (rollout: vllm) serves a Hugging Face model directory",
    );
}

/**
 * What `startManagedVllm` would refuse, checked before the run loads its worker: the interpreter,
 * the model directory and a configured port (each a usage error naming it).
 */
export async function checkManagedVllm(torch: TorchModelConfig, modelDir?: string): Promise<void> {
  checkServedModel(resolve(modelDir ?? torch.path!));
  await checkVllmStart(torch.vllm);
}

/** Starts the server of `rollout: vllm` on `modelDir` (default `torch.path`). */
export function startManagedVllm(
  torch: TorchModelConfig,
  opts: { modelDir?: string; logFile?: string | null; overrides?: Partial<VllmServerOptions> } = {},
): Promise<VllmServer> {
  const model = resolve(opts.modelDir ?? torch.path!);
  try {
    checkServedModel(model);
  } catch (err) {
    return Promise.reject(err);
  }
  return VllmServer.start({
    model,
    servedName: MANAGED_BASE_NAME,
    vllm: torch.vllm,
    loraRank: torch.lora?.rank ?? null,
    push: managedPush(torch),
    dtype: torch.dtype,
    contextLength: configContextLength(model),
    logFile: opts.logFile ?? null,
    ...opts.overrides,
  });
}

/**
 * Rollouts from a managed server; `push()` writes the learner's adapter or weights (as the server
 * was started to take them) under `adapterDir` and has the server load them.
 */
export function managedRolloutPolicy(
  server: VllmServer,
  learner: TorchLearner,
  adapterDir: string,
  opts: { fetch?: typeof fetch; concurrency?: number } = {},
): ServedRolloutPolicy {
  return new ServedRolloutPolicy({
    learner,
    baseUrl: server.baseUrl,
    model: MANAGED_BASE_NAME,
    lora: server.push === "lora",
    adapterDir,
    weightsDir: null,
    reload: server.push === "weights" ? { dtype: server.dtype } : null,
    serverFailure: () => (server.exit ? server.deathError() : null),
    ...(opts.concurrency ? { policy: { concurrency: opts.concurrency } } : {}),
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
  });
}

/**
 * A torch run checkpoint served by a managed vLLM server on the base model it was trained from
 * (`mage eval --checkpoint` of a `rollout: vllm` run): its weights (an adapter merged in, or the
 * adapter itself with `vllm.push: lora`) are written from the opened worker into a temporary
 * directory and loaded; `close()` stops the server and removes it.
 */
export async function serveCheckpointWithVllm(
  opened: OpenedTorchCheckpoint,
  overrides?: Partial<VllmServerOptions>,
): Promise<{ policy: ServedRolloutPolicy; server: VllmServer; close(): Promise<void> }> {
  const { info } = opened;
  // The opened worker is one process whatever the run used, so whole weights can be pushed. A checkpoint written before a field existed gets its default.
  const torch: TorchModelConfig = { ...info.torch, vllm: TorchVllmSchema.parse(info.torch.vllm ?? {}) };
  const server = await startManagedVllm(torch, {
    modelDir: info.basePath,
    ...(overrides ? { overrides } : {}),
  });
  const dir = mkdtempSync(join(tmpdir(), "mage-eval-vllm-"));
  const close = async () => {
    try {
      await server.stop();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  try {
    const policy = managedRolloutPolicy(server, opened.learner, dir, { concurrency: torch.vllm.concurrency });
    await policy.push(0);
    return { policy, server, close };
  } catch (err) {
    await close();
    throw err;
  }
}
