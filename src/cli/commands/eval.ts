import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { UsageError } from "../../core/errors.js";
import { type EvalCell, evaluate, formatCells, HARDER_SEED_RANGE } from "../../evaluate/evaluate.js";
import { EvalProgressBar } from "../../evaluate/progress.js";
import { loadGame } from "../../games/registry.js";
import {
  checkpointPool,
  runDirOfCheckpoint,
  type SnapshotCells,
  snapshotCells,
  snapshotsOnDisk,
  withResolvedSnapshot,
} from "../../league/eval-snapshots.js";
import { isEvalSnapshotSpec, snapshotCellProblem } from "../../league/pool.js";
import { loadEmbeddedPolicy } from "../../league/snapshots.js";
import { torchSnapshotPolicy } from "../../league/torch-snapshots.js";
import type { TorchLearner } from "../../learner/torch/learner.js";
import { serveCheckpointWithVllm } from "../../learner/torch/managed-vllm.js";
import { openTorchCheckpoint } from "../../learner/torch/open-checkpoint.js";
import { isTorchCheckpoint, readCheckpointMeta } from "../../model/checkpoint.js";
import { EmbeddedPolicy } from "../../policy/embedded.js";
import { type OpenedPolicy, openPolicy } from "../../policy/factory.js";
import { parsePolicySpec } from "../../policy/spec.js";
import { EVAL_SAMPLING } from "../../policy/types.js";
import {
  CONTEXT_OVERFLOW_POLICIES,
  type ContextOverflow,
  RolloutAbortedError,
} from "../../rollout/runner.js";
import type { TrialRecord } from "../../rollout/types.js";
import { checkOpponentSpec, loadTask, TASK_NAMES, type TaskDefinition } from "../../tasks/registry.js";
import { openRemoteTask } from "../../tasks/remote.js";
import { REFLECTION_TYPES } from "../../tasks/types.js";
import {
  INSTANCE_MODES,
  KNOB_GAMES,
  loadConfig,
  parseKnobsArg,
  readConfigFile,
  type TaskKnobs,
  taskKnobOptions,
} from "../../train/config.js";
import { snapshotPlay } from "../../train/league-setup.js";
import { DEFAULT_POOLS, PRETRAIN_GAMES, type PretrainGame } from "../../train/pretrain/corpus.js";
import { REPORT_FILE } from "../../train/pretrain/run.js";
import { everyInstance } from "../../train/run-eval.js";
import { parseFlags } from "../args.js";
import { checkpointArg } from "../checkpoint-arg.js";
import type { Command } from "../command.js";
import { openTorchModelDir } from "../open-torch-model.js";

