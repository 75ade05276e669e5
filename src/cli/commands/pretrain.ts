/**
 * `mage pretrain`: the supervised warm start of the embedded model on transcripts of unskilled
 * scripted players (see `src/train/pretrain/run.ts`). Writes a checkpoint directory with
 * `pretrain-report.json` and prints the checks against the model issue's targets.
 */
import { expectChoice, UsageError } from "../../core/errors.js";
import { formatTactics } from "../../evaluate/tictactoe-tactics.js";
import { PRESET_NAMES } from "../../model/config.js";
import { KERNEL_PREFERENCES } from "../../model/kernels/select.js";
import { parseKnobsArg, type TaskKnobs } from "../../train/config.js";
import { PRETRAIN_GAMES } from "../../train/pretrain/corpus.js";
import type { PretrainEvaluation } from "../../train/pretrain/evaluate.js";
import { corpusWinText, type PretrainReport, REPORT_FILE, runPretrain } from "../../train/pretrain/run.js";
import { loadServedPretrainConfig, openServedPretrain } from "../../train/pretrain/served-config.js";
import { servedCorpusText } from "../../train/pretrain/served-corpus.js";
import { formatTargetValue } from "../../train/pretrain/target-text.js";
import {
  previewTorchCorpus,
  runTorchPretrain,
  TORCH_DTYPES,
  TORCH_PRETRAIN_GAMES,
  type TorchPretrainReport,
} from "../../train/pretrain/torch-run.js";
import { intFlag, parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE =
  "mage pretrain --game kuhn|tictactoe|sokoban|minesweeper --backend torch --model DIR [--out DIR] [--steps N] [--lr X] [--lora-rank R] " +
  "[--seed S] [--eval-trials N] [--corpus-trials N] [--batch-tokens N] [--micro-batch-tokens N] [--action-weight N] [--remark-weight N] " +
  "[--tactical-rate X] [--unlikelihood A] [--epsilon X] [--reflection-moves N] [--knobs YAML] [--device cpu|cuda|cuda:N] [--dtype float32|bfloat16|float16|auto] [--threads N] [--prefix-cache-mb N] [--eval-batch N] [--checkpoint-seconds S] [--resume] [--json]\n" +
  "  --backend torch: warm-starts a local Hugging Face model (LoRA rank 16 on every linear layer; --lora-rank 0: full\n" +
  "    fine-tuning) and writes it, merged, as a plain model directory (default: <model>-<game>-warm beside it)\n" +
  "  --resume (torch): a warm start in --out cut off during its SFT goes on from its last SFT checkpoint\n" +
  "    (<out>.sft-checkpoint, written every --checkpoint-seconds: default 120 with LoRA, 900 for full fine-tuning,\n" +
  "    0: every step; removed at the end);\n" +
  "    one whose checks were cut off gets them sampled from its exported model; a complete one is printed as it is;\n" +
  "    the settings must be those it was trained with, except --threads, --prefix-cache-mb and --eval-batch (most\n" +
  "    trials sampled in one call, default 64: lower it when the checks run out of memory)\n" +
  "  --unlikelihood: TicTacToe and MineSweeper, weight of a term that pushes down the tokens of taken or revealed\n" +
  "    cells' answers (0: plain SFT; default 16 for both)\n" +
  "  --knobs (torch): TicTacToe's and MineSweeper's cell format, \"cells: digits\" (the default: answers\n" +
  '    <action>23</action>) or "cells: pair"; the puzzles\' difficulty as below\n' +
  "  --remark-weight (torch): loss weight of the reflections' tokens (default 1; served environments 4)\n" +
  "mage pretrain --config FILE [--model DIR] [--out DIR] [--seed S] [--epsilon X] [--first-epsilon X] [--reflection-facts N] [--failed-share X] [--remark-max-tokens N] [--corpus-only] " +
  "[the torch flags above: --steps, --lr, --corpus-trials, --eval-trials, --threads, --resume, …]\n" +
  "  a warm start on a served environment with an expert (configs/pretrain/*.yaml; the flags override its settings)\n" +
  "  --epsilon: share of the corpus expert's answers that are random legal actions; --first-epsilon: the share at\n" +
  "    attempt 1 (default: --epsilon; higher makes first attempts fail, so later ones show the reflection at work)\n" +
  "  --failed-share: share of corpus trials whose attempt 1 explores part of the way and is lost (default 0.5),\n" +
  "    so that their reflections lead the later attempts; --remark-max-tokens: a corpus reflection's token cap (48)\n" +
  "  --corpus-only: play the corpus the warm start would train on and print its tally (trials won, reflections),\n" +
  "    without loading the model: seconds, to size the ε settings and --corpus-trials before a long SFT\n" +
  "mage pretrain --game kuhn|tictactoe|sokoban|minesweeper [--preset tiny|small|base] [--out DIR] " +
  "[--steps N] [--seed S] [--kernels auto|js|wasm|native] [--corpus-trials N] [--eval-trials N] " +
  "[--lr X] [--init-std X] [--answers-only] [--batch-tokens N] [--action-weight N] [--tactical-rate X] [--epsilon X] [--reflection-moves N] [--heed-reflections] [--knobs YAML] [--shards N] [--json]\n" +
  "  --epsilon: puzzles, share of the corpus player's moves that are random instead of the solver's\n" +
  "  --reflection-moves: most moves (Sokoban) or cells (MineSweeper) a corpus reflection lists, the rest counted\n" +
  "    (0: all; torch default 5 and 3)\n" +
  "  --heed-reflections: MineSweeper, later corpus attempts never reveal a cell an earlier reflection named a mine\n" +
  '  --knobs: puzzles, the levels\' difficulty, e.g. "roomSize: [7, 7], boxes: 2" or "mines: 4"; TicTacToe and MineSweeper, "cells: digits"';

function numberFlag(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n <= 0)
    throw new UsageError(`--${name} must be a number > 0, got "${v}"`);
  return n;
}

