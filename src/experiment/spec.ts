import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { UsageError } from "../core/errors.js";
import { loadConfig, type MageConfig } from "../train/config.js";
import { PRETRAIN_DEFAULTS, PRETRAIN_RECIPE, type PretrainSettings } from "../train/pretrain/run.js";
import { type WarmStart, WarmStartSchema, warmStartArgs, warmStartKey } from "./warm-start.js";

/**
 * An experiment: a grid of methods × seeds. Each method is a training config plus overrides;
 * every run of a seed starts from the same pretrained base model (one per game, preset,
 * pretraining settings and seed), so methods are compared on paired seeds.
 */
const MethodSchema = z
  .object({
    /** The method's name: the run's `name`, its summary file and its label in reports. */
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "letters, digits, '.', '_' or '-'"),
    config: z.string().min(1),
    /** `key.path=value` overrides applied after the experiment's own. */
    set: z.array(z.string()).default([]),
    /** Seeds for this method only (default: the experiment's). */
    seeds: z.array(z.number().int().min(0)).min(1).optional(),
  })
  .strict();

export const ExperimentSchema = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "letters, digits, '.', '_' or '-'"),
    seeds: z.array(z.number().int().min(0)).min(1),
    /** Runs in parallel (child processes); each gets one BLAS thread when more than one. */
    jobs: z.number().int().min(1).default(1),
    /** seed-major: every method of seed 0, then of seed 1, …; method-major: every seed of a method first. */
    order: z.enum(["seed-major", "method-major"]).default("seed-major"),
    /** Overrides applied to every run. */
    set: z.array(z.string()).default([]),
    /** Where run directories go (never committed). */
    runsDir: z.string().default("runs/experiments"),
    /**
     * A grid kept only as a record (the reason, e.g. its warm start's recipe changed since): its
     * committed summaries stay readable by `mage report`, and `mage experiment` refuses to run it,
     * since it would rebuild its bases another way. null: a live grid.
     */
    archived: z.string().min(1).nullable().default(null),
    /** Where shared pretrained base models go. */
    pretrainedDir: z.string().default("runs/pretrained"),
    /** Where each finished run's summary.json is copied (committed): `<resultsDir>/<name>/<method>-s<seed>.json`. */
    resultsDir: z.string().default("docs/results/experiments"),
    methods: z.array(MethodSchema).min(1),
    /**
     * Real models (`model.backend: torch`): warm-start `model.torch.path` once per seed with
     * `mage pretrain --backend torch` (these settings over its defaults) and start every method
     * of the seed from it. null: each config names the model it trains.
     */
    warmStart: WarmStartSchema.nullable().default(null),
    /**
     * After each run, measure the diversity of its final model's attempt-1 play (`mage diversity`),
     * and of each shared pretrained model, into `<resultsDir>/<name>/diversity/`. null: skip.
     */
    diversity: z
      .object({
        samples: z.number().int().positive().default(200),
        opponent: z.string().min(1).optional(),
      })
      .strict()
      .nullable()
      .default(null),
    /**
     * Kuhn poker: after each run, the exploitability of its final model's attempt-1 strategy
     * (`mage exploitability`, `samples` hands per information set) into
     * `<resultsDir>/<name>/exploitability/`. null: skip.
     */
    exploitability: z
      .object({ samples: z.number().int().positive().default(64) })
      .strict()
      .nullable()
      .default(null),
  })
  .strict();

export type ExperimentSpec = z.infer<typeof ExperimentSchema>;

export interface PlannedRun {
  method: string;
  seed: number;
  configPath: string;
  overrides: string[];
  config: MageConfig;
  /** Directory of the shared base model this run starts from (null: the config names its own). */
  pretrainedDir: string | null;
  runDir: string;
  summaryPath: string;
}