const USAGE = [
  "mage eval (--checkpoint DIR | --policy SPEC | --model DIR [--threads N]) [--game G] --opponent SPEC[,SPEC...] [--seat first|second|both]",
  "          [--attempts K] [--trials N] [--reflection TYPE|none] [--style compact|full] [--max-tokens N]",
  "          [--temperature T] [--top-p P] [--top-k K] [--seed S] [--out FILE.jsonl] [--json] [--quiet]",
  "          [--context-overflow stop|drop-oldest] [--seen SPEC[,SPEC...]|none] [--knobs YAML] [--harder]",
  "          [--game remote --env-url URL --env-name NAME [--env-config JSON] [--env-seeds MIN-MAX]",
  "          [--env-instances drawn|every] [--env-api-key-env NAME]]",
  "  --game remote: an environment served over docs/env-protocol.md (e.g. by mage env-serve); a",
  "          checkpoint trained on one remembers its server, environment, env config and seeds",
  "  --env-seeds: draw the served instances from these seeds, e.g. a split's range:",
  '          --env-config \'{"split": "test"}\' --env-seeds 20000-20999 (default: the checkpoint\'s',
  "          seeds, or all the server's when --env-config is given or nothing was recorded)",
  "  --env-instances every: play each served instance once, trial i instance i, in order, instead of",
  "          --trials drawn with replacement: every game of an ALFWorld split (its count from the server),",
  "          or every seed of --env-seeds where the server declares no count",
  '  --knobs: puzzle difficulty, e.g. "roomSize: [7, 7], boxes: 2" (sokoban) or "mines: 5" (minesweeper),',
  '          or TicTacToe\'s cell format, "cells: digits"; default: the knobs the checkpoint or warm start',
  "          trained with (else the reference's 6x6 levels and (row, col) cells)",
  "  --harder: draw the levels from the harder set's seed range [2^32, 2^33) instead of [2^16, 2^32)",
  "  --policy: checkpoint:DIR, openai:URL#MODEL[?apiKeyEnv=NAME&...], gguf:PATH",
  "  --opponent snapshot:latest|snapshot:N: with --checkpoint RUN of a run trained with population.league,",
  "          its league snapshots (latest: the newest of the pool the checkpoint recorded), played as in",
  "          training (the run's prompt style, knobs, rollout sampling and reply length)",
  "  --model: a Hugging Face model directory sampled by the PyTorch worker (e.g. a warm start of",
  "          `mage pretrain --backend torch`, whose game, compact prompts and 48-token replies it keeps);",
  "          --threads: the worker's CPU threads (default: one per core)",
  "  --rollout worker|vllm: who samples a torch run checkpoint: its PyTorch worker, or a vLLM server mage",
  "          starts from .venv-vllm (default: vllm for a run trained with model.torch.rollout: vllm)",
  "  --json: the results as one JSON object on stdout; progress goes to stderr (--quiet: none)",
  "  --seen: the opponents the policy trained against, so results say seen or unseen. A checkpoint",
  "          records its pool and needs no flag; a served or GGUF model cannot tell, so without",
  "          --seen every opponent counts as unseen. --seen none marks them all unseen.",
].join("\n");

function num(name: string, v: string | undefined, fallback: number, integer = false): number {
  if (v === undefined) return fallback;
  const x = Number(v);
  if (!Number.isFinite(x) || (integer && !Number.isInteger(x)) || x < 0) {
    throw new UsageError(
      `--${name} must be a ${integer ? "non-negative integer" : "non-negative number"}, got "${v}"`,
    );
  }
  return x;
}

/**
 * The opponents a checkpoint played in training (a trained model's pool, or a pretrained base's
 * corpus pool); empty when unknown (another policy, or a checkpoint older than the record), so
 * every opponent then counts as unseen.
 */
function trainingOpponents(
  meta: Record<string, unknown> | null,
  game: string,
  checkpoint: string,
): Set<string> {
  if (Array.isArray(meta?.trainingOpponents))
    return new Set(meta.trainingOpponents.filter((s): s is string => typeof s === "string"));
  if (meta?.pretrain && (PRETRAIN_GAMES as readonly string[]).includes(game))
    return new Set((DEFAULT_POOLS[game as PretrainGame] ?? []).map((e) => e.spec));
  // Checkpoints written before the pool was recorded: the run directory's config.yaml has it.
  const runConfig = join(checkpoint, "..", "..", "config.yaml");
  if (basename(dirname(resolve(checkpoint))) === "checkpoints" && existsSync(runConfig)) {
    try {
      const opponents = (readConfigFile(runConfig).population as { opponents?: unknown } | undefined)
        ?.opponents;
      if (Array.isArray(opponents))
        return new Set(
          opponents.map((o) => (o as { spec?: unknown })?.spec).filter((s) => typeof s === "string"),
        );
    } catch {
      // An unreadable run config leaves the pool unknown.
    }
  }
  return new Set();
}

/**
 * What a model directory says of how it plays: a warm start of `mage pretrain --backend torch`
 * records its game and task knobs and was checked with compact prompts and 48-token replies;
 * null otherwise.
 */
function modelDirMeta(dir: string): Record<string, unknown> | null {
  const report = join(dir, REPORT_FILE);
  if (!existsSync(report)) return null;
  const { game, taskKnobs } = JSON.parse(readFileSync(report, "utf8")) as {
    game?: unknown;
    taskKnobs?: unknown;
  };
  return {
    ...(typeof game === "string" ? { game } : {}),
    ...(taskKnobs && typeof taskKnobs === "object" ? { taskKnobs } : {}),
    promptStyle: "compact",
    maxResponseTokens: 48,
  };
}