function weightFlag(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n < 0)
    throw new UsageError(`--${name} must be a number ≥ 0, got "${v}"`);
  return n;
}

function rateFlag(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n < 0 || n > 1)
    throw new UsageError(`--${name} must be a number in [0, 1], got "${v}"`);
  return n;
}

function pct(x: number): string {
  return `${(100 * x).toFixed(1)}%`;
}

const BACKENDS = ["embedded", "torch"] as const;
const EMBEDDED_ONLY_FLAGS = ["preset", "kernels", "init-std", "answers-only", "shards", "heed-reflections"];
const TORCH_ONLY_FLAGS = [
  "model",
  "lora-rank",
  "device",
  "dtype",
  "micro-batch-tokens",
  "threads",
  "prefix-cache-mb",
  "unlikelihood",
  "resume",
  "checkpoint-seconds",
  "eval-batch",
  "remark-weight",
];

/** A UsageError when a flag of the other backend is given. */
function checkBackendFlags(backend: (typeof BACKENDS)[number], values: Record<string, unknown>): void {
  const foreign = backend === "torch" ? EMBEDDED_ONLY_FLAGS : TORCH_ONLY_FLAGS;
  const given = foreign.filter((f) => values[f] !== undefined && values[f] !== false);
  if (given.length === 0) return;
  const names = given.map((f) => `--${f}`).join(", ");
  throw new UsageError(
    backend === "torch"
      ? `${names}: only for the embedded model, not with --backend torch`
      : `${names}: only with --backend torch`,
  );
}

/**
 * Below this probability mass of the canonical answers, an opening's exact entropy is over answers
 * the model seldom gives (a probe once scored `(r, c)` answers of a model that answers `23`).
 */
const LOW_CANDIDATE_MASS = 0.5;

function successText(at: readonly number[]): string {
  return at.map(pct).join("  ");
}

