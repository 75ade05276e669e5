/**
 * `mage pretrain`: the supervised warm start of the embedded model (the paper's "base LLM"):
 * corpus of unskilled scripted play → BPE tokenizer trained on it → SFT of a fresh model on
 * whole transcripts → atomic checkpoint → sampled checks written to `pretrain-report.json`.
 *
 * Every random choice is keyed from `Rng.seeded(seed).derive("pretrain", game)`:
 * `corpus`, `init`, `sft` (batch order) and `eval` (fresh trials and their samples), so a seed
 * fixes the run (bit for bit with the js and wasm kernels).
 */
import { join } from "node:path";
import { writeFileAtomic } from "../../core/atomic-write.js";
import { UsageError } from "../../core/errors.js";
import { readJsonOrNull } from "../../core/json-file.js";
import { Rng } from "../../core/rng.js";
import { saveCheckpoint } from "../../model/checkpoint.js";
import { type ModelConfig, parameterCount, presetConfig } from "../../model/config.js";
import { selectKernels } from "../../model/kernels/select.js";
import type { Kernels } from "../../model/kernels/types.js";
import { Learner } from "../../model/learner.js";
import { paramsToMap } from "../../model/params-io.js";
import { type Tokenizer, trainTokenizer } from "../../model/tokenizer.js";
import { EmbeddedPolicy } from "../../policy/embedded.js";
import type { GenerateRequest, Generation, Policy } from "../../policy/types.js";
import type { TaskOptions } from "../../tasks/types.js";
import { type TaskKnobs, taskKnobOptions } from "../config.js";
import { ProgressBar } from "../progress.js";
import { collectRunMeta, type RunMeta } from "../run-meta.js";
import {
  buildCorpus,
  type Corpus,
  type CorpusStats,
  checkPretrainGame,
  corpusTexts,
  heedsReflections,
  type PretrainGame,
} from "./corpus.js";
import { embeddedAnswerScorer, evaluatePretrained, type PretrainEvaluation } from "./evaluate.js";
import {
  encodeTrial,
  runSft,
  type SftExample,
  type SftResult,
  type SftSummary,
  summarizeSft,
} from "./sft.js";
import { SftShardPool } from "./sft-shards.js";

export interface PretrainSettings {
  preset: string;
  steps: number;
  /** Trials in the corpus. */
  corpusTrials: number;
  /** Fresh trials sampled for the checks. */
  evalTrials: number;
  /** Tokens per optimizer step (whole transcripts packed up to this). */
  batchTokens: number;
  /** Peak learning rate (linear warmup over `warmupSteps`, cosine to `lr · minLrRatio`). */
  lr: number;
  /** Standard deviation of the normal init of the weight matrices (see docs/design.md, "Pretraining"). */
  initStd: number;
  warmupSteps: number;
  minLrRatio: number;
  weightDecay: number;
  /** Score the whole transcript (prompts and feedback too), not only the model's answers. */
  contextLoss: boolean;
  /** Share of play answers that are deliberately malformed in the corpus. */
  malformedRate: number;
  /** Loss weight of the tokens of well-formed play answers (every other scored token weighs 1). */
  actionWeight: number;
  /**
   * Share of the corpus player's TicTacToe moves that take a one-move win, else block the
   * opponent's, when there is one (0: random legal moves only; other games ignore it).
   */
  tacticalRate: number;
  /**
   * Puzzles: share of the corpus player's moves that are random instead of the solver's
   * (1: the random player; Kuhn and TicTacToe ignore it). Calibrated in docs/design.md.
   */
  epsilon: number;
  /**
   * Sokoban: most moves a corpus reflection lists, the rest counted (0: every move, which can run
   * past the 48-token answer limit; docs/design.md, puzzles). Other games ignore it.
   */
  reflectionMoves: number;
  /**
   * MineSweeper: the corpus player's later attempts never reveal a cell that an earlier
   * reflection named a mine (docs/design.md, puzzles). Other games reject it.
   */
  heedReflections: boolean;
  /**
   * Each batch's gradient is computed in this many shards, one thread each (see sft-shards.ts).
   * The result depends on this count, not on how many cores run it.
   */
  shards: number;
}

