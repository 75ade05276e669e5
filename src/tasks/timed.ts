/**
 * Wall time spent inside a task (the environment: level generation at reset, move execution and
 * dead-lock checks at step, opponents' replies), for the environment's share of an iteration.
 * The wrapper is a Proxy, so getters (`done`, `opponent`, …) and every other method pass through.
 */
import type { TextTask } from "./types.js";

export interface EnvClock {
  /** Milliseconds spent in reset, step and restart. */
  ms: number;
  /** Calls to step (one model answer each). */
  steps: number;
}

export function newEnvClock(): EnvClock {
  return { ms: 0, steps: 0 };
}

const TIMED = new Set<PropertyKey>(["reset", "step", "restart"]);

export function timedTask(task: TextTask, clock: EnvClock): TextTask {
  return new Proxy(task, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (!TIMED.has(prop)) return value.bind(target);
      return (...args: unknown[]) => {
        const t0 = performance.now();
        const out = value.apply(target, args);
        if (prop === "step") clock.steps += 1;
        if (out instanceof Promise) {
          return out.finally(() => {
            clock.ms += performance.now() - t0;
          });
        }
        clock.ms += performance.now() - t0;
        return out;
      };
    },
  });
}
