import { type ParseArgsConfig, parseArgs } from "node:util";
import { UsageError } from "../core/errors.js";

/** node:util parseArgs in strict mode, with its errors turned into usage errors that show the usage. */
export function parseFlags<T extends NonNullable<ParseArgsConfig["options"]>>(
  argv: string[],
  options: T,
  usage: string,
  allowPositionals = false,
) {
  try {
    return parseArgs({ args: argv, options, strict: true, allowPositionals });
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${usage}`);
  }
}

/**
 * An integer flag within [min, max] (min defaults to 0, max to the largest safe integer), or
 * undefined when the flag was not given. The error names the flag and the range.
 */
export function intFlag(
  name: string,
  value: string | undefined,
  range: { min?: number; max?: number } = {},
): number | undefined {
  if (value === undefined) return undefined;
  const min = range.min ?? 0;
  const max = range.max ?? Number.MAX_SAFE_INTEGER;
  const text = value.trim();
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < min || n > max) {
    const wanted =
      range.max !== undefined
        ? `an integer from ${min} to ${max}`
        : min === 0
          ? "a non-negative integer"
          : `an integer >= ${min}`;
    throw new UsageError(`--${name} must be ${wanted}, got "${value}"`);
  }
  return n;
}
