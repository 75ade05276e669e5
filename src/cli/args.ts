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
