import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type AdvantageRow, computeAdvantages, RoleBaselines, scopeKey } from "../../src/algo/advantages.js";
import { Rng } from "../../src/core/rng.js";

function close(actual: number[], expected: number[], tol = 1e-4): void {
  for (const [i, a] of actual.entries())
    assert.ok(Math.abs(a - expected[i]) <= tol, `index ${i}: ${a} vs ${expected[i]}`);
}

const row = (score: number, stepReturn: number, anchor: string, attempt = 0): AdvantageRow => ({
  taskId: "t0",
  opponent: "mcts",
  seat: "first",
  attempt,
  anchor,
  score,
  stepReturn,
});

describe("GiGPO (reference §4.3 worked example)", () => {
  it("reproduces the reference vector with mean_norm", () => {
    const rows = [
      row(-10, 0.7491, "b0"),
      row(-10, 0.7885, "u1"),
      row(-10, 0.83, "u2"),
      row(0, 18.05, "reflection", 1),
      row(20, 18.05, "b0", 1),
      row(20, 19.0, "u3", 1),
      row(20, 20.0, "u4", 1),
      row(10, 9.5, "b0"),
      row(10, 10.0, "u5"),
    ];
    const a = computeAdvantages(rows, { estimator: "gigpo", scope: "agent", mode: "mean_norm" });
    close(a.advantages, [-24.2395, -15.5556, -15.5556, -5.5556, 23.0614, 14.4444, 14.4444, 4.5114, 4.4444]);
  });

  it("mean_std_norm divides by the unbiased std", () => {
    const rows = [row(1, 0, "a"), row(3, 0, "b")];
    const a = computeAdvantages(rows, { mode: "mean_std_norm" });
    const std = Math.SQRT2;
    close(a.episode, [-1 / (std + 1e-6), 1 / (std + 1e-6)]);
  });

  it("anchorPerAttempt separates step groups by attempt", () => {
    const rows = [row(0, 1, "s", 0), row(0, 3, "s", 1)];
    assert.deepEqual(computeAdvantages(rows).step, [-1, 1]);
    assert.deepEqual(computeAdvantages(rows, { anchorPerAttempt: true }).step, [0, 0]);
  });

  it("GRPO normalises episode scores by mean and std", () => {
    const rows = [row(0, 0, "a"), row(10, 0, "b"), row(20, 0, "c")];
    const a = computeAdvantages(rows, { estimator: "grpo", mode: "mean_std_norm" });
    close(a.advantages, [-1, 0, 1], 1e-5);
  });
});

describe("normalisation scopes", () => {
  it("the agent scope never mixes opponents or seats in a group (property)", () => {
    const rng = Rng.seeded(11);
    for (let trial = 0; trial < 50; trial++) {
      const rows: AdvantageRow[] = Array.from({ length: 40 }, () => ({
        taskId: `t${rng.int(3)}`,
        opponent: rng.pick(["random", "mcts:100", "preferred:1"]),
        seat: rng.pick(["first", "second"]),
        attempt: rng.int(3),
        anchor: `s${rng.int(4)}`,
        score: rng.int(21) - 10,
        stepReturn: rng.float() * 10,
      }));
      const groups = new Map<string, AdvantageRow[]>();
      for (const r of rows) {
        const k = scopeKey(r, "agent");
        groups.set(k, [...(groups.get(k) ?? []), r]);
      }
      for (const members of groups.values()) {
        assert.equal(new Set(members.map((m) => m.opponent)).size, 1);
        assert.equal(new Set(members.map((m) => m.seat)).size, 1);
        assert.equal(new Set(members.map((m) => m.taskId)).size, 1);
      }
      // Advantages of one agent group do not change when other groups' rows change.
      const a1 = computeAdvantages(rows);
      const changed = rows.map((r) => (r.opponent === "random" ? { ...r, score: r.score + 100 } : r));
      const a2 = computeAdvantages(changed);
      rows.forEach((r, i) => {
        if (r.opponent !== "random") assert.ok(Math.abs(a1.advantages[i] - a2.advantages[i]) < 1e-9);
      });
    }
  });

  it("the task scope mixes opponents of one task; batch mixes everything", () => {
    const rows = [
      { ...row(0, 0, "x"), opponent: "a" },
      { ...row(10, 0, "y"), opponent: "b" },
    ];
    assert.deepEqual(
      computeAdvantages(rows, { scope: "agent", estimator: "grpo", mode: "mean_norm" }).advantages,
      [0, 10],
    );
    assert.deepEqual(
      computeAdvantages(rows, { scope: "task", estimator: "grpo", mode: "mean_norm" }).advantages,
      [-5, 5],
    );
    const other = [...rows, { ...row(20, 0, "z"), taskId: "t9" }];
    assert.deepEqual(
      computeAdvantages(other, { scope: "batch", estimator: "grpo", mode: "mean_norm" }).advantages,
      [-10, 0, 10],
    );
  });
});

describe("role-conditioned baselines", () => {
  it("uses the baseline from before the update, then moves it by the decay", () => {
    const b = new RoleBaselines(0.9);
    assert.deepEqual(b.apply(["p0", "p0", "p1"], [10, 10, -4]), [10, 9, -4]);
    assert.ok(Math.abs(b.get("p0") - (0.9 * 1 + 0.1 * 10)) < 1e-12);
    const restored = RoleBaselines.fromJSON(JSON.parse(JSON.stringify(b.toJSON())));
    assert.equal(restored.get("p1"), b.get("p1"));
  });
});
