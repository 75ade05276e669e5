/**
 * Wall time spent inside a task (the environment: level generation at reset, move execution and
 * dead-lock checks at step, opponents' replies), for the environment's share of an iteration.
 * The wrapper is a Proxy, so getters (`done`, `opponent`, …) and every other method pass through.
 *
 * The clock counts the union of the calls' wall intervals, not their sum. The runner starts the
 * calls of a whole batch before awaiting any (`Promise.all` over `reset` or `step`); a local task
 * does its work synchronously, so each call's promise settles only after every later call of the
 * batch has run, and summing per-call intervals counted call k's work up to N − k times (a group
 * of 24 resets read as ≈ 12× the real time). The union counts each millisecond once, and for a
 * served task it is the time some environment request was in flight.
 */
import type { TextTask } from "./types.js";

export interface EnvClock {
  /** Milliseconds during which at least one reset, step or restart was running or pending. */
  ms: number;
  /** Calls to step (one model answer each). */
  steps: number;
  /** Calls running or pending now. */
  inFlight: number;
  /** When the current span of overlapping calls began (valid while inFlight > 0). */
  spanStart: number;
}

export function newEnvClock(): EnvClock {
  return { ms: 0, steps: 0, inFlight: 0, spanStart: 0 };
}

const TIMED = new Set<PropertyKey>(["reset", "step", "restart"]);

function enter(clock: EnvClock): void {
  if (clock.inFlight === 0) clock.spanStart = performance.now();
  clock.inFlight += 1;
}

function leave(clock: EnvClock): void {
  clock.inFlight -= 1;
  if (clock.inFlight === 0) clock.ms += performance.now() - clock.spanStart;
}

export function timedTask(task: TextTask, clock: EnvClock): TextTask {
  return new Proxy(task, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (!TIMED.has(prop)) return value.bind(target);
      return (...args: unknown[]) => {
        enter(clock);
        let out: unknown;
        try {
          out = value.apply(target, args);
        } catch (err) {
          leave(clock);
          throw err;
        }
        if (prop === "step") clock.steps += 1;
        if (out instanceof Promise) return out.finally(() => leave(clock));
        leave(clock);
        return out;
      };
    },
  });
}
