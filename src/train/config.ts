import { readFileSync } from "node:fs";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { z } from "zod";
import { UsageError } from "../core/errors.js";
import { LeagueSchema, RatingSchema } from "../league/config.js";
import { isEvalSnapshotSpec, snapshotCellProblem } from "../league/pool.js";
import { CELL_FORMATS } from "../tasks/cell-format.js";
import { TICTACTOE_CELL_FORMATS } from "../tasks/tictactoe.js";

/**
 * The training/evaluation config: YAML validated by a schema. Every field has a default, so a
 * preset file only states what differs; `mage config print FILE` shows the resolved whole.
 */

const Sampling = z
  .object({
    temperature: z.number().min(0).default(1),
    topP: z.number().gt(0).max(1).default(1),
    topK: z.number().int().min(0).default(0),
  })
  .strict();

const OpponentWeight = z
  .object({
    spec: z.string().min(1),
    weight: z.number().gt(0).default(1),
  })
  .strict();

/**
 * Sokoban difficulty knobs (`task.sokoban`), forwarded to the level generator and the task; unset
 * fields keep the reference's 6×6 room, 2 boxes, solutions of 5..21 moves, 3 moves a turn, 30 moves.
 */
const SokobanKnobsConfig = z
  .object({
    /** [rows, cols] including the wall border. */
    roomSize: z.tuple([z.number().int().min(4).max(12), z.number().int().min(4).max(12)]).optional(),
    boxes: z.number().int().min(1).max(6).optional(),
    /** Shortest solution of a level: at least this many moves … */
    minSteps: z.number().int().min(0).optional(),
    /** … and at most this many. */
    maxSolSteps: z.number().int().min(1).optional(),
    /** Reverse-play depth and BFS depth limit. */
    searchDepth: z.number().int().min(1).optional(),
    movesPerTurn: z.number().int().min(1).max(10).optional(),
    /** Primitive moves per attempt. */
    maxSteps: z.number().int().min(1).optional(),
  })
  .strict()
  .superRefine((k, ctx) => {
    if (k.minSteps !== undefined && k.maxSolSteps !== undefined && k.minSteps > k.maxSolSteps) {
      ctx.addIssue({
        code: "custom",
        path: ["minSteps"],
        message: `must be at most maxSolSteps (${k.maxSolSteps}), got ${k.minSteps}`,
      });
    }
  });

/** MineSweeper difficulty knobs (`task.minesweeper`); unset fields keep the reference's 6×6 board with 3 mines. */
const MinesweeperKnobsConfig = z
  .object({
    rows: z.number().int().min(2).max(16).optional(),
    cols: z.number().int().min(2).max(16).optional(),
    mines: z.number().int().min(1).optional(),
    /** How answers name a cell: `pair` `(3, 4)`, `digits` `34` (boards up to 9×9; compact boards show closed cells so). */
    cells: z.enum(CELL_FORMATS).optional(),
  })
  .strict()
  .superRefine((k, ctx) => {
    if (k.cells === "digits" && ((k.rows ?? 6) > 9 || (k.cols ?? 6) > 9)) {
      ctx.addIssue({
        code: "custom",
        path: ["cells"],
        message: `digits name cells of boards up to 9x9, not ${k.rows ?? 6}x${k.cols ?? 6}`,
      });
    }
    const cells = (k.rows ?? 6) * (k.cols ?? 6);
    if (k.mines !== undefined && k.mines > cells - 2) {
      ctx.addIssue({
        code: "custom",
        path: ["mines"],
        message: `must leave at least 2 safe cells on the ${k.rows ?? 6}x${k.cols ?? 6} board (at most ${cells - 2}), got ${k.mines}`,
      });
    }
  });

/** TicTacToe's text knobs (`task.tictactoe`); unset: the reference's `(row, col)` cells. */
const TicTacToeKnobsConfig = z
  .object({
    /** How answers and the opponent's moves name a cell: `pair` `(2, 3)`, `digits` `23`. */
    cells: z.enum(TICTACTOE_CELL_FORMATS).optional(),
  })
  .strict();

export type SokobanKnobsConfig = z.infer<typeof SokobanKnobsConfig>;
export type MinesweeperKnobsConfig = z.infer<typeof MinesweeperKnobsConfig>;
export type TicTacToeKnobsConfig = z.infer<typeof TicTacToeKnobsConfig>;

/** A task's knobs by game, as `task.<game>` holds them; games without knobs ignore them. */
export interface TaskKnobs {
  sokoban?: SokobanKnobsConfig;
  minesweeper?: MinesweeperKnobsConfig;
  tictactoe?: TicTacToeKnobsConfig;
}

