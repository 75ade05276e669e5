import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { UsageError } from "../core/errors.js";
import type { AttemptSummary } from "../rollout/types.js";
import type { TrialMemory } from "../tasks/memory.js";

/**
 * Trial logs as `mage train` (transcripts.jsonl: sampled training trials with their memory;
 * eval-trials.jsonl: final-evaluation outcomes) and `mage eval --out` (every trial with its memory)
 * write them: one JSON object per line.
 */
export interface TrialRecord {
  /** 1-based line in the file, to point at a record. */
  line: number;
  iteration?: number;
  trialId: number;
  opponent: string | null;
  seat: string | null;
  taskSeed?: number;
  attempts: AttemptSummary[];
  aborted?: boolean;
  stopReason?: string;
  memory?: TrialMemory;
}

export interface TrialLog {
  file: string;
  records: TrialRecord[];
  /** Lines that are not trial records (a run killed mid-write leaves a partial last line). */
  skipped: number[];
}

/**
 * The trial log a path names: a JSONL file, or a run directory's transcripts.jsonl (with
 * `evaluation`, its eval-transcripts.jsonl: the final evaluation's first trials of each cell).
 */
export function resolveTrialLog(path: string, evaluation = false): string {
  if (!existsSync(path)) throw new UsageError(`no such file or run directory: ${path}`);
  if (!statSync(path).isDirectory()) return path;
  const name = evaluation ? "eval-transcripts.jsonl" : "transcripts.jsonl";
  const file = join(path, name);
  if (existsSync(file)) return file;
  throw new UsageError(
    evaluation
      ? `${path} holds no eval-transcripts.jsonl: its final evaluation has not run, or eval.transcriptsPerCell is 0`
      : `${path} holds no transcripts.jsonl; give a run directory of \`mage train\` or a JSONL file of \`mage eval --out\``,
  );
}

function isAttempt(x: unknown): x is AttemptSummary {
  const a = x as AttemptSummary;
  return typeof a === "object" && a !== null && typeof a.won === "boolean" && typeof a.score === "number";
}

function asRecord(value: unknown, line: number): TrialRecord | null {
  if (typeof value !== "object" || value === null) return null;
  const v = value as Record<string, unknown>;
  if (typeof v.trialId !== "number" || !Array.isArray(v.attempts) || !v.attempts.every(isAttempt))
    return null;
  const memory = v.memory as TrialMemory | undefined;
  const memoryOk = memory === undefined || (typeof memory === "object" && Array.isArray(memory?.attempts));
  if (!memoryOk) return null;
  return {
    line,
    ...(typeof v.iteration === "number" ? { iteration: v.iteration } : {}),
    trialId: v.trialId,
    opponent: typeof v.opponent === "string" ? v.opponent : null,
    seat: typeof v.seat === "string" ? v.seat : null,
    ...(typeof v.taskSeed === "number" ? { taskSeed: v.taskSeed } : {}),
    attempts: v.attempts as AttemptSummary[],
    ...(v.aborted === true ? { aborted: true } : {}),
    ...(typeof v.stopReason === "string" ? { stopReason: v.stopReason } : {}),
    ...(memory ? { memory } : {}),
  };
}

export function readTrialLog(file: string): TrialLog {
  const records: TrialRecord[] = [];
  const skipped: number[] = [];
  const lines = readFileSync(file, "utf8").split("\n");
  lines.forEach((text, i) => {
    if (text.trim() === "") return;
    let record: TrialRecord | null = null;
    try {
      record = asRecord(JSON.parse(text), i + 1);
    } catch {
      record = null;
    }
    if (record) records.push(record);
    else skipped.push(i + 1);
  });
  return { file, records, skipped };
}
