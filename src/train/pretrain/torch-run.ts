/**
 * `mage pretrain --backend torch --model DIR`: the supervised warm start of a real (Hugging Face)
 * model, so that its answers are well-formed before group-relative RL (a base that never writes
 * `<action>…</action>` gets equal rewards in every group and cannot learn). Corpus of unskilled
 * scripted play (the embedded path's `buildCorpus`, compact prompts) → rendered with the model's
 * own chat template → LoRA SFT of the answers in the PyTorch worker → export of a plain Hugging
 * Face directory (adapter merged, float32) → the embedded path's checks through the worker:
 * sampled validity on fresh trials and the exact first-decision entropy. The directory also holds
 * `pretrain-report.json`, which records the base model it came from (name and weights' SHA-256).
 *
 * Every random choice is keyed from `Rng.seeded(seed).derive("pretrain", game)` as in the
 * embedded path (`corpus`: the same corpus for the same seed; `sft`: batch order; `eval`: the
 * fresh trials and their samples); the worker's LoRA init is seeded with `seed`.
 */
import { createHash } from "node:crypto";
import { createReadStream, existsSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { writeFileAtomic } from "../../core/atomic-write.js";
import { expectChoice, UsageError } from "../../core/errors.js";
import { Rng } from "../../core/rng.js";
import { EvalProgressBar } from "../../evaluate/progress.js";
import { TorchLearner } from "../../learner/torch/learner.js";
import { TorchPolicy } from "../../learner/torch/policy.js";
import type { TorchWorkerOptions } from "../../learner/torch/worker.js";
import {
  type TaskKnobs,
  TORCH_DEVICE_PATTERN,
  type TorchModelConfig,
  TorchModelSchema,
  taskKnobOptions,
} from "../config.js";
import { ProgressBar } from "../progress.js";
import { collectRunMeta } from "../run-meta.js";
import { buildCorpus, type CorpusStats, type CorpusTrial } from "./corpus.js";
import { evaluatePretrained, type PretrainEvaluation, type PretrainTargets } from "./evaluate.js";
import { corpusSummary, corpusWinText, PRETRAIN_DEFAULTS, REPORT_FILE } from "./run.js";
import { CHECKS_TRANSCRIPTS_FILE, evaluateServed } from "./served-checks.js";
import type { ServedPretrain } from "./served-config.js";
import {
  buildServedCorpus,
  SERVED_CORPUS_DEFAULTS,
  type ServedCorpusStats,
  servedCorpusText,
} from "./served-corpus.js";
import { type SftExample, summarizeSft } from "./sft.js";
import { torchAnswerScorer } from "./torch-checks.js";
import {
  type BaseModelRecord,
  TORCH_DTYPES,
  TORCH_PRETRAIN_GAMES,
  type TorchPhaseTimes,
  type TorchPretrainGame,
  type TorchPretrainReport,
  type TorchPretrainSettings,
} from "./torch-report.js";
import {
  planTorchResume,
  readSftCheckpoint,
  removeSftCheckpoint,
  restoreSftCheckpoint,
  type SftProgress,
  saveSftCheckpoint,
  sftCheckpointDir,
} from "./torch-resume.js";
import { encodeWithTemplate, runTorchSft, type SftSoFar, templateTokenizer } from "./torch-sft.js";
import { cachedTokenizer } from "./unlikely.js";

export {
  type BaseModelRecord,
  TORCH_DTYPES,
  TORCH_PRETRAIN_GAMES,
  type TorchPhaseTimes,
  type TorchPretrainGame,
  type TorchPretrainReport,
  type TorchPretrainSettings,
};

/** A served warm start's loss weight of reflection tokens (`TORCH_PRETRAIN_DEFAULTS.remote`). */
export const SERVED_REMARK_WEIGHT = 4;

/** A served warm start's share of corpus trials with an exploring attempt 1 that is lost. */
export const SERVED_FAILED_SHARE = 0.5;

/** LoRA on every linear layer of a Llama-style block. */
export const LORA_TARGET_MODULES = [
  "q_proj",
  "k_proj",
  "v_proj",
  "o_proj",
  "gate_proj",
  "up_proj",
  "down_proj",
];

/** Sized for the 20-minute budget on the 2-core machine with SmolLM2-135M (docs/design.md). */
const SHARED_TORCH_SETTINGS = {
  microBatchTokens: 2048,
  lr: 1e-3,
  minLrRatio: 0.1,
  weightDecay: 0,
  malformedRate: 0.02,
  tacticalRate: 0,
  loraRank: 16,
  dtype: "float32",
  device: "cpu",
  evalBatch: 64,
  prefixCacheMB: 3072,
  threads: 0,
} as const;

/** What the two puzzles share; their entries below state only what differs. */
const PUZZLE_TORCH_SETTINGS = {
  ...SHARED_TORCH_SETTINGS,
  steps: 32,
  warmupSteps: 3,
  batchTokens: 2048,
  corpusTrials: 200,
  evalTrials: 40,
  actionWeight: 1,
} as const;

export const TORCH_PRETRAIN_DEFAULTS: Record<TorchPretrainGame, TorchPretrainSettings> = {
  kuhn: {
    ...SHARED_TORCH_SETTINGS,
    steps: 30,
    warmupSteps: 3,
    batchTokens: 1024,
    corpusTrials: 200,
    evalTrials: 200,
    actionWeight: 1,
    unlikelihood: 0,
  },
  // 60 checks, as the embedded TicTacToe default: a trial costs ~10 samples of up to 600-token
  // prompts, and 200 would take 30 of the 20 minutes alone (docs/design.md).
  // Cells written as digits, 32 steps, the unlikelihood term at 16 and play answers weighted as
  // reflections: 98.5% legal answers and 95.2% remarks on a probe, where `(r, c)` answers and
  // plain SFT gave 62-66% legal (docs/design.md, "TicTacToe cells as digits").
  tictactoe: {
    ...SHARED_TORCH_SETTINGS,
    steps: 32,
    warmupSteps: 3,
    batchTokens: 1536,
    corpusTrials: 200,
    evalTrials: 60,
    actionWeight: 1,
    unlikelihood: 16,
  },
  // The puzzles: the embedded path's corpus players (ε 0.5 and 0.25) and check count, and the
  // Kuhn/TicTacToe step budget. Reflections list at most 5 moves or 3 cells: listing all, 40% of
  // Sokoban's and 45% of MineSweeper's corpus reflections ran past 48 SmolLM2 tokens (5 and 3: 0%
  // and 3%), and a MineSweeper warm start that listed all wrote 41.6% valid remarks. MineSweeper
  // takes TicTacToe's unlikelihood term on revealed cells: without it 62% of the play answers
  // (393 of 638) named a revealed cell (docs/design.md).
  sokoban: {
    ...PUZZLE_TORCH_SETTINGS,
    unlikelihood: 0,
    epsilon: PRETRAIN_DEFAULTS.sokoban.epsilon,
    reflectionMoves: 5,
  },
  // MineSweeper trains twice as long: with cells as digits, 32 steps gave 90.7% legal answers and
  // 69.4% remarks, 64 steps 95.1% and 90.4% (seed 0, 40 checks; docs/design.md).
  minesweeper: {
    ...PUZZLE_TORCH_SETTINGS,
    steps: 64,
    unlikelihood: 16,
    epsilon: PRETRAIN_DEFAULTS.minesweeper.epsilon,
    reflectionMoves: 3,
  },
  // A served environment with an expert (ALFWorld): whole 3-attempt compact trials of about
  // 2,400 SmolLM2 tokens (at most 3,400), so a step packs one or two and a micro-batch holds one.
  // On the shared 2-core machine a corpus trial costs about 10 s to play and 54 s of SFT (45
  // tokens/s), so 15 take about 16 minutes; the 100 checks the issue asks for take about 2 hours
  // there (1.5-2.2 s per sampled answer on one CPU thread): docs/environments.md, ALFWorld, "Warm start".
  remote: {
    ...SHARED_TORCH_SETTINGS,
    steps: 9,
    warmupSteps: 2,
    batchTokens: 4096,
    microBatchTokens: 4096,
    corpusTrials: 15,
    evalTrials: 100,
    evalBatch: 50,
    actionWeight: 1,
    // Reflections are a few answers among many actions: with half the trials lost at attempt 1,
    // ALFWorld's reflections are 18% of the scored SmolLM2 tokens and ScienceWorld's 10%, so
    // weight 4 gives them 46% and 31% of the loss (the coin config sets 2: its short actions leave
    // the remarks 27%; docs/environments.md).
    remarkWeight: SERVED_REMARK_WEIGHT,
    unlikelihood: 0,
    epsilon: SERVED_CORPUS_DEFAULTS.epsilon,
    reflectionFacts: SERVED_CORPUS_DEFAULTS.reflectionFacts,
    failedShare: SERVED_FAILED_SHARE,
    remarkMaxTokens: SERVED_CORPUS_DEFAULTS.remarkMaxTokens,
  },
};

/**
 * The task knobs a real model's warm start plays with unless told otherwise: TicTacToe's and
 * MineSweeper's cells as digits (SmolLM2 names cells it cannot read off the board otherwise).
 */
export const TORCH_PRETRAIN_KNOBS: Record<TorchPretrainGame, TaskKnobs> = {
  kuhn: {},
  tictactoe: { tictactoe: { cells: "digits" } },
  sokoban: {},
  minesweeper: { minesweeper: { cells: "digits" } },
  remote: {},
};

/**
 * The warm start's targets for a real model: the embedded model's, with 95% valid play answers
 * and 0.5 bit per Kuhn seat (a pretrained LLM keeps its own preferences; what RL needs is that
 * its answers count and its first decision is not fixed), and 1.5 bits on the empty board.
 */
export const TORCH_PRETRAIN_TARGETS: PretrainTargets = {
  playValid: 0.95,
  remarkValid: 0.95,
  kuhnFirstDecisionBits: 0.5,
  tictactoeFirstMoveBits: 1.5,
};

export interface TorchPretrainOptions extends Partial<TorchPretrainSettings> {
  game: string;
  /** Task knobs (`--knobs`; TicTacToe's `cells`), laid over `TORCH_PRETRAIN_KNOBS`. */
  taskKnobs?: TaskKnobs;
  /** The base: a local Hugging Face model directory with a chat template. */
  model: string;
  /** The warm-started model directory (default: `<model>-<game>-warm` beside the base). */
  out?: string;
  seed?: number;
  /** The worker's interpreter (default: as `model.torch.python`). */
  python?: string | null;
  /** Progress bar and phase lines go here (default process.stderr); null silences them. */
  progress?: NodeJS.WriteStream | null;
  /** Skip the sampled checks (tests of the training path only). */
  skipEvaluation?: boolean;
  /**
   * Continue the warm start in `out` (`torch-resume.ts`): one whose checks are missing gets them
   * sampled from its exported model, one that is complete is returned as it is; nothing there: a
   * fresh run.
   */
  resume?: boolean;
  /**
   * Seconds between SFT checkpoints (`<out>.sft-checkpoint`, for `resume`); 0: after every step.
   * Default 120 with LoRA (a small adapter), 900 for full fine-tuning (the weights and twice them in AdamW state).
   */
  checkpointSeconds?: number;
  /** Passed to the worker (tests). */
  worker?: Partial<TorchWorkerOptions>;
  /** `game: remote`: the served environment with an expert (`openServedPretrain`). */
  served?: ServedPretrain;
}

function checkPositiveInt(flag: string, v: number): void {
  if (!(Number.isInteger(v) && v > 0)) throw new UsageError(`--${flag} must be a positive integer, got ${v}`);
}

function checkRate(flag: string, v: number): void {
  if (!(Number.isFinite(v) && v >= 0 && v <= 1))
    throw new UsageError(`--${flag} must be a number in [0, 1], got ${v}`);
}

/** The run's settings: the game's defaults overridden by the options, checked. */
export function resolveTorchSettings(
  game: TorchPretrainGame,
  opts: Partial<TorchPretrainSettings>,
): TorchPretrainSettings {
  const defined = Object.fromEntries(
    Object.entries(opts).filter(([k, v]) => v !== undefined && k in TORCH_PRETRAIN_DEFAULTS[game]),
  ) as Partial<TorchPretrainSettings>;
  for (const [key, flag] of [
    ["epsilon", "--epsilon"],
    ["reflectionMoves", "--reflection-moves"],
  ] as const)
    if (opts[key] !== undefined && !(key in TORCH_PRETRAIN_DEFAULTS[game]))
      throw new UsageError(`${flag} is for the puzzles' corpus player (sokoban, minesweeper), not ${game}`);
  const s: TorchPretrainSettings = { ...TORCH_PRETRAIN_DEFAULTS[game], ...defined };
  checkPositiveInt("steps", s.steps);
  checkPositiveInt("corpus-trials", s.corpusTrials);
  checkPositiveInt("eval-trials", s.evalTrials);
  checkPositiveInt("batch-tokens", s.batchTokens);
  checkPositiveInt("micro-batch-tokens", s.microBatchTokens);
  checkPositiveInt("eval-batch", s.evalBatch);
  if (!(Number.isFinite(s.prefixCacheMB) && s.prefixCacheMB >= 0))
    throw new UsageError(`--prefix-cache-mb must be a number ≥ 0, got ${s.prefixCacheMB}`);
  if (!(Number.isInteger(s.threads) && s.threads >= 0))
    throw new UsageError(`--threads must be an integer ≥ 0 (0: one per core), got ${s.threads}`);
  if (!(Number.isFinite(s.lr) && s.lr > 0)) throw new UsageError(`--lr must be a number > 0, got ${s.lr}`);
  if (!(Number.isInteger(s.actionWeight) && s.actionWeight >= 1 && s.actionWeight <= 255))
    throw new UsageError(`--action-weight must be an integer in [1, 255], got ${s.actionWeight}`);
  // Every torch warm start may weigh its reflections; absent, they weigh 1 as they always did.
  if (opts.remarkWeight !== undefined) s.remarkWeight = opts.remarkWeight;
  if (
    s.remarkWeight !== undefined &&
    !(Number.isInteger(s.remarkWeight) && s.remarkWeight >= 1 && s.remarkWeight <= 255)
  )
    throw new UsageError(`--remark-weight must be an integer in [1, 255], got ${s.remarkWeight}`);
  if (!(Number.isInteger(s.loraRank) && s.loraRank >= 0))
    throw new UsageError(`--lora-rank must be an integer ≥ 0 (0: full fine-tuning), got ${s.loraRank}`);
  if (!(Number.isInteger(s.warmupSteps) && s.warmupSteps >= 0))
    throw new UsageError(`warmupSteps must be an integer ≥ 0, got ${s.warmupSteps}`);
  if (!(Number.isFinite(s.unlikelihood) && s.unlikelihood >= 0))
    throw new UsageError(`--unlikelihood must be a number ≥ 0 (0: plain SFT), got ${s.unlikelihood}`);
  checkRate("tactical-rate", s.tacticalRate);
  if (s.epsilon !== undefined) checkRate("epsilon", s.epsilon);
  for (const key of [
    "reflectionFacts",
    "firstEpsilon",
    "failedShare",
    "remarkMaxTokens",
    "scoreRandomMoves",
  ] as const)
    if (opts[key] !== undefined && !("reflectionFacts" in TORCH_PRETRAIN_DEFAULTS[game]))
      throw new UsageError(`${key} is for served environments' corpus player, not ${game}`);
  if (opts.firstEpsilon !== undefined) {
    checkRate("firstEpsilon", opts.firstEpsilon);
    s.firstEpsilon = opts.firstEpsilon;
  }
  if (s.failedShare !== undefined) checkRate("failedShare", s.failedShare);
  if (opts.scoreRandomMoves !== undefined) s.scoreRandomMoves = opts.scoreRandomMoves;
  if (s.remarkMaxTokens !== undefined && !(Number.isInteger(s.remarkMaxTokens) && s.remarkMaxTokens >= 24))
    throw new UsageError(`remarkMaxTokens must be an integer ≥ 24, got ${s.remarkMaxTokens}`);
  if (s.reflectionFacts !== undefined && !(Number.isInteger(s.reflectionFacts) && s.reflectionFacts >= 1))
    throw new UsageError(`reflectionFacts must be an integer ≥ 1, got ${s.reflectionFacts}`);
  if (s.reflectionMoves !== undefined && !(Number.isInteger(s.reflectionMoves) && s.reflectionMoves >= 0))
    throw new UsageError(`--reflection-moves must be an integer ≥ 0 (0: all), got ${s.reflectionMoves}`);
  checkRate("malformedRate", s.malformedRate);
  checkRate("minLrRatio", s.minLrRatio);
  expectChoice("dtype", s.dtype, TORCH_DTYPES);
  if (!TORCH_DEVICE_PATTERN.test(s.device))
    throw new UsageError(`--device must be cpu, cuda or cuda:N, got "${s.device}"`);
  return s;
}

/** The base model directory, or a UsageError naming --model. */
function checkModelDir(model: string): string {
  const dir = resolve(model);
  if (!existsSync(join(dir, "config.json")))
    throw new UsageError(`--model ${model} is not a Hugging Face model directory (no config.json in it)`);
  return dir;
}

async function fileSha256(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

export async function baseModelRecord(dir: string): Promise<BaseModelRecord> {
  const weights = join(dir, "model.safetensors");
  const single = existsSync(weights) && statSync(weights).isFile();
  return { dir, name: basename(dir), sha256: single ? await fileSha256(weights) : null };
}

function torchModelConfig(model: string, s: TorchPretrainSettings, python: string | null | undefined) {
  return TorchModelSchema.parse({
    path: model,
    python: python ?? null,
    dtype: s.dtype,
    device: s.device,
    lora:
      s.loraRank > 0 ? { rank: s.loraRank, alpha: 2 * s.loraRank, targetModules: LORA_TARGET_MODULES } : null,
    microBatchTokens: s.microBatchTokens,
    prefixCacheMB: s.prefixCacheMB,
  });
}

function workerOptions(
  s: TorchPretrainSettings,
  given: Partial<TorchWorkerOptions> | undefined,
): Partial<TorchWorkerOptions> {
  if (s.threads === 0) return given ?? {};
  return { ...given, env: { ...given?.env, OMP_NUM_THREADS: String(s.threads) } };
}

/** Wall time of the phases, lap by lap. */
class Stopwatch {
  private last = performance.now();
  readonly start = this.last;
  lap(): number {
    const now = performance.now();
    const d = now - this.last;
    this.last = now;
    return d;
  }
}

/** A run's fixed inputs, checked. */
/** The game's default knobs with the given ones laid over; knobs of other games are refused. */
export function resolveTorchKnobs(game: TorchPretrainGame, given: TaskKnobs = {}): TaskKnobs {
  const foreign = Object.entries(given).filter(([g, k]) => g !== game && k !== undefined);
  if (foreign.length > 0)
    throw new UsageError(`--knobs: ${foreign.map(([g]) => g).join(", ")} knobs do not apply to ${game}`);
  const defaults = TORCH_PRETRAIN_KNOBS[game] as Record<string, object | undefined>;
  const mine = (given as Record<string, object | undefined>)[game];
  if (mine === undefined) return TORCH_PRETRAIN_KNOBS[game];
  return { [game]: { ...(defaults[game] ?? {}), ...mine } } as TaskKnobs;
}

interface TorchRun {
  game: TorchPretrainGame;
  settings: TorchPretrainSettings;
  taskKnobs: TaskKnobs;
  seed: number;
  modelDir: string;
  out: string;
  root: Rng;
  stream: NodeJS.WriteStream | null;
  say: (line: string) => void;
  /** `game: remote`: the served environments; null for the built-in games. */
  served: ServedPretrain | null;
}

function prepareRun(opts: TorchPretrainOptions): TorchRun {
  const game = expectChoice("game (with --backend torch)", opts.game, TORCH_PRETRAIN_GAMES);
  const settings = resolveTorchSettings(game, opts);
  const taskKnobs = resolveTorchKnobs(game, opts.taskKnobs);
  const seed = opts.seed ?? 0;
  if (!(Number.isInteger(seed) && seed >= 0))
    throw new UsageError(`--seed must be an integer ≥ 0, got ${seed}`);
  const served = opts.served ?? null;
  if (game === "remote" && served === null)
    throw new UsageError(
      "--game remote warm-starts on a served environment with an expert: give it in --config FILE (configs/pretrain/alfworld-smollm2.yaml)",
    );
  if (game !== "remote" && served !== null)
    throw new UsageError(`a served environment is for --game remote, not ${game}`);
  const label = served ? served.record.name : game;
  const modelDir = checkModelDir(opts.model);
  const out = resolve(opts.out ?? join(dirname(modelDir), `${basename(modelDir)}-${label}-warm`));
  if (out === modelDir)
    throw new UsageError(`--out must differ from --model (${out} would replace the base)`);
  const stream = opts.progress === undefined ? process.stderr : opts.progress;
  const say = (line: string) => {
    stream?.write(`pretrain ${game} (torch): ${line}\n`);
  };
  return {
    game,
    settings,
    taskKnobs,
    seed,
    modelDir,
    out,
    root: served
      ? Rng.seeded(seed).derive("pretrain", game, label)
      : Rng.seeded(seed).derive("pretrain", game),
    stream,
    say,
    served,
  };
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** The corpus: the served environment's expert player, or the built-in game's scripted player. */
function playCorpus(r: TorchRun) {
  if (r.served)
    return buildServedCorpus({
      def: r.served.corpus,
      trials: r.settings.corpusTrials,
      maxTurns: r.served.maxTurns,
      rng: r.root.derive("corpus"),
      malformedRate: r.settings.malformedRate,
      ...(r.settings.epsilon !== undefined ? { epsilon: r.settings.epsilon } : {}),
      ...(r.settings.reflectionFacts !== undefined ? { reflectionFacts: r.settings.reflectionFacts } : {}),
      ...(r.settings.firstEpsilon !== undefined ? { firstEpsilon: r.settings.firstEpsilon } : {}),
      ...(r.settings.failedShare !== undefined ? { failedShare: r.settings.failedShare } : {}),
      ...(r.settings.remarkMaxTokens !== undefined ? { remarkMaxTokens: r.settings.remarkMaxTokens } : {}),
      ...(r.settings.scoreRandomMoves !== undefined ? { scoreRandomMoves: r.settings.scoreRandomMoves } : {}),
    });
  return buildCorpus({
    game: r.game,
    trials: r.settings.corpusTrials,
    rng: r.root.derive("corpus"),
    malformedRate: r.settings.malformedRate,
    tacticalRate: r.settings.tacticalRate,
    ...(r.settings.epsilon !== undefined ? { epsilon: r.settings.epsilon } : {}),
    ...(r.settings.reflectionMoves !== undefined ? { reflectionMoves: r.settings.reflectionMoves } : {}),
    taskOptions: taskKnobOptions(r.game, r.taskKnobs),
  });
}

async function corpusPhase(r: TorchRun) {
  const t = performance.now();
  const corpus = await playCorpus(r);
  const c = corpus.stats;
  r.say(
    `corpus of ${c.trials} trials, ${c.playResponses} play answers (${c.malformed} malformed), ` +
      `${c.reflections} reflections${corpusWinText(c)} (${seconds(performance.now() - t)})`,
  );
  if (c.served) r.say(servedCorpusText(c.served));
  return corpus;
}

/** The worker on `torch`'s model, with the run's optimizer, seed and threads; no reference model. */
function openWorker(r: TorchRun, opts: TorchPretrainOptions, torch: TorchModelConfig): Promise<TorchLearner> {
  const s = r.settings;
  return TorchLearner.open({
    torch,
    optimizer: { lr: s.lr, weightDecay: s.weightDecay, gradClip: 1 },
    seed: r.seed,
    reference: false,
    worker: workerOptions(s, opts.worker),
  });
}

async function openLearner(r: TorchRun, opts: TorchPretrainOptions, base: BaseModelRecord) {
  const t = performance.now();
  const s = r.settings;
  const torch = torchModelConfig(r.modelDir, s, opts.python);
  const learner = await openWorker(r, opts, torch);
  const info = learner.info;
  const tuning = torch.lora ? `, LoRA rank ${torch.lora.rank}` : ", full fine-tuning";
  r.say(
    `${base.name} (${info.architecture}, ${info.parameters} parameters, ${info.trainableParameters} trainable` +
      `${tuning}) on ${s.device}, ${info.precision} (${seconds(performance.now() - t)})`,
  );
  return { learner, lora: torch.lora };
}

function unlikelyCount(examples: readonly SftExample[]): number {
  let n = 0;
  for (const e of examples) for (const ids of e.unlikely?.values() ?? []) n += ids.length;
  return n;
}

async function renderPhase(
  r: TorchRun,
  learner: TorchLearner,
  trials: readonly CorpusTrial[],
  served?: ServedCorpusStats,
) {
  const t = performance.now();
  const remarkTokens: number[] = [];
  const examples = await encodeWithTemplate(learner, trials, {
    contextLength: learner.info.contextLength,
    actionWeight: r.settings.actionWeight,
    ...(r.settings.remarkWeight !== undefined ? { remarkWeight: r.settings.remarkWeight } : {}),
    remarkTokens,
    ...(r.settings.unlikelihood > 0
      ? { unlikely: { game: r.game, tokenize: cachedTokenizer(templateTokenizer(learner)) } }
      : {}),
  });
  const stats = corpusSummary({ trials: 0, playResponses: 0, malformed: 0, reflections: 0 }, examples);
  const unlikely = unlikelyCount(examples);
  r.say(
    `${stats.tokens} corpus tokens in the model's chat template (mean ${Math.round(stats.meanTokens)} per trial, ` +
      `${stats.scoredTokens} scored${r.settings.unlikelihood > 0 ? `, ${unlikely} unlikely` : ""}) (${seconds(performance.now() - t)})`,
  );
  if (served) {
    const cap = served.remarkTokens.cap;
    served.templateRemarkTokens = {
      mean: remarkTokens.reduce((a, b) => a + b, 0) / Math.max(1, remarkTokens.length),
      max: Math.max(0, ...remarkTokens),
      overCap: remarkTokens.filter((n) => n > cap).length,
    };
    const m = served.templateRemarkTokens;
    r.say(
      `reflections in the model's template: ${m.mean.toFixed(1)} tokens on average, ${m.max} at most, ` +
        `${m.overCap} over the ${cap}-token cap (end of turn included)`,
    );
  }
  return examples;
}

/** How the SFT phase goes on from an interrupted run and saves its own progress. */
interface SftResumption {
  done: SftProgress | null;
  save: (soFar: SftSoFar, meanQ: readonly number[]) => Promise<void>;
  everyMs: number;
}

async function sftPhase(
  r: TorchRun,
  learner: TorchLearner,
  examples: readonly SftExample[],
  resumption: SftResumption,
) {
  const bar = r.stream
    ? new ProgressBar({ label: `pretrain ${r.game} (torch)`, total: r.settings.steps, stream: r.stream })
    : null;
  let tokens = 0;
  const meanQ: number[] = [...(resumption.done?.meanQ ?? [])];
  const t = performance.now();
  const sft = await runTorchSft(learner, examples, {
    ...r.settings,
    rng: r.root.derive("sft"),
    ...(resumption.done ? { done: resumption.done } : {}),
    checkpoint: { everyMs: resumption.everyMs, save: (soFar) => resumption.save(soFar, meanQ) },
    onStep: (m, step) => {
      tokens += m.batchTokens;
      const tokPerSec = Math.round(tokens / ((performance.now() - t) / 1000));
      const fields: Record<string, number> = { loss: m.loss };
      // The mean probability of an unlikely token before the step: what the term pushes down.
      if (m.unlikelyTokens > 0) {
        meanQ.push(m.unlikelyMass / m.unlikelyTokens);
        fields["unlikely q"] = meanQ[meanQ.length - 1];
      }
      bar?.update(step, { ...fields, lr: m.lr, "tok/s": tokPerSec });
    },
  });
  bar?.finish();
  const unlikely =
    meanQ.length > 0
      ? { tokens: unlikelyCount(examples), meanQFirst: meanQ[0], meanQLast: meanQ[meanQ.length - 1] }
      : null;
  return { sft, unlikely };
}

/** Samples the checks into the report (its evaluation and whether every target is met). */
async function checkInto(r: TorchRun, learner: TorchLearner, report: TorchPretrainReport): Promise<void> {
  report.evaluation = await checksPhase(r, learner);
  report.targetsMet = report.evaluation.targets.every((t) => t.met);
}

function checksPhase(r: TorchRun, learner: TorchLearner): Promise<PretrainEvaluation> {
  r.say(`sampling ${r.settings.evalTrials} fresh trials at temperature 1 …`);
  if (r.served) {
    const bar = r.stream
      ? new EvalProgressBar({ label: `pretrain ${r.game} checks`, stream: r.stream })
      : null;
    return evaluateServed({
      def: r.served.checks,
      maxTurns: r.served.maxTurns,
      policy: new TorchPolicy(learner, `pretrain-${r.served.record.name}`),
      rng: r.root.derive("eval"),
      trials: r.settings.evalTrials,
      maxBatch: r.settings.evalBatch,
      targets: TORCH_PRETRAIN_TARGETS,
      servedTargets: r.served.targets,
      transcriptsPath: join(r.out, CHECKS_TRANSCRIPTS_FILE),
      ...(bar ? { onProgress: bar.update } : {}),
    }).finally(() => bar?.finish());
  }
  return evaluatePretrained({
    game: r.game,
    policy: new TorchPolicy(learner, `pretrain-${r.game}`),
    scoreAnswers: torchAnswerScorer(learner),
    rng: r.root.derive("eval"),
    trials: r.settings.evalTrials,
    maxBatch: r.settings.evalBatch,
    targets: TORCH_PRETRAIN_TARGETS,
    taskOptions: taskKnobOptions(r.game, r.taskKnobs),
  });
}

export async function runTorchPretrain(opts: TorchPretrainOptions): Promise<TorchPretrainReport> {
  const r = prepareRun(opts);
  const base = await baseModelRecord(r.modelDir);
  if (opts.resume) {
    const plan = planTorchResume({ ...r, base, ...servedIdentity(r) });
    if (plan.kind === "done") {
      r.say(`${r.out} is complete, checks included: nothing to resume`);
      return plan.report;
    }
    if (plan.kind === "checks") return resumeChecks(r, opts, plan.report);
  }
  return trainAndCheck(r, opts, base);
}

/**
 * The corpus the warm start with these options would train on, played and tallied without loading
 * the model (`--corpus-only`): seconds, not the SFT's tens of minutes, to size ε and the trials.
 */
export async function previewTorchCorpus(
  opts: TorchPretrainOptions,
): Promise<{ stats: CorpusStats; settings: TorchPretrainSettings; seconds: number }> {
  const r = prepareRun(opts);
  const clock = new Stopwatch();
  const corpus = await playCorpus(r);
  return { stats: corpus.stats, settings: r.settings, seconds: clock.lap() / 1000 };
}

/** The checks of a warm start that was trained and exported by an earlier, interrupted run. */
async function resumeChecks(
  r: TorchRun,
  opts: TorchPretrainOptions,
  report: TorchPretrainReport,
): Promise<TorchPretrainReport> {
  if (opts.skipEvaluation) return report;
  r.say(`resuming ${r.out}: trained and exported by an earlier run, its checks missing`);
  const clock = new Stopwatch();
  const earlierMs = report.timings.totalMs;
  const learner = await openWorker(
    r,
    opts,
    torchModelConfig(r.out, { ...r.settings, loraRank: 0 }, opts.python),
  );
  clock.lap(); // the evaluation's time starts once the model is loaded, as in a fresh run
  try {
    report.checksRun = collectRunMeta("torch");
    await checkInto(r, learner, report);
    report.timings.evalMs = clock.lap();
    await writeReport(r.out, report, clock, earlierMs);
    return report;
  } finally {
    await learner.close();
  }
}

/** What names a served warm start beyond the built-in ones' fields: its server, environment and configs. */
function servedIdentity(r: TorchRun): { env?: NonNullable<TorchPretrainReport["env"]> } {
  return r.served ? { env: r.served.record } : {};
}

/** Where the SFT starts: an interrupted run's checkpoint with `--resume`, else step 0 (an old checkpoint removed). */
async function sftStart(
  r: TorchRun,
  opts: TorchPretrainOptions,
  base: BaseModelRecord,
): Promise<SftProgress | null> {
  const dir = sftCheckpointDir(r.out);
  if (opts.resume) return readSftCheckpoint({ ...r, base, ...servedIdentity(r) });
  if (existsSync(dir)) {
    r.say(`removing the SFT checkpoint of an earlier run, ${dir} (--resume goes on from one)`);
    await removeSftCheckpoint(r.out);
  }
  return null;
}

function sftResumption(
  r: TorchRun,
  opts: TorchPretrainOptions,
  learner: TorchLearner,
  base: BaseModelRecord,
  done: SftProgress | null,
  clock: Stopwatch,
): SftResumption {
  const seconds = opts.checkpointSeconds ?? (r.settings.loraRank > 0 ? 120 : 900);
  if (!(Number.isFinite(seconds) && seconds >= 0))
    throw new UsageError(`--checkpoint-seconds must be a number ≥ 0, got ${seconds}`);
  const identity = {
    ...servedIdentity(r),
    backend: "torch" as const,
    game: r.game,
    seed: r.seed,
    taskKnobs: r.taskKnobs,
    base,
    settings: r.settings,
  };
  return {
    done,
    everyMs: seconds * 1000,
    save: (soFar, meanQ) =>
      saveSftCheckpoint(learner, sftCheckpointDir(r.out), identity, {
        ...soFar,
        learnerStep: learner.step,
        meanQ: [...meanQ],
        runMs: (done?.runMs ?? 0) + performance.now() - clock.start,
      }),
  };
}

async function trainAndCheck(
  r: TorchRun,
  opts: TorchPretrainOptions,
  base: BaseModelRecord,
): Promise<TorchPretrainReport> {
  const meta = collectRunMeta("torch");
  const clock = new Stopwatch();
  const timings: TorchPhaseTimes = {
    corpusMs: 0,
    loadMs: 0,
    renderMs: 0,
    sftMs: 0,
    saveMs: 0,
    evalMs: 0,
    totalMs: 0,
  };
  const done = await sftStart(r, opts, base);
  const corpus = await corpusPhase(r);
  timings.corpusMs = clock.lap();
  const { learner, lora } = await openLearner(r, opts, base);
  try {
    timings.loadMs = clock.lap();
    const trained = await trainAndExport(r, opts, { base, learner, corpus, done, clock, timings });
    const report: TorchPretrainReport = {
      backend: "torch",
      game: r.game,
      seed: r.seed,
      out: r.out,
      settings: r.settings,
      taskKnobs: r.taskKnobs,
      ...(r.served ? { env: r.served.record } : {}),
      base,
      model: { ...learner.info, lora },
      ...trained,
      evaluation: null,
      targetsMet: false,
      timings,
      run: meta,
      ...(done ? { sftResumedAfterStep: done.steps } : {}),
    };
    // Written now too, so a directory whose checks fail still says which base it came from.
    const earlierMs = done?.runMs ?? 0;
    await writeReport(r.out, report, clock, earlierMs);
    await removeSftCheckpoint(r.out);
    if (!opts.skipEvaluation) await checkInto(r, learner, report);
    timings.evalMs = clock.lap();
    await writeReport(r.out, report, clock, earlierMs);
    return report;
  } finally {
    await learner.close();
  }
}

/** Render, SFT (from an interrupted run's checkpoint when there is one) and export; their times into `timings`. */
async function trainAndExport(
  r: TorchRun,
  opts: TorchPretrainOptions,
  c: {
    base: BaseModelRecord;
    learner: TorchLearner;
    corpus: { stats: CorpusStats; trials: readonly CorpusTrial[] };
    done: SftProgress | null;
    clock: Stopwatch;
    timings: TorchPhaseTimes;
  },
): Promise<Pick<TorchPretrainReport, "export" | "corpus" | "sft" | "unlikely">> {
  const { learner, done, clock, timings } = c;
  const examples = await renderPhase(r, learner, c.corpus.trials, c.corpus.stats.served);
  timings.renderMs = clock.lap();
  if (done) {
    await restoreSftCheckpoint(learner, r.out, done);
    r.say(`going on after SFT step ${done.steps} of ${r.settings.steps}, from ${sftCheckpointDir(r.out)}`);
  }
  const resumption = sftResumption(r, opts, learner, c.base, done, clock);
  const { sft, unlikely } = await sftPhase(r, learner, examples, resumption);
  timings.sftMs = sft.ms; // an interrupted run's SFT time up to its checkpoint included
  clock.lap();
  const exported = await learner.exportHf(r.out);
  timings.saveMs = clock.lap();
  r.say(`wrote ${r.out}${exported.merged ? " (LoRA merged into the base)" : ""}`);
  return {
    export: { format: "hf", merged: exported.merged, dtype: "float32" },
    corpus: corpusSummary(c.corpus.stats, examples),
    sft: summarizeSft(sft),
    unlikely,
  };
}

/** Writes the report, its total wall time this run's plus `earlierMs` (a resumed run's predecessor). */
async function writeReport(
  out: string,
  report: TorchPretrainReport,
  clock: Stopwatch,
  earlierMs = 0,
): Promise<void> {
  report.timings.totalMs = earlierMs + performance.now() - clock.start;
  await writeFileAtomic(join(out, REPORT_FILE), `${JSON.stringify(report, null, 2)}\n`);
}
