import { execFileSync } from "node:child_process";
import { cpus, hostname, platform, release, totalmem } from "node:os";

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

function git(args: string[]): string | null {
  try {
    return execFileSync("git", args, { stdio: ["ignore", "pipe", "ignore"], encoding: "utf8" }).trim();
  } catch {
    return null;
  }
}

export function collectRunMeta(kernels: string, now: Date = new Date()): RunMeta {
  const status = git(["status", "--porcelain", "--untracked-files=no"]);
  const cpu = cpus();
  return {
    commit: git(["rev-parse", "HEAD"]),
    dirty: status === null ? null : status.length > 0,
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
