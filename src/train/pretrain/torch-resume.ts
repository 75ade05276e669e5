/**
 * `mage pretrain --backend torch --resume`. A warm start killed during its checks keeps its
 * exported model (the report is first written right after the export, `evaluation: null`), so a
 * rerun with `--resume` samples the checks from that directory instead of training again. The
 * checks then read the merged float32 weights, the model `mage train` starts from, rather than
 * the base plus its LoRA in the worker's memory: the same function up to rounding.
 *
 * A warm start killed during its SFT goes on from its last SFT checkpoint: `<out>.sft-checkpoint/`
 * beside the output, the worker's own `save` (weights or adapter, optimizer, RNG) and the steps'
 * record, written atomically every `checkpointSeconds` and removed once the report is written.
 * The batches of the steps already done are drawn again (the stream is seeded) but not trained on,
 * so the resumed run trains on the same batches as an uninterrupted one.
 */
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { UsageError } from "../../core/errors.js";
import { readJsonOrNull } from "../../core/json-file.js";
import type { TorchLearner } from "../../learner/torch/learner.js";
import { recoverCheckpoint, writeDirAtomic } from "../../model/checkpoint.js";
import { REPORT_FILE } from "./run.js";
import type { SftResult } from "./sft.js";
import type { BaseModelRecord, TorchPretrainReport, TorchPretrainSettings } from "./torch-report.js";

/**
 * Settings that change how fast the checks run and how much memory they take, not what they
 * sample (each request's seed is its own; batching changes results by rounding at most): free to
 * differ on resume, so checks that ran out of memory can be resumed with a smaller batch.
 */
const RUNTIME_ONLY_SETTINGS: ReadonlySet<keyof TorchPretrainSettings> = new Set([
  "threads",
  "prefixCacheMB",
  "evalBatch",
]);

export type TorchResumePlan =
  /** Nothing to resume: no report in the directory. */
  | { kind: "fresh" }
  /** Trained and checked already. */
  | { kind: "done"; report: TorchPretrainReport }
  /** Trained and exported; the checks are missing. */
  | { kind: "checks"; report: TorchPretrainReport };

/** What the resumed run would do; a report of a different warm start is a UsageError naming the field. */
export interface TorchResumeInputs {
  out: string;
  game: string;
  seed: number;
  settings: TorchPretrainSettings;
  taskKnobs: unknown;
  base: BaseModelRecord;
  /** `game: remote`: the served environment and configs (absent for the built-in games). */
  env?: TorchPretrainReport["env"];
}

export function planTorchResume(want: TorchResumeInputs): TorchResumePlan {
  const report = readJsonOrNull(join(want.out, REPORT_FILE)) as TorchPretrainReport | null;
  if (report === null) return { kind: "fresh" };
  const mismatch = firstMismatch(report, want);
  if (mismatch !== null)
    throw new UsageError(
      `--resume: ${want.out} holds a different warm start (${mismatch}); give the same settings, ` +
        "or drop --resume to train it again",
    );
  return report.evaluation ? { kind: "done", report } : { kind: "checks", report };
}

function shown(v: unknown): string {
  return v === undefined ? "unset" : JSON.stringify(v);
}

/** What names a warm start: a report's or an SFT checkpoint's fields that a resumed run must share. */
type WarmStartIdentity = Pick<
  TorchPretrainReport,
  "backend" | "game" | "seed" | "taskKnobs" | "base" | "settings" | "env"
>;

/** The first field in which the directory's warm start differs from the one asked for, or null. */
function firstMismatch(report: WarmStartIdentity, want: TorchResumeInputs): string | null {
  if (report.backend !== "torch") return `backend ${shown(report.backend)}, not "torch"`;
  const top: [string, unknown, unknown][] = [
    ["game", report.game, want.game],
    ["seed", report.seed, want.seed],
    ["taskKnobs", report.taskKnobs, want.taskKnobs],
    ["base sha256", report.base?.sha256, want.base.sha256],
    ["env", report.env, want.env],
  ];
  for (const [name, had, asked] of top)
    if (JSON.stringify(had) !== JSON.stringify(asked)) return `${name} ${shown(had)}, not ${shown(asked)}`;
  const keys = new Set([...Object.keys(report.settings ?? {}), ...Object.keys(want.settings)]);
  for (const key of [...keys].sort()) {
    if (RUNTIME_ONLY_SETTINGS.has(key as keyof TorchPretrainSettings)) continue;
    const had = (report.settings as unknown as Record<string, unknown>)?.[key];
    const asked = (want.settings as unknown as Record<string, unknown>)[key];
    if (JSON.stringify(had) !== JSON.stringify(asked))
      return `settings.${key} ${shown(had)}, not ${shown(asked)}`;
  }
  return null;
}

