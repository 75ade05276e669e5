/**
 * Runs a module of the project's Python package (`python/mage_learner`) as a command-line tool,
 * with the interpreter the worker would use (`resolvePython`) and `python/` on PYTHONPATH; its
 * stderr passes through, its stdout is returned.
 *
 *   const { code, stdout } = await runPythonModule("mage_learner.import_gguf", ["--gguf", f, "--out", d]);
 */
import { spawn } from "node:child_process";
import { delimiter, join } from "node:path";
import { UsageError } from "../../core/errors.js";
import { PACKAGE_ROOT, resolvePython } from "./worker.js";

export interface PythonRun {
  code: number;
  stdout: string;
}

export async function runPythonModule(
  module: string,
  args: readonly string[],
  opts: { python?: string | null; env?: NodeJS.ProcessEnv } = {},
): Promise<PythonRun> {
  const { python, source } = resolvePython(opts.python);
  const env = opts.env ?? process.env;
  const pyPath = join(PACKAGE_ROOT, "python");
  const child = spawn(python, ["-m", module, ...args], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {
      ...env,
      PYTHONPATH: env.PYTHONPATH ? `${pyPath}${delimiter}${env.PYTHONPATH}` : pyPath,
      PYTHONUNBUFFERED: "1",
      HF_HUB_OFFLINE: "1",
    },
  });
  let stdout = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    stdout += d;
  });
  return new Promise((resolve, reject) => {
    child.on("error", (err) =>
      reject(
        new UsageError(
          `cannot start ${python} (from ${source}): ${err.message}; run \`node scripts/python-env.mjs\` ` +
            "to create the project's Python environment, or set MAGE_PYTHON",
        ),
      ),
    );
    child.on("close", (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), stdout }));
  });
}