/** The games that take `--knobs`. */
export const KNOB_GAMES = ["sokoban", "minesweeper", "tictactoe"] as const;

const EvalCell = z
  .object({
    opponent: z.string().min(1),
    seat: z.enum(["first", "second"]),
    /** Whether the opponent is outside the training pool (reported as unseen). */
    unseen: z.boolean().default(true),
  })
  .strict();

/** How an evaluation picks the served instances it plays. */
export const INSTANCE_MODES = ["drawn", "every"] as const;
export type InstanceMode = (typeof INSTANCE_MODES)[number];

/** `game: remote`: a served environment's config laid over another's, and its seeds (null: the same). */
const EvalEnv = z
  .object({
    config: z.record(z.string(), z.unknown()).default({}),
    seeds: z.object({ min: z.number().int(), max: z.number().int() }).strict().nullable().default(null),
    /**
     * `drawn` (the default): each trial draws its instance from the seeds, with replacement, as
     * training does. `every`: the final evaluation (and its independent retries and scaling) plays
     * every instance once, trial i instance i, in order (ALFWorld: every game of the split, as
     * ALFWorld evaluates), however many `finalTrials` says; the periodic evaluations still draw
     * `eval.trials`. Unset in `eval.harder.env`: the evaluation's.
     */
    instances: z.enum(INSTANCE_MODES).optional(),
  })
  .strict()
  .nullable()
  .default(null);

const TorchLora = z
  .object({
    rank: z.number().int().positive(),
    /** Scaling numerator (LoRA scale alpha/rank); default 2 × rank. */
    alpha: z.number().positive().optional(),
    dropout: z.number().min(0).lt(1).default(0),
    targetModules: z.array(z.string().min(1)).min(1).default(["q_proj", "k_proj", "v_proj", "o_proj"]),
    /**
     * Decoder layers (0-based) that get adapters; null: every layer. Upper layers only (e.g. 20-29
     * of SmolLM2's 30) cut the backward pass short; what that does to learning is not measured yet.
     */
    layers: z.array(z.number().int().min(0)).min(1).nullable().default(null),
  })
  .strict();

/** The devices `model.torch.device` (and the `--device` flags) accept. */
export const TORCH_DEVICE_PATTERN = /^(cpu|cuda|cuda:\d+)$/;

/** vLLM's largest `--max-lora-rank`; a larger LoRA rank cannot be served. */
export const VLLM_MAX_LORA_RANK = 512;

/**
 * `model.torch.vllm`: the vLLM server mage starts itself (`rollout: vllm`) from the vLLM
 * environment (`node scripts/vllm-env.mjs`), on the run's model, and stops when the run ends.
 */
export const TorchVllmSchema = z
  .object({
    /** The vLLM environment's interpreter; null: MAGE_VLLM_PYTHON, $MAGE_VLLM_VENV/bin/python, the project's .venv-vllm. */
    python: z.string().min(1).nullable().default(null),
    /** The loopback port; null: a free one. */
    port: z.number().int().min(1).max(65535).nullable().default(null),
    /**
     * Memory for vLLM's KV cache (`--kv-cache-memory-bytes`); null: vLLM's own sizing, which on a
     * CPU reserves `--gpu-memory-utilization` (0.92) of ALL memory and refuses to start on a
     * machine where other processes hold some.
     */
    kvCacheGiB: z.number().positive().nullable().default(4),
    /** More arguments for `vllm.entrypoints.openai.api_server`, after mage's (a repeated flag: the later one wins). */
    extraArgs: z.array(z.string()).default([]),
    /** How long the server may take to answer `GET /v1/models` after it is started. */
    startTimeoutS: z.number().positive().default(600),
    /**
     * How a LoRA run's weights reach the server after every update: `merged`, the adapter merged
     * into the weights by the worker and reloaded by the server (which then samples with no
     * adapter, about twice as fast on a CPU; docs/design.md), or `lora`, the adapter itself through
     * vLLM's runtime LoRA API. Full fine-tuning always pushes the whole weights as `merged` does.
     * Weight pushes run in one worker process (model.torch.processes: 1).
     */
    push: z.enum(["lora", "merged"]).default("merged"),
    /**
     * Requests in flight to the server at once (vLLM batches what is in flight; the worker's own
     * sampler takes a whole turn's requests at once). Each request carries its own seed.
     */
    concurrency: z.number().int().positive().default(16),
  })
  .strict();

export type TorchVllmConfig = z.infer<typeof TorchVllmSchema>;

