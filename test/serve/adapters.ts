/**
 * The servers of the environment protocol as the probe suite starts them: `mage env-serve` in this
 * process, and the Python adapters (python/mage_envs) as child processes of the project's Python,
 * each with the same flags (`--api-key-env`, `--max-sessions`, `--session-ttl`).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startEnvServer } from "../../src/serve/env-server.js";
import { pythonPath, REPO_ROOT } from "../openspiel/python.js";
import type { CliServer } from "./probes.js";

export interface ServerOptions {
  apiKey?: string;
  maxSessions?: number;
  sessionTtlSeconds?: number;
}

export interface Served {
  url: string;
  close(): Promise<void>;
  /** Resident memory of the server's process in MB (child processes only). */
  rssMb?(): number;
}

/** `python -m MODULE --port 0 ARGS` from python/; resolves once it prints its URL. */
export function startPythonServer(
  module: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<CliServer & { proc: ChildProcess }> {
  const child = spawn(pythonPath(), ["-m", module, "--port", "0", ...args], {
    cwd: join(REPO_ROOT, "python"),
    env: { ...env, PYTHONDONTWRITEBYTECODE: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  );
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${module} did not start in 120 s:\n${err}`)), 120_000);
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1], child, proc: child, stderr: () => err, exited });
      }
    });
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`${module} exited with ${code} before listening:\n${err}`));
    });
  });
}

function flags(o: ServerOptions, keyVar: string): string[] {
  return [
    ...(o.apiKey !== undefined ? ["--api-key-env", keyVar] : []),
    ...(o.maxSessions !== undefined ? ["--max-sessions", String(o.maxSessions)] : []),
    ...(o.sessionTtlSeconds !== undefined ? ["--session-ttl", String(o.sessionTtlSeconds)] : []),
  ];
}

export async function startPythonAdapter(module: string, extra: string[], o: ServerOptions): Promise<Served> {
  const keyVar = "MAGE_PROBE_ADAPTER_KEY";
  const env = o.apiKey !== undefined ? { ...process.env, [keyVar]: o.apiKey } : process.env;
  const s = await startPythonServer(module, [...extra, ...flags(o, keyVar)], env);
  return {
    url: s.url,
    async close() {
      if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill("SIGTERM");
      await s.exited;
    },
    rssMb() {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${s.proc.pid}/status`, "utf8"));
      return m ? Number(m[1]) / 1024 : Number.NaN;
    },
  };
}

export async function startEnvServe(o: ServerOptions): Promise<Served> {
  const h = await startEnvServer({ ...o, opponentThreads: 2 });
  return { url: h.url, close: () => h.close() };
}
