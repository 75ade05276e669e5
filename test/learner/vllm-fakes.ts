/**
 * Test helpers for the managed vLLM server: an executable that stands in for the vLLM
 * environment's interpreter (`model.torch.vllm.python`) — `-m vllm.entrypoints.openai.api_server`
 * starts `fake-vllm-server.ts`, anything else (the process guard) runs python3 — and checks that a
 * process is really gone.
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const FAKE_SERVER = resolve("test/learner/fake-vllm-server.ts");

export type FakeMode = "ok" | "die-at-start" | "never-ready" | "stubborn" | `die-after:${number}`;

export interface FakeVllmPython {
  /** The path to give as model.torch.vllm.python. */
  python: string;
  /** Written by the fake server once started. */
  pidsFile: string;
}

/** Writes the stand-in interpreter into `dir`. */
export function fakeVllmPython(dir: string, mode: FakeMode = "ok", name = "fake-python"): FakeVllmPython {
  const python = join(dir, name);
  const pidsFile = join(dir, `${name}.pids.json`);
  writeFileSync(
    python,
    [
      "#!/bin/sh",
      'if [ "$1" = "-m" ] && [ "$2" = "vllm.entrypoints.openai.api_server" ]; then',
      "  shift 2",
      `  FAKE_VLLM_MODE=${mode} FAKE_VLLM_PIDS='${pidsFile}' exec '${process.execPath}' --import tsx '${FAKE_SERVER}' "$@"`,
      "fi",
      'exec python3 "$@"',
      "",
    ].join("\n"),
  );
  chmodSync(python, 0o755);
  return { python, pidsFile };
}

export interface FakePids {
  server: number;
  engine: number;
  argv: string[];
  env: Record<string, string | null>;
}

export function readPids(file: string): FakePids {
  return JSON.parse(readFileSync(file, "utf8")) as FakePids;
}

/** Whether a process runs (a zombie, which only waits to be reaped, does not). */
export function running(pid: number): boolean {
  const stat = `/proc/${pid}/stat`;
  if (existsSync("/proc/self/stat")) {
    try {
      const s = readFileSync(stat, "utf8");
      const state = s.slice(s.lastIndexOf(")") + 2).split(" ")[0];
      return state !== "Z" && state !== "X";
    } catch {
      return false;
    }
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits up to `ms` for every pid to be gone; returns the ones still running. */
export async function survivors(pids: readonly number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = pids.filter(running);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
}