export interface PlannedPretrain {
  dir: string;
  game: MageConfig["game"];
  preset: MageConfig["model"]["preset"];
  seed: number;
  kernels: MageConfig["model"]["kernels"];
  settings: MageConfig["pretrain"];
  /** The task knobs the corpus is played at (`mage pretrain --knobs`), or null. */
  knobs?: string | null;
  /** A real model's warm start (`mage pretrain --backend torch`) of `base`, instead of an embedded pretrain. */
  warmStart?: { base: string; settings: WarmStart; knobs: string | null };
}

export interface ExperimentPlan {
  spec: ExperimentSpec;
  file: string;
  runs: PlannedRun[];
  /** The bases this plan builds or checks (its runs' seeds). */
  pretrains: PlannedPretrain[];
  /** The base folders of the whole grid, every method and seed, whatever the filter. */
  gridBaseDirs: string[];
  resultsDir: string;
}

export function readExperiment(file: string): ExperimentSpec {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(file, "utf8"));
  } catch (err) {
    throw new UsageError(`cannot read experiment ${file}: ${(err as Error).message}`);
  }
  const parsed = ExperimentSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map(
      (i) => `  ${i.path.length > 0 ? i.path.join(".") : "(top level)"}: ${i.message}`,
    );
    throw new UsageError(`invalid experiment ${file}:\n${lines.join("\n")}`);
  }
  const names = parsed.data.methods.map((m) => m.name);
  const dup = names.find((n, i) => names.indexOf(n) !== i);
  if (dup) throw new UsageError(`invalid experiment ${file}: methods: "${dup}" appears twice`);
  return parsed.data;
}

/**
 * Settings added after the recipe they leave unchanged at these values: they enter the key only
 * when set to something else, so models pretrained before a setting existed keep their keys.
 */
const KEYED_ONLY_WHEN_SET: Partial<Record<keyof PretrainSettings, unknown>> = {
  tacticalRate: 0,
  epsilon: 1,
  reflectionMoves: 0,
  heedReflections: false,
};

/**
 * A short stable tag of what makes two pretrained models identical: the resolved settings (the
 * game's defaults with the config's overrides) and the recipe version, so a change of either
 * gets a fresh model instead of silently reusing one made the old way.
 */
export function pretrainKey(config: MageConfig): string {
  const defaults = (PRETRAIN_DEFAULTS as Record<string, PretrainSettings>)[config.game] ?? {};
  const settings = Object.fromEntries(
    Object.entries({ ...defaults, ...config.pretrain })
      .filter(([k, v]) => v !== undefined && KEYED_ONLY_WHEN_SET[k as keyof PretrainSettings] !== v)
      .sort(([a], [b]) => a.localeCompare(b)),
  );
  // The puzzles' difficulty knobs enter the key only when set (older keys stay valid).
  const knobs = taskKnobsText(config);
  const hash = createHash("sha256")
    .update(
      JSON.stringify({
        settings,
        contextLength: config.model.contextLength,
        recipe: PRETRAIN_RECIPE,
        ...(knobs !== null ? { knobs } : {}),
      }),
    )
    .digest("hex")
    .slice(0, 8);
  return `${config.game}-${config.model.preset}-${hash}`;
}

type GridMethod = ExperimentSpec["methods"][number];

/** The grid's (method, seed) cells in the order its runs start (`order`), optionally of some methods only. */
export function gridCells(
  spec: ExperimentSpec,
  onlyMethods?: readonly string[],
): { method: GridMethod; seed: number }[] {
  const methods = spec.methods.filter((m) => !onlyMethods || onlyMethods.includes(m.name));
  const cells: { method: GridMethod; seed: number }[] = [];
  if (spec.order === "method-major") {
    for (const method of methods) for (const seed of method.seeds ?? spec.seeds) cells.push({ method, seed });
  } else {
    const allSeeds = [...new Set([...spec.seeds, ...methods.flatMap((m) => m.seeds ?? [])])];
    for (const seed of allSeeds)
      for (const method of methods)
        if ((method.seeds ?? spec.seeds).includes(seed)) cells.push({ method, seed });
  }
  return cells;
}