/**
 * Version of the pretraining recipe (corpus, compact prompts, loss). Bump it when a change makes
 * models pretrained with the same settings differ, so experiment grids pretrain afresh.
 * 2: coordinate TicTacToe boards and the whole-transcript loss.
 * 3: data-parallel SFT in 2 shards; TicTacToe weighs its play answers ×4 and runs 1,200 steps.
 */
export const PRETRAIN_RECIPE = 3;

/**
 * Defaults per game, sized for the 5-minute budget on 2 cores (see docs/design.md, "Pretraining").
 * The `tiny` preset: `small` costs ~3.5× per token and learned nothing more per CPU second in
 * the budget. Init std 0.1 and the whole-transcript loss are what let the small model learn to
 * read the board (see the design notes for the measurements). The puzzles' defaults are unmeasured.
 */
/** What every game shares; the per-game entries state only what differs. */
const SHARED_SETTINGS = {
  preset: "tiny",
  batchTokens: 4096,
  lr: 3e-3,
  initStd: 0.1,
  contextLoss: true,
  warmupSteps: 10,
  minLrRatio: 0.1,
  weightDecay: 0.01,
  malformedRate: 0.02,
  actionWeight: 1,
  tacticalRate: 0,
  epsilon: 1,
  reflectionMoves: 0,
  heedReflections: false,
  shards: 2,
} as const;

export const PRETRAIN_DEFAULTS: Record<PretrainGame, PretrainSettings> = {
  kuhn: { ...SHARED_SETTINGS, steps: 500, corpusTrials: 1500, evalTrials: 200 },
  tictactoe: { ...SHARED_SETTINGS, steps: 1200, actionWeight: 4, corpusTrials: 1500, evalTrials: 60 },
  // The puzzles' corpus player is the ε-imperfect solver (issue 18), calibrated in docs/design.md.
  sokoban: { ...SHARED_SETTINGS, steps: 160, corpusTrials: 1000, evalTrials: 40, epsilon: 0.5 },
  // MineSweeper: 160 steps left a base at 9% with 48% invalid answers, below the 10-40% band; 480
  // steps with play answers weighed x4 (as TicTacToe) reach 15% (docs/design.md, puzzles).
  minesweeper: {
    ...SHARED_SETTINGS,
    steps: 480,
    actionWeight: 4,
    corpusTrials: 1000,
    evalTrials: 40,
    epsilon: 0.25,
  },
};

export interface PretrainOptions extends Partial<PretrainSettings> {
  game: string;
  /** Checkpoint directory (default `runs/pretrain-<game>`). */
  out?: string;
  seed?: number;
  /** Kernel preference: auto | js | wasm | native (MAGE_KERNELS overrides). */
  kernels?: string;
  /** Progress bar and phase lines go here (default process.stderr); null silences them. */
  progress?: NodeJS.WriteStream | null;
  /** Skip the sampled checks (tests of the training path only). */
  skipEvaluation?: boolean;
  /** Task knobs of the corpus and the checks: the puzzles' difficulty, TicTacToe's cell format. */
  taskKnobs?: TaskKnobs;
}

export interface PretrainReport {
  game: PretrainGame;
  seed: number;
  out: string;
  settings: PretrainSettings;
  model: { preset: string; config: ModelConfig; parameters: number };
  kernels: string;
  corpus: CorpusStats & { tokens: number; scoredTokens: number; meanTokens: number; maxTokens: number };
  tokenizer: { vocabSize: number };
  /** The knobs the corpus and checks played with (`recordedKnobs`); `mage train` checks a base against them. */
  taskKnobs: TaskKnobs;
  sft: SftSummary;
  evaluation: PretrainEvaluation | null;
  /** Every target met (false when the checks were skipped). */
  targetsMet: boolean;
  timings: PhaseTimes;
  /** CPU time of this process (user + system, all threads) per phase; on a busy machine wall time overstates the cost. */
  cpu: PhaseTimes;
  run: RunMeta;
}

