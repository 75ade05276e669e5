import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { z } from "zod";
import { UsageError } from "../core/errors.js";
import type { MageConfig } from "../train/config.js";
import { readPretrainReport } from "../train/pretrain/run.js";
import { sftCheckpointSteps } from "../train/pretrain/torch-resume.js";
import {
  TORCH_DTYPES,
  TORCH_PRETRAIN_DEFAULTS,
  TORCH_PRETRAIN_GAMES,
  type TorchPretrainSettings,
} from "../train/pretrain/torch-run.js";

/**
 * A grid's warm start of a real model (`model.backend: torch`): every seed's runs start from
 * `mage pretrain --backend torch --model <model.torch.path> --seed <seed>`, built once per seed
 * and shared by the seed's methods, as the embedded grids share their pretrained base.
 */
export const WarmStartSchema = z
  .object({
    steps: z.number().int().positive(),
    corpusTrials: z.number().int().positive(),
    evalTrials: z.number().int().positive(),
    batchTokens: z.number().int().positive(),
    microBatchTokens: z.number().int().positive(),
    lr: z.number().positive(),
    actionWeight: z.number().positive(),
    tacticalRate: z.number().min(0).max(1),
    epsilon: z.number().min(0).max(1),
    reflectionMoves: z.number().int().min(0),
    unlikelihood: z.number().min(0),
    loraRank: z.number().int().min(0),
    dtype: z.enum(TORCH_DTYPES),
    device: z.string().min(1),
    threads: z.number().int().min(0),
    prefixCacheMB: z.number().min(0),
    evalBatch: z.number().int().positive(),
    /** `game: remote`: the served warm start's config file (`mage pretrain --config`), its settings under these. */
    config: z.string().min(1),
  })
  .partial()
  .strict();

export type WarmStart = z.infer<typeof WarmStartSchema>;

/** Bumped when the warm start's recipe changes in a way that changes its weights. */
export const TORCH_WARM_START_RECIPE = 1;

/**
 * Settings added after grids were keyed, left out of the key while off, so that the bases of
 * those grids keep their directory names.
 */
const OFF_WHEN_ZERO: ReadonlySet<string> = new Set(["unlikelihood"]);

/** How the process runs, not what it learns: left out of the key. */
const RUNTIME_ONLY: ReadonlySet<string> = new Set(["threads", "prefixCacheMB", "device", "evalBatch"]);

/**
 * Games whose grids were keyed while the checks' batch was still in the key: their keys hold the
 * game's default batch (not the grid's), so that their bases keep their directory names and the
 * committed summaries still find them. The puzzles' grids were keyed after it left.
 */
const KEYED_WITH_DEFAULT_EVAL_BATCH: ReadonlySet<string> = new Set(["kuhn", "tictactoe"]);

const FLAGS: Record<Exclude<keyof WarmStart, "config">, string> = {
  steps: "--steps",
  corpusTrials: "--corpus-trials",
  evalTrials: "--eval-trials",
  batchTokens: "--batch-tokens",
  microBatchTokens: "--micro-batch-tokens",
  lr: "--lr",
  actionWeight: "--action-weight",
  tacticalRate: "--tactical-rate",
  epsilon: "--epsilon",
  reflectionMoves: "--reflection-moves",
  unlikelihood: "--unlikelihood",
  loraRank: "--lora-rank",
  dtype: "--dtype",
  device: "--device",
  threads: "--threads",
  prefixCacheMB: "--prefix-cache-mb",
  evalBatch: "--eval-batch",
};

/**
 * The warm-started directory's name stem: game, base model name and a hash of what shapes the
 * weights, task knobs included when there are any (the Kuhn bases made before knobs keep their names).
 */
