/**
 * The model `mage serve` serves, opened as a `ServeBackend`:
 * - `--checkpoint DIR`: a mage checkpoint or training run (its newest checkpoint). An embedded one
 *   samples in this process (`ServeEngine`); one of `model.backend: torch` samples in the PyTorch
 *   worker, opened as `mage eval --checkpoint` opens it.
 * - `--model DIR`: a Hugging Face model directory (`config.json`, weights, tokenizer, chat
 *   template), or a torch run or checkpoint, sampled in the PyTorch worker.
 * The worker serves with its prefix store off, so a seeded request's reply does not depend on
 * which requests came before it.
 */
import { existsSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { expectChoice, UsageError } from "../core/errors.js";
import { openTorchCheckpoint } from "../learner/torch/open-checkpoint.js";
import {
  isCheckpointDir,
  isTorchCheckpoint,
  latestRunCheckpoint,
  loadCheckpoint,
} from "../model/checkpoint.js";
import { selectKernels } from "../model/kernels/select.js";
import type { ServeBackend } from "../serve/backend.js";
import { paramsFromMap, ServeEngine } from "../serve/engine.js";
import { TorchServeBackend } from "../serve/torch-backend.js";
import { TORCH_DEVICE_PATTERN, type TorchModelConfig } from "../train/config.js";
import { TORCH_DTYPES } from "../train/pretrain/torch-run.js";
import { checkpointArg } from "./checkpoint-arg.js";
import { openTorchModelDir, workerWithThreads } from "./open-torch-model.js";

export interface ServeModelFlags {
  checkpoint?: string;
  model?: string;
  /** Embedded models only. */
  kernels?: string;
  /** PyTorch worker only: CPU threads (0: one per core), device, dtype. */
  threads?: number;
  device?: string;
  dtype?: string;
}

export interface OpenedServeModel {
  backend: ServeBackend;
  /** The default name clients pass as `model`: the served directory's name. */
  name: string;
  /** What is served, for the start line. */
  description: string;
}

const TORCH_FLAGS = ["threads", "device", "dtype"] as const;

interface TorchSettings {
  threads: number | undefined;
  device: string | undefined;
  dtype: TorchModelConfig["dtype"] | undefined;
}

function torchSettings(flags: ServeModelFlags): TorchSettings {
  if (flags.kernels !== undefined)
    throw new UsageError(
      "--kernels applies to embedded checkpoints only; a PyTorch model takes --threads, --device and --dtype",
    );
  if (flags.device !== undefined && !TORCH_DEVICE_PATTERN.test(flags.device))
    throw new UsageError(`--device must be cpu, cuda or cuda:N, got "${flags.device}"`);
  return {
    threads: flags.threads,
    device: flags.device,
    dtype: flags.dtype === undefined ? undefined : expectChoice("--dtype", flags.dtype, TORCH_DTYPES),
  };
}

/** Opens the model the flags name (exactly one of --checkpoint and --model). */
export async function openServeModel(
  flags: ServeModelFlags,
  env: NodeJS.ProcessEnv = process.env,
): Promise<OpenedServeModel> {
  if ((flags.checkpoint === undefined) === (flags.model === undefined))
    throw new UsageError(
      "give one of --checkpoint DIR (a mage checkpoint or training run) and --model DIR (a Hugging Face model directory or a torch run)",
    );
  if (flags.model !== undefined) return openModelFlag(flags.model, flags);
  const dir = flags.checkpoint as string;
  const found = await checkpointArg(dir);
  if (isTorchCheckpoint(found)) return openTorch("--checkpoint", dir, found, torchSettings(flags));
  return openEmbedded(dir, found, flags, env);
}

/** `--model DIR`: a mage checkpoint or run (a torch one), else a Hugging Face directory. */
async function openModelFlag(dir: string, flags: ServeModelFlags): Promise<OpenedServeModel> {
  const settings = torchSettings(flags);
  const target = resolve(dir);
  const isMage = (await isCheckpointDir(target)) || (await latestRunCheckpoint(target)) !== null;
  if (!isMage) {
    if (existsSync(join(target, "config.json"))) return openTorch("--model", dir, null, settings);
    throw new UsageError(
      `--model ${dir} is neither a Hugging Face model directory (no config.json in it) nor a torch training run or checkpoint`,
    );
  }
  const found = await checkpointArg(dir);
  if (!isTorchCheckpoint(found))
    throw new UsageError(`--model ${dir} is an embedded mage checkpoint; serve it with --checkpoint ${dir}`);
  return openTorch("--model", dir, found, settings);
}

/** A Hugging Face directory (`checkpoint` null) or a torch run checkpoint, in the PyTorch worker. */
async function openTorch(
  flag: string,
  dir: string,
  checkpoint: string | null,
  s: TorchSettings,
): Promise<OpenedServeModel> {
  const common = {
    ...(s.device !== undefined ? { device: s.device } : {}),
    ...(s.dtype !== undefined ? { dtype: s.dtype } : {}),
    prefixCacheMB: 0,
  };
  let opened: Awaited<ReturnType<typeof openTorchModelDir>>;
  try {
    opened =
      checkpoint === null
        ? await openTorchModelDir(dir, { ...common, threads: s.threads })
        : await openTorchCheckpoint(checkpoint, { ...common, worker: workerWithThreads(s.threads) });
  } catch (err) {
    if (err instanceof UsageError) throw new UsageError(`${flag} ${dir}: ${err.message}`);
    throw err;
  }
  const { info, options } = opened.learner;
  const threads = s.threads ? `, ${s.threads} thread${s.threads === 1 ? "" : "s"}` : "";
  return {
    backend: new TorchServeBackend(opened),
    name: basename(checkpoint ?? resolve(dir)),
    description:
      `${info.architecture}, ${info.parameters.toLocaleString("en-US")} parameters, ` +
      `PyTorch worker on ${options.torch.device} in ${options.torch.dtype}${threads}`,
  };
}

async function openEmbedded(
  dir: string,
  found: string,
  flags: ServeModelFlags,
  env: NodeJS.ProcessEnv,
): Promise<OpenedServeModel> {
  for (const f of TORCH_FLAGS)
    if (flags[f] !== undefined)
      throw new UsageError(
        `--${f} applies to models served through the PyTorch worker; ${dir} is an embedded checkpoint (it takes --kernels)`,
      );
  let ckpt: Awaited<ReturnType<typeof loadCheckpoint>>;
  try {
    ckpt = await loadCheckpoint(found, { trainingState: false });
  } catch (err) {
    throw new UsageError(`--checkpoint ${dir}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const kernels = await selectKernels(flags.kernels ?? "auto", env);
  let engine: ServeEngine;
  try {
    engine = new ServeEngine({
      params: paramsFromMap(ckpt.config, ckpt.params),
      tokenizer: ckpt.tokenizer,
      kernels,
    });
  } catch (err) {
    throw new UsageError(`--checkpoint ${dir}: ${err instanceof Error ? err.message : String(err)}`);
  }
  return {
    backend: engine,
    name: basename(ckpt.dir),
    description: `${ckpt.config.nLayers} layers, d ${ckpt.config.dModel}, kernels ${kernels.name}`,
  };
}
