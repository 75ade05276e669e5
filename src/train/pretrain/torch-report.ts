import type { TorchModelInfo } from "../../learner/torch/learner.js";
import type { TaskKnobs, TorchModelConfig } from "../config.js";
import type { RunMeta } from "../run-meta.js";
import type { CorpusStats } from "./corpus.js";
import type { PretrainEvaluation } from "./evaluate.js";
import type { SftSummary } from "./sft.js";

/**
 * What a torch warm start is asked for and what its `pretrain-report.json` records: shared by the
 * run (torch-run.ts) and its resume (torch-resume.ts), which reads an earlier run's report.
 */

/** "remote": a served environment that declares an expert (`served-corpus.ts`, `mage pretrain --config`). */
export const TORCH_PRETRAIN_GAMES = ["kuhn", "tictactoe", "sokoban", "minesweeper", "remote"] as const;
export type TorchPretrainGame = (typeof TORCH_PRETRAIN_GAMES)[number];

export const TORCH_DTYPES = ["float32", "bfloat16", "float16", "auto"] as const;

export interface TorchPretrainSettings {
  steps: number;
  /** Trials in the corpus (the SFT sees them once at most: see docs/design.md). */
  corpusTrials: number;
  /** Fresh trials sampled for the checks. */
  evalTrials: number;
  /** Tokens per optimizer step (whole trials packed up to this). */
  batchTokens: number;
  /** Most tokens per forward/backward pass in the worker (gradient accumulation). */
  microBatchTokens: number;
  /** Peak learning rate: linear warmup over `warmupSteps`, cosine to `lr · minLrRatio`. */
  lr: number;
  warmupSteps: number;
  minLrRatio: number;
  weightDecay: number;
  /** Share of play answers that are deliberately malformed in the corpus (never scored). */
  malformedRate: number;
  /** Loss weight of the tokens of well-formed play answers. */
  actionWeight: number;
  /**
   * Loss weight of the tokens of reflections (absent: 1, the built-in games' warm starts as they
   * were). Served environments: 4 (docs/design.md, "A warm start on a served environment").
   */
  remarkWeight?: number;
  /**
   * Weight α of the unlikelihood term: at each TicTacToe or MineSweeper play answer, −log(1 − q)
   * for every token that would start a taken or revealed cell's answer (`unlikely.ts`); 0: plain
   * SFT. No effect on Kuhn and Sokoban.
   */
  unlikelihood: number;
  /** TicTacToe corpus player: share of moves that take a one-move win, else block (0: random). */
  tacticalRate: number;
  /**
   * Puzzles' corpus player: share of its moves that are random instead of the solver's (the
   * embedded defaults, issue 18). Absent for Kuhn and TicTacToe, whose players are random, so
   * their grids' warm-start keys stay as they were.
   */
  epsilon?: number;
  /**
   * Puzzles: most moves (Sokoban) or cells (MineSweeper) a corpus reflection lists, the rest
   * counted; 0 lists all. Sized so that SmolLM2's reflections fit 48 tokens. Absent for Kuhn and
   * TicTacToe, as `epsilon`.
   */
  reflectionMoves?: number;
  /** Served environments: most facts a corpus reflection states (absent for the built-in games). */
  reflectionFacts?: number;
  /**
   * Served environments: `epsilon` at a corpus trial's first attempt, where set (absent: the
   * same as `epsilon`, and the warm start's key stays as it was).
   */
  firstEpsilon?: number;
  /**
   * Served environments: the share of corpus trials whose attempt 1 is an exploring attempt that
   * is lost, so that their reflections lead later attempts (`served-corpus.ts`).
   */
  failedShare?: number;
  /** Served environments: most tokens of a corpus reflection (the reflect call's cap), estimated conservatively. */
  remarkMaxTokens?: number;
  /**
   * Served environments: whether the corpus player's ε-random moves are SFT targets (absent: they
   * are, as before, and the warm start's key stays as it was; false: unscored detours).
   */
  scoreRandomMoves?: boolean;
  /** LoRA rank on `LORA_TARGET_MODULES`, alpha twice the rank; 0: full fine-tuning. */
  loraRank: number;
  dtype: (typeof TORCH_DTYPES)[number];
  device: string;
  /** Generate calls of the checks batch at most this many requests. */
  evalBatch: number;
  /**
   * The worker's store of earlier samples' keys and values (`model.torch.prefixCacheMB`). The
   * checks' trials advance in lockstep, so a store smaller than all their conversations evicts
   * each one just before its next turn and every turn prefills from scratch (docs/design.md).
   */
  prefixCacheMB: number;
  /**
   * The worker's CPU threads (OMP_NUM_THREADS); 0: torch's default, one per core. On a machine
   * that other jobs share, 1 thread was 3× faster than 2 (docs/design.md).
   */
  threads: number;
}

/** The base model a warm start came from. */
export interface BaseModelRecord {
  dir: string;
  name: string;
  /** SHA-256 of its `model.safetensors` (null when its weights are sharded or named otherwise). */
  sha256: string | null;
}

export interface TorchPhaseTimes {
  corpusMs: number;
  loadMs: number;
  renderMs: number;
  sftMs: number;
  saveMs: number;
  evalMs: number;
  totalMs: number;
}

export interface TorchPretrainReport {
  backend: "torch";
  game: TorchPretrainGame;
  seed: number;
  out: string;
  settings: TorchPretrainSettings;
  /** The task knobs it played with (`mage eval --model` and `mage train` read them from here). */
  taskKnobs: TaskKnobs;
  /** `game: remote`: the served environment, the corpus's config and the checks'. */
  env?: {
    url: string;
    name: string;
    config: Record<string, unknown>;
    checksConfig: Record<string, unknown>;
    maxTurns?: number;
  };
  base: BaseModelRecord;
  model: TorchModelInfo & { lora: TorchModelConfig["lora"] };
  /** What the directory holds: a plain HF model, with LoRA merged into the base's weights. */
  export: { format: "hf"; merged: boolean; dtype: "float32" };
  corpus: CorpusStats & { tokens: number; scoredTokens: number; meanTokens: number; maxTokens: number };
  sft: SftSummary;
  /**
   * With `unlikelihood` > 0: the unlikely tokens of the corpus, and the mean probability of the
   * first and last steps' unlikely tokens before each step; null without.
   */
  unlikely: { tokens: number; meanQFirst: number; meanQLast: number } | null;
  evaluation: PretrainEvaluation | null;
  /** Every target met (false when the checks were skipped). */
  targetsMet: boolean;
  timings: TorchPhaseTimes;
  run: RunMeta;
  /** The run that sampled the checks, when a later `--resume` did (`timings.evalMs` is its). */
  checksRun?: RunMeta;
  /** The SFT steps an interrupted run had done, when this run went on from its checkpoint. */
  sftResumedAfterStep?: number;
}