/**
 * Resolves every run of the grid (validating each config with its overrides, so a bad field is
 * reported before anything starts) and the pretrained models they share. A filter (`--only`,
 * `--seeds`) limits the runs and bases to build; the whole grid's base folders are still listed.
 */
export function planExperiment(
  spec: ExperimentSpec,
  file: string,
  filter: { methods?: readonly string[]; seeds?: readonly number[] } = {},
): ExperimentPlan {
  const known = new Set(spec.methods.map((m) => m.name));
  for (const m of filter.methods ?? []) {
    if (!known.has(m)) throw new UsageError(`--only: unknown method "${m}"; valid: ${[...known].join(", ")}`);
  }
  const chosen = (method: GridMethod, seed: number) =>
    (!filter.methods || filter.methods.includes(method.name)) &&
    (!filter.seeds || filter.seeds.includes(seed));
  const resultsDir = join(spec.resultsDir, spec.name);
  const pretrains = new Map<string, PlannedPretrain>();
  const otherBases = new Map<string, PlannedPretrain>();
  const runs: PlannedRun[] = [];
  for (const { method, seed } of gridCells(spec, filter.methods)) {
    if (chosen(method, seed)) runs.push(planRun(spec, method, seed, pretrains));
  }
  for (const { method, seed } of gridCells(spec)) {
    if (!chosen(method, seed)) planRun(spec, method, seed, otherBases);
  }
  if (spec.diversity !== null && runs.some((r) => r.config.model.backend === "torch")) {
    throw new UsageError(
      `invalid experiment ${file}: diversity is measured for embedded models only; set diversity: null for a grid of real models`,
    );
  }
  if (
    spec.exploitability !== null &&
    runs.some((r) => r.config.game !== "kuhn" || r.config.model.backend === "torch")
  ) {
    throw new UsageError(
      `invalid experiment ${file}: exploitability is measured for embedded Kuhn models only; set exploitability: null`,
    );
  }
  const gridBaseDirs = [...new Set([...pretrains.keys(), ...otherBases.keys()])];
  return { spec, file, runs, pretrains: [...pretrains.values()], gridBaseDirs, resultsDir };
}

/** One cell's run: its resolved config and, when it starts from one, the base model it shares (added to `pretrains`). */
function planRun(
  spec: ExperimentSpec,
  method: GridMethod,
  seed: number,
  pretrains: Map<string, PlannedPretrain>,
): PlannedRun {
  // The grid's name groups its runs in TensorBoard and W&B (when a run logs there).
  const base = [
    `logging.group=${JSON.stringify(spec.name)}`,
    ...spec.set,
    ...method.set,
    `name=${method.name}`,
    `seed=${seed}`,
  ];
  let config: MageConfig;
  try {
    config = loadConfig(method.config, base);
  } catch (err) {
    throw new UsageError(`method "${method.name}" (seed ${seed}): ${(err as Error).message}`);
  }
  let pretrainedDir: string | null = null;
  const overrides = [...base];
  if (config.model.backend === "torch") {
    if (spec.warmStart !== null) {
      const warmed = planWarmStart(spec, config, seed, pretrains);
      pretrainedDir = warmed.dir;
      overrides.push(`model.torch.path=${warmed.dir}`);
      config = warmed.config;
    }
  } else if (config.model.checkpoint === null) {
    pretrainedDir = join(spec.pretrainedDir, `${pretrainKey(config)}-s${seed}`);
    if (!pretrains.has(pretrainedDir)) {
      pretrains.set(pretrainedDir, {
        dir: pretrainedDir,
        game: config.game,
        preset: config.model.preset,
        seed,
        kernels: config.model.kernels,
        settings: config.pretrain,
        knobs: taskKnobsText(config),
      });
    }
    overrides.push(`model.checkpoint=${pretrainedDir}`);
    config = { ...config, model: { ...config.model, checkpoint: pretrainedDir } };
  }
  return {
    method: method.name,
    seed,
    configPath: method.config,
    overrides,
    config,
    pretrainedDir,
    runDir: join(spec.runsDir, spec.name, `${method.name}-s${seed}`),
    summaryPath: join(spec.resultsDir, spec.name, `${method.name}-s${seed}.json`),
  };
}

