import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { newEnvClock, timedTask } from "../../src/tasks/timed.js";
import type { TextTask } from "../../src/tasks/types.js";

/** A task whose reset does `ms` of synchronous work, as a local puzzle's level generation does, and records the time it really spent in `spent`. */
function busyTask(ms: number, spent: number[]): TextTask {
  const fake = {
    async reset(): Promise<void> {
      const t0 = performance.now();
      while (performance.now() - t0 < ms) {
        // busy
      }
      spent.push(performance.now() - t0);
    },
    async step(): Promise<void> {
      await new Promise((resolve) => setTimeout(resolve, ms));
    },
    restart(): void {
      throw new Error("restart failed");
    },
  };
  return fake as unknown as TextTask;
}

describe("environment clock", () => {
  it("counts a batch of concurrently started synchronous resets once, not once per pending call", async () => {
    const clock = newEnvClock();
    const spent: number[] = [];
    const tasks = Array.from({ length: 12 }, () => timedTask(busyTask(8, spent), clock));
    await Promise.all(tasks.map((t) => t.reset({} as never)));
    const work = spent.reduce((a, b) => a + b, 0);
    // Summing each call's start-to-settle interval reads ≈ 6.5× the work here (12 + 11 + … + 1 shares).
    assert.ok(clock.ms >= work, `clock ${clock.ms} ms covers the work ${work} ms`);
    assert.ok(clock.ms < 2 * work, `clock ${clock.ms} ms counts the work ${work} ms once`);
    assert.equal(clock.inFlight, 0);
  });

  it("counts overlapping awaited steps as the span they cover, and every step", async () => {
    const clock = newEnvClock();
    const tasks = Array.from({ length: 6 }, () => timedTask(busyTask(40, []), clock));
    const t0 = performance.now();
    await Promise.all(tasks.map((t) => t.step("x")));
    const wall = performance.now() - t0;
    assert.equal(clock.steps, 6);
    assert.ok(clock.ms >= 35 && clock.ms <= wall + 1, `clock ${clock.ms} ms within the batch's ${wall} ms`);
  });

  it("a call that throws still closes its interval", () => {
    const clock = newEnvClock();
    const task = timedTask(busyTask(1, []), clock);
    assert.throws(() => task.restart(), /restart failed/);
    assert.equal(clock.inFlight, 0);
  });
});