/** `model.torch`: the PyTorch learner worker (used when `model.backend` is torch). */
export const TorchModelSchema = z
  .object({
    /** A local Hugging Face model directory (config.json, weights, tokenizer, chat template). */
    path: z.string().min(1).nullable().default(null),
    /** The interpreter; null: MAGE_PYTHON, $MAGE_VENV/bin/python, the project's .venv, python3. */
    python: z.string().min(1).nullable().default(null),
    /** On a CPU, bfloat16 (and auto where the CPU has native bf16) keeps float32 weights and runs matrix products in bf16. */
    dtype: z.enum(["float32", "bfloat16", "float16", "auto"]).default("float32"),
    device: z.string().regex(TORCH_DEVICE_PATTERN, "must be cpu, cuda or cuda:N").default("cpu"),
    /** Worker processes (FSDP data-parallel ranks under torchrun); 1: a plain process. */
    processes: z.number().int().positive().default(1),
    /** null: full fine-tuning. */
    lora: TorchLora.nullable().default(null),
    gradientCheckpointing: z.boolean().default(false),
    /** Gradient accumulation: most tokens per forward/backward pass. */
    microBatchTokens: z.number().int().positive().default(8192),
    /**
     * Where rollouts are sampled: the worker's own generate; an OpenAI-compatible vLLM server you
     * run (`openai`, at `rolloutUrl`); or a vLLM server mage starts and stops itself (`vllm`).
     */
    rollout: z.enum(["worker", "openai", "vllm"]).default("worker"),
    /** The server's base URL (rollout: openai), e.g. http://127.0.0.1:8000/v1. */
    rolloutUrl: z.string().min(1).nullable().default(null),
    /** The server's name for the base model (`--served-model-name`). */
    rolloutModel: z.string().min(1).nullable().default(null),
    /** Full fine-tuning with rollout: openai: the directory the server loads weights from (`vllm serve DIR`). */
    rolloutWeightsDir: z.string().min(1).nullable().default(null),
    /** The server of `rollout: vllm`. */
    vllm: TorchVllmSchema.prefault({}),
    /** Longest a single worker request may take. */
    timeoutSeconds: z.number().positive().default(1800),
    /**
     * Memory the worker's sampler may keep for keys and values of earlier samples, so a later turn
     * of the same conversation prefills only its new tokens (0: off).
     */
    prefixCacheMB: z.number().min(0).default(1024),
    /**
     * The worker's sampler: hf (the Hugging Face forward with a growing cache), lean (a static-cache
     * step for Llama-family models, CUDA graphs on a GPU), or auto (lean on CUDA where the model
     * allows, hf on the CPU, where lean is no faster). The two draw from different random streams,
     * so a run's samples depend on the sampler used.
     */
    decoder: z.enum(["hf", "lean", "auto"]).default("auto"),
    /** With the lean decoder on CUDA: capture each step as a CUDA graph (false: run it eagerly). */
    cudaGraphs: z.boolean().default(true),
  })
  .strict();

export type TorchModelConfig = z.infer<typeof TorchModelSchema>;

