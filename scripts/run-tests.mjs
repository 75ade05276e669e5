#!/usr/bin/env node
// The README's test command. Creates or reuses the project-local Python environment (and, on Linux
// x86-64, the vLLM environment .venv-vllm that the real vLLM test uses; MAGE_SKIP_VLLM_ENV=1 skips
// making it, and that test then skips), runs every test/**/*.test.ts file with Node's built-in test
// runner through tsx, then type-checks the Python package with mypy and runs its pytest suite.
// Node 20's --test does not expand globs itself, so the file list is built here. Arguments filter:
// `npm test -- model python` runs the Node test files whose path contains "model" and, because
// "python" is named, the Python checks.
import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { ensurePythonEnv } from "./python-env.mjs";
import { ensureVllmEnv, vllmEnvUnsupported } from "./vllm-env.mjs";

function collect(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...collect(p));
    else if (name.endsWith(".test.ts")) out.push(p);
  }
  return out;
}

const filters = process.argv.slice(2);
let files = collect("test");
if (filters.length > 0) files = files.filter((f) => filters.some((x) => f.includes(x)));
const runPython = filters.length === 0 || filters.includes("python");
if (files.length === 0 && !runPython) {
  console.error("no test files matched");
  process.exit(1);
}

let python;
try {
  python = ensurePythonEnv();
} catch (err) {
  console.error(`python-env: ${err.message}`);
  process.exit(1);
}
// Tests (and the worker processes they start) use this interpreter.
const env = { ...process.env, MAGE_PYTHON: python };

// The vLLM environment (6.3 GB; 6-7 minutes the first time on two busy cores), for the test that
// runs the real vLLM server (test/train/torch-vllm-real.test.ts); only when that test is selected.
if (files.some((f) => f.includes("vllm-real"))) {
  const unsupported = vllmEnvUnsupported();
  if (process.env.MAGE_SKIP_VLLM_ENV === "1")
    console.error(
      "vllm-env: MAGE_SKIP_VLLM_ENV=1: not creating .venv-vllm; the real vLLM test skips unless it exists",
    );
  else if (unsupported) console.error(`vllm-env: skipped (${unsupported}); the real vLLM test skips`);
  else {
    try {
      env.MAGE_VLLM_PYTHON = ensureVllmEnv();
    } catch (err) {
      console.error(`vllm-env: ${err.message}`);
      process.exit(1);
    }
  }
}

let failed = false;
// Test files that start the real vLLM server run after the others, alone: vLLM's CPU engine binds
// one OpenMP thread to each core, and a step waits for all of them, so beside another test file's
// work on two cores its steps slow down many times over.
const alone = files.filter((f) => f.includes("vllm-real"));
for (const batch of [files.filter((f) => !alone.includes(f)), alone]) {
  if (batch.length === 0) continue;
  const result = spawnSync(
    process.execPath,
    ["--import", "tsx", "--test", "--test-concurrency=2", "--test-reporter=spec", ...batch],
    { stdio: "inherit", env },
  );
  failed ||= result.status !== 0;
}
if (runPython) {
  const opts = { stdio: "inherit", cwd: "python", env: { ...env, PYTHONDONTWRITEBYTECODE: "1" } };
  const mypy = spawnSync(python, ["-m", "mypy"], opts);
  failed ||= mypy.status !== 0;
  const pytest = spawnSync(python, ["-m", "pytest", "-p", "no:cacheprovider"], opts);
  failed ||= pytest.status !== 0;
}
process.exit(failed ? 1 : 0);