/** A Hugging Face model directory as a policy through the PyTorch worker. */
async function openModelEval(
  dir: string,
  threads: number,
  meta: Record<string, unknown> | null,
): Promise<OpenedPolicy> {
  const opened = await openTorchModelDir(dir, { threads });
  return {
    policy: opened.policy,
    kind: "torch",
    promptStyle: meta?.promptStyle === "compact" ? "compact" : "full",
    close: opened.close,
  };
}

/**
 * A torch run checkpoint as a policy: prompts in the style it trained with, replies as long as in
 * training. Sampled by the worker, or by a vLLM server mage starts (`--rollout vllm`; the default
 * for a run that trained with `model.torch.rollout: vllm`).
 */
async function openTorchEval(
  dir: string,
  meta: Record<string, unknown> | null,
  rollout: string | undefined,
): Promise<OpenedPolicy> {
  if (rollout !== undefined) checkChoice("rollout", rollout, ["worker", "vllm"]);
  const opened = await openTorchCheckpoint(dir);
  const promptStyle = meta?.promptStyle === "compact" ? "compact" : "full";
  if ((rollout ?? opened.info.torch.rollout) !== "vllm")
    return withWorker(
      { policy: opened.policy, kind: "torch", promptStyle, close: opened.close },
      opened.learner,
    );
  let served: Awaited<ReturnType<typeof serveCheckpointWithVllm>>;
  try {
    served = await serveCheckpointWithVllm(opened);
  } catch (err) {
    await opened.close();
    throw err;
  }
  return withWorker(
    {
      policy: served.policy,
      kind: "vllm",
      promptStyle,
      close: async () => {
        try {
          await served.close();
        } finally {
          await opened.close();
        }
      },
    },
    opened.learner,
  );
}

/** The PyTorch worker behind an evaluated torch checkpoint: its league snapshots sample there. */
const workers = new WeakMap<OpenedPolicy, TorchLearner>();

function withWorker(opened: OpenedPolicy, learner: TorchLearner): OpenedPolicy {
  workers.set(opened, learner);
  return opened;
}

function defaultMaxTokens(opened: OpenedPolicy, meta: Record<string, unknown> | null): number {
  if (opened.kind === "embedded") return 48;
  if ((opened.kind === "torch" || opened.kind === "vllm") && typeof meta?.maxResponseTokens === "number")
    return meta.maxResponseTokens;
  return 1024;
}

const FLAGS = {
  checkpoint: { type: "string" },
  policy: { type: "string" },
  model: { type: "string" },
  threads: { type: "string" },
  game: { type: "string" },
  "env-url": { type: "string" },
  "env-name": { type: "string" },
  "env-api-key-env": { type: "string" },
  "env-config": { type: "string" },
  "env-seeds": { type: "string" },
  "env-instances": { type: "string" },
  opponent: { type: "string" },
  seat: { type: "string" },
  attempts: { type: "string" },
  trials: { type: "string" },
  reflection: { type: "string" },
  style: { type: "string" },
  "max-tokens": { type: "string" },
  temperature: { type: "string" },
  "top-p": { type: "string" },
  "top-k": { type: "string" },
  seed: { type: "string" },
  "context-overflow": { type: "string" },
  seen: { type: "string" },
  knobs: { type: "string" },
  harder: { type: "boolean" },
  out: { type: "string" },
  json: { type: "boolean" },
  quiet: { type: "boolean" },
  rollout: { type: "string" },
} as const;

type Flags = { [K in keyof typeof FLAGS]?: (typeof FLAGS)[K]["type"] extends "boolean" ? boolean : string };
type Meta = Record<string, unknown>;

/** What is evaluated (a checkpoint, a policy spec or a model directory) and what it recorded of its training. */
class EvalSource {
  readonly modelDir: string | undefined;
  /** The policy spec asked for (a checkpoint as `checkpoint:DIR`). */
  readonly requested: string;
  readonly checkpointDir: string | undefined;
  private meta: Meta | null;