export interface PhaseTimes {
  corpusMs: number;
  tokenizerMs: number;
  sftMs: number;
  saveMs: number;
  evalMs: number;
  totalMs: number;
}

export const REPORT_FILE = "pretrain-report.json";

/** The parsed `pretrain-report.json` in `dir`, or null when there is none or it is not JSON. */
export function readPretrainReport(dir: string): unknown {
  return readJsonOrNull(join(dir, REPORT_FILE));
}

/** CPU milliseconds (user + system) of this process so far. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

function checkPositiveInt(name: string, v: number): void {
  if (!(Number.isInteger(v) && v > 0)) throw new UsageError(`${name} must be a positive integer, got ${v}`);
}

/**
 * The embedded policy, with each request's `maxTokens` lowered to what the context still holds
 * (a request with no room left gets an empty "length" reply), so a long sampled trial ends
 * early instead of aborting the rollout.
 */
export function contextFittingPolicy(policy: EmbeddedPolicy): Policy {
  const limit = policy.config.contextLength;
  return {
    name: policy.name,
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      const out: (Generation | null)[] = [];
      const fitting: GenerateRequest[] = [];
      for (const req of requests) {
        const n = policy.promptIds(req).length;
        const room = limit - n;
        if (room <= 0) {
          out.push({ text: "", tokenIds: [], logprobs: [], finishReason: "length", promptTokens: n });
          continue;
        }
        out.push(null);
        fitting.push(
          room >= req.sampling.maxTokens ? req : { ...req, sampling: { ...req.sampling, maxTokens: room } },
        );
      }
      const gens = fitting.length > 0 ? await policy.generate(fitting) : [];
      let j = 0;
      return out.map((g) => g ?? gens[j++]);
    },
  };
}

/**
 * The knobs of `game` a warm start played with, as its report and checkpoint record them:
 * TicTacToe always names its cell format, so a base of either format can be checked.
 */
export function recordedKnobs(game: string, given: TaskKnobs = {}): TaskKnobs {
  const own = (given as Record<string, Record<string, unknown> | undefined>)[game] ?? {};
  const mine = Object.fromEntries(Object.entries(own).filter(([, v]) => v !== undefined));
  if (game === "tictactoe") return { tictactoe: { cells: "pair", ...mine } } as TaskKnobs;
  return Object.keys(mine).length > 0 ? ({ [game]: mine } as TaskKnobs) : {};
}

/** The settings of a run: the game's defaults under the options' own settings, checked. */
export function pretrainSettings(game: PretrainGame, opts: Partial<PretrainSettings>): PretrainSettings {
  // Only the settings' own keys: the report and checkpoint record `settings`, not the run options.
  const defined = Object.fromEntries(
    Object.entries(opts).filter(([k, v]) => v !== undefined && k in PRETRAIN_DEFAULTS[game]),
  );
  const s: PretrainSettings = { ...PRETRAIN_DEFAULTS[game], ...(defined as Partial<PretrainSettings>) };
  for (const k of ["corpusTrials", "evalTrials", "batchTokens", "shards"] as const) checkPositiveInt(k, s[k]);
  if (!(Number.isInteger(s.steps) && s.steps >= 0))
    throw new UsageError(`steps must be an integer ≥ 0, got ${s.steps}`);
  if (!(Number.isFinite(s.lr) && s.lr > 0)) throw new UsageError(`lr must be a number > 0, got ${s.lr}`);
  if (!(Number.isInteger(s.actionWeight) && s.actionWeight >= 1 && s.actionWeight <= 255))
    throw new UsageError(`actionWeight must be an integer in [1, 255], got ${s.actionWeight}`);
  if (!(Number.isFinite(s.tacticalRate) && s.tacticalRate >= 0 && s.tacticalRate <= 1))
    throw new UsageError(`tacticalRate must be a number in [0, 1], got ${s.tacticalRate}`);
  if (!(Number.isFinite(s.epsilon) && s.epsilon >= 0 && s.epsilon <= 1))
    throw new UsageError(`epsilon must be a number in [0, 1], got ${s.epsilon}`);
  if (!(Number.isInteger(s.reflectionMoves) && s.reflectionMoves >= 0))
    throw new UsageError(`reflectionMoves must be an integer ≥ 0, got ${s.reflectionMoves}`);
  if (s.heedReflections && !heedsReflections(game))
    throw new UsageError(`heedReflections is built for minesweeper only, not ${game}`);
  if (s.heedReflections && s.epsilon === 1)
    throw new UsageError("heedReflections needs epsilon < 1 (the random player heeds nothing)");
  if (!(Number.isFinite(s.initStd) && s.initStd > 0))
    throw new UsageError(`initStd must be a number > 0, got ${s.initStd}`);
  if (!(Number.isInteger(s.warmupSteps) && s.warmupSteps >= 0))
    throw new UsageError(`warmupSteps must be an integer ≥ 0, got ${s.warmupSteps}`);
  // A run shorter than the warmup warms up over all but its last step.
  s.warmupSteps = Math.min(s.warmupSteps, Math.max(0, s.steps - 1));
  return s;
}

