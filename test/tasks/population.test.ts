import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { TrialEnv } from "../../src/tasks/env.js";
import {
  allocateByWeight,
  assignGroups,
  expandGroups,
  parsePool,
  summarizeAssignments,
} from "../../src/tasks/population.js";
import { createTask } from "../../src/tasks/registry.js";

describe("allocateByWeight", () => {
  it("gives exact largest-remainder counts", () => {
    assert.deepEqual(allocateByWeight([0.3, 0.3, 0.4], 16), [5, 5, 6]); // MAGE's Kuhn pool
    assert.deepEqual(allocateByWeight([1, 1, 1], 10), [4, 3, 3]); // tie → earlier entry
    assert.deepEqual(allocateByWeight([1, 6, 2], 0), [0, 0, 0]);
    assert.deepEqual(allocateByWeight([2, 0, 1], 7), [5, 0, 2]);
    assert.deepEqual(allocateByWeight([1], 5), [5]);
  });

  it("always sums to the total and stays within one of the exact quota", () => {
    const rng = Rng.seeded("alloc");
    for (let i = 0; i < 2000; i++) {
      const weights: number[] = Array.from({ length: 1 + rng.int(7) }, () =>
        rng.int(4) === 0 ? 0 : rng.float() * 5,
      );
      if (!weights.some((w) => w > 0)) weights[0] = 1;
      const total = rng.int(200);
      const counts = allocateByWeight(weights, total);
      assert.equal(
        counts.reduce((a, b) => a + b, 0),
        total,
      );
      const sum = weights.reduce((a, b) => a + b, 0);
      counts.forEach((c, j) => {
        const q = (total * weights[j]) / sum;
        assert.ok(c >= Math.floor(q) && c <= Math.ceil(q), `${c} vs quota ${q}`);
        if (weights[j] === 0) assert.equal(c, 0);
      });
    }
  });
});

describe("assignGroups", () => {
  const pool = parsePool("conservative@0.3,aggressive@0.3,intermediate@0.4");

  it("parses pools with weights and rejects bad ones", () => {
    assert.deepEqual(parsePool("mcts:100@2, random"), [
      { spec: "mcts:100", weight: 2 },
      { spec: "random", weight: 1 },
    ]);
    assert.throws(() => parsePool(""), UsageError);
    assert.throws(() => parsePool("random@0"), UsageError);
    assert.throws(() => parsePool("random@x"), UsageError);
    assert.throws(() => parsePool("random,random"), UsageError);
  });

  it("counts opponents and seats exactly", () => {
    for (const G of [1, 5, 16, 37]) {
      const groups = assignGroups({
        numGroups: G,
        pool,
        seats: { mode: "mixed", secondRatio: 0.5 },
        rng: Rng.seeded(G),
      });
      assert.equal(groups.length, G);
      const s = summarizeAssignments(groups);
      const counts = allocateByWeight([0.3, 0.3, 0.4], G);
      ["conservative", "aggressive", "intermediate"].forEach((name, i) => {
        const got = s[name] ? s[name].first + s[name].second : 0;
        assert.equal(got, counts[i], `${name} with G=${G}`);
      });
      const seconds = groups.filter((g) => g.seat === "second").length;
      assert.equal(seconds, Math.round(G * 0.5));
      // Only pool members play, and every group has a seat.
      for (const g of groups) {
        assert.ok(pool.some((p) => p.spec === g.opponent));
        assert.ok(g.seat === "first" || g.seat === "second");
        assert.ok(Number.isInteger(g.taskSeed) && g.taskSeed >= 0 && g.taskSeed < 2 ** 32);
      }
    }
    const s16 = summarizeAssignments(
      assignGroups({ numGroups: 16, pool, seats: { mode: "mixed", secondRatio: 0.5 }, rng: Rng.seeded(0) }),
    );
    // 5/5/6 groups, seconds split 3/2/3 (largest remainder of 8 over 5,5,6: 2.5, 2.5, 3 → ties to the earlier).
    assert.deepEqual(s16, {
      conservative: { first: 2, second: 3 },
      aggressive: { first: 3, second: 2 },
      intermediate: { first: 3, second: 3 },
    });
  });

  it("honours fixed seats and ratios, and the seed range", () => {
    const all2 = assignGroups({ numGroups: 9, pool, seats: { mode: "second" }, rng: Rng.seeded(1) });
    assert.ok(all2.every((g) => g.seat === "second"));
    const all1 = assignGroups({ numGroups: 9, pool, rng: Rng.seeded(1) });
    assert.ok(all1.every((g) => g.seat === "first"));
    const quarter = assignGroups({
      numGroups: 20,
      pool,
      seats: { mode: "mixed", secondRatio: 0.25 },
      rng: Rng.seeded(1),
    });
    assert.equal(quarter.filter((g) => g.seat === "second").length, 5);
    const val = assignGroups({ numGroups: 50, rng: Rng.seeded(1), seedRange: [2 ** 16, 2 ** 32] });
    assert.ok(val.every((g) => g.taskSeed >= 2 ** 16 && g.opponent === null && g.seat === null));
    assert.throws(() => assignGroups({ numGroups: 0, rng: Rng.seeded(1) }), UsageError);
    assert.throws(
      () =>
        assignGroups({ numGroups: 4, pool, seats: { mode: "mixed", secondRatio: 2 }, rng: Rng.seeded(1) }),
      UsageError,
    );
  });

  it("is a pure function of the rng key, and the order is shuffled", () => {
    const a = assignGroups({ numGroups: 32, pool, seats: { mode: "mixed" }, rng: Rng.seeded(7) });
    const b = assignGroups({ numGroups: 32, pool, seats: { mode: "mixed" }, rng: Rng.seeded(7) });
    const c = assignGroups({ numGroups: 32, pool, seats: { mode: "mixed" }, rng: Rng.seeded(8) });
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
    const blocks = a.map((g) => g.opponent);
    const sorted = [...blocks].sort(
      (x, y) => pool.findIndex((p) => p.spec === x) - pool.findIndex((p) => p.spec === y),
    );
    assert.notDeepEqual(blocks, sorted, "not laid out in pool order");
  });

  it("group members share task, opponent and seat, and so the identical start", async () => {
    const groups = assignGroups({ numGroups: 6, pool, seats: { mode: "mixed" }, rng: Rng.seeded(3) });
    const envs = expandGroups(groups, 4);
    assert.equal(envs.length, 24);
    const starts = new Map<number, string>();
    for (const e of envs) {
      assert.equal(e.env, e.group * 4 + e.member);
      const g = groups[e.group];
      assert.deepEqual([e.taskSeed, e.opponent, e.seat], [g.taskSeed, g.opponent, g.seat]);
      const env = new TrialEnv(await createTask("kuhn", { opponent: e.opponent!, seat: e.seat! }));
      await env.reset(Rng.seeded(e.taskSeed));
      const start = `${env.task.observation()}|${env.anchor("play")}`;
      if (starts.has(e.group)) assert.equal(start, starts.get(e.group));
      else starts.set(e.group, start);
    }
  });
});
