/**
 * Checkpoints: one directory per checkpoint.
 *
 *   model.safetensors           weights, named and shaped as paramSpecs(config)
 *   config.json                 { format, formatVersion, preset, model: ModelConfig }
 *   tokenizer.json              Hugging Face tokenizer
 *   tokenizer_config.json       HF companion with the chat template
 *   training-state.safetensors  optimizer moments and other tensors of the trainer (optional)
 *   training-state.json         step, schedule, RNG states, any JSON the trainer passes (optional)
 *   meta.json                   backend/kernel that ran, Node version, time, mage version, commit
 *
 * Saving is atomic: everything is written and fsynced into a hidden sibling directory
 * `.NAME.tmp-PID-…`, which is then renamed over the target (an existing target is first
 * renamed away to `.NAME.old-PID-…` and removed afterwards). A save killed at any point leaves
 * the previous checkpoint loadable; `recoverCheckpoint` (run by save and, when the target is
 * missing, by load) restores it from the `.old-` copy if the kill fell between the two renames
 * and clears what dead writers left behind. Hidden names are never taken for checkpoints.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fsyncDir, writeFileDurable } from "../core/atomic-write.js";
import { UsageError } from "../core/errors.js";
import { SOURCE_COMMIT_ENV } from "../core/source-env.js";
import { tokenizerConfigJson } from "./chat-template.js";
import { type ModelConfig, paramSpecs, validateModelConfig } from "./config.js";
import { readSafetensors, type Tensor, type TensorInputs, writeSafetensors } from "./safetensors.js";
import { Tokenizer } from "./tokenizer.js";

export const CHECKPOINT_FORMAT = "mage-checkpoint";
export const CHECKPOINT_FORMAT_VERSION = 1;

export const CHECKPOINT_FILES = {
  model: "model.safetensors",
  config: "config.json",
  tokenizer: "tokenizer.json",
  tokenizerConfig: "tokenizer_config.json",
  trainingTensors: "training-state.safetensors",
  trainingJson: "training-state.json",
  meta: "meta.json",
} as const;

const REQUIRED_FILES = [
  CHECKPOINT_FILES.model,
  CHECKPOINT_FILES.config,
  CHECKPOINT_FILES.tokenizer,
  CHECKPOINT_FILES.meta,
];

/**
 * A run checkpoint of the PyTorch learner (`model.backend: torch`): the worker's own save
 * (`learner/`: HF weights or a PEFT adapter, tokenizer, optimizer, RNG), `torch.json` (what was
 * saved and from which base), mage's `training-state.json` and `meta.json`.
 */
export const TORCH_CHECKPOINT_FILES = {
  learner: "learner",
  torch: "torch.json",
  trainingJson: CHECKPOINT_FILES.trainingJson,
  meta: CHECKPOINT_FILES.meta,
} as const;

const TORCH_REQUIRED = [
  TORCH_CHECKPOINT_FILES.learner,
  TORCH_CHECKPOINT_FILES.torch,
  TORCH_CHECKPOINT_FILES.trainingJson,
  TORCH_CHECKPOINT_FILES.meta,
];

/** Whether a checkpoint directory holds a torch learner's checkpoint (not the embedded model's). */
export function isTorchCheckpoint(dir: string): boolean {
  return existsSync(join(dir, TORCH_CHECKPOINT_FILES.torch));
}

export type ParamInputs = ReadonlyMap<string, Float32Array> | Readonly<Record<string, Float32Array>>;

export interface TrainingStateInput {
  /** Optimizer moments and any other arrays (a bare typed array is stored 1-D). */
  tensors?: TensorInputs;
  /** Step, schedule state, RNG states (`Rng.getState()`), anything JSON-serialisable. */
  json?: unknown;
}

export interface TrainingState {
  tensors: Map<string, Tensor>;
  json: unknown;
}

/** What the caller says about the run; the rest of meta.json is filled in by saveCheckpoint. */
export interface CheckpointMetaInput {
  /** Backend that produced the weights, e.g. "cpu-js". */
  backend?: string;
  /** GEMM kernel that ran, e.g. "js". */
  kernel?: string;
  [key: string]: unknown;
}