export function warmStartKey(config: MageConfig, warm: WarmStart, knobs: string | null = null): string {
  const game = torchGame(config, warm);
  const base = config.model.torch.path;
  if (!base) throw new UsageError("warmStart: model.torch.path must name the base model to warm-start");
  const defaults = TORCH_PRETRAIN_DEFAULTS[game];
  const { config: file, ...flags } = warm;
  const resolved: Partial<TorchPretrainSettings> = { ...defaults, ...flags };
  const keyed = Object.entries(resolved).filter(
    ([k, v]) => v !== undefined && !RUNTIME_ONLY.has(k) && !(OFF_WHEN_ZERO.has(k) && v === 0),
  );
  if (KEYED_WITH_DEFAULT_EVAL_BATCH.has(game)) keyed.push(["evalBatch", defaults.evalBatch]);
  const settings = Object.fromEntries(keyed.sort(([a], [b]) => a.localeCompare(b)));
  const hash = createHash("sha256")
    .update(
      JSON.stringify({
        settings,
        base: basename(base),
        recipe: TORCH_WARM_START_RECIPE,
        ...(knobs !== null ? { knobs } : {}),
        ...(file !== undefined ? { served: servedConfigText(file) } : {}),
      }),
    )
    .digest("hex")
    .slice(0, 8);
  const label = game === "remote" && config.env ? config.env.name : game;
  return `${label}-${basename(base)}-${hash}`;
}

/** The `mage pretrain --backend torch` arguments that warm-start `base` for `seed` into `out`. */
export function warmStartArgs(
  game: string,
  base: string,
  seed: number,
  out: string,
  warm: WarmStart,
  knobs: string | null = null,
): string[] {
  const { config: file, ...flags } = warm;
  const args =
    file !== undefined
      ? ["pretrain", "--config", file, "--model", base, "--seed", String(seed)]
      : ["pretrain", "--game", game, "--backend", "torch", "--model", base, "--seed", String(seed)];
  // A base whose checks a stopped grid cut off gets them sampled, not trained again.
  args.push("--out", out, "--resume");
  if (knobs !== null) args.push("--knobs", knobs);
  for (const [key, value] of Object.entries(flags)) {
    if (value === undefined) continue;
    args.push(FLAGS[key as keyof typeof FLAGS], String(value));
  }
  return args;
}

/** True once a warm start finished, checks included (its report is written before and after them). */
export function warmStartDone(dir: string): boolean {
  const report = readPretrainReport(dir) as { evaluation?: unknown } | null;
  return report?.evaluation !== null && report?.evaluation !== undefined;
}

/**
 * Where an unfinished warm start in `dir` would go on from (its `--resume`): its SFT checkpoint's
 * step, or its checks when it was trained and exported; null when it starts afresh.
 */
export function warmStartProgress(dir: string): string | null {
  const report = readPretrainReport(dir) as { evaluation?: unknown } | null;
  if (report && report.evaluation === null) return "trained, its checks to sample";
  const sft = sftCheckpointSteps(dir);
  return sft ? `goes on after SFT step ${sft.done}/${sft.of}` : null;
}

function torchGame(config: MageConfig, warm: WarmStart): (typeof TORCH_PRETRAIN_GAMES)[number] {
  const game = config.game as (typeof TORCH_PRETRAIN_GAMES)[number];
  // A served environment's warm start is its own config file (`mage pretrain --config`).
  if (game === "remote") {
    if (warm.config === undefined)
      throw new UsageError(
        "warmStart.config: a served environment is warm-started from its pretrain config file (e.g. configs/pretrain/alfworld-smollm2.yaml)",
      );
    return game;
  }
  if (warm.config !== undefined)
    throw new UsageError(
      `warmStart.config: only a served environment (game: remote) takes one, not ${config.game}`,
    );
  const builtIn = TORCH_PRETRAIN_GAMES.filter((g) => g !== "remote");
  if (!(builtIn as readonly string[]).includes(game)) {
    throw new UsageError(
      `warmStart: real models are warm-started for ${builtIn.join(", ")} only, not ${config.game}`,
    );
  }
  return game;
}

/** The served warm start's config file, whose every byte shapes the weights (a missing one names the field). */
function servedConfigText(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`warmStart.config: cannot read ${file}: ${(err as Error).message}`);
  }
}
