#!/usr/bin/env node
// The npm registry reachable here serves only the Linux builds of packages that ship per-platform
// binaries as optional dependencies (Biome, node-llama-cpp), so `npm install` cannot lock the other
// platforms' packages and a strict `npm ci` then refuses the lock ("Missing: … from lock file").
// This drops, from package-lock.json, the optional edges whose package the lock does not contain.
// Run it after `npm install` changes the lock: `node scripts/prune-lock.mjs`.
import { readFileSync, writeFileSync } from "node:fs";

const path = process.argv[2] ?? "package-lock.json";
const lock = JSON.parse(readFileSync(path, "utf8"));
let dropped = 0;
for (const [key, entry] of Object.entries(lock.packages)) {
  if (!entry.optionalDependencies) continue;
  const base = key === "" ? "" : `${key}/`;
  for (const name of Object.keys(entry.optionalDependencies)) {
    const nested = `${base}node_modules/${name}`;
    if (lock.packages[nested] || lock.packages[`node_modules/${name}`]) continue;
    delete entry.optionalDependencies[name];
    dropped++;
  }
  if (Object.keys(entry.optionalDependencies).length === 0) delete entry.optionalDependencies;
}
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`${path}: dropped ${dropped} optional dependencies that the registry does not serve`);