export const ConfigSchema = z
  .object({
    name: z.string().default("run"),
    seed: z.number().int().min(0).default(0),
    game: z.enum(["tictactoe", "kuhn", "sokoban", "minesweeper", "remote"]),
    /**
     * `game: remote`: the environment server and environment to play (docs/env-protocol.md).
     * Checked against the server's /info before any trial is played.
     */
    env: z
      .object({
        url: z.string().min(1),
        name: z.string().min(1),
        config: z.record(z.string(), z.unknown()).default({}),
        /** Per-request timeout. */
        timeoutMs: z.number().int().positive().default(10_000),
        /** More tries after a 5xx, a timeout or a connection error (never after a 4xx). */
        retries: z.number().int().min(0).max(20).default(3),
        /** Requests in flight to the server at once. */
        concurrency: z.number().int().positive().default(16),
        /** A sub-range of the server's seeds to draw instances from (default: all). */
        seeds: z.object({ min: z.number().int(), max: z.number().int() }).strict().nullable().default(null),
        /** The environment variable holding the server's API key (`env-serve --api-key-env`). */
        apiKeyEnv: z.string().min(1).nullable().default(null),
      })
      .strict()
      .nullable()
      .default(null),
    model: z
      .object({
        preset: z.enum(["tiny", "small", "base"]).default("tiny"),
        /** A pretrained checkpoint directory; when null, `mage train` pretrains one first. */
        checkpoint: z.string().nullable().default(null),
        kernels: z.enum(["auto", "js", "wasm", "native"]).default("auto"),
        contextLength: z.number().int().positive().default(1024),
        /** embedded: the TypeScript transformer; torch: a Hugging Face model in the PyTorch worker. */
        backend: z.enum(["embedded", "torch"]).default("embedded"),
        torch: TorchModelSchema.prefault({}),
      })
      .strict()
      .superRefine((m, ctx) => {
        if (m.backend !== "torch") return;
        const t = m.torch;
        const need = (ok: boolean, field: string, message: string) => {
          if (!ok) ctx.addIssue({ code: "custom", path: ["torch", field], message });
        };
        need(
          t.path !== null,
          "path",
          "required with model.backend: torch (a local Hugging Face model directory)",
        );
        if (t.rollout === "openai") {
          need(
            t.rolloutUrl !== null,
            "rolloutUrl",
            "required with rollout: openai (e.g. http://127.0.0.1:8000/v1)",
          );
          need(
            t.rolloutModel !== null,
            "rolloutModel",
            "required with rollout: openai (the server's model name)",
          );
          need(
            t.lora !== null || t.rolloutWeightsDir !== null,
            "rolloutWeightsDir",
            "required with rollout: openai and full fine-tuning (lora: null): the directory the server was started from",
          );
        }
        if (t.rollout === "vllm") {
          for (const field of ["rolloutUrl", "rolloutModel", "rolloutWeightsDir"] as const)
            need(
              t[field] === null,
              field,
              "is for a server you run (rollout: openai); rollout: vllm starts its own (settings in model.torch.vllm)",
            );
          const pushesWeights = t.lora === null || t.vllm.push === "merged";
          if (pushesWeights && t.processes > 1)
            ctx.addIssue({
              code: "custom",
              path: ["torch", "processes"],
              message:
                `${t.lora === null ? "full fine-tuning" : "vllm.push: merged"} with rollout: vllm writes the weights from one ` +
                "worker process; use processes: 1, or LoRA with vllm.push: lora to train under FSDP",
            });
          if (!pushesWeights && t.lora !== null && t.lora.rank > VLLM_MAX_LORA_RANK)
            ctx.addIssue({
              code: "custom",
              path: ["torch", "lora", "rank"],
              message: `at most ${VLLM_MAX_LORA_RANK} with rollout: vllm and vllm.push: lora (vLLM's largest --max-lora-rank)`,
            });
        }
      })
      .prefault({}),
    /** Overrides of the per-game pretraining defaults (`PRETRAIN_DEFAULTS`); unset fields keep them. */
    pretrain: z
      .object({
        steps: z.number().int().min(0).optional(),
        corpusTrials: z.number().int().positive().optional(),
        /** Fresh trials sampled after pretraining to check formats (the checks of `mage pretrain`). */
        evalTrials: z.number().int().positive().optional(),
        batchTokens: z.number().int().positive().optional(),
        lr: z.number().positive().optional(),
        /** Gradient shards per batch, one thread each (the result depends on this count, not on the cores). */
        shards: z.number().int().positive().optional(),
        /** Loss weight of the play answers' tokens (every other scored token weighs 1). */
        actionWeight: z.number().int().min(1).max(255).optional(),
        /** Share of the corpus player's TicTacToe moves that take a one-move win or block (default 0). */
        tacticalRate: z.number().min(0).max(1).optional(),
        /** Puzzles: share of the corpus player's moves that are random instead of the solver's. */
        epsilon: z.number().min(0).max(1).optional(),
        /** Sokoban: most moves a corpus reflection lists, the rest counted (default 0: every move). */
        reflectionMoves: z.number().int().min(0).optional(),
        /** MineSweeper: later corpus attempts avoid the cells earlier reflections named mines. */
        heedReflections: z.boolean().optional(),
      })
      .strict()
      .prefault({}),
    task: z
      .object({
        promptStyle: z.enum(["compact", "full"]).default("compact"),
        maxTurns: z.number().int().positive().optional(),
        attempts: z.number().int().min(1).default(3),
        reflection: z
          .enum(["reflection_only", "history_only", "history_and_reflection", "none"])
          .default("reflection_only"),
        hindsight: z.boolean().default(false),
        /** Opponents answer the same moves the same way in every attempt of a trial. */
        replayOpponent: z.boolean().default(false),
        /** A prompt longer than the model's context: stop the trial, or drop the oldest earlier attempts. */
        contextOverflow: z.enum(["stop", "drop-oldest"]).default("stop"),
        /** Sokoban difficulty (ignored by the other games). */
        sokoban: SokobanKnobsConfig.prefault({}),
        /** MineSweeper difficulty (ignored by the other games). */
        minesweeper: MinesweeperKnobsConfig.prefault({}),
        /** TicTacToe's cell format (ignored by the other games). */
        tictactoe: TicTacToeKnobsConfig.prefault({}),
      })
      .strict()
      .prefault({}),
    population: z
      .object({
        /** The training opponents; two-player games need at least one, puzzles none. */
        opponents: z.array(OpponentWeight).default([]),
        seats: z.enum(["first", "second", "mixed"]).default("mixed"),
        secondRatio: z.number().min(0).max(1).default(0.5),
        /** Snapshots of the agent as opponents (docs/configs.md, "League"); null: none. */
        league: LeagueSchema.nullable().default(null),
        /** Rate the agent and every opponent from every training game (always on with a league). */
        rate: z.boolean().default(false),
        /** The rating model's knobs (openskill's Weng-Lin Plackett-Luce). */
        ratings: RatingSchema.prefault({}),
      })
      .strict()
      .prefault({}),
    rollout: z
      .object({
        tasksPerIteration: z.number().int().positive().default(16),
        groupSize: z.number().int().positive().default(8),
        maxResponseTokens: z.number().int().positive().default(48),
        sampling: Sampling.prefault({}),
      })
      .strict()
      .prefault({}),
    credit: z
      .object({
        mode: z.enum(["differential", "per-attempt"]).default("differential"),
        stepGamma: z.number().min(0).max(1).default(0.95),
        trajGamma: z.number().min(0).max(1).default(0.6),
        returnForm: z.enum(["reference", "paper"]).default("reference"),
      })
      .strict()
      .prefault({}),
    advantage: z
      .object({
        estimator: z.enum(["gigpo", "grpo"]).default("gigpo"),
        scope: z.enum(["agent", "task", "batch"]).default("agent"),
        mode: z.enum(["mean_norm", "mean_std_norm"]).default("mean_norm"),
        stepWeight: z.number().min(0).default(1),
        anchorPerAttempt: z.boolean().default(false),
        /** SPIRAL-style role-conditioned running baseline instead of the group mean (episode level). */
        roleBaselineDecay: z.number().min(0).max(1).nullable().default(null),
      })
      .strict()
      .prefault({}),
    penalties: z
      .object({
        invalidAction: z.number().min(0).default(0.5),
        length: z.number().min(0).default(0),
      })
      .strict()
      .prefault({}),
    optim: z
      .object({
        lr: z.number().positive().default(1e-4),
        weightDecay: z.number().min(0).default(0.01),
        gradClip: z.number().positive().default(1),
        epochs: z.number().int().positive().default(1),
        miniBatchRows: z.number().int().positive().default(64),
        clipLow: z.number().min(0).default(0.2),
        clipHigh: z.number().min(0).default(0.2),
        dualClip: z.number().min(0).default(3),
        entropyCoef: z.number().min(0).default(0.001),
        klCoef: z.number().min(0).default(0),
        klClamp: z.number().positive().default(10),
      })
      .strict()
      .prefault({}),
    train: z
      .object({
        /** false for the prompting baselines (zero-shot, Reflexion): evaluation only, no updates. */
        updates: z.boolean().default(true),
        iterations: z.number().int().min(0).default(40),
        /** A time box: no new iteration starts once this many minutes of training have passed (null: none); the final evaluation follows. */
        maxMinutes: z.number().positive().nullable().default(null),
        checkpointEvery: z.number().int().positive().default(10),
        keepLast: z.number().int().positive().default(3),
        transcriptsPerIteration: z.number().int().min(0).default(2),
      })
      .strict()
      .prefault({}),
    eval: z
      .object({
        every: z.number().int().min(0).default(10),
        /** Evaluate the starting model before the first update (the reference's val_before_train). */
        atStart: z.boolean().default(false),
        trials: z.number().int().positive().default(64),
        finalTrials: z.number().int().positive().default(500),
        /** The final evaluation keeps the whole play of each cell's first trials by index (eval-transcripts.jsonl). */
        transcriptsPerCell: z.number().int().min(0).default(5),
        attempts: z.number().int().min(1).optional(),
        reflection: z.enum(["reflection_only", "history_only", "history_and_reflection", "none"]).optional(),
        cells: z.array(EvalCell).default([]),
        /**
         * `game: remote`: what evaluations play instead of the training environment's config and
         * seeds (its fields laid over `env.config`; e.g. ALFWorld's valid_seen split after training
         * on valid_train). null: the training environment.
         */
        env: EvalEnv,
        sampling: Sampling.prefault({ temperature: 0.7, topP: 0.8, topK: 20 }),
        /**
         * Test-time scaling: after the final evaluation, play these cells again with more attempts
         * than training used (e.g. trained with 3, evaluated with 5). null: skip.
         */
        scaling: z
          .object({
            attempts: z.number().int().min(1),
            trials: z.number().int().positive(),
            /** Default: the run's evaluation cells (puzzles have one, with no opponent). */
            cells: z.array(EvalCell).min(1).optional(),
            /**
             * More attempts than training used can outgrow the model's context; by default the
             * oldest attempts then leave the prompt, so the later attempts are played, not cut off.
             */
            contextOverflow: z.enum(["stop", "drop-oldest"]).default("drop-oldest"),
          })
          .strict()
          .nullable()
          .default(null),
        /**
         * The same model retried independently: after the final evaluation, its cells, seeds and
         * attempts again with no memory between attempts (`reflection: none`), so that the
         * difference at success@k measures what the memory adds. Skipped when the evaluation
         * already has no memory. `trials` default: `finalTrials`. null: skip.
         */
        independent: z
          .object({ trials: z.number().int().positive().optional() })
          .strict()
          .nullable()
          .default(null),
        /**
         * The harder held-out set (LaMer's generalisation test): after the final evaluation,
         * `trials` trials on levels from HARDER_SEED_RANGE with these knobs laid over the training
         * knobs (`task.sokoban` / `task.minesweeper`), or for `game: remote` on the served
         * environment with `env.config` laid over the evaluation's (e.g. more rooms). null: skip.
         */
        harder: z
          .object({
            trials: z.number().int().positive(),
            attempts: z.number().int().min(1).optional(),
            sokoban: SokobanKnobsConfig.prefault({}),
            minesweeper: MinesweeperKnobsConfig.prefault({}),
            env: EvalEnv,
          })
          .strict()
          .nullable()
          .default(null),
      })
      .strict()
      .prefault({}),
    /**
     * Where the run's scalars go besides metrics.jsonl (README, "Training curves"): TensorBoard
     * event files and a Weights & Biases run; neither by default.
     */
    logging: z
      .object({
        /** A TensorBoard log root; this run writes to `<tensorboard>/[<group>/]<run directory's name>`. */
        tensorboard: z.string().min(1).nullable().default(null),
        /** Runs that belong together (`mage experiment` sets the grid's name): the TensorBoard sub-folder and the W&B group. */
        group: z.string().min(1).nullable().default(null),
        wandb: z
          .object({
            project: z.string().min(1),
            entity: z.string().min(1).nullable().default(null),
            /** The run's W&B name (default: the run directory's name). */
            name: z.string().min(1).nullable().default(null),
            /** offline: no network, a run directory `wandb sync` uploads later; disabled: no W&B at all. */
            mode: z.enum(["online", "offline", "disabled"]).default("online"),
          })
          .strict()
          .nullable()
          .default(null),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
    const twoPlayer = c.game === "tictactoe" || c.game === "kuhn";
    const league = c.population.league;
    if (twoPlayer && c.population.opponents.length === 0 && !(league?.atStart && league.share === 1)) {
      ctx.addIssue({
        code: "custom",
        path: ["population", "opponents"],
        message: `${c.game} is a two-player game: list at least one training opponent (or a league with share: 1 and atStart: true, pure self-play)`,
      });
    }
    checkLeague(c, twoPlayer, ctx);
    checkSnapshotCells(c, ctx);
    const harder = c.eval.harder;
    if (harder !== null && c.game === "remote" && harder.env === null) {
      ctx.addIssue({
        code: "custom",
        path: ["eval", "harder", "env"],
        message: "a served environment's harder set needs env: {config, seeds} laid over the evaluation's",
      });
    } else if (harder !== null && c.game !== "remote" && harder.env !== null) {
      ctx.addIssue({
        code: "custom",
        path: ["eval", "harder", "env"],
        message: `only game: remote takes a harder env (game is ${c.game}; the puzzles take knobs)`,
      });
    } else if (harder !== null && c.game !== "sokoban" && c.game !== "minesweeper" && c.game !== "remote") {
      ctx.addIssue({
        code: "custom",
        path: ["eval", "harder"],
        message: `the harder held-out set is for the puzzles (sokoban, minesweeper) and served environments, not ${c.game}`,
      });
    }
  });

export type MageConfig = z.infer<typeof ConfigSchema>;

/** Evaluation cells naming league snapshots (`snapshot:latest`, `snapshot:N`) need a league that takes them. */
function checkSnapshotCells(
  c: {
    population: { league: unknown };
    eval: { cells: { opponent: string }[]; scaling: { cells?: { opponent: string }[] } | null };
  },
  ctx: z.RefinementCtx,
): void {
  const lists = [
    { path: ["eval", "cells"], cells: c.eval.cells },
    { path: ["eval", "scaling", "cells"], cells: c.eval.scaling?.cells ?? [] },
  ];
  for (const { path, cells } of lists) {
    cells.forEach((cell, i) => {
      const problem = snapshotCellProblem(cell.opponent);
      if (problem) ctx.addIssue({ code: "custom", path: [...path, i, "opponent"], message: problem });
      else if (isEvalSnapshotSpec(cell.opponent) && c.population.league === null)
        ctx.addIssue({
          code: "custom",
          path: [...path, i, "opponent"],
          message: `${cell.opponent} is one of the run's league snapshots: set population.league (with share: 0 snapshots are kept but never played)`,
        });
    });
  }
}

/**
 * `population.league` / `population.rate`: two-player games only; a torch league's snapshots are
 * LoRA adapters sampled in one worker process.
 */
function checkLeague(
  c: {
    game: string;
    model: { backend: string; torch: { lora: unknown; processes: number } };
    population: { league: unknown; rate: boolean; opponents: unknown[] };
    eval: { cells: unknown[] };
  },
  twoPlayer: boolean,
  ctx: z.RefinementCtx,
): void {
  if (
    twoPlayer &&
    c.population.league !== null &&
    c.population.opponents.length === 0 &&
    c.eval.cells.length === 0
  )
    ctx.addIssue({
      code: "custom",
      path: ["eval", "cells"],
      message:
        "pure self-play (a league with no scripted population.opponents) has no training opponent to evaluate against: list the evaluation's opponents here",
    });
  for (const field of ["league", "rate"] as const) {
    const on = field === "league" ? c.population.league !== null : c.population.rate;
    if (on && !twoPlayer)
      ctx.addIssue({
        code: "custom",
        path: ["population", field],
        message: `is for the two-player games (tictactoe, kuhn), not ${c.game}`,
      });
  }
  if (c.population.league === null || c.model.backend !== "torch") return;
  if (c.model.torch.lora === null)
    ctx.addIssue({
      code: "custom",
      path: ["model", "torch", "lora"],
      message:
        "a torch league's snapshots are LoRA adapters on the one base model: set model.torch.lora " +
        "(snapshots of full fine-tuning, a whole copy of the weights each, are not built)",
    });
  if (c.model.torch.processes > 1)
    ctx.addIssue({
      code: "custom",
      path: ["model", "torch", "processes"],
      message:
        "a torch league samples its snapshots in one worker process (each adapter swapped into the unsharded model): set model.torch.processes: 1",
    });
}

function formatIssues(error: z.ZodError, source: string): string {
  const lines = error.issues.map((issue) => {
    const field = issue.path.length > 0 ? issue.path.join(".") : "(top level)";
    return `  ${field}: ${issue.message}`;
  });
  return `invalid config ${source}:\n${lines.join("\n")}`;
}

/** Validates a plain object; throws a UsageError naming each bad field and what is allowed. */
export function validateConfig(raw: unknown, source = "(inline)"): MageConfig {
  const result = ConfigSchema.safeParse(raw);
  if (!result.success) throw new UsageError(formatIssues(result.error, source));
  const c = result.data;
  if (c.game === "remote" && c.env === null) {
    throw new UsageError(
      `invalid config ${source}:\n  env: game: remote needs an env section (env.url, env.name; see docs/env-protocol.md)`,
    );
  }
  if (c.game !== "remote" && c.env !== null) {
    throw new UsageError(
      `invalid config ${source}:\n  env: only game: remote takes an env section (game is ${c.game})`,
    );
  }
  if (c.game !== "remote" && c.eval.env !== null) {
    throw new UsageError(
      `invalid config ${source}:\n  eval.env: only game: remote evaluates on another environment config (game is ${c.game})`,
    );
  }
  return c;
}

/** Applies `key.path=value` overrides (values parsed as YAML scalars) to a plain object. */
export function applyOverrides(
  raw: Record<string, unknown>,
  overrides: readonly string[],
): Record<string, unknown> {
  const out = structuredClone(raw);
  for (const o of overrides) {
    const eq = o.indexOf("=");
    if (eq <= 0) throw new UsageError(`--set expects key=value (e.g. optim.lr=3e-4), got "${o}"`);
    const path = o.slice(0, eq).split(".");
    let value: unknown;
    try {
      value = parseYaml(o.slice(eq + 1));
    } catch {
      value = o.slice(eq + 1);
    }
    let node: Record<string, unknown> = out;
    for (const key of path.slice(0, -1)) {
      const next = node[key];
      if (next === undefined || next === null) node[key] = {};
      else if (typeof next !== "object" || Array.isArray(next)) {
        throw new UsageError(`--set ${o}: "${key}" is not a section of the config`);
      }
      node = node[key] as Record<string, unknown>;
    }
    node[path[path.length - 1]] = value;
  }
  return out;
}

export function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read config ${path}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new UsageError(`config ${path} is not valid YAML: ${(err as Error).message}`);
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new UsageError(`config ${path} must be a YAML mapping of sections`);
  }
  return raw as Record<string, unknown>;
}

