import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { UsageError } from "../../src/core/errors.js";
import { encodeFrame, FrameReader } from "../../src/learner/torch/frames.js";
import { resolvePython, TorchWorker, TorchWorkerError } from "../../src/learner/torch/worker.js";

const FAKE = fileURLToPath(new URL("./fake_worker.py", import.meta.url));
const PY = process.env.MAGE_PYTHON ?? "python3";
const fake = (env: Record<string, string> = {}) =>
  TorchWorker.start({ command: [PY, FAKE, "--connect", "{socket}"], env, startTimeoutMs: 20_000 });

describe("learner frames", () => {
  it("round-trips header and arrays, split at any byte", () => {
    const ids = Int32Array.from([1, -2, 300000]);
    const lp = Float64Array.from([-0.5, -1e-9, Math.PI]);
    const mask = Uint8Array.from([0, 1, 1]);
    const f32 = Float32Array.from([1.5]);
    const bytes = Buffer.concat([
      encodeFrame({ id: 1, op: "x" }, { ids, mask, lp, f32 }),
      encodeFrame({ id: 2, op: "y" }),
    ]);
    for (const cut of [1, 7, 8, 20, bytes.length - 1]) {
      const r = new FrameReader();
      const frames = [...r.push(bytes.subarray(0, cut)), ...r.push(bytes.subarray(cut))];
      assert.equal(frames.length, 2);
      assert.deepEqual(frames[0].arrays.ids, ids);
      assert.deepEqual(frames[0].arrays.lp, lp);
      assert.deepEqual(frames[0].arrays.mask, mask);
      assert.deepEqual(frames[0].arrays.f32, f32);
      assert.equal(frames[1].header.op, "y");
      // Offsets are multiples of 8, as the protocol promises.
      const specs = frames[0].header.arrays as Record<string, { offset: number }>;
      for (const s of Object.values(specs)) assert.equal(s.offset % 8, 0);
    }
  });

  it("rejects bytes that are not a frame", () => {
    assert.throws(() => new FrameReader().push(Buffer.from([0, 0, 0, 0, 0, 0, 0, 0])), /bad frame lengths/);
  });
});

describe("TorchWorker", () => {
  it("exchanges binary arrays with a worker process, one request at a time", async () => {
    const w = await fake();
    try {
      assert.equal(w.hello?.protocol, 2);
      const replies = await Promise.all([
        w.request("echo", { note: "a" }, { ids: Int32Array.from([1, 2, 3]) }),
        w.request("echo", { note: "b" }, { x: Float64Array.from([0.25, -1]), m: Uint8Array.from([1, 0]) }),
      ]);
      assert.deepEqual(replies[0].arrays.ids, Int32Array.from([2, 4, 6]));
      assert.equal(replies[0].header.note, "a");
      assert.deepEqual(replies[1].arrays.x, Float64Array.from([0.5, -2]));
      assert.deepEqual(replies[1].arrays.m, Uint8Array.from([2, 0]));
    } finally {
      await w.close();
    }
  });

  it("turns a usage error into a UsageError naming the field, an internal one into a TorchWorkerError", async () => {
    const w = await fake();
    try {
      await assert.rejects(
        w.request("usage"),
        (e: unknown) => e instanceof UsageError && /^model\.torch\.path: no config\.json/.test(e.message),
      );
      await assert.rejects(
        w.request("fail"),
        (e: unknown) =>
          e instanceof TorchWorkerError && e.kind === "internal" && /ValueError: boom/.test(e.message),
      );
      // The worker is still usable after errors it reported.
      const r = await w.request("echo", {}, { a: Int32Array.from([5]) });
      assert.deepEqual(r.arrays.a, Int32Array.from([10]));
    } finally {
      await w.close();
    }
  });

  it("a worker that dies mid-request fails it with the exit code and its last output, and every later request", async () => {
    const w = await fake();
    const err = await w.request("die").then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof TorchWorkerError);
    assert.equal(err.kind, "died");
    assert.match(err.message, /exited with code 3 during `die`/);
    assert.match(err.message, /about to die/);
    await assert.rejects(w.request("echo"), /exited with code 3/);
    await w.close();
  });

  it("kill -9 of the worker is named as such", async () => {
    const w = await fake();
    const pending = w.request("sleep", { seconds: 30 });
    process.kill(w.pid!, "SIGKILL");
    await assert.rejects(
      pending,
      (e: unknown) => e instanceof TorchWorkerError && /killed by SIGKILL during `sleep`/.test(e.message),
    );
    await w.close();
  });

  it("a request that outlives its timeout stops the worker", async () => {
    const w = await fake();
    await assert.rejects(
      w.request("sleep", { seconds: 30 }, {}, { timeoutMs: 300 }),
      (e: unknown) => e instanceof TorchWorkerError && e.kind === "timeout",
    );
    await w.close();
  });

  it("a protocol version mismatch says to update and reinstall", async () => {
    await assert.rejects(
      fake({ FAKE_PROTOCOL: "3" }),
      (e: unknown) =>
        e instanceof TorchWorkerError &&
        e.kind === "protocol" &&
        /speaks protocol 3 but this mage speaks 2/.test(e.message) &&
        /python-env\.mjs/.test(e.message),
    );
    await assert.rejects(fake({ FAKE_GARBAGE: "1" }), /malformed frame/);
  });

  it("a missing interpreter or a Python without torch is a UsageError that says what to run", async () => {
    await assert.rejects(
      TorchWorker.start({ python: "/nowhere/bin/python" }),
      (e: unknown) =>
        e instanceof UsageError &&
        /model\.torch\.python: \/nowhere\/bin\/python does not exist/.test(e.message) &&
        /node scripts\/python-env\.mjs/.test(e.message),
    );
    // An interpreter without torch: the worker module cannot import it. (PYTHONNOUSERSITE and -I
    // keep the test independent of what the machine's own python3 has installed.)
    const script = join(fileURLToPath(new URL(".", import.meta.url)), "no_torch.py");
    await assert.rejects(
      TorchWorker.start({ command: ["python3", script, "--connect", "{socket}"], startTimeoutMs: 20_000 }),
      (e: unknown) =>
        e instanceof UsageError && /has no torch/.test(e.message) && /python-env\.mjs/.test(e.message),
    );
  });

  it("resolves the interpreter: config, MAGE_PYTHON, MAGE_VENV, then the project's .venv or python3", () => {
    assert.equal(resolvePython("/x/python", { MAGE_PYTHON: "/y" }).python, "/x/python");
    assert.equal(resolvePython(null, { MAGE_PYTHON: "/y" }).python, "/y");
    assert.equal(resolvePython(null, { MAGE_VENV: "/v" }).python, "/v/bin/python");
    assert.match(resolvePython(null, {}).python, /(\.venv\/bin\/python|python3)$/);
  });
});