  constructor(values: Flags) {
    const given = [values.checkpoint, values.policy, values.model].filter((v) => v !== undefined);
    if (given.length !== 1)
      throw new UsageError(
        `give exactly one of --checkpoint DIR, --policy SPEC or --model DIR\nusage: ${USAGE}`,
      );
    if (values.threads !== undefined && values.model === undefined)
      throw new UsageError(
        "--threads goes with --model DIR (a torch run checkpoint's worker uses its run's settings)",
      );
    this.modelDir = values.model;
    this.requested = values.policy ?? `checkpoint:${values.checkpoint ?? ""}`;
    const parsed = this.modelDir === undefined ? parsePolicySpec(this.requested) : null;
    this.checkpointDir = parsed?.kind === "checkpoint" ? parsed.dir : undefined;
    if (values.rollout !== undefined && this.checkpointDir === undefined)
      throw new UsageError("--rollout goes with --checkpoint DIR (a torch run checkpoint)");
    this.meta = this.modelDir === undefined ? null : modelDirMeta(this.modelDir);
  }

  /** What is known without reading a checkpoint (a model directory's report). */
  known(): Meta | null {
    return this.meta;
  }

  /** The recorded meta, read from the checkpoint (`dir`, default the one given) the first time it is needed. */
  async recorded(dir = this.checkpointDir): Promise<Meta | null> {
    if (this.meta === null && dir !== undefined) this.meta = await readCheckpointMeta(dir);
    return this.meta;
  }
}

/** The task: a served environment (`--game remote`, or a checkpoint trained on one) or a built-in game. */
async function evalTask(values: Flags, source: EvalSource): Promise<{ task: TaskDefinition; game: string }> {
  let game = values.game;
  if (game === undefined) {
    const meta = source.known() ?? (source.checkpointDir !== undefined ? await source.recorded() : null);
    if (typeof meta?.game === "string") game = meta.game;
  }
  const metaEnv = source.known()?.env as
    | {
        url?: string;
        name?: string;
        config?: Record<string, unknown>;
        seeds?: { min: number; max: number };
        apiKeyEnv?: string | null;
      }
    | undefined;
  const served =
    game === "remote" ||
    values["env-url"] !== undefined ||
    values["env-name"] !== undefined ||
    (values.game === undefined && metaEnv !== undefined);
  if (!served) {
    if (game === undefined)
      throw new UsageError(`--game is required; valid choices: ${[...TASK_NAMES, "remote"].join(", ")}`);
    return { task: await loadTask(game), game };
  }
  const url = values["env-url"] ?? metaEnv?.url;
  const name = values["env-name"] ?? metaEnv?.name;
  if (!url || !name)
    throw new UsageError(`--game remote needs --env-url URL and --env-name NAME\nusage: ${USAGE}`);
  // The checkpoint's config and seeds go together: a new --env-config (another split) drops both.
  const ownConfig = values["env-config"] !== undefined;
  const config = ownConfig ? envConfigArg(values["env-config"]!) : (metaEnv?.config ?? {});
  const apiKeyEnv = values["env-api-key-env"] ?? metaEnv?.apiKeyEnv ?? null;
  const seeds =
    values["env-seeds"] !== undefined
      ? envSeedsArg(values["env-seeds"])
      : ownConfig
        ? null
        : (metaEnv?.seeds ?? null);
  const task = await openRemoteTask({ url, name, config, apiKeyEnv, seeds });
  return { task, game: task.name };
}

function envConfigArg(text: string): Record<string, unknown> {
  let config: unknown;
  try {
    config = JSON.parse(text);
  } catch {
    throw new UsageError(`--env-config must be a JSON object, got ${text}`);
  }
  if (typeof config !== "object" || config === null || Array.isArray(config))
    throw new UsageError(`--env-config must be a JSON object, got ${text}`);
  return config as Record<string, unknown>;
}

/** `--env-seeds MIN-MAX` (or one seed, `N`); the server checks the range against its own. */
function envSeedsArg(text: string): { min: number; max: number } {
  const m = /^(\d+)(?:-(\d+))?$/.exec(text.trim());
  const min = m ? Number(m[1]) : Number.NaN;
  const max = m?.[2] !== undefined ? Number(m[2]) : min;
  if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || min > max)
    throw new UsageError(`--env-seeds must be MIN-MAX with 0 <= MIN <= MAX (or one seed N), got ${text}`);
  return { min, max };
}

