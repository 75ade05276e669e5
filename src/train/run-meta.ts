import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus, hostname, platform, release, totalmem } from "node:os";
import { SOURCE_COMMIT_ENV, SOURCE_DIRTY_ENV } from "../core/source-env.js";

/** What a run records about where it ran, so numbers can be traced to commit, backend and machine. */
export interface RunMeta {
  commit: string | null;
  dirty: boolean | null;
  node: string;
  platform: string;
  cpu: string;
  /**
   * The CPU's family, model and widest vector extension (Linux; null elsewhere): two machines that
   * both call themselves "AMD EPYC" may round a PyTorch warm start differently (AVX2 vs AVX-512).
   */
  cpuId?: string | null;
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

/** "family 25 model 1, avx2" from the text of /proc/cpuinfo (its first processor); null when absent. */
export function cpuIdOf(cpuinfo: string): string | null {
  const first = cpuinfo.split(/\n\s*\n/)[0] ?? "";
  const field = (name: string) => first.match(new RegExp(`^${name}\\s*:\\s*(.*)$`, "m"))?.[1]?.trim() ?? null;
  const family = field("cpu family");
  const model = field("model");
  const flags = new Set((field("flags") ?? "").split(/\s+/));
  if (family === null && model === null && flags.size <= 1) return null;
  const isa = flags.has("avx512f") ? "avx512" : flags.has("avx2") ? "avx2" : flags.has("avx") ? "avx" : "sse";
  return `family ${family ?? "?"} model ${model ?? "?"}, ${isa}`;
}

function readCpuId(): string | null {
  try {
    return cpuIdOf(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    return null;
  }
}

export function collectRunMeta(kernels: string, now: Date = new Date(), cwd = process.cwd()): RunMeta {
  const cpu = cpus();
  return {
    ...sourceState(cwd),
    node: process.version,
    platform: `${platform()} ${release()}`,
    cpu: cpu[0]?.model ?? "unknown",
    cpuId: readCpuId(),
    cores: cpu.length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    host: hostname(),
    kernels,
    startedAt: now.toISOString(),
  };
}
