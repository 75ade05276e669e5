import { existsSync, readFileSync } from "node:fs";

/** The parsed JSON of `file`, or null when it is missing or not JSON (a record a run may not have written). */
export function readJsonOrNull(file: string): unknown {
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return null;
  }
}
