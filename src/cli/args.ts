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

/**
 * The key `--api-key-env NAME` names: the value of the environment variable NAME, trimmed; null
 * when the flag was not given. A bad name or an unset or empty variable is a UsageError.
 */
export function apiKeyFromEnvFlag(
  name: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string | null {
  if (name === undefined) return null;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
    throw new UsageError(
      `--api-key-env must name an environment variable (letters, digits, _), got "${name}"`,
    );
  const v = env[name];
  if (v === undefined || v.trim() === "")
    throw new UsageError(`--api-key-env ${name}: the environment variable ${name} is not set or empty`);
  return v.trim();
}

/**
 * Waits for SIGINT or SIGTERM, then runs `stop` once and resolves when it is done; a second
 * signal while stopping exits at once with status 130.
 */
export function untilSignal(name: string, stop: (signal: NodeJS.Signals) => Promise<void>): Promise<void> {
  return new Promise<void>((resolve) => {
    let stopping = false;
    const onSignal = (sig: NodeJS.Signals) => {
      if (stopping) {
        console.error(`mage ${name}: ${sig} again, exiting now`);
        process.exit(130);
      }
      stopping = true;
      stop(sig).then(
        () => {
          process.off("SIGINT", onSignal);
          process.off("SIGTERM", onSignal);
          resolve();
        },
        (err: unknown) => {
          console.error(`mage ${name}: while stopping: ${err instanceof Error ? err.message : String(err)}`);
          resolve();
        },
      );
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}
