import { UsageError } from "../core/errors.js";

/** Parses a positive integer argument of a spec, or throws a UsageError naming the spec. */
export function positiveIntArg(spec: string, arg: string | undefined, fallback?: number): number {
  if (arg === undefined || arg === "") {
    if (fallback !== undefined) return fallback;
    throw new UsageError(`opponent spec "${spec}" needs a positive integer argument`);
  }
  if (!/^\d+$/.test(arg) || Number(arg) <= 0) {
    throw new UsageError(`opponent spec "${spec}": "${arg}" is not a positive integer`);
  }
  return Number(arg);
}
