import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { LeagueSchema } from "../../src/league/config.js";
import { addSnapshot, newSnapshotEntry, snapshotDue, snapshotIteration } from "../../src/league/pool.js";
import { Ratings } from "../../src/league/ratings.js";
import { iterationPool, snapshotGroupCount, snapshotWeights } from "../../src/league/sampler.js";

const pool = [0, 5, 10, 15].map(newSnapshotEntry);

function league(over: Record<string, unknown> = {}) {
  return LeagueSchema.parse({ every: 5, ...over });
}

/** How often each snapshot is drawn over many single-group draws. */
function drawShares(l: ReturnType<typeof league>, iteration: number, win: (spec: string) => number) {
  const counts = new Map<string, number>();
  const n = 4000;
  for (let k = 0; k < n; k++) {
    const entries = iterationPool({
      groups: 1,
      scripted: [],
      snapshots: pool,
      league: l,
      iteration,
      winProbability: win,
      rng: Rng.seeded("draws").derive(k),
    });
    for (const e of entries) counts.set(e.spec, (counts.get(e.spec) ?? 0) + e.weight / n);
  }
  return counts;
}

describe("league pool", () => {
  it("takes a snapshot every N iterations (and at the start when asked)", () => {
    const due = Array.from({ length: 13 }, (_, d) => d).filter((d) => snapshotDue(d, 4, true));
    assert.deepEqual(due, [0, 4, 8, 12]);
    assert.equal(snapshotDue(0, 4, false), false);
  });

  it("keeps at most the cap, the oldest leaving first", () => {
    let p = [newSnapshotEntry(0)];
    const evicted: number[] = [];
    for (const it of [3, 6, 9]) {
      const r = addSnapshot(p, newSnapshotEntry(it), 2);
      p = r.pool;
      evicted.push(...r.evicted.map((e) => e.iteration));
    }
    assert.deepEqual(
      p.map((s) => s.iteration),
      [6, 9],
    );
    assert.deepEqual(evicted, [0, 3]);
    assert.equal(snapshotIteration(p[1].spec), 9);
    assert.equal(p[1].dir, "league/snapshot-000009");
  });
});

describe("snapshot sampling modes", () => {
  const even = () => 0.5;

  it("latest: always the newest snapshot", () => {
    assert.deepEqual(
      snapshotWeights(pool, { iteration: 17, league: league({ sampling: "latest" }), winProbability: even }),
      [0, 0, 0, 1],
    );
  });

  it("uniform: every snapshot about equally often", () => {
    const shares = drawShares(league({ sampling: "uniform" }), 17, even);
    for (const s of pool)
      assert.ok(Math.abs((shares.get(s.spec) ?? 0) - 0.25) < 0.03, `${s.spec}: ${shares.get(s.spec)}`);
  });

  it("lagged: only snapshots k..m iterations old, else the nearest to the window", () => {
    const l = league({ sampling: "lagged", lag: { min: 6, max: 12 } });
    // At iteration 17 the ages are 17, 12, 7, 2: snapshots 5 and 10 are in the window.
    assert.deepEqual(snapshotWeights(pool, { iteration: 17, league: l, winProbability: even }), [0, 1, 1, 0]);
    const shares = drawShares(l, 17, even);
    assert.deepEqual([...shares.keys()].sort(), ["snapshot:10", "snapshot:5"]);
    // At iteration 16 the ages are 16, 11, 6, 1 → 5 and 10; at 30 all are too old → the newest (15).
    assert.deepEqual(snapshotWeights(pool, { iteration: 30, league: l, winProbability: even }), [0, 0, 0, 1]);
    // At iteration 3 only snapshot 0 exists in the past and it is too young (age 3) → it is the nearest.
    assert.deepEqual(
      snapshotWeights(pool.slice(0, 1), { iteration: 3, league: l, winProbability: even }),
      [1],
    );
  });

  it("rating: prioritised toward the snapshots the agent beats least", () => {
    const ratings = new Ratings();
    ratings.ensure("agent");
    // The agent beat snapshot:0 many times and lost to snapshot:15 many times.
    for (let k = 0; k < 20; k++) {
      ratings.record("agent", "snapshot:0", 1);
      ratings.record("agent", "snapshot:15", -1);
    }
    const win = (spec: string) => ratings.winProbability("agent", spec);
    assert.ok(win("snapshot:0") > 0.5 && win("snapshot:15") < 0.5);
    const w = snapshotWeights(pool, {
      iteration: 17,
      league: league({ sampling: "rating" }),
      winProbability: win,
    });
    assert.ok(w[3] > w[1] && w[1] > w[0], `weights ${w}`);
    const shares = drawShares(league({ sampling: "rating", priority: 2 }), 17, win);
    assert.ok((shares.get("snapshot:15") ?? 0) > (shares.get("snapshot:0") ?? 0) + 0.3);
    // priority 0 is uniform.
    assert.deepEqual(
      snapshotWeights(pool, {
        iteration: 17,
        league: league({ sampling: "rating", priority: 0 }),
        winProbability: win,
      }),
      [1, 1, 1, 1],
    );
  });
});

