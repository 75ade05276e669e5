import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { writeFileAtomic } from "../../src/core/atomic-write.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  CHECKPOINT_FILES,
  isCheckpointDir,
  latestRunCheckpoint,
  listCheckpoints,
  loadCheckpoint,
  RUN_CHECKPOINTS_DIR,
  resolveCheckpointDir,
  saveCheckpoint,
} from "../../src/model/checkpoint.js";
import { type ModelConfig, paramSpecs, presetConfig } from "../../src/model/config.js";
import {
  parseSafetensors,
  readSafetensors,
  serializeSafetensors,
  writeSafetensors,
} from "../../src/model/safetensors.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));

function makeParams(config: ModelConfig, version: number): Map<string, Float32Array> {
  const params = new Map<string, Float32Array>();
  paramSpecs(config).forEach((spec, k) => {
    const n = spec.shape.reduce((a, b) => a * b, 1);
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = version * 1000 + k + ((i * 2654435761) % 1000003) / 1000003;
    params.set(spec.name, a);
  });
  return params;
}

function sameParams(a: Map<string, Float32Array>, b: Map<string, Float32Array>): boolean {
  if (a.size !== b.size) return false;
  for (const [name, x] of a) {
    const y = b.get(name);
    if (!y || y.length !== x.length) return false;
    if (
      !Buffer.from(x.buffer, x.byteOffset, x.byteLength).equals(
        Buffer.from(y.buffer, y.byteOffset, y.byteLength),
      )
    )
      return false;
  }
  return true;
}

let root: string;
let tok: Tokenizer;