/** The sampled checks' lines, shared by both backends' summaries. */
export function formatChecks(e: PretrainEvaluation, evalMs: number): string[] {
  const lines = [
    `  checks   ${e.trials} fresh trials at temperature 1: ${e.validPlayAnswers}/${e.playAnswers} play answers valid, ${e.validRemarks}/${e.reflections} remarks valid${e.informativeRemarks !== undefined ? `, ${e.informativeRemarks} informative` : ""}  [${(evalMs / 1000).toFixed(1)} s]`,
  ];
  for (const t of e.targets) lines.push(`    ${t.met ? "ok  " : "MISS"} ${t.name}: ${formatTargetValue(t)}`);
  if (e.successAt) lines.push(`    success@k ${successText(e.successAt)} (k = 1..${e.successAt.length})`);
  for (const [category, c] of Object.entries(e.byCategory ?? {}))
    lines.push(`      ${category} (${c.trials} trials): ${successText(c.successAt)}`);
  const sampled = Object.entries(e.entropy.sampledBySeat)
    .map(([seat, b]) => `${seat} ${b.toFixed(2)}`)
    .join(", ");
  if (sampled) lines.push(`    sampled first-answer entropy (bits, plug-in): ${sampled}`);
  const low = e.entropy.states.filter((s) => s.mass < LOW_CANDIDATE_MASS);
  if (low.length > 0)
    lines.push(
      `    warning: at ${low.length} opening(s) the scored answers hold only ${Math.min(...low.map((s) => s.mass)).toPrecision(2)} of the first decision's probability, so its entropy describes answers the model seldom gives`,
    );
  if (e.tactics) lines.push(`    one-move tactics in the sampled play: ${formatTactics(e.tactics)}`);
  const reasons = Object.entries(e.invalidReasons);
  if (reasons.length > 0)
    lines.push(`    invalid play answers: ${reasons.map(([k, n]) => `${n}× ${k}`).join("; ")}`);
  const remarkReasons = Object.entries(e.remarkInvalidReasons ?? {});
  if (remarkReasons.length > 0)
    lines.push(`    invalid remarks: ${remarkReasons.map(([k, n]) => `${n}× ${k}`).join("; ")}`);
  if (e.remarkInformativeRate !== undefined)
    lines.push(`    informative remarks (of those judged): ${pct(e.remarkInformativeRate)}`);
  return lines;
}

/** A line naming the task knobs a warm start played with, when it has any. */
function knobsLines(knobs: TaskKnobs | undefined): string[] {
  const set = Object.entries(knobs ?? {}).filter(([, k]) => k !== undefined && Object.keys(k).length > 0);
  return set.map(([game, k]) => `  task     ${game} knobs ${JSON.stringify(k)}`);
}

/** The human-readable summary of a torch warm start's report. */
export function formatTorchPretrainReport(r: TorchPretrainReport): string {
  const sec = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const t = r.timings;
  const lines = [
    `mage pretrain --game ${r.env ? `remote (${r.env.name} at ${r.env.url})` : r.game} --backend torch: ${r.base.name} (${r.model.architecture}, ${r.model.parameters} parameters, ${r.model.lora ? `LoRA rank ${r.model.lora.rank}, ${r.model.trainableParameters} trainable` : "full fine-tuning"}), ${r.settings.device} ${r.settings.dtype}`,
    `  base     ${r.base.dir} (model.safetensors sha256 ${r.base.sha256 ?? "n/a"})`,
    ...knobsLines(r.taskKnobs),
    `  corpus   ${r.corpus.trials} trials, ${r.corpus.tokens} tokens in the model's template (${r.corpus.scoredTokens} scored), ${r.corpus.playResponses} play answers (${r.corpus.malformed} malformed), ${r.corpus.reflections} reflections  [${sec(t.corpusMs + t.renderMs)}]`,
    ...servedPlayerLine(r),
    `  sft      ${r.sft.steps} steps, ${r.sft.epochs} epochs, loss ${r.sft.earlyMeanLoss.toFixed(3)} → ${r.sft.lateMeanLoss.toFixed(3)}  [load ${sec(t.loadMs)}, sft ${sec(t.sftMs)}, export ${sec(t.saveMs)}]`,
  ];
  if (r.unlikely)
    lines.push(
      `  unlikely ${r.unlikely.tokens} tokens of ${r.env ? "the answers the expert judged a waste" : "illegal answers"} (α ${r.settings.unlikelihood}): mean probability ${pct(r.unlikely.meanQFirst)} at the first step, ${pct(r.unlikely.meanQLast)} at the last`,
    );
  if (r.evaluation) lines.push(...formatChecks(r.evaluation, t.evalMs));
  if (r.sftResumedAfterStep !== undefined)
    lines.push(
      `    went on from the SFT checkpoint of an interrupted run, after step ${r.sftResumedAfterStep}`,
    );
  if (r.evaluation && r.checksRun)
    lines.push(`    checks sampled from the exported model by a --resume run (commit ${r.checksRun.commit})`);
  lines.push(
    `  wrote    ${r.out} (${r.export.merged ? "LoRA merged, " : ""}float32, ${REPORT_FILE})  total ${sec(t.totalMs)} wall`,
  );
  return lines.join("\n");
}

