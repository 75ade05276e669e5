import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";

describe("Rng", () => {
  it("is deterministic for a seed and differs across seeds", () => {
    const a = Rng.seeded(42);
    const b = Rng.seeded(42);
    const c = Rng.seeded(43);
    const xa = Array.from({ length: 8 }, () => a.nextU32());
    const xb = Array.from({ length: 8 }, () => b.nextU32());
    const xc = Array.from({ length: 8 }, () => c.nextU32());
    assert.deepEqual(xa, xb);
    assert.notDeepEqual(xa, xc);
  });

  it("derives children by key, independent of the parent's stream position", () => {
    const a = Rng.seeded(7);
    const b = Rng.seeded(7);
    for (let i = 0; i < 100; i++) b.nextU32();
    assert.deepEqual(a.derive("task", 3).nextU32(), b.derive("task", 3).nextU32());
    assert.notEqual(a.derive("task", 3).nextU32(), a.derive("task", 4).nextU32());
    assert.notEqual(a.derive("task", 3).nextU32(), a.derive("task").derive(3).derive("x").nextU32());
    // string "3" and number 3 are different keys
    assert.notEqual(a.derive("3").nextU32(), a.derive(3).nextU32());
  });

  it("round-trips its state", () => {
    const a = Rng.seeded("run").derive("opp");
    a.nextU32();
    const st = a.getState();
    const b = Rng.fromState(JSON.parse(JSON.stringify(st)));
    assert.deepEqual(
      Array.from({ length: 5 }, () => a.float()),
      Array.from({ length: 5 }, () => b.float()),
    );
    const r = Rng.seeded(1);
    const first = r.nextU32();
    r.nextU32();
    assert.equal(r.restarted().nextU32(), first);
  });

  it("draws uniform integers without visible bias", () => {
    const r = Rng.seeded(5);
    const counts = [0, 0, 0, 0, 0, 0];
    const n = 60000;
    for (let i = 0; i < n; i++) counts[r.int(6)]++;
    for (const c of counts) assert.ok(Math.abs(c - n / 6) < 5 * Math.sqrt(n / 6), `count ${c}`);
    const f = Array.from({ length: 10000 }, () => r.float());
    assert.ok(f.every((x) => x >= 0 && x < 1));
    const mean = f.reduce((s, x) => s + x, 0) / f.length;
    assert.ok(Math.abs(mean - 0.5) < 0.02);
  });

  it("samples weighted indices and shuffles as permutations", () => {
    const r = Rng.seeded(9);
    const counts = [0, 0, 0];
    for (let i = 0; i < 30000; i++) counts[r.weighted([0.3, 0.3, 0.4])]++;
    assert.ok(Math.abs(counts[2] / 30000 - 0.4) < 0.015);
    assert.throws(() => r.weighted([0, 0]), /sum to zero/);
    const arr = [1, 2, 3, 4, 5, 6, 7];
    const sh = r.shuffle([...arr]);
    assert.deepEqual([...sh].sort(), arr);
  });
});