/** Wall and CPU time of the run's phases, one lap per phase. */
class PhaseClock {
  private readonly wall0 = performance.now();
  private readonly cpu0 = cpuMs();
  private wall = this.wall0;
  private cpu = this.cpu0;

  /** Wall and CPU milliseconds since the last lap. */
  lap(): { wallMs: number; cpuMs: number } {
    const wall = performance.now();
    const cpu = cpuMs();
    const out = { wallMs: wall - this.wall, cpuMs: cpu - this.cpu };
    this.wall = wall;
    this.cpu = cpu;
    return out;
  }

  totalWallMs(): number {
    return performance.now() - this.wall0;
  }

  totalCpuMs(): number {
    return cpuMs() - this.cpu0;
  }
}

type Lap = ReturnType<PhaseClock["lap"]>;
type PhaseName = "corpus" | "tokenizer" | "sft" | "save" | "eval";

/** Each phase's wall and CPU milliseconds, as the report records them. */
function phaseTimes(
  clock: PhaseClock,
  laps: Record<PhaseName, Lap>,
): Pick<PretrainReport, "timings" | "cpu"> {
  const of = (key: "wallMs" | "cpuMs") => ({
    corpusMs: laps.corpus[key],
    tokenizerMs: laps.tokenizer[key],
    sftMs: laps.sft[key],
    saveMs: laps.save[key],
    evalMs: laps.eval[key],
  });
  return {
    timings: { ...of("wallMs"), totalMs: clock.totalWallMs() },
    cpu: { ...of("cpuMs"), totalMs: clock.totalCpuMs() },
  };
}

/** The corpus's counts and its token lengths once tokenized. */
export function corpusSummary(
  stats: CorpusStats,
  examples: readonly { ids: ArrayLike<number>; scored: number }[],
): PretrainReport["corpus"] {
  const lengths = examples.map((e) => e.ids.length);
  const tokens = lengths.reduce((a, b) => a + b, 0);
  return {
    ...stats,
    tokens,
    scoredTokens: examples.reduce((a, e) => a + e.scored, 0),
    meanTokens: tokens / Math.max(1, examples.length),
    maxTokens: Math.max(0, ...lengths),
  };
}

/** What every phase of one run reads. */
interface PretrainRun {
  game: PretrainGame;
  seed: number;
  out: string;
  s: PretrainSettings;
  root: Rng;
  kernels: Kernels;
  taskOptions: TaskOptions;
  say: (line: string) => void;
  stream: NodeJS.WriteStream | null;
}

