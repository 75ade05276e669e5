import { spawnSync } from "node:child_process";

/**
 * The interpreter of the project's Python environment, from MAGE_PYTHON (`npm test` sets it), or
 * undefined when the tests run without it (`npm run test:one`): tests that need transformers skip then.
 */
export function magePython(): string | undefined {
  return process.env.MAGE_PYTHON || undefined;
}

/** Runs `script` with MAGE_PYTHON, `input` as JSON on stdin; returns the JSON it prints last on stdout. */
export function runPythonJson<T>(script: string, input: unknown, timeoutMs = 120_000): T {
  const python = magePython();
  if (!python) throw new Error("MAGE_PYTHON is not set (npm test sets it)");
  const r = spawnSync(python, ["-c", script], {
    input: JSON.stringify(input),
    encoding: "utf8",
    timeout: timeoutMs,
    maxBuffer: 256 * 1024 * 1024,
    env: {
      ...process.env,
      OMP_NUM_THREADS: "1",
      TRANSFORMERS_VERBOSITY: "error",
      HF_HUB_OFFLINE: "1",
      TOKENIZERS_PARALLELISM: "false",
    },
  });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`python exited with ${r.status}:\n${r.stderr.slice(-4000)}`);
  const lines = r.stdout.trim().split("\n");
  return JSON.parse(lines[lines.length - 1]) as T;
}