/** `--env-instances every`: the served instances, each once (undefined: `--trials` drawn). */
async function evalInstances(values: Flags, task: TaskDefinition): Promise<number[] | undefined> {
  const mode = values["env-instances"] ?? "drawn";
  checkChoice("env-instances", mode, INSTANCE_MODES);
  if (mode === "drawn") return undefined;
  if (values.trials !== undefined)
    throw new UsageError("--env-instances every plays one trial per instance; leave --trials out");
  if (values.harder) throw new UsageError("--env-instances every and --harder exclude each other");
  return everyInstance(task);
}

/**
 * The cells to play: each opponent in each seat asked for (one cell for a puzzle), each marked
 * seen or unseen by `--seen` or the checkpoint's training pool. Every flag is checked before the
 * checkpoint's pool is read.
 */
async function evalCells(
  values: Flags,
  task: TaskDefinition,
  game: string,
  source: EvalSource,
): Promise<EvalCell[]> {
  const checkOpponent = async (spec: string, seat?: "first" | "second") => {
    const problem = snapshotCellProblem(spec);
    if (problem) throw new UsageError(`--opponent: ${problem}`);
    if (isEvalSnapshotSpec(spec)) {
      if (source.checkpointDir === undefined)
        throw new UsageError(
          `--opponent ${spec}: a run's league snapshots play against --checkpoint RUN (a run trained with population.league)`,
        );
      return;
    }
    if (task.checkOpponent) await task.checkOpponent(spec, seat);
    else checkOpponentSpec(game, spec);
  };
  const seatArg = values.seat ?? "first";
  if (!["first", "second", "both"].includes(seatArg))
    throw new UsageError(`unknown --seat "${seatArg}"; valid choices: first, second, both`);
  const seats: ("first" | "second")[] =
    seatArg === "both" ? ["first", "second"] : [seatArg as "first" | "second"];
  let cells: EvalCell[];
  if (task.twoPlayer) {
    const opponents = (values.opponent ?? task.defaultOpponent ?? "").split(",").filter((s) => s.length > 0);
    if (opponents.length === 0) throw new UsageError("--opponent is required");
    for (const o of opponents) for (const seat of seats) await checkOpponent(o, seat);
    cells = opponents.flatMap((opponent) => seats.map((seat) => ({ opponent, seat, unseen: true })));
  } else {
    if (values.opponent !== undefined)
      throw new UsageError(`${game} is single-player and takes no --opponent`);
    cells = [{ opponent: null, seat: null, unseen: true }];
  }
  checkChoice("reflection", values.reflection ?? "reflection_only", ["none", ...REFLECTION_TYPES]);
  checkChoice("context-overflow", values["context-overflow"] ?? "stop", CONTEXT_OVERFLOW_POLICIES);
  let declaredSeen: Set<string> | undefined;
  if (values.seen !== undefined) {
    if (!task.twoPlayer) throw new UsageError(`${game} is single-player and takes no --seen`);
    const specs = values.seen === "none" ? [] : values.seen.split(",").filter((x) => x.length > 0);
    if (specs.length === 0 && values.seen !== "none")
      throw new UsageError("--seen needs opponent specs (comma-separated) or none");
    for (const o of specs) await checkOpponent(o);
    declaredSeen = new Set(specs);
  }
  const checkpointDir = source.checkpointDir;
  if (!task.twoPlayer || (declaredSeen === undefined && checkpointDir === undefined)) return cells;
  const known =
    declaredSeen ??
    (checkpointDir !== undefined
      ? trainingOpponents(await source.recorded(), game, checkpointDir)
      : new Set());
  return cells.map((c) => ({ ...c, unseen: c.opponent === null || !known.has(c.opponent) }));
}

function checkChoice(flag: string, value: string, valid: readonly string[]): void {
  if (!valid.includes(value))
    throw new UsageError(`unknown --${flag} "${value}"; valid choices: ${valid.join(", ")}`);
}

