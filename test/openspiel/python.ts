import { spawnSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (this file is test/openspiel/python.ts). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

let cached: string | undefined;

/**
 * The project's Python interpreter: `MAGE_PYTHON` (set by `npm test`), else the one
 * `scripts/python-env.mjs` creates or reuses (so `npm run test:one` works on its own).
 */
export function pythonPath(): string {
  if (process.env.MAGE_PYTHON) return process.env.MAGE_PYTHON;
  if (cached) return cached;
  const r = spawnSync(process.execPath, [join(REPO_ROOT, "scripts", "python-env.mjs")], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) throw new Error(`scripts/python-env.mjs exited with ${r.status}`);
  cached = r.stdout.trim();
  return cached;
}

/**
 * Runs `python -m MODULE ARGS` from python/ with `input` on stdin and parses the JSON object it
 * prints. Throws with the process's stderr when it fails.
 */
export function runPythonJson<T>(module: string, args: string[], input: string): T {
  const r = spawnSync(pythonPath(), ["-m", module, ...args], {
    cwd: join(REPO_ROOT, "python"),
    input,
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
  });
  if (r.error) throw r.error;
  if (r.status !== 0)
    throw new Error(`python -m ${module} ${args.join(" ")} exited with ${r.status}:\n${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}