/** Where a warm start writing `out` keeps its SFT checkpoint. */
export function sftCheckpointDir(out: string): string {
  return `${out}.sft-checkpoint`;
}

const SFT_PROGRESS_FILE = "sft-progress.json";
const SFT_LEARNER_DIR = "learner";

/** The SFT steps done so far, as the checkpoint records them. */
export interface SftProgress extends Omit<SftResult, "epochs"> {
  /** The worker's optimizer step after them (a restore must give it back). */
  learnerStep: number;
  /** The mean probability of the unlikely tokens before each step (`unlikely` in the report). */
  meanQ: number[];
  /** Wall time of the interrupted run(s) up to this checkpoint: corpus, load, render and SFT. */
  runMs: number;
}

interface SftCheckpointFile {
  format: "mage-torch-sft-checkpoint";
  identity: WarmStartIdentity;
  progress: SftProgress;
}

/** Writes the worker's state and the progress into the checkpoint directory, atomically. */
export async function saveSftCheckpoint(
  learner: TorchLearner,
  dir: string,
  identity: WarmStartIdentity,
  progress: SftProgress,
): Promise<void> {
  await writeDirAtomic(dir, async (tmp) => {
    await learner.saveWeights(join(tmp, SFT_LEARNER_DIR));
    const file: SftCheckpointFile = { format: "mage-torch-sft-checkpoint", identity, progress };
    return { [SFT_PROGRESS_FILE]: `${JSON.stringify(file)}\n` };
  });
}

/**
 * The progress of the SFT checkpoint of the warm start asked for, or null when there is none;
 * another warm start's checkpoint is a UsageError naming the field that differs.
 */
export async function readSftCheckpoint(want: TorchResumeInputs): Promise<SftProgress | null> {
  const dir = sftCheckpointDir(want.out);
  await recoverCheckpoint(dir); // a kill between the two renames of an atomic write
  if (!existsSync(dir)) return null;
  const file = readJsonOrNull(join(dir, SFT_PROGRESS_FILE)) as SftCheckpointFile | null;
  if (file?.format !== "mage-torch-sft-checkpoint")
    throw new UsageError(
      `--resume: ${dir} is not an SFT checkpoint (no readable ${SFT_PROGRESS_FILE}); remove it`,
    );
  const mismatch = firstMismatch(file.identity, want);
  if (mismatch !== null)
    throw new UsageError(
      `--resume: ${dir} is the SFT checkpoint of a different warm start (${mismatch}); give the same ` +
        "settings, or remove it to train afresh",
    );
  return file.progress;
}

/** The steps an SFT checkpoint of `out` holds and the run's total, or null when there is none (for `--dry-run`). */
export function sftCheckpointSteps(out: string): { done: number; of: number } | null {
  const file = readJsonOrNull(join(sftCheckpointDir(out), SFT_PROGRESS_FILE)) as SftCheckpointFile | null;
  const done = file?.progress?.steps;
  const of = file?.identity?.settings?.steps;
  return typeof done === "number" && typeof of === "number" ? { done, of } : null;
}

/** Loads the checkpoint's weights and optimizer into the worker (opened on the same base). */
export async function restoreSftCheckpoint(
  learner: TorchLearner,
  out: string,
  progress: SftProgress,
): Promise<void> {
  const dir = sftCheckpointDir(out);
  await learner.restoreWeights(join(dir, SFT_LEARNER_DIR));
  if (learner.step !== progress.learnerStep)
    throw new Error(
      `${dir}: the worker restored optimizer step ${learner.step}, but the checkpoint records ${progress.learnerStep}`,
    );
}

export function removeSftCheckpoint(out: string): Promise<void> {
  return rm(sftCheckpointDir(out), { recursive: true, force: true });
}