/** The human-readable summary of a report. */
export function formatPretrainReport(r: PretrainReport): string {
  const sec = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const lines = [
    `mage pretrain --game ${r.game}: ${r.model.preset} model (${r.model.parameters} parameters, vocab ${r.tokenizer.vocabSize}), kernels ${r.kernels}`,
    `  corpus   ${r.corpus.trials} trials, ${r.corpus.tokens} tokens, ${r.corpus.playResponses} play answers (${r.corpus.malformed} malformed), ${r.corpus.reflections} reflections  [${sec(r.timings.corpusMs + r.timings.tokenizerMs)}]`,
    ...(r.corpus.won !== undefined || r.corpus.wonFirst !== undefined
      ? [
          `  player   the scripted player won ${pct((r.corpus.won ?? 0) / r.corpus.trials)} of the corpus trials, ${pct((r.corpus.wonFirst ?? 0) / r.corpus.trials)} at attempt 1 (epsilon ${r.settings.epsilon})`,
        ]
      : []),
    ...knobsLines(r.taskKnobs),
    `  sft      ${r.sft.steps} steps, ${r.sft.epochs} epochs, loss ${r.sft.earlyMeanLoss.toFixed(3)} → ${r.sft.lateMeanLoss.toFixed(3)}  [${sec(r.timings.sftMs)}]`,
  ];
  if (r.evaluation) lines.push(...formatChecks(r.evaluation, r.timings.evalMs));
  lines.push(
    `  wrote    ${r.out} (${REPORT_FILE})  total ${sec(r.timings.totalMs)} wall, ${sec(r.cpu.totalMs)} CPU (sft ${sec(r.cpu.sftMs)}, checks ${sec(r.cpu.evalMs)})`,
  );
  return lines.join("\n");
}

const FLAGS = {
  game: { type: "string" },
  preset: { type: "string" },
  out: { type: "string" },
  steps: { type: "string" },
  seed: { type: "string" },
  kernels: { type: "string" },
  "corpus-trials": { type: "string" },
  "eval-trials": { type: "string" },
  lr: { type: "string" },
  "init-std": { type: "string" },
  "answers-only": { type: "boolean" },
  "batch-tokens": { type: "string" },
  shards: { type: "string" },
  "action-weight": { type: "string" },
  "tactical-rate": { type: "string" },
  epsilon: { type: "string" },
  "reflection-moves": { type: "string" },
  "heed-reflections": { type: "boolean" },
  knobs: { type: "string" },
  backend: { type: "string" },
  model: { type: "string" },
  "lora-rank": { type: "string" },
  device: { type: "string" },
  dtype: { type: "string" },
  "micro-batch-tokens": { type: "string" },
  threads: { type: "string" },
  "prefix-cache-mb": { type: "string" },
  unlikelihood: { type: "string" },
  resume: { type: "boolean" },
  "checkpoint-seconds": { type: "string" },
  "eval-batch": { type: "string" },
  config: { type: "string" },
  "reflection-facts": { type: "string" },
  "first-epsilon": { type: "string" },
  "failed-share": { type: "string" },
  "remark-max-tokens": { type: "string" },
  "remark-weight": { type: "string" },
  "corpus-only": { type: "boolean" },
  json: { type: "boolean", default: false },
} as const;

type FlagValues = Record<string, string | boolean | undefined>;

export const command: Command = {
  name: "pretrain",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    const { values }: { values: FlagValues } = parseFlags(argv, FLAGS, USAGE);
    if (values.config !== undefined) return runServedCommand(values);
    for (const flag of [
      "reflection-facts",
      "first-epsilon",
      "failed-share",
      "remark-max-tokens",
      "corpus-only",
    ])
      if (values[flag] !== undefined)
        throw new UsageError(`--${flag} is for a served environment's warm start (--config FILE)`);
    if (values.game === undefined)
      throw new UsageError(`--game is required; valid choices: ${PRETRAIN_GAMES.join(", ")}`);
    const backend = expectChoice("backend", (values.backend as string | undefined) ?? "embedded", BACKENDS);
    checkBackendFlags(backend, values);
    return backend === "torch" ? runTorchCommand(values) : runEmbeddedCommand(values);
  },
};