/** `--knobs`, else the knobs the checkpoint or warm start trained with (puzzles, TicTacToe's cells). */
async function evalKnobs(values: Flags, game: string, source: EvalSource): Promise<TaskKnobs> {
  // parseKnobsArg refuses --knobs for a game without knobs; taskKnobOptions gives {} for one.
  if (values.knobs !== undefined) return parseKnobsArg(game, values.knobs);
  if (!(KNOB_GAMES as readonly string[]).includes(game)) return {};
  const meta = await source.recorded();
  return meta?.taskKnobs && typeof meta.taskKnobs === "object" ? (meta.taskKnobs as TaskKnobs) : {};
}

/** The policy to play: a model directory or a torch run checkpoint through the PyTorch worker, or any other spec. */
async function openEvalPolicy(
  values: Flags,
  source: EvalSource,
): Promise<{ opened: OpenedPolicy; spec: string; meta: Meta | null }> {
  if (source.modelDir !== undefined) {
    const meta = source.known();
    const threads = num("threads", values.threads, 0, true);
    return {
      opened: await openModelEval(source.modelDir, threads, meta),
      spec: `model:${source.modelDir}`,
      meta,
    };
  }
  if (source.checkpointDir === undefined)
    return { opened: await openPolicy(source.requested), spec: source.requested, meta: source.known() };
  const resolved = await checkpointArg(source.checkpointDir);
  const spec = `checkpoint:${resolved}`;
  // A checkpoint of model.backend: torch plays through the PyTorch worker.
  if (!isTorchCheckpoint(resolved)) {
    if (values.rollout !== undefined)
      throw new UsageError(
        `--rollout: ${resolved} is an embedded checkpoint; only torch run checkpoints take it`,
      );
    return { opened: await openPolicy(spec), spec, meta: source.known() };
  }
  const meta = await source.recorded(resolved);
  return { opened: await openTorchEval(resolved, meta, values.rollout), spec, meta };
}

/**
 * The league snapshots of the checkpoint's run, when a cell names one (`snapshot:latest`: the
 * newest of the pool the checkpoint recorded, else of the run's league/ folder), played as the
 * run's training played them: its prompt style, knobs, rollout sampling and reply length.
 */
async function evalSnapshots(
  cells: readonly EvalCell[],
  checkpointDir: string | undefined,
  opened: OpenedPolicy,
  game: string,
  task: TaskDefinition,
): Promise<SnapshotCells> {
  if (!cells.some((c) => isEvalSnapshotSpec(c.opponent))) return snapshotCells(cells, null);
  const resolved = await checkpointArg(checkpointDir!, () => {});
  const runDir = runDirOfCheckpoint(resolved);
  if (runDir === null || !existsSync(join(runDir, "config.yaml")))
    throw new UsageError(
      `--opponent snapshot:…: ${checkpointDir} is not a training run's checkpoint (RUN/checkpoints/iter-N) or run directory`,
    );
  const config = loadConfig(join(runDir, "config.yaml"));
  const pool = (await checkpointPool(resolved)) ?? (await snapshotsOnDisk(runDir));
  if (pool.length === 0 && (await snapshotsOnDisk(runDir)).length === 0)
    throw new UsageError(
      `--opponent snapshot:…: the run ${runDir} has no league snapshots (population.league)`,
    );
  const kernels = opened.policy instanceof EmbeddedPolicy ? opened.policy.kernels : undefined;
  const worker = workers.get(opened);
  const snap = await snapshotCells(cells, {
    runDir,
    pool,
    play: snapshotPlay(config),
    game: await loadGame(game),
    task,
    load: async (dir, name) =>
      worker ? torchSnapshotPolicy(worker, dir, name) : loadEmbeddedPolicy(dir, name, kernels),
  });
  if (snap.skipped.length > 0)
    throw new UsageError(
      `--opponent: the run ${runDir} has no ${snap.skipped.map((c) => c.opponent).join(", ")} (snapshots kept: ${
        (await snapshotsOnDisk(runDir)).map((e) => e.spec).join(", ") || "none"
      })`,
    );
  return snap;
}

/** One trial's line of the `--out` file. */
function trialLine(t: TrialRecord): string {
  const { trialId, opponent, seat, taskSeed, attempts, aborted, stopReason, memory } = t;
  return `${JSON.stringify({ trialId, opponent, seat, taskSeed, attempts, aborted, ...(stopReason ? { stopReason } : {}), memory })}\n`;
}

