import { execFileSync } from "node:child_process";
import { cpus, hostname, platform, release, totalmem } from "node:os";
import { SOURCE_COMMIT_ENV, SOURCE_DIRTY_ENV } from "../core/source-env.js";

/** What a run records about where it ran, so numbers can be traced to commit, backend and machine. */
export interface RunMeta {
  commit: string | null;
  dirty: boolean | null;
  node: string;
  platform: string;
  cpu: string;
  cores: number;
  memoryGiB: number;
  host: string;
  kernels: string;
  startedAt: string;
}

function git(args: string[], cwd: string): string | null {
  try {
    return execFileSync("git", args, { cwd, stdio: ["ignore", "pipe", "ignore"], encoding: "utf8" }).trim();
  } catch {
    return null;
  }
}

export { SOURCE_COMMIT_ENV, SOURCE_DIRTY_ENV } from "../core/source-env.js";

/** The source's commit and whether tracked code differs from it; results written under docs/results do not count. */
function sourceState(cwd: string): { commit: string | null; dirty: boolean | null } {
  const commit = process.env[SOURCE_COMMIT_ENV];
  const dirty = process.env[SOURCE_DIRTY_ENV];
  if (commit) return { commit, dirty: dirty === "1" ? true : dirty === "0" ? false : null };
  const status = git(
    ["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs/results"],
    cwd,
  );
  return { commit: git(["rev-parse", "HEAD"], cwd), dirty: status === null ? null : status.length > 0 };
}

export function collectRunMeta(kernels: string, now: Date = new Date(), cwd = process.cwd()): RunMeta {
  const cpu = cpus();
  return {
    ...sourceState(cwd),
    node: process.version,
    platform: `${platform()} ${release()}`,
    cpu: cpu[0]?.model ?? "unknown",
    cores: cpu.length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    host: hostname(),
    kernels,
    startedAt: now.toISOString(),
  };
}
