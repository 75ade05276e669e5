import { createHash } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { basename, dirname, join, relative, sep } from "node:path";
import { compareRuns, findSummaryFiles, type LoadedSummary, parseSummaryFile } from "../report/load.js";
import type { RunSummary } from "../train/summary.js";

/**
 * The runs the dashboard shows: every run summary under its folders (a run directory of `mage
 * train` holds summary.json, rewritten after every iteration; an experiments folder holds committed
 * summaries), re-found on every request from file times alone and re-read only when they change.
 */

/** Trial logs a run directory may hold, in the order the dashboard offers them. */
export const TRIAL_LOGS = [
  { key: "transcripts", file: "transcripts.jsonl", label: "training trials (sampled)" },
  { key: "eval", file: "eval-transcripts.jsonl", label: "final evaluation, with play" },
  { key: "eval-outcomes", file: "eval-trials.jsonl", label: "final evaluation, outcomes only" },
] as const;
export type TrialLogKey = (typeof TRIAL_LOGS)[number]["key"];

export function isTrialLogKey(s: string): s is TrialLogKey {
  return TRIAL_LOGS.some((l) => l.key === s);
}

/**
 * finished: the final evaluation is in; active: a file of the run changed recently; stopped:
 * neither (killed, interrupted or waiting for `--resume`).
 */
export type RunState = "finished" | "active" | "stopped";

export interface DashboardRun {
  /**
   * Stable, readable key: the run directory (or summary file) relative to the working directory,
   * or its absolute path when it lies outside.
   */
  id: string;
  summaryPath: string;
  /** The run directory when the summary is a run's summary.json; null for a committed summary file. */
  runDir: string | null;
  summary: RunSummary;
  state: RunState;
  /** Newest modification time (ms) of the summary and the run's logs. */
  lastWriteMs: number;
  /** Trial logs present in the run directory. */
  logs: TrialLogKey[];
}

/** Files whose writes show a run is alive: iterations rewrite the summary, the final evaluation appends trials. */
const LIVE_FILES = ["summary.json", "metrics.jsonl", "eval-trials.jsonl", "eval.jsonl", "train.log"];

/**
 * How long after its last write a run still counts as active: three iterations' wall time, at
 * least two minutes (a periodic evaluation writes nothing until it ends).
 */
export function activeWindowMs(summary: RunSummary): number {
  const recent = summary.history.slice(-5).map((h) => (h.rollout_ms ?? 0) + (h.update_ms ?? 0));
  const perIterationMs = Math.max(0, ...recent.filter(Number.isFinite));
  return Math.max(120_000, 3 * perIterationMs);
}

export function runState(summary: RunSummary, lastWriteMs: number, nowMs: number): RunState {
  if (summary.finalEval) return "finished";
  return nowMs - lastWriteMs <= activeWindowMs(summary) ? "active" : "stopped";
}

function mtimeMs(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function posix(p: string): string {
  return p.split(sep).join("/");
}

/** What a page's freshness depends on: which runs there are, when each last wrote, and their states. */
export function stampOf(runs: readonly DashboardRun[]): string {
  const text = runs.map((r) => `${r.id}@${Math.round(r.lastWriteMs)}:${r.state}`).join("|");
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}

interface CacheEntry {
  mtimeMs: number;
  size: number;
  summary: RunSummary | null;
}

export class RunIndex {
  private readonly cache = new Map<string, CacheEntry>();

  constructor(
    readonly roots: readonly string[],
    private readonly now: () => number = Date.now,
    private readonly cwd: string = process.cwd(),
  ) {}

  /** Every run under the roots, sorted by game, name and seed. */
  scan(): DashboardRun[] {
    const loaded: { file: string; summary: RunSummary }[] = [];
    const seen = new Set<string>();
    for (const file of findSummaryFiles(this.roots)) {
      seen.add(file);
      const summary = this.read(file);
      if (summary) loaded.push({ file, summary });
    }
    for (const key of this.cache.keys()) if (!seen.has(key)) this.cache.delete(key);
    const sorted: LoadedSummary[] = loaded.map((l) => ({ path: l.file, summary: l.summary }));
    sorted.sort(compareRuns);
    const nowMs = this.now();
    return sorted.map(({ path, summary }) => {
      const runDir = basename(path) === "summary.json" ? dirname(path) : null;
      const lastWriteMs = runDir
        ? Math.max(...LIVE_FILES.map((f) => mtimeMs(join(runDir, f))))
        : mtimeMs(path);
      const rel = posix(relative(this.cwd, runDir ?? path)) || ".";
      // Outside the working directory the absolute path reads better than a climb of "../".
      const id = rel.startsWith("../") ? posix(runDir ?? path) : rel;
      const logs = runDir ? TRIAL_LOGS.filter((l) => existsSync(join(runDir, l.file))).map((l) => l.key) : [];
      return {
        id,
        summaryPath: path,
        runDir,
        summary,
        state: runState(summary, lastWriteMs, nowMs),
        lastWriteMs,
        logs,
      };
    });
  }

  find(id: string): DashboardRun | undefined {
    return this.scan().find((r) => r.id === id);
  }

  /**
   * A string that changes whenever a shown run changes (or one appears or goes): pages poll it and
   * reload. With ids, only those runs count.
   */
  stamp(ids?: readonly string[]): string {
    return stampOf(this.scan().filter((r) => ids === undefined || ids.includes(r.id)));
  }

  private read(file: string): RunSummary | null {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(file);
    } catch {
      return null;
    }
    const hit = this.cache.get(file);
    if (hit && hit.mtimeMs === st.mtimeMs && hit.size === st.size) return hit.summary;
    let summary: RunSummary | null = null;
    try {
      const parsed = parseSummaryFile(file);
      summary = parsed.ok ? parsed.summary : null;
    } catch {
      summary = null; // unreadable right now (removed mid-scan): shown again once it can be read
    }
    this.cache.set(file, { mtimeMs: st.mtimeMs, size: st.size, summary });
    return summary;
  }
}