describe("iteration pool", () => {
  const scripted = [
    { spec: "cfr", weight: 1 },
    { spec: "random", weight: 3 },
  ];

  it("gives the snapshots their share of the groups and the scripted opponents the rest by weight", () => {
    const p = iterationPool({
      groups: 10,
      scripted,
      snapshots: pool,
      league: league({ share: 0.6, sampling: "latest" }),
      iteration: 17,
      winProbability: () => 0.5,
      rng: Rng.seeded(1),
    });
    assert.deepEqual(p, [
      { spec: "cfr", weight: 1 },
      { spec: "random", weight: 3 },
      { spec: "snapshot:15", weight: 6 },
    ]);
  });

  it("plays only scripted opponents while the pool is empty, only snapshots without scripted ones", () => {
    assert.equal(snapshotGroupCount(8, 0.5, true, false), 0);
    assert.equal(snapshotGroupCount(8, 0.5, false, true), 8);
    assert.equal(snapshotGroupCount(7, 0.5, true, true), 3);
    const p = iterationPool({
      groups: 4,
      scripted,
      snapshots: [],
      league: league({ share: 1 }),
      iteration: 0,
      winProbability: () => 0.5,
      rng: Rng.seeded(1),
    });
    assert.deepEqual(p, [
      { spec: "cfr", weight: 1 },
      { spec: "random", weight: 3 },
    ]);
  });

  it("is the same for the same seed and iteration", () => {
    const make = (seed: number) =>
      iterationPool({
        groups: 12,
        scripted,
        snapshots: pool,
        league: league({ share: 0.5 }),
        iteration: 17,
        winProbability: () => 0.5,
        rng: Rng.seeded(seed).derive("iteration", 17, "league"),
      });
    assert.deepEqual(make(3), make(3));
    assert.notDeepEqual(
      [3, 4, 5, 6].map((s) => JSON.stringify(make(s))),
      [3, 3, 3, 3].map((s) => JSON.stringify(make(s))),
    );
  });
});

describe("ratings", () => {
  it("a win raises the winner and lowers the loser; a draw between equals moves neither mean", () => {
    const r = new Ratings();
    r.record("a", "b", 1);
    const a = r.get("a")!;
    const b = r.get("b")!;
    assert.ok(a.mu > 25 && b.mu < 25, `${a.mu} ${b.mu}`);
    assert.ok(a.sigma < 25 / 3 && b.sigma < 25 / 3);
    assert.deepEqual([a.wins, a.losses, b.wins, b.losses], [1, 0, 0, 1]);
    const d = new Ratings();
    d.record("x", "y", 0);
    assert.ok(Math.abs(d.get("x")!.mu - 25) < 1e-9 && Math.abs(d.get("y")!.mu - 25) < 1e-9);
    assert.equal(d.get("x")!.draws, 1);
  });

  it("more wins give a higher rating and a higher win probability; the table sorts by mean", () => {
    const r = new Ratings();
    for (let k = 0; k < 30; k++) {
      r.record("strong", "weak", k % 5 === 0 ? -1 : 1);
      r.record("strong", "mid", k % 3 === 0 ? -1 : 1);
      r.record("mid", "weak", k % 3 === 0 ? -1 : 1);
    }
    assert.ok(r.winProbability("strong", "weak") > 0.6);
    assert.deepEqual(
      r.table().map((x) => x.name),
      ["strong", "mid", "weak"],
    );
    const row = r.table()[0];
    assert.ok(row.lo < row.mu && row.mu < row.hi);
  });

  it("round-trips through JSON exactly", () => {
    const r = new Ratings({ beta: 3, tau: 0.1 });
    r.record("a", "b", 1);
    r.record("b", "c", 0);
    const back = Ratings.fromJSON(JSON.parse(JSON.stringify(r.toJSON())));
    assert.deepEqual(back.toJSON(), r.toJSON());
    back.record("a", "c", -1);
    r.record("a", "c", -1);
    assert.deepEqual(back.toJSON(), r.toJSON());
  });
});