export const command: Command = {
  name: "eval",
  usage: USAGE,
  async run(argv) {
    const { values } = parseFlags(argv, FLAGS, USAGE);
    const source = new EvalSource(values);
    const { task, game } = await evalTask(values, source);
    const cells = await evalCells(values, task, game, source);
    const taskOptions = taskKnobOptions(game, await evalKnobs(values, game, source));
    if (task.twoPlayer && values.harder) throw new UsageError(`${game} takes no --harder (puzzles only)`);
    const instanceSeeds = await evalInstances(values, task);
    const { opened, spec, meta } = await openEvalPolicy(values, source);
    try {
      const snapshots = await evalSnapshots(cells, source.checkpointDir, opened, game, task);
      const style = values.style ?? opened.promptStyle;
      if (style !== "compact" && style !== "full")
        throw new UsageError(`unknown --style "${style}"; valid choices: compact, full`);
      const seed = num("seed", values.seed, 0, true);
      const out = values.out ?? `runs/eval/${game}-s${seed}.jsonl`;
      mkdirSync(dirname(out), { recursive: true });
      writeFileSync(out, "");
      const progress = values.quiet ? null : new EvalProgressBar({ label: "eval" });
      let result: Awaited<ReturnType<typeof evaluate>>;
      try {
        result = await evaluate(opened.policy, {
          task,
          cells,
          trials: num("trials", values.trials, 100, true),
          attempts: num("attempts", values.attempts, 3, true),
          reflection: (values.reflection ?? "reflection_only") as never,
          promptStyle: style,
          maxTurns: task.maxTurns,
          sampling: {
            temperature: num("temperature", values.temperature, EVAL_SAMPLING.temperature),
            topP: num("top-p", values["top-p"], EVAL_SAMPLING.topP),
            topK: num("top-k", values["top-k"], EVAL_SAMPLING.topK, true),
            maxTokens: num("max-tokens", values["max-tokens"], defaultMaxTokens(opened, meta), true),
            stop: [],
          },
          seed,
          taskOptions,
          ...(snapshots.makeOpponent ? { makeOpponent: snapshots.makeOpponent } : {}),
          ...(values.harder ? { seedRange: HARDER_SEED_RANGE } : {}),
          ...(instanceSeeds ? { instanceSeeds } : {}),
          contextOverflow: (values["context-overflow"] ?? "stop") as ContextOverflow,
          concurrency: opened.kind === "embedded" || opened.kind === "torch" ? 1 : 8,
          ...(progress ? { onProgress: progress.update } : {}),
          onTrial: (t) => appendFileSync(out, trialLine(t)),
        });
      } catch (err) {
        progress?.finish();
        if (!(err instanceof RolloutAbortedError)) throw err;
        return reportAborted(err, opened, out);
      }
      progress?.finish();
      result.cells = result.cells.map((c) => withResolvedSnapshot(c, snapshots.resolved));
      if (values.json) {
        console.log(JSON.stringify({ policy: spec, game, cells: result.cells, trialsFile: out }));
      } else {
        console.log(formatCells(result.cells));
        console.log(`intervals: 95% percentile bootstrap over trials; trials written to ${out}`);
      }
      return 0;
    } finally {
      await opened.close();
    }
  },
};

/**
 * Every trial, finished or in flight, is already in the file (in-flight ones marked
 * `"aborted": true`); no metric is computed, so aborted trials never count as losses.
 */
function reportAborted(err: RolloutAbortedError, opened: OpenedPolicy, out: string): number {
  const cause = err.cause instanceof Error ? err.cause.message : String(err.cause);
  const url = (opened.policy as { url?: unknown }).url;
  console.error(
    `mage eval: the policy backend ${opened.policy.name}${typeof url === "string" ? ` at ${url}` : ""} failed: ${cause}\n` +
      `mage eval: ${err.finished.length} trials finished, ${err.aborted.length} aborted (written with "aborted": true to ${out}); no metrics reported`,
  );
  return 1;
}