before(async () => {
  root = await mkdtemp(join(tmpdir(), "mage-ckpt-"));
  tok = trainTokenizer(
    Array.from({ length: 200 }, (_, i) => `Board ${i}: X . O | move ${i % 9} <answer>${i}</answer>`),
    { vocabSize: 400 },
  );
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("safetensors", () => {
  it("round-trips F32, I32 and U8 tensors with shapes and metadata exactly", async () => {
    const rng = Rng.seeded("st");
    const f = Float32Array.from({ length: 6 * 7 }, () => rng.normal());
    f[0] = Number.NaN;
    f[1] = -0;
    f[2] = Number.POSITIVE_INFINITY;
    const i32 = Int32Array.from({ length: 5 }, () => rng.nextU32() | 0);
    const u8 = Uint8Array.from({ length: 3 }, () => rng.int(256));
    const scalar = Float32Array.of(3.5);
    const empty = new Float32Array(0);
    const tensors = {
      "w.weight": { shape: [6, 7], data: f },
      ids: i32,
      bytes: { shape: [1, 3], data: u8 },
      scalar: { shape: [], data: scalar },
      empty: { shape: [0, 4], data: empty },
    };
    const path = join(root, "a.safetensors");
    await writeSafetensors(path, tensors, { format: "pt", note: "ünïcode" });
    const buf = await readFile(path);
    const n = Number(buf.readBigUInt64LE(0));
    assert.equal((8 + n) % 8, 0, "data section is 8-byte aligned");
    assert.ok(buf.equals(serializeSafetensors(tensors, { format: "pt", note: "ünïcode" })));
    const back = await readSafetensors(path);
    assert.deepEqual(back.metadata, { format: "pt", note: "ünïcode" });
    assert.deepEqual([...back.tensors.keys()], ["w.weight", "ids", "bytes", "scalar", "empty"]);
    const w = back.tensors.get("w.weight")!;
    assert.equal(w.dtype, "F32");
    assert.deepEqual(w.shape, [6, 7]);
    assert.ok(Buffer.from(w.data.buffer).equals(Buffer.from(f.buffer)));
    assert.deepEqual(back.tensors.get("ids"), { dtype: "I32", shape: [5], data: i32 });
    assert.deepEqual(back.tensors.get("bytes"), { dtype: "U8", shape: [1, 3], data: u8 });
    assert.deepEqual(back.tensors.get("scalar")!.shape, []);
    assert.equal(back.tensors.get("scalar")!.data[0], 3.5);
    assert.equal(back.tensors.get("empty")!.data.length, 0);
  });

  it("reads a file built by hand from the format description", () => {
    const header = JSON.stringify({
      __metadata__: { k: "v" },
      b: { dtype: "I32", shape: [1], data_offsets: [8, 12] },
      a: { dtype: "F32", shape: [2], data_offsets: [0, 8] },
    });
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const data = Buffer.alloc(12);
    data.writeFloatLE(1.5, 0);
    data.writeFloatLE(-2, 4);
    data.writeInt32LE(-7, 8);
    const file = parseSafetensors(Buffer.concat([len, Buffer.from(header), data]));
    assert.deepEqual([...file.tensors.get("a")!.data], [1.5, -2]);
    assert.deepEqual([...file.tensors.get("b")!.data], [-7]);
    assert.deepEqual(file.metadata, { k: "v" });
  });

  it("rejects truncated files, bad offsets and shape mismatches", () => {
    const good = serializeSafetensors({ a: Float32Array.of(1, 2, 3), b: Float32Array.of(4) });
    assert.throws(() => parseSafetensors(good.subarray(0, good.length - 2)), /data_offsets|trailing|exceeds/);
    assert.throws(() => parseSafetensors(good.subarray(0, 5)), /shorter/);
    const header = JSON.stringify({
      a: { dtype: "F32", shape: [2], data_offsets: [0, 8] },
      b: { dtype: "F32", shape: [1], data_offsets: [4, 8] },
    });
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    assert.throws(
      () => parseSafetensors(Buffer.concat([len, Buffer.from(header), Buffer.alloc(8)])),
      /overlaps|gap/,
    );
    assert.throws(() => serializeSafetensors({ a: { shape: [2, 2], data: new Float32Array(3) } }), /shape/);
  });
});

describe("checkpoints", () => {
  it("round-trips weights, config, tokenizer, training state and meta", async () => {
    const config = presetConfig("tiny", { vocabSize: 512 });
    const params = makeParams(config, 1);
    const rng = Rng.seeded("train").derive("sampler");
    rng.nextU32();
    const m1 = Float32Array.from({ length: 100 }, (_, i) => i / 7);
    const steps = Int32Array.of(1, 2, 3);
    const dir = join(root, "runs", "step-000010");
    await saveCheckpoint(dir, {
      config,
      preset: "tiny",
      params,
      tokenizer: tok,
      trainingState: {
        tensors: { "adam.m.token_embd.weight": m1, steps: { shape: [3], data: steps } },
        json: { step: 10, schedule: { lr: 3e-4, warmup: 5 }, rng: rng.getState() },
      },
      meta: { backend: "cpu-js", kernel: "js", note: "unit test" },
    });
    const files = (await readdir(dir)).sort();
    assert.deepEqual(files, Object.values(CHECKPOINT_FILES).sort());

    const ck = await loadCheckpoint(dir);
    assert.deepEqual(ck.config, config);
    assert.equal(ck.preset, "tiny");
    assert.ok(sameParams(ck.params, params));
    assert.equal(ck.tokenizer.toJsonString(), tok.toJsonString());
    assert.deepEqual(ck.trainingState!.tensors.get("adam.m.token_embd.weight")!.data, m1);
    assert.deepEqual(ck.trainingState!.tensors.get("steps")!.data, steps);
    const json = ck.trainingState!.json as { step: number; rng: ReturnType<Rng["getState"]> };
    assert.equal(json.step, 10);
    const resumed = Rng.fromState(json.rng);
    assert.equal(resumed.nextU32(), rng.nextU32());
    assert.equal(ck.meta.backend, "cpu-js");
    assert.equal(ck.meta.kernel, "js");
    assert.equal(ck.meta.note, "unit test");
    assert.equal(ck.meta.nodeVersion, process.version);
    const pkg = JSON.parse(await readFile(join(repo, "package.json"), "utf8"));
    assert.equal(ck.meta.mageVersion, pkg.version);
    assert.ok(ck.meta.commit === null || /^[0-9a-f]{40}$/.test(ck.meta.commit));
    assert.ok(Math.abs(Date.parse(ck.meta.createdAt) - Date.now()) < 60_000);
    const tcfg = JSON.parse(await readFile(join(dir, CHECKPOINT_FILES.tokenizerConfig), "utf8"));
    assert.equal(typeof tcfg.chat_template, "string");

    // without training state
    const dir2 = join(root, "runs", "final");
    await saveCheckpoint(dir2, { config, params, tokenizer: tok });
    const ck2 = await loadCheckpoint(dir2);
    assert.equal(ck2.trainingState, null);
    assert.equal(ck2.preset, null);
    assert.deepEqual(await listCheckpoints(join(root, "runs")), ["final", "step-000010"]);
  });

  it("replaces an existing checkpoint and leaves no temporary directories", async () => {
    const config = presetConfig("tiny", { vocabSize: 512 });
    const dir = join(root, "replace", "ckpt");
    await saveCheckpoint(dir, { config, params: makeParams(config, 1), tokenizer: tok });
    await saveCheckpoint(dir, { config, params: makeParams(config, 2), tokenizer: tok });
    assert.ok(sameParams((await loadCheckpoint(dir)).params, makeParams(config, 2)));
    assert.deepEqual(await readdir(join(root, "replace")), ["ckpt"]);
  });

  it("reads a training run's directory as its newest complete checkpoint", async () => {
    const config = presetConfig("tiny", { vocabSize: 512 });
    const run = join(root, "a-run");
    for (const [iteration, version] of [
      [10, 1],
      [20, 2],
      [30, 3],
    ]) {
      await saveCheckpoint(join(run, RUN_CHECKPOINTS_DIR, `iter-0000${iteration}`), {
        config,
        params: makeParams(config, version),
        tokenizer: tok,
      });
    }
    // the newest one lost a file: it is passed over, not loaded half
    await rm(join(run, RUN_CHECKPOINTS_DIR, "iter-000030", CHECKPOINT_FILES.meta));
    assert.equal(await resolveCheckpointDir(run), join(run, RUN_CHECKPOINTS_DIR, "iter-000020"));
    assert.equal(await latestRunCheckpoint(run), join(run, RUN_CHECKPOINTS_DIR, "iter-000020"));
    assert.ok(sameParams((await loadCheckpoint(run)).params, makeParams(config, 2)));
    // a checkpoint directory names itself
    const own = join(run, RUN_CHECKPOINTS_DIR, "iter-000010");
    assert.equal(await resolveCheckpointDir(own), own);
    // neither: a usage error that says what a checkpoint needs
    await mkdir(join(root, "empty-run", RUN_CHECKPOINTS_DIR), { recursive: true });
    assert.equal(await latestRunCheckpoint(join(root, "empty-run")), null);
    await assert.rejects(
      resolveCheckpointDir(join(root, "empty-run")),
      (e: unknown) =>
        e instanceof UsageError && /needs model\.safetensors.*nor a training run/.test(e.message),
    );
  });

  it("validates what it is given and what it loads", async () => {
    const config = presetConfig("tiny", { vocabSize: 512 });
    const params = makeParams(config, 1);
    const dir = join(root, "bad", "x");
    const missing = new Map(params);
    missing.delete("blk.1.ffn_down.weight");
    await assert.rejects(
      saveCheckpoint(dir, { config, params: missing, tokenizer: tok }),
      /blk\.1\.ffn_down\.weight/,
    );
    const wrong = new Map(params);
    wrong.set("output_norm.weight", new Float32Array(3));
    await assert.rejects(saveCheckpoint(dir, { config, params: wrong, tokenizer: tok }), /output_norm/);
    const small = presetConfig("tiny", { vocabSize: tok.vocabSize - 1 });
    await assert.rejects(
      saveCheckpoint(dir, { config: small, params: makeParams(small, 1), tokenizer: tok }),
      new RegExp(`tokenizer has ${tok.vocabSize} tokens`),
    );
    await assert.rejects(loadCheckpoint(join(root, "bad", "nothing-here")), /not a complete checkpoint/);
    // a directory missing one of its files is not a checkpoint
    await saveCheckpoint(dir, { config, params, tokenizer: tok });
    await rm(join(dir, CHECKPOINT_FILES.meta));
    assert.equal(await isCheckpointDir(dir), false);
    await assert.rejects(loadCheckpoint(dir), /not a complete checkpoint/);
    // weights that do not fit the config are refused
    await saveCheckpoint(dir, { config, params, tokenizer: tok });
    const cfg = JSON.parse(await readFile(join(dir, CHECKPOINT_FILES.config), "utf8"));
    cfg.model.dFf = 512;
    await writeFile(join(dir, CHECKPOINT_FILES.config), JSON.stringify(cfg));
    await assert.rejects(loadCheckpoint(dir), /ffn_gate/);
  });

  it("writes single files atomically", async () => {
    const p = join(root, "atomic", "f.txt");
    await mkdir(join(root, "atomic"));
    await writeFileAtomic(p, "one");
    await writeFileAtomic(p, Buffer.from("two"));
    assert.equal(await readFile(p, "utf8"), "two");
    assert.deepEqual(await readdir(join(root, "atomic")), ["f.txt"]);
  });
});

// ---- kill -9 in the middle of a save -------------------------------------------------------

const CHILD = `
import { saveCheckpoint } from ${JSON.stringify(pathToFileURL(join(repo, "src/model/checkpoint.ts")).href)};
import { presetConfig, paramSpecs } from ${JSON.stringify(pathToFileURL(join(repo, "src/model/config.ts")).href)};
import { Tokenizer } from ${JSON.stringify(pathToFileURL(join(repo, "src/model/tokenizer.ts")).href)};
import { readFileSync } from "node:fs";
const [dir, version, tokPath] = process.argv.slice(2);
const v = Number(version);
const config = presetConfig("small", { vocabSize: 512 });
const params = new Map();
paramSpecs(config).forEach((spec, k) => {
  const n = spec.shape.reduce((a, b) => a * b, 1);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = v * 1000 + k + ((i * 2654435761) % 1000003) / 1000003;
  params.set(spec.name, a);
});
const moments = {};
for (const [name, a] of params) { moments["m." + name] = a; moments["v." + name] = a; }
const tokenizer = Tokenizer.fromJsonString(readFileSync(tokPath, "utf8"));
process.stdout.write("ready\\n");
const t0 = performance.now();
await saveCheckpoint(dir, { config, preset: "small", params, tokenizer,
  trainingState: { tensors: moments, json: { step: v } }, meta: { backend: "test" } });
process.stdout.write("done " + (performance.now() - t0).toFixed(1) + "\\n");
`;

interface ChildRun {
  child: ChildProcess;
  ready: Promise<void>;
  exit: Promise<number | null>;
  output: () => string;
}

function runChild(script: string, dir: string, version: number, tokPath: string): ChildRun {
  const child = spawn(process.execPath, ["--import", "tsx", script, dir, String(version), tokPath], {
    cwd: repo,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  let onReady: () => void = () => {};
  const ready = new Promise<void>((res) => {
    onReady = res;
  });
  child.stdout!.on("data", (d) => {
    out += d;
    if (out.includes("ready")) onReady();
  });
  child.stderr!.on("data", (d) => {
    err += d;
  });
  const exit = new Promise<number | null>((res) => child.on("exit", (code) => res(code)));
  return { child, ready, exit, output: () => out + err };
}

describe("checkpoint saving killed midway", () => {
  it("always leaves the previous (or the completed new) checkpoint intact and loadable", async (t) => {
    const base = join(root, "kill");
    await mkdir(base);
    const script = join(base, "child.mjs");
    await writeFile(script, CHILD);
    const tokPath = join(base, "tok.json");
    await tok.save(tokPath);
    const target = join(base, "ckpt");
    const config = presetConfig("small", { vocabSize: 512 });

    // A complete first save, timed.
    const first = runChild(script, target, 1, tokPath);
    assert.equal(await first.exit, 0, first.output());
    const took = Number(/done ([\d.]+)/.exec(first.output())![1]);
    assert.ok(took > 0);
    let current = 1;
    let killedMidway = 0;
    let completed = 0;

    const fractions = [0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.2];
    for (const [i, f] of fractions.entries()) {
      const version = 10 + i;
      const run = runChild(script, target, version, tokPath);
      await run.ready;
      await new Promise((r) => setTimeout(r, f * took));
      run.child.kill("SIGKILL");
      await run.exit;
      const leftovers = (await readdir(base)).filter((n) => n.startsWith(".ckpt."));
      if (leftovers.length > 0) killedMidway++;

      assert.deepEqual(
        await listCheckpoints(base),
        ["ckpt"],
        `round ${i}: only the real checkpoint is listed`,
      );
      const ck = await loadCheckpoint(target);
      const isPrev = sameParams(ck.params, makeParams(config, current));
      const isNew = sameParams(ck.params, makeParams(config, version));
      assert.ok(
        isPrev || isNew,
        `round ${i} (kill at ${(f * took).toFixed(0)} ms): weights are neither old nor new`,
      );
      const json = ck.trainingState!.json as { step: number };
      assert.equal(
        json.step,
        isNew ? version : current,
        "training state belongs to the same save as the weights",
      );
      assert.equal(ck.trainingState!.tensors.size, 2 * paramSpecs(config).length);
      if (isNew) {
        current = version;
        completed++;
      }
    }
    t.diagnostic(
      `full save ${took.toFixed(0)} ms; kills mid-save ${killedMidway}; saves completed ${completed}`,
    );
    assert.ok(killedMidway >= 2, `expected several kills in the middle of a save, got ${killedMidway}`);
    assert.ok(completed < fractions.length, "some kills must have interrupted the save");

    // A later save clears what the killed writers left behind.
    const last = runChild(script, target, 99, tokPath);
    assert.equal(await last.exit, 0, last.output());
    assert.deepEqual(
      (await readdir(base)).filter((n) => n.startsWith(".ckpt.")),
      [],
      "stale temporary directories are removed",
    );
    assert.ok(sameParams((await loadCheckpoint(target)).params, makeParams(config, 99)));

    // Kill landing between "rename old away" and "rename new in": the target is missing.
    const deadPid = last.child.pid!;
    const old = join(base, `.ckpt.old-${deadPid}-${Date.now()}-1`);
    await rename(target, old);
    await mkdir(join(base, `.ckpt.tmp-${deadPid}-${Date.now()}-1`));
    // Listing restores it (so --resume finds the newest checkpoint, not an older one), as loading does.
    assert.deepEqual(await listCheckpoints(base), ["ckpt"]);
    const restored = await loadCheckpoint(target);
    assert.ok(sameParams(restored.params, makeParams(config, 99)));
    assert.deepEqual(
      (await readdir(base)).filter((n) => n.startsWith(".ckpt.")),
      [],
    );
    await assert.rejects(loadCheckpoint(old), /hidden/);
  });
});