export interface CheckpointMeta extends CheckpointMetaInput {
  format: string;
  formatVersion: number;
  nodeVersion: string;
  createdAt: string;
  mageVersion: string;
  commit: string | null;
}

export interface SaveCheckpointInput {
  config: ModelConfig;
  preset?: string | null;
  params: ParamInputs;
  tokenizer: Tokenizer;
  trainingState?: TrainingStateInput;
  meta?: CheckpointMetaInput;
}

export interface Checkpoint {
  dir: string;
  config: ModelConfig;
  preset: string | null;
  params: Map<string, Float32Array>;
  tokenizer: Tokenizer;
  trainingState: TrainingState | null;
  meta: CheckpointMeta;
}

// ---- meta -----------------------------------------------------------------------------------

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
let cachedVersion: string | undefined;
let cachedCommit: string | null | undefined;

export function mageVersion(): string {
  if (cachedVersion === undefined) {
    try {
      cachedVersion = String(
        JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).version ?? "unknown",
      );
    } catch {
      cachedVersion = "unknown";
    }
  }
  return cachedVersion;
}

/**
 * The git commit of the mage sources, or null when unknown. The commit a grid passes down wins, so
 * checkpoints and run summaries name the same commit (a frozen build has no .git beside it).
 */
export function mageCommit(): string | null {
  const passed = process.env[SOURCE_COMMIT_ENV];
  if (passed) return passed;
  if (cachedCommit === undefined) {
    cachedCommit = null;
    if (existsSync(join(repoRoot, ".git"))) {
      try {
        const out = execFileSync("git", ["rev-parse", "HEAD"], {
          cwd: repoRoot,
          stdio: ["ignore", "pipe", "ignore"],
          timeout: 5000,
        });
        const sha = out.toString().trim();
        if (/^[0-9a-f]{40}$/.test(sha)) cachedCommit = sha;
      } catch {
        cachedCommit = null;
      }
    }
  }
  return cachedCommit;
}

// ---- helpers --------------------------------------------------------------------------------

function paramEntries(params: ParamInputs): [string, Float32Array][] {
  return params instanceof Map
    ? [...params.entries()]
    : Object.entries(params as Record<string, Float32Array>);
}

function jsonText(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

let saveCounter = 0;

interface Leftover {
  path: string;
  kind: "tmp" | "old";
  pid: number;
  time: number;
  seq: number;
}

function processAlive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function leftovers(target: string): Promise<Leftover[]> {
  const parent = dirname(target);
  const prefix = `.${basename(target)}.`;
  let names: string[];
  try {
    names = await readdir(parent);
  } catch {
    return [];
  }
  const out: Leftover[] = [];
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const m = /^(tmp|old)-(\d+)-(\d+)-(\d+)$/.exec(name.slice(prefix.length));
    if (!m) continue;
    out.push({
      path: join(parent, name),
      kind: m[1] as "tmp" | "old",
      pid: Number(m[2]),
      time: Number(m[3]),
      seq: Number(m[4]),
    });
  }
  return out;
}

export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * SHA-256 of a checkpoint's weights file (null when it has none): tells two builds of the same
 * base model apart, e.g. one pretrained again on a CPU whose BLAS rounds differently.
 */
