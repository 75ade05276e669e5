import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, it } from "node:test";
import { mageCommit } from "../../src/model/checkpoint.js";
import { collectRunMeta, cpuIdOf, SOURCE_COMMIT_ENV, SOURCE_DIRTY_ENV } from "../../src/train/run-meta.js";

function repoWithOneCommit(): { dir: string; commit: string } {
  const dir = mkdtempSync(join(tmpdir(), "mage-meta-"));
  const git = (...args: string[]) =>
    execFileSync("git", args, { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  git("init", "-q");
  mkdirSync(join(dir, "src"));
  mkdirSync(join(dir, "docs", "results"), { recursive: true });
  writeFileSync(join(dir, "src", "a.ts"), "export const a = 1;\n");
  writeFileSync(join(dir, "docs", "results", "run.json"), "{}\n");
  git("add", "-A");
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init");
  return { dir, commit: git("rev-parse", "HEAD") };
}

describe("run meta", () => {
  afterEach(() => {
    delete process.env[SOURCE_COMMIT_ENV];
    delete process.env[SOURCE_DIRTY_ENV];
  });

  it("counts changed code as dirty but not results the grid itself writes", () => {
    const { dir, commit } = repoWithOneCommit();
    const clean = collectRunMeta("wasm", new Date(0), dir);
    assert.equal(clean.commit, commit);
    assert.equal(clean.dirty, false);
    writeFileSync(join(dir, "docs", "results", "run.json"), '{"updated": true}\n');
    assert.equal(collectRunMeta("wasm", new Date(0), dir).dirty, false);
    writeFileSync(join(dir, "src", "a.ts"), "export const a = 2;\n");
    assert.equal(collectRunMeta("wasm", new Date(0), dir).dirty, true);
  });

  it("takes the source state a grid passes down over the checkout's", () => {
    const { dir } = repoWithOneCommit();
    process.env[SOURCE_COMMIT_ENV] = "0123abc";
    process.env[SOURCE_DIRTY_ENV] = "1";
    const meta = collectRunMeta("wasm", new Date(0), dir);
    assert.equal(meta.commit, "0123abc");
    assert.equal(meta.dirty, true);
    assert.equal(mageCommit(), "0123abc", "checkpoints name the same commit as the summaries");
  });

  it("names the CPU's family, model and widest vector extension from /proc/cpuinfo", () => {
    const proc = (family: string, model: string, flags: string) =>
      `processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: ${family}\nmodel\t\t: ${model}\n` +
      `model name\t: AMD EPYC\nflags\t\t: ${flags}\n`;
    const milan = proc("25", "1", "fpu sse2 avx avx2 fma");
    const genoa = proc("25", "17", "fpu sse2 avx avx2 avx512f avx512bw");
    assert.equal(cpuIdOf(`${milan}\n${genoa}`), "family 25 model 1, avx2", "the first processor's");
    assert.equal(cpuIdOf(genoa), "family 25 model 17, avx512");
    assert.equal(cpuIdOf(proc("6", "85", "fpu sse2")), "family 6 model 85, sse");
    assert.equal(cpuIdOf(""), null);
  });
});