/** The seed's warm-started copy of the config's real model (planned once per seed and settings). */
function planWarmStart(
  spec: ExperimentSpec,
  config: MageConfig,
  seed: number,
  pretrains: Map<string, PlannedPretrain>,
): { dir: string; config: MageConfig } {
  const settings = spec.warmStart ?? {};
  const knobs = warmStartKnobs(config);
  const dir = join(spec.pretrainedDir, `${warmStartKey(config, settings, knobs)}-s${seed}`);
  if (!pretrains.has(dir)) {
    pretrains.set(dir, {
      dir,
      game: config.game,
      preset: config.model.preset,
      seed,
      kernels: config.model.kernels,
      settings: {},
      warmStart: { base: config.model.torch.path!, settings, knobs },
    });
  }
  const torch = { ...config.model.torch, path: dir };
  return { dir, config: { ...config, model: { ...config.model, torch } } };
}

/**
 * The knobs a grid's warm start plays with: the config's, and for TicTacToe and MineSweeper always
 * their cell format (`pair` when unset), so that the base answers as the runs' prompts ask even
 * though a real model's warm start defaults to digits.
 */
export function warmStartKnobs(config: MageConfig): string | null {
  if (config.game !== "tictactoe" && config.game !== "minesweeper") return taskKnobsText(config);
  const knobs = config.task[config.game];
  return flowMapping({ ...knobs, cells: knobs.cells ?? "pair" });
}

/** The config's task knobs as a YAML flow mapping (for `mage pretrain --knobs`), or null when none is set. */
export function taskKnobsText(config: MageConfig): string | null {
  const k: Record<string, unknown> =
    config.game === "sokoban"
      ? config.task.sokoban
      : config.game === "minesweeper"
        ? config.task.minesweeper
        : config.game === "tictactoe"
          ? config.task.tictactoe
          : {};
  return flowMapping(k);
}

/** The set entries of `k` as a YAML flow mapping, or null when none is set. */
function flowMapping(k: Record<string, unknown>): string | null {
  const set = Object.entries(k).filter(([, v]) => v !== undefined);
  if (set.length === 0) return null;
  return `{${set.map(([key, v]) => `${key}: ${JSON.stringify(v)}`).join(", ")}}`;
}

/** The `mage pretrain` arguments that build `p` (the same model `mage train` would pretrain itself). */
export function pretrainArgs(p: PlannedPretrain): string[] {
  if (p.warmStart)
    return warmStartArgs(p.game, p.warmStart.base, p.seed, p.dir, p.warmStart.settings, p.warmStart.knobs);
  const args = ["pretrain", "--game", p.game, "--preset", p.preset, "--seed", String(p.seed)];
  args.push("--kernels", p.kernels, "--out", p.dir);
  const flag: Record<string, string> = {
    steps: "--steps",
    corpusTrials: "--corpus-trials",
    evalTrials: "--eval-trials",
    batchTokens: "--batch-tokens",
    lr: "--lr",
    shards: "--shards",
    actionWeight: "--action-weight",
    tacticalRate: "--tactical-rate",
    epsilon: "--epsilon",
    reflectionMoves: "--reflection-moves",
    heedReflections: "--heed-reflections",
  };
  for (const [key, value] of Object.entries(p.settings)) {
    if (value === undefined) continue;
    const f = flag[key];
    if (!f) throw new Error(`pretrain setting "${key}" has no mage pretrain flag`);
    // A boolean setting is a bare flag.
    if (typeof value === "boolean") {
      if (value) args.push(f);
    } else args.push(f, String(value));
  }
  if (p.knobs) args.push("--knobs", p.knobs);
  return args;
}
