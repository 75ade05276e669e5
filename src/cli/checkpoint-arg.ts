import { relative, resolve } from "node:path";
import { resolveCheckpointDir } from "../model/checkpoint.js";

/**
 * The checkpoint a `--checkpoint` argument names. A training run's directory stands for its newest
 * checkpoint, and the user is told which one that is (on stderr, so `--json` output stays clean).
 */
export async function checkpointArg(
  dir: string,
  log: (line: string) => void = console.error,
): Promise<string> {
  const found = await resolveCheckpointDir(dir);
  if (found !== resolve(dir))
    log(`using ${relative(process.cwd(), found) || "."}, the newest checkpoint of the run ${dir}`);
  return found;
}