export async function runPretrain(opts: PretrainOptions): Promise<PretrainReport> {
  const clock = new PhaseClock();
  const game = checkPretrainGame(opts.game);
  const s = pretrainSettings(game, opts);
  const seed = opts.seed ?? 0;
  if (!Number.isInteger(seed) || seed < 0) throw new UsageError(`seed must be an integer ≥ 0, got ${seed}`);
  const baseConfig = presetConfig(s.preset);
  const kernels = await selectKernels(opts.kernels ?? "auto");
  const stream = opts.progress === undefined ? process.stderr : opts.progress;
  const r: PretrainRun = {
    game,
    seed,
    out: opts.out ?? join("runs", `pretrain-${game}`),
    s,
    root: Rng.seeded(seed).derive("pretrain", game),
    kernels,
    // From the given knobs, not the recorded ones: a default task is built as before knobs existed.
    taskOptions: taskKnobOptions(game, opts.taskKnobs ?? {}),
    say: (line: string) => stream?.write(`${line}\n`),
    stream,
  };
  const run = collectRunMeta(kernels.name);
  const taskKnobs = recordedKnobs(game, opts.taskKnobs);

  clock.lap(); // the phases' times start here, after the set-up
  const corpus = await corpusPhase(r);
  const corpusLap = clock.lap();
  r.say(
    `pretrain ${game}: corpus of ${corpus.stats.trials} trials, ${corpus.stats.playResponses} play answers ` +
      `(${corpus.stats.malformed} malformed), ${corpus.stats.reflections} reflections${corpusWinText(corpus.stats)} ` +
      `(${(corpusLap.wallMs / 1000).toFixed(1)} s)`,
  );
  const { tokenizer, config, examples } = tokenizePhase(r, corpus, baseConfig);
  const tokenizerLap = clock.lap();
  const lengths = examples.map((e) => e.ids.length);
  const corpusTokens = lengths.reduce((a, b) => a + b, 0);
  r.say(
    `pretrain ${game}: tokenizer of ${tokenizer.vocabSize} tokens; ${corpusTokens} corpus tokens ` +
      `(mean ${Math.round(corpusTokens / examples.length)} per trial); model ${s.preset}, ` +
      `${parameterCount(config)} parameters, kernels ${kernels.name}`,
  );
  const { learner, sft } = await sftPhase(r, config, examples);
  const sftLap = clock.lap();
  await saveBase(r, { config, learner, tokenizer, taskKnobs });
  const saveLap = clock.lap();
  r.say(`pretrain ${game}: checkpoint saved to ${r.out}`);
  const evaluation = opts.skipEvaluation ? null : await checksPhase(r, learner, tokenizer);
  const evalLap = clock.lap();

  const report: PretrainReport = {
    game,
    seed,
    out: r.out,
    settings: s,
    model: { preset: s.preset, config, parameters: parameterCount(config) },
    kernels: kernels.name,
    corpus: corpusSummary(corpus.stats, examples),
    tokenizer: { vocabSize: tokenizer.vocabSize },
    taskKnobs,
    sft: summarizeSft(sft),
    evaluation,
    targetsMet: evaluation?.targets.every((x) => x.met) ?? false,
    ...phaseTimes(clock, {
      corpus: corpusLap,
      tokenizer: tokenizerLap,
      sft: sftLap,
      save: saveLap,
      eval: evalLap,
    }),
    run,
  };
  await writeFileAtomic(join(r.out, REPORT_FILE), `${JSON.stringify(report, null, 2)}\n`);
  return report;
}

/** 1. The scripted players' transcripts. */
function corpusPhase(r: PretrainRun): Promise<Corpus> {
  return buildCorpus({
    game: r.game,
    trials: r.s.corpusTrials,
    rng: r.root.derive("corpus"),
    malformedRate: r.s.malformedRate,
    tacticalRate: r.s.tacticalRate,
    epsilon: r.s.epsilon,
    reflectionMoves: r.s.reflectionMoves,
    heedReflections: r.s.heedReflections,
    taskOptions: r.taskOptions,
  });
}

/** 2. A tokenizer trained on the corpus, the model config with its vocabulary, the encoded trials. */
function tokenizePhase(r: PretrainRun, corpus: Corpus, baseConfig: ModelConfig) {
  const tokenizer = trainTokenizer(corpusTexts(corpus), { vocabSize: Math.min(1024, baseConfig.vocabSize) });
  const config = presetConfig(r.s.preset, { vocabSize: tokenizer.vocabSize });
  const examples = corpus.trials.map((trial) =>
    encodeTrial(tokenizer, trial, {
      contextLength: config.contextLength,
      contextLoss: r.s.contextLoss,
      actionWeight: r.s.actionWeight,
    }),
  );
  return { tokenizer, config, examples };
}

