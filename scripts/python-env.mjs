#!/usr/bin/env node
// Creates or reuses the project-local Python environment (the PyTorch learner worker and the
// environment adapters need it). The environment is reused while its stamp matches the pinned
// requirements, so PyTorch's large wheels are installed once. Prints the interpreter's path.
//
//   node scripts/python-env.mjs          # ensure, then print the python path
//   MAGE_VENV=/some/dir node scripts/...  # another location (e.g. shared by several worktrees)
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const venv = process.env.MAGE_VENV ? resolve(process.env.MAGE_VENV) : join(root, ".venv");
const python = join(venv, "bin", "python");
const stampFile = join(venv, ".mage-requirements");
const files = ["python/requirements.txt", "python/constraints.txt", "python/requirements-nodeps.txt"].map(
  (f) => join(root, f),
);

function run(cmd, args) {
  const r = spawnSync(cmd, args, { stdio: ["ignore", process.stderr, process.stderr] });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited with ${r.status}`);
}

/**
 * Refuses to start an install that cannot fit: pip fails half-way with "No space left on device"
 * and leaves a broken environment behind. `neededGiB` is the installed size plus pip's unpacking room.
 */
export function checkFreeDisk(dir, neededGiB, what) {
  let probe = dir;
  while (!existsSync(probe)) probe = dirname(probe);
  const { bavail, bsize } = statfsSync(probe);
  const freeGiB = (Number(bavail) * Number(bsize)) / 2 ** 30;
  if (freeGiB < neededGiB)
    throw new Error(
      `${what} needs about ${neededGiB} GiB free under ${probe}; ${freeGiB.toFixed(1)} GiB is free. ` +
        "Free some space, or set MAGE_VENV to a folder on a larger disk.",
    );
}

/** A Python ≥ 3.11 to create a virtual environment with (also used by scripts/vllm-env.mjs). */
export function basePython() {
  for (const cand of [process.env.MAGE_BASE_PYTHON, "python3.11", "python3"].filter(Boolean)) {
    const r = spawnSync(cand, ["-c", "import sys; print(sys.version_info[:2] >= (3, 11))"], {
      encoding: "utf8",
    });
    if (r.status === 0 && r.stdout.trim() === "True") return cand;
  }
  throw new Error("no Python ≥ 3.11 found (python3.11, python3); install one or set MAGE_BASE_PYTHON");
}

export function ensurePythonEnv() {
  const hash = createHash("sha256");
  for (const f of files) hash.update(readFileSync(f));
  const stamp = hash.digest("hex");
  if (existsSync(python) && existsSync(stampFile) && readFileSync(stampFile, "utf8").trim() === stamp)
    return python;
  const t0 = Date.now();
  console.error(`python-env: installing the pinned Python packages into ${venv} (once; PyTorch is large)`);
  // 6.4 GiB installed (PyTorch's CUDA wheels from PyPI) plus the largest wheels while they unpack.
  checkFreeDisk(venv, 9, "the Python environment");
  if (existsSync(venv) && !existsSync(python)) rmSync(venv, { recursive: true, force: true });
  if (!existsSync(python)) run(basePython(), ["-m", "venv", venv]);
  rmSync(stampFile, { force: true });
  run(python, [
    "-m",
    "pip",
    "install",
    "--quiet",
    "--disable-pip-version-check",
    // pip's cache would keep a second copy of PyTorch's wheels (about 4 GiB) that is never reused:
    // the environment itself is reused while its stamp matches.
    "--no-cache-dir",
    "-r",
    files[0],
    "-c",
    files[1],
  ]);
  // Packages whose declared dependencies are not needed (requirements-nodeps.txt says why).
  run(python, [
    "-m",
    "pip",
    "install",
    "--quiet",
    "--disable-pip-version-check",
    "--no-cache-dir",
    "--no-deps",
    "-r",
    files[2],
    "-c",
    files[1],
  ]);
  writeFileSync(stampFile, `${stamp}\n`);
  console.error(`python-env: ready in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  return python;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    console.log(ensurePythonEnv());
  } catch (err) {
    console.error(`python-env: ${err.message}`);
    process.exit(1);
  }
}