export function weightsSha256(dir: string): string | null {
  const file = join(dir, CHECKPOINT_FILES.model);
  if (!existsSync(file)) return null;
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

/**
 * SHA-256 of a Hugging Face directory's weights (model.safetensors), read in chunks so a real
 * model's file is never held whole; null when absent.
 */
export function hfWeightsSha256Sync(dir: string): string | null {
  const file = join(dir, "model.safetensors");
  if (!existsSync(file) || !statSync(file).isFile()) return null;
  const hash = createHash("sha256");
  const chunk = Buffer.allocUnsafe(8 << 20);
  const fd = openSync(file, "r");
  try {
    for (let n = readSync(fd, chunk); n > 0; n = readSync(fd, chunk)) hash.update(chunk.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return hash.digest("hex");
}

/** True when `dir` is a complete checkpoint directory (and not a hidden temporary one). */
export async function isCheckpointDir(dir: string): Promise<boolean> {
  if (basename(resolve(dir)).startsWith(".")) return false;
  try {
    if (!(await stat(dir)).isDirectory()) return false;
  } catch {
    return false;
  }
  return isCompleteLayout(dir);
}

/** Names of the complete checkpoints directly under `parent`, sorted. */
export async function listCheckpoints(parent: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(parent);
  } catch {
    return [];
  }
  // A save killed between its two renames left only `.NAME.old-…`: restore NAME before listing,
  // or a resumed run would start from an older checkpoint than the newest one it saved.
  const present = new Set(names);
  const interrupted = new Set<string>();
  for (const n of names) {
    const m = /^\.(.+)\.old-\d+-\d+-\d+$/.exec(n);
    if (m && !present.has(m[1])) interrupted.add(m[1]);
  }
  for (const name of interrupted) {
    await recoverCheckpoint(join(parent, name));
    if (await exists(join(parent, name))) names.push(name);
  }
  const out: string[] = [];
  for (const name of names.sort()) if (await isCheckpointDir(join(parent, name))) out.push(name);
  return out;
}

/**
 * Repairs what a killed save of `dir` left behind (only leftovers of processes no longer
 * alive are touched): restores the previous checkpoint when the target is missing but its
 * renamed-away copy exists, and removes stale temporary and old copies.
 */
export async function recoverCheckpoint(dir: string): Promise<void> {
  const target = resolve(dir);
  const dead = (await leftovers(target)).filter((l) => !processAlive(l.pid));
  if (!(await exists(target))) {
    const olds = dead
      .filter((l) => l.kind === "old")
      .sort((a, b) => b.time - a.time || b.seq - a.seq || b.pid - a.pid);
    for (const old of olds) {
      if (await isCompleteLayout(old.path)) {
        await rename(old.path, target);
        await fsyncDir(dirname(target));
        break;
      }
    }
  }
  for (const l of dead) if (await exists(l.path)) await rm(l.path, { recursive: true, force: true });
}

async function isCompleteLayout(dir: string): Promise<boolean> {
  const required = (await exists(join(dir, TORCH_CHECKPOINT_FILES.torch))) ? TORCH_REQUIRED : REQUIRED_FILES;
  for (const f of required) if (!(await exists(join(dir, f)))) return false;
  return true;
}

// ---- save -----------------------------------------------------------------------------------

function validateInput(input: SaveCheckpointInput): [string, Float32Array][] {
  const config = validateModelConfig(input.config);
  if (input.tokenizer.vocabSize > config.vocabSize)
    throw new RangeError(
      `checkpoint: tokenizer has ${input.tokenizer.vocabSize} tokens but model.vocabSize is ${config.vocabSize}`,
    );
  const list = paramEntries(input.params);
  const byName = new Map(list);
  for (const spec of paramSpecs(config)) {
    const p = byName.get(spec.name);
    const n = spec.shape.reduce((a, b) => a * b, 1);
    if (!p) throw new RangeError(`checkpoint: parameter "${spec.name}" is missing`);
    if (!(p instanceof Float32Array))
      throw new TypeError(`checkpoint: parameter "${spec.name}" must be a Float32Array`);
    if (p.length !== n)
      throw new RangeError(
        `checkpoint: parameter "${spec.name}" has ${p.length} values, expected ${n} [${spec.shape}]`,
      );
  }
  return list;
}

/** meta.json's content: what the caller says plus format, versions, time and commit. */
export function checkpointMeta(input: CheckpointMetaInput = {}): CheckpointMeta {
  return {
    ...input,
    format: CHECKPOINT_FORMAT,
    formatVersion: CHECKPOINT_FORMAT_VERSION,
    nodeVersion: process.version,
    createdAt: new Date().toISOString(),
    mageVersion: mageVersion(),
    commit: mageCommit(),
  };
}

/**
 * Atomically writes a checkpoint-like directory at `dir` (replacing an existing one), the same
 * way `saveCheckpoint` does: `fill(tmp)` writes what it wants into the hidden temporary directory
 * (and may return small files as `name → text`, or `meta.json → CheckpointMetaInput`), then the
 * directory is fsynced and renamed into place.
 */
export async function writeDirAtomic(
  dir: string,
  fill: (tmp: string) => Promise<Record<string, string | CheckpointMetaInput> | undefined>,
): Promise<void> {
  const target = resolve(dir);
  const parent = dirname(target);
  await mkdir(parent, { recursive: true });
  await recoverCheckpoint(target);
  saveCounter += 1;
  const tag = `${process.pid}-${Date.now()}-${saveCounter}`;
  const tmp = join(parent, `.${basename(target)}.tmp-${tag}`);
  const old = join(parent, `.${basename(target)}.old-${tag}`);
  await mkdir(tmp);
  try {
    const files = (await fill(tmp)) ?? {};
    for (const [name, content] of Object.entries(files)) {
      const text =
        typeof content === "string"
          ? content
          : jsonText(name === CHECKPOINT_FILES.meta ? checkpointMeta(content) : content);
      await writeFileDurable(join(tmp, name), text);
    }
    await fsyncDir(tmp);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true }).catch(() => {});
    throw err;
  }
  await swapIntoPlace(tmp, target, old);
}

