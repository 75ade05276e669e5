/**
 * `mage pretrain --backend torch --resume`: a warm start killed during its checks keeps its
 * exported model (the report is first written right after the export, `evaluation: null`), so a
 * rerun with `--resume` samples the checks from that directory instead of training again. The
 * checks then read the merged float32 weights, the model `mage train` starts from, rather than
 * the base plus its LoRA in the worker's memory: the same function up to rounding.
 */
import { join } from "node:path";
import { UsageError } from "../../core/errors.js";
import { readJsonOrNull } from "../../core/json-file.js";
import { REPORT_FILE } from "./run.js";
import type { BaseModelRecord, TorchPretrainReport, TorchPretrainSettings } from "./torch-run.js";

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

/** The first field in which the directory's warm start differs from the one asked for, or null. */
function firstMismatch(report: TorchPretrainReport, want: TorchResumeInputs): string | null {
  if (report.backend !== "torch") return `backend ${shown(report.backend)}, not "torch"`;
  const top: [string, unknown, unknown][] = [
    ["game", report.game, want.game],
    ["seed", report.seed, want.seed],
    ["taskKnobs", report.taskKnobs, want.taskKnobs],
    ["base sha256", report.base?.sha256, want.base.sha256],
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