async function runEmbeddedCommand(values: FlagValues): Promise<number> {
  const str = (k: string) => values[k] as string | undefined;
  const game = expectChoice("game", str("game")!, PRETRAIN_GAMES);
  const preset =
    str("preset") === undefined ? undefined : expectChoice("preset", str("preset")!, PRESET_NAMES);
  const kernels =
    str("kernels") === undefined ? undefined : expectChoice("kernels", str("kernels")!, KERNEL_PREFERENCES);
  const report = await runPretrain({
    game,
    preset,
    kernels,
    out: str("out"),
    steps: intFlag("steps", str("steps"), { min: 1 }),
    seed: intFlag("seed", str("seed")),
    corpusTrials: intFlag("corpus-trials", str("corpus-trials"), { min: 1 }),
    evalTrials: intFlag("eval-trials", str("eval-trials"), { min: 1 }),
    batchTokens: intFlag("batch-tokens", str("batch-tokens"), { min: 1 }),
    shards: intFlag("shards", str("shards"), { min: 1 }),
    actionWeight: intFlag("action-weight", str("action-weight"), { min: 1 }),
    lr: numberFlag("lr", str("lr")),
    initStd: numberFlag("init-std", str("init-std")),
    tacticalRate: rateFlag("tactical-rate", str("tactical-rate")),
    epsilon: rateFlag("epsilon", str("epsilon")),
    reflectionMoves: intFlag("reflection-moves", str("reflection-moves"), { min: 0 }),
    heedReflections: values["heed-reflections"] ? true : undefined,
    ...(str("knobs") !== undefined ? { taskKnobs: parseKnobsArg(game, str("knobs")!) } : {}),
    contextLoss: values["answers-only"] ? false : undefined,
    progress: values.json ? null : process.stderr,
  });
  process.stdout.write(
    values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatPretrainReport(report)}\n`,
  );
  return 0;
}

async function runTorchCommand(values: Record<string, string | boolean | undefined>): Promise<number> {
  const str = (k: string) => values[k] as string | undefined;
  const model = str("model");
  if (model === undefined)
    throw new UsageError(
      "--model DIR is required with --backend torch (a local Hugging Face model directory)",
    );
  const game = expectChoice("game (with --backend torch)", str("game")!, TORCH_PRETRAIN_GAMES);
  if (game === "remote")
    throw new UsageError(
      "--game remote: give the served environment in --config FILE (configs/pretrain/alfworld-smollm2.yaml)",
    );
  const report = await runTorchPretrain({
    game,
    model,
    out: str("out"),
    seed: intFlag("seed", str("seed")),
    ...torchFlagSettings(values),
    tacticalRate: rateFlag("tactical-rate", str("tactical-rate")),
    reflectionMoves: intFlag("reflection-moves", str("reflection-moves"), { min: 0 }),
    unlikelihood: weightFlag("unlikelihood", str("unlikelihood")),
    ...(str("knobs") !== undefined ? { taskKnobs: parseKnobsArg(game, str("knobs")!) } : {}),
    resume: values.resume === true,
    checkpointSeconds: intFlag("checkpoint-seconds", str("checkpoint-seconds"), { min: 0 }),
    progress: values.json ? null : process.stderr,
  });
  process.stdout.write(
    values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatTorchPretrainReport(report)}\n`,
  );
  return 0;
}

/** `--corpus-only`: the corpus a served warm start would train on, tallied. */
async function printCorpusPreview(
  options: Parameters<typeof previewTorchCorpus>[0],
  json: boolean,
): Promise<number> {
  const { stats, settings, seconds } = await previewTorchCorpus(options);
  if (json) {
    process.stdout.write(`${JSON.stringify({ corpus: stats, settings, seconds }, null, 2)}\n`);
    return 0;
  }
  const eps = settings.firstEpsilon === undefined ? "" : `, ${settings.firstEpsilon} at attempt 1`;
  process.stdout.write(
    `corpus of ${stats.trials} trials (seed ${options.seed}, epsilon ${settings.epsilon}${eps}): ` +
      `${stats.playResponses} play answers (${stats.malformed} malformed), ${stats.reflections} reflections` +
      `${corpusWinText(stats)}; ${(stats.won ?? 0) - (stats.wonFirst ?? 0)} trials won after attempt 1  [${seconds.toFixed(1)} s]\n`,
  );
  if (stats.served) process.stdout.write(`  ${servedCorpusText(stats.served)}\n`);
  return 0;
}