async function swapIntoPlace(tmp: string, target: string, old: string): Promise<void> {
  const parent = dirname(target);
  // Between the two renames the previous checkpoint lives at `old`.
  let replaced = false;
  try {
    await rename(target, old);
    replaced = true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
      await rm(tmp, { recursive: true, force: true }).catch(() => {});
      throw err;
    }
  }
  try {
    await rename(tmp, target);
  } catch (err) {
    if (replaced) await rename(old, target).catch(() => {});
    await rm(tmp, { recursive: true, force: true }).catch(() => {});
    throw err;
  }
  await fsyncDir(parent);
  if (replaced) await rm(old, { recursive: true, force: true });
}

/** Atomically writes a checkpoint directory at `dir` (replacing an existing one). */
export async function saveCheckpoint(dir: string, input: SaveCheckpointInput): Promise<void> {
  const list = validateInput(input);
  const shapes = new Map(paramSpecs(input.config).map((s) => [s.name, s.shape]));
  await writeDirAtomic(dir, async (tmp) => {
    const weights = new Map(
      list.map(([name, data]) => [name, { shape: shapes.get(name) ?? [data.length], data }] as const),
    );
    await writeSafetensors(
      join(tmp, CHECKPOINT_FILES.model),
      weights,
      { format: "mage", preset: input.preset ?? "" },
      { atomic: false },
    );
    if (input.trainingState) {
      await writeSafetensors(
        join(tmp, CHECKPOINT_FILES.trainingTensors),
        input.trainingState.tensors ?? {},
        undefined,
        {
          atomic: false,
        },
      );
    }
    return {
      [CHECKPOINT_FILES.config]: jsonText({
        format: CHECKPOINT_FORMAT,
        formatVersion: CHECKPOINT_FORMAT_VERSION,
        preset: input.preset ?? null,
        model: input.config,
      }),
      [CHECKPOINT_FILES.tokenizer]: input.tokenizer.toJsonString(),
      [CHECKPOINT_FILES.tokenizerConfig]: jsonText(tokenizerConfigJson(input.config.contextLength)),
      ...(input.trainingState
        ? { [CHECKPOINT_FILES.trainingJson]: jsonText(input.trainingState.json ?? null) }
        : {}),
      [CHECKPOINT_FILES.meta]: input.meta ?? {},
    };
  });
}

// ---- load -----------------------------------------------------------------------------------

export interface LoadCheckpointOptions {
  /** Also read training-state.* (default true). */
  trainingState?: boolean;
}

/** Where a training run keeps its checkpoints: `RUN/checkpoints/iter-NNNNNN`. */
export const RUN_CHECKPOINTS_DIR = "checkpoints";

/** The newest complete `iter-N` checkpoint of a training run's directory, or null when it has none. */
export async function latestRunCheckpoint(runDir: string): Promise<string | null> {
  const parent = join(runDir, RUN_CHECKPOINTS_DIR);
  const names = (await listCheckpoints(parent)).filter((n) => /^iter-\d+$/.test(n));
  return names.length > 0 ? join(parent, names[names.length - 1]) : null;
}

