#!/usr/bin/env node
// `npm run build:native`: builds the optional OpenBLAS addon native/build/Release/mage_blas.node.
// Needs a C compiler, make, python3 and OpenBLAS (Debian: `apt-get install -y libopenblas-dev`).
// Works offline: node-gyp is the copy bundled with npm, and the Node headers are taken from the
// running Node's install prefix when it ships them (include/node/node_api.h), so nothing is downloaded.
// Exits non-zero on failure; the project then falls back to the wasm kernels.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const nativeDir = join(root, "native");

function findNodeGyp() {
  const candidates = [];
  // Under `npm run`, npm_execpath is npm's own CLI script; node-gyp ships next to it.
  if (process.env.npm_execpath) {
    candidates.push(
      join(dirname(process.env.npm_execpath), "..", "node_modules", "node-gyp", "bin", "node-gyp.js"),
    );
  }
  const prefix = resolve(dirname(process.execPath), "..");
  candidates.push(
    join(prefix, "lib", "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js"),
  );
  candidates.push(join(root, "node_modules", "node-gyp", "bin", "node-gyp.js"));
  return candidates.find((p) => existsSync(p));
}

const gyp = findNodeGyp();
if (!gyp) {
  console.error("build-native: node-gyp not found (it normally ships with npm); native kernels unavailable");
  process.exit(1);
}
const args = [gyp, "rebuild", "--directory", nativeDir];
const prefix = resolve(dirname(process.execPath), "..");
if (!process.env.npm_config_nodedir && existsSync(join(prefix, "include", "node", "node_api.h"))) {
  args.push(`--nodedir=${prefix}`);
}
console.log(`build-native: node ${args.map((a) => JSON.stringify(a)).join(" ")}`);
const r = spawnSync(process.execPath, args, { stdio: "inherit" });
if (r.status !== 0) {
  console.error(
    "build-native: build failed. Install a compiler and OpenBLAS (Debian: apt-get install -y build-essential libopenblas-dev) and retry.",
  );
  process.exit(r.status ?? 1);
}
const out = join(nativeDir, "build", "Release", "mage_blas.node");
if (!existsSync(out)) {
  console.error(`build-native: node-gyp finished but ${out} is missing`);
  process.exit(1);
}
console.log(`build-native: built ${out}`);