/** 3. SFT of a fresh model on the encoded trials, in `shards` threads, with a progress bar. */
async function sftPhase(
  r: PretrainRun,
  config: ModelConfig,
  examples: SftExample[],
): Promise<{ learner: Learner; sft: SftResult }> {
  const { s } = r;
  const t = performance.now();
  const learner = Learner.create(config, r.root.derive("init"), {
    init: { std: s.initStd },
    kernels: r.kernels,
    adamw: { weightDecay: s.weightDecay },
    schedule:
      s.steps > 0
        ? {
            kind: "cosine",
            lr: s.lr,
            warmupSteps: s.warmupSteps,
            totalSteps: s.steps,
            minLr: s.lr * s.minLrRatio,
          }
        : { kind: "constant", lr: s.lr },
    maxGradNorm: 1,
  });
  const bar = r.stream
    ? new ProgressBar({ label: `pretrain ${r.game}`, total: s.steps, stream: r.stream })
    : null;
  let tokensSoFar = 0;
  const pool = s.shards > 1 ? await SftShardPool.start(config, r.kernels, s.shards) : undefined;
  try {
    const sft = await runSft(learner, examples, {
      steps: s.steps,
      batchTokens: s.batchTokens,
      rng: r.root.derive("sft"),
      pool,
      onStep: (m, step) => {
        tokensSoFar += m.tokens;
        const secs = (performance.now() - t) / 1000;
        bar?.update(step, { loss: m.loss, lr: m.lr, "tok/s": Math.round(tokensSoFar / secs) });
      },
    });
    bar?.finish();
    return { learner, sft };
  } finally {
    await pool?.close();
  }
}

/** 4. The checkpoint: weights, tokenizer, optimizer state and what the run was. */
async function saveBase(
  r: PretrainRun,
  m: { config: ModelConfig; learner: Learner; tokenizer: Tokenizer; taskKnobs: TaskKnobs },
): Promise<void> {
  const { s, game, seed } = r;
  const optimizer = m.learner.exportState();
  await saveCheckpoint(r.out, {
    config: m.config,
    preset: s.preset,
    params: paramsToMap(m.learner.params),
    tokenizer: m.tokenizer,
    trainingState: {
      tensors: optimizer.tensors,
      json: { kind: "pretrain", game, seed, settings: s, optimizer: optimizer.meta },
    },
    meta: {
      backend: "cpu",
      kernel: r.kernels.name,
      kernels: r.kernels.name,
      pretrain: { game, seed, preset: s.preset, steps: s.steps, corpusTrials: s.corpusTrials },
      // As a trained run's checkpoint: the default knobs of `mage eval --checkpoint`.
      taskKnobs: m.taskKnobs,
    },
  });
}

/** 5. The sampled checks on fresh trials. */
function checksPhase(r: PretrainRun, learner: Learner, tokenizer: Tokenizer): Promise<PretrainEvaluation> {
  const policy = new EmbeddedPolicy({
    params: learner.params,
    tokenizer,
    kernels: r.kernels,
    name: `pretrain-${r.game}`,
  });
  r.say(`pretrain ${r.game}: sampling ${r.s.evalTrials} fresh trials at temperature 1 …`);
  return evaluatePretrained({
    game: r.game,
    policy: contextFittingPolicy(policy),
    scoreAnswers: embeddedAnswerScorer(learner.params, tokenizer, r.kernels),
    rng: r.root.derive("eval"),
    trials: r.s.evalTrials,
    taskOptions: r.taskOptions,
  });
}

/** The scripted player's success, for the corpus line: ", won 73.4% (46.6% at attempt 1)". */
export function corpusWinText(stats: { trials: number; won?: number; wonFirst?: number }): string {
  if (stats.trials === 0) return "";
  const pct = (n: number) => `${((100 * n) / stats.trials).toFixed(1)}%`;
  return `, won ${pct(stats.won ?? 0)} (${pct(stats.wonFirst ?? 0)} at attempt 1)`;
}