/** A served warm start's corpus player: how often it won, with its ε. */
function servedPlayerLine(r: TorchPretrainReport): string[] {
  if (!r.env || r.corpus.won === undefined) return [];
  const n = r.corpus.trials;
  const pct = (k: number) => `${((100 * k) / n).toFixed(1)}%`;
  const eps = r.settings.firstEpsilon === undefined ? "" : `, ${r.settings.firstEpsilon} at attempt 1`;
  const served = r.corpus.served;
  const template = served?.templateRemarkTokens;
  return [
    `  player   the expert won ${pct(r.corpus.won)} of the corpus trials, ${pct(r.corpus.wonFirst ?? 0)} at attempt 1 (epsilon ${r.settings.epsilon}${eps})`,
    ...(served ? [`  remarks  ${servedCorpusText(served)}`] : []),
    ...(template
      ? [
          `           in the model's template: ${template.mean.toFixed(1)} tokens on average, ${template.max} at most, ${template.overCap} over the cap; loss weight ${r.settings.remarkWeight ?? 1}`,
        ]
      : []),
  ];
}

/** The torch settings both kinds of warm start take from the command line (undefined where a flag is absent; --reflection-facts is refused for built-in games before this). */
function torchFlagSettings(values: FlagValues) {
  const str = (k: string) => values[k] as string | undefined;
  return {
    steps: intFlag("steps", str("steps"), { min: 1 }),
    lr: numberFlag("lr", str("lr")),
    loraRank: intFlag("lora-rank", str("lora-rank"), { min: 0 }),
    corpusTrials: intFlag("corpus-trials", str("corpus-trials"), { min: 1 }),
    evalTrials: intFlag("eval-trials", str("eval-trials"), { min: 1 }),
    batchTokens: intFlag("batch-tokens", str("batch-tokens"), { min: 1 }),
    microBatchTokens: intFlag("micro-batch-tokens", str("micro-batch-tokens"), { min: 1 }),
    actionWeight: intFlag("action-weight", str("action-weight"), { min: 1, max: 255 }),
    epsilon: rateFlag("epsilon", str("epsilon")),
    reflectionFacts: intFlag("reflection-facts", str("reflection-facts"), { min: 1 }),
    firstEpsilon: rateFlag("first-epsilon", str("first-epsilon")),
    failedShare: rateFlag("failed-share", str("failed-share")),
    remarkMaxTokens: intFlag("remark-max-tokens", str("remark-max-tokens"), { min: 24 }),
    remarkWeight: intFlag("remark-weight", str("remark-weight"), { min: 1, max: 255 }),
    dtype: str("dtype") === undefined ? undefined : expectChoice("dtype", str("dtype")!, TORCH_DTYPES),
    device: str("device"),
    threads: intFlag("threads", str("threads"), { min: 0 }),
    prefixCacheMB: intFlag("prefix-cache-mb", str("prefix-cache-mb"), { min: 0 }),
    evalBatch: intFlag("eval-batch", str("eval-batch"), { min: 1 }),
  };
}

/** Flags that do not apply to a served environment's warm start. */
const NOT_SERVED_FLAGS = [
  "game",
  "backend",
  "knobs",
  "tactical-rate",
  "reflection-moves",
  "unlikelihood",
  ...EMBEDDED_ONLY_FLAGS,
];

/** `mage pretrain --config FILE`: a torch warm start on a served environment with an expert. */
async function runServedCommand(values: FlagValues): Promise<number> {
  const given = NOT_SERVED_FLAGS.filter((f) => values[f] !== undefined && values[f] !== false);
  if (given.length > 0)
    throw new UsageError(
      `${given.map((f) => `--${f}`).join(", ")}: not with --config (the file names the game, a served environment)`,
    );
  const str = (k: string) => values[k] as string | undefined;
  const file = loadServedPretrainConfig(str("config")!);
  const flags = Object.fromEntries(
    Object.entries(torchFlagSettings(values)).filter(([, v]) => v !== undefined),
  );
  const served = await openServedPretrain(file);
  try {
    const options = {
      ...file.settings,
      ...flags,
      game: "remote",
      model: str("model") ?? file.model,
      out: str("out") ?? file.out ?? undefined,
      seed: intFlag("seed", str("seed")) ?? file.seed,
      served,
    };
    if (values["corpus-only"] === true) return await printCorpusPreview(options, values.json === true);
    const report = await runTorchPretrain({
      ...options,
      resume: values.resume === true,
      checkpointSeconds: intFlag("checkpoint-seconds", str("checkpoint-seconds"), { min: 0 }),
      progress: values.json ? null : process.stderr,
    });
    process.stdout.write(
      values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatTorchPretrainReport(report)}\n`,
    );
    return 0;
  } finally {
    served.corpus.client.destroy();
    served.checks.client.destroy();
  }
}