export function loadConfig(path: string, overrides: readonly string[] = []): MageConfig {
  return validateConfig(applyOverrides(readConfigFile(path), overrides), path);
}

/**
 * Task knobs written on a command line as a YAML flow mapping (`--knobs "{boxes: 3}"`,
 * `--knobs "boxes: 3, roomSize: [7, 7]"` or `--knobs "cells: digits"`), checked by the config
 * schema; a bad field is named.
 */
export function parseKnobsArg(game: string, text: string, flag = "--knobs"): TaskKnobs {
  if (!(KNOB_GAMES as readonly string[]).includes(game))
    throw new UsageError(`${flag} is for ${KNOB_GAMES.join(", ")}, not ${game}`);
  let raw: unknown;
  const body = text.trim().startsWith("{") ? text : `{${text}}`;
  try {
    raw = parseYaml(body);
  } catch (err) {
    throw new UsageError(`${flag} is not a YAML mapping: ${(err as Error).message}`);
  }
  const schema =
    game === "sokoban"
      ? SokobanKnobsConfig
      : game === "minesweeper"
        ? MinesweeperKnobsConfig
        : TicTacToeKnobsConfig;
  const result = schema.safeParse(raw);
  if (!result.success) {
    const fields =
      game === "sokoban"
        ? SOKOBAN_KNOB_FIELDS
        : game === "minesweeper"
          ? MINESWEEPER_KNOB_FIELDS
          : TICTACTOE_KNOB_FIELDS;
    const lines = result.error.issues.map(
      (i) => `  ${flag} ${i.path.length > 0 ? i.path.join(".") : "(mapping)"}: ${i.message}`,
    );
    throw new UsageError(`bad ${game} knobs:\n${lines.join("\n")}\nvalid fields: ${fields.join(", ")}`);
  }
  return { [game]: result.data } as TaskKnobs;
}

