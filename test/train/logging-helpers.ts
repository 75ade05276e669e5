import { spawnSync } from "node:child_process";
import { delimiter, join } from "node:path";
import { PACKAGE_ROOT, resolvePython } from "../../src/learner/torch/worker.js";

/** Runs `python -m MODULE ARG` from the project's Python package and parses its JSON output. */
function pythonJson(module: string, arg: string): unknown {
  const { python } = resolvePython(null);
  const pyPath = join(PACKAGE_ROOT, "python");
  const r = spawnSync(python, ["-m", module, arg], {
    encoding: "utf8",
    env: { ...process.env, PYTHONPATH: [pyPath, process.env.PYTHONPATH].filter(Boolean).join(delimiter) },
    maxBuffer: 256 * 1024 * 1024,
  });
  if (r.status !== 0) throw new Error(`python -m ${module} ${arg} failed (${r.status}):\n${r.stderr}`);
  return JSON.parse(r.stdout);
}

export interface TbScalar {
  tag: string;
  step: number;
  value: number;
  wall_time: number;
}

export interface TbRun {
  files: string[];
  file_versions: string[];
  scalars: TbScalar[];
  accumulator: Record<string, [number, number][]>;
}

/** Every event-file folder under `logdir`, read back by the tensorboard package (`mage_logging.tfevents`). */
export function readTensorBoard(logdir: string): Record<string, TbRun> {
  return pythonJson("mage_logging.tfevents", logdir) as Record<string, TbRun>;
}

export interface WandbRun {
  file: string;
  run: { id: string; project: string; entity: string; name: string; group: string };
  config: Record<string, unknown>;
  history: Record<string, unknown>[];
  summary: Record<string, unknown>;
  tables: Record<string, { columns: string[]; data: unknown[][] }>;
}

/** Every offline W&B run under a run directory's `wandb/`, oldest first (`mage_logging.wandb_records`). */
export function readWandb(wandbDir: string): WandbRun[] {
  return pythonJson("mage_logging.wandb_records", wandbDir) as WandbRun[];
}

/** An environment in which W&B keeps its settings and caches under `dir` and cannot reach a server. */
export function isolatedWandbEnv(dir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    WANDB_CONFIG_DIR: join(dir, "config"),
    WANDB_CACHE_DIR: join(dir, "cache"),
    WANDB_DATA_DIR: join(dir, "data"),
    WANDB_ARTIFACT_DIR: join(dir, "artifacts"),
    WANDB_BASE_URL: "http://127.0.0.1:9",
    WANDB_INIT_TIMEOUT: "10",
    // No ~/.netrc credentials either.
    HOME: dir,
  };
  delete env.WANDB_API_KEY;
  delete env.WANDB_MODE;
  return env;
}