/**
 * The checkpoint a path names: the path itself when it is a checkpoint directory (recovering an
 * interrupted save first); for a training run's directory, its newest complete checkpoint (the
 * model its final evaluation played). Anything else is a usage error.
 */
export async function resolveCheckpointDir(dir: string): Promise<string> {
  const target = resolve(dir);
  if (basename(target).startsWith("."))
    throw new UsageError(`checkpoint: ${dir} is a hidden (temporary) directory, not a checkpoint`);
  if (!(await exists(target))) await recoverCheckpoint(target);
  if (await isCheckpointDir(target)) return target;
  const latest = await latestRunCheckpoint(target);
  if (latest !== null) return latest;
  throw new UsageError(
    `checkpoint: ${dir} is not a complete checkpoint directory (needs ${REQUIRED_FILES.join(", ")}, or ${TORCH_REQUIRED.join(", ")} for a torch checkpoint) ` +
      `nor a training run with checkpoints under ${RUN_CHECKPOINTS_DIR}/`,
  );
}

/** A checkpoint's meta.json alone, for callers that need its game or pool but not its weights. */
export async function readCheckpointMeta(dir: string): Promise<CheckpointMeta> {
  const target = await resolveCheckpointDir(dir);
  return JSON.parse(await readFile(join(target, CHECKPOINT_FILES.meta), "utf8")) as CheckpointMeta;
}

export async function loadCheckpoint(dir: string, opts: LoadCheckpointOptions = {}): Promise<Checkpoint> {
  const target = await resolveCheckpointDir(dir);
  if (isTorchCheckpoint(target))
    throw new UsageError(
      `checkpoint ${target} holds a Hugging Face model trained with model.backend: torch, not the embedded model; ` +
        "evaluate it with `mage eval --checkpoint` (it plays through the PyTorch worker)",
    );

  const configJson = JSON.parse(await readFile(join(target, CHECKPOINT_FILES.config), "utf8"));
  if (configJson?.format !== CHECKPOINT_FORMAT)
    throw new Error(`checkpoint: ${CHECKPOINT_FILES.config} is not a ${CHECKPOINT_FORMAT} config`);
  const config = validateModelConfig(configJson.model as ModelConfig);
  const tokenizer = Tokenizer.fromJsonString(
    await readFile(join(target, CHECKPOINT_FILES.tokenizer), "utf8"),
  );
  const weights = await readSafetensors(join(target, CHECKPOINT_FILES.model));
  const params = new Map<string, Float32Array>();
  for (const spec of paramSpecs(config)) {
    const t = weights.tensors.get(spec.name);
    if (!t) throw new Error(`checkpoint: ${CHECKPOINT_FILES.model} lacks "${spec.name}"`);
    if (t.dtype !== "F32" || t.shape.join(",") !== spec.shape.join(","))
      throw new Error(
        `checkpoint: "${spec.name}" is ${t.dtype} [${t.shape}], expected F32 [${spec.shape}] for this config`,
      );
    params.set(spec.name, t.data as Float32Array);
  }
  for (const [name, t] of weights.tensors) {
    if (!params.has(name)) {
      if (t.dtype !== "F32") throw new Error(`checkpoint: extra tensor "${name}" must be F32`);
      params.set(name, t.data as Float32Array);
    }
  }
  let trainingState: TrainingState | null = null;
  if ((opts.trainingState ?? true) && (await exists(join(target, CHECKPOINT_FILES.trainingJson)))) {
    const tensors = (await readSafetensors(join(target, CHECKPOINT_FILES.trainingTensors))).tensors;
    const json = JSON.parse(await readFile(join(target, CHECKPOINT_FILES.trainingJson), "utf8"));
    trainingState = { tensors, json };
  }
  const meta = JSON.parse(await readFile(join(target, CHECKPOINT_FILES.meta), "utf8")) as CheckpointMeta;
  return {
    dir: target,
    config,
    preset: typeof configJson.preset === "string" ? configJson.preset : null,
    params,
    tokenizer,
    trainingState,
    meta,
  };
}