export const SOKOBAN_KNOB_FIELDS = [
  "roomSize",
  "boxes",
  "minSteps",
  "maxSolSteps",
  "searchDepth",
  "movesPerTurn",
  "maxSteps",
] as const;
export const MINESWEEPER_KNOB_FIELDS = ["rows", "cols", "mines", "cells"] as const;
export const TICTACTOE_KNOB_FIELDS = ["cells"] as const;

/**
 * The task constructor options a config's knobs give (`task.sokoban` / `task.minesweeper` /
 * `task.tictactoe`, with `over` laid on top for the harder set); {} for a game without knobs set.
 */
export function taskKnobOptions(
  game: string,
  task: TaskKnobs,
  over: TaskKnobs = {},
): { knobs?: Record<string, unknown>; movesPerTurn?: number; maxSteps?: number } {
  const defined = (o: object | undefined) =>
    Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined));
  if (game === "sokoban") {
    const k = { ...defined(task.sokoban), ...defined(over.sokoban) } as SokobanKnobsConfig;
    const knobs: Record<string, unknown> = {};
    if (k.roomSize) knobs.roomSize = [k.roomSize[0], k.roomSize[1]];
    if (k.boxes !== undefined) knobs.numBoxes = k.boxes;
    if (k.minSteps !== undefined) knobs.minSteps = k.minSteps;
    if (k.maxSolSteps !== undefined) knobs.maxSolSteps = k.maxSolSteps;
    if (k.searchDepth !== undefined) knobs.searchDepth = k.searchDepth;
    return {
      knobs,
      ...(k.movesPerTurn !== undefined ? { movesPerTurn: k.movesPerTurn } : {}),
      ...(k.maxSteps !== undefined ? { maxSteps: k.maxSteps } : {}),
    };
  }
  if (game === "minesweeper") {
    return { knobs: { ...defined(task.minesweeper), ...defined(over.minesweeper) } };
  }
  if (game === "tictactoe") {
    // Only when set, so a default TicTacToe task is built exactly as before the knob existed.
    const knobs = { ...defined(task.tictactoe), ...defined(over.tictactoe) };
    return Object.keys(knobs).length > 0 ? { knobs } : {};
  }
  return {};
}

export function configToYaml(config: MageConfig): string {
  return stringifyYaml(config);
}

/** Per-game defaults the reference uses when a config leaves them out. */
export const GAME_DEFAULTS: Record<Exclude<MageConfig["game"], "remote">, { maxTurns: number }> = {
  tictactoe: { maxTurns: 8 },
  kuhn: { maxTurns: 6 },
  sokoban: { maxTurns: 7 },
  minesweeper: { maxTurns: 7 },
};
