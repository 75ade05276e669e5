import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { UsageError } from "../../core/errors.js";
import { type EvalCell, evaluate, formatCells, HARDER_SEED_RANGE } from "../../evaluate/evaluate.js";
import { EvalProgressBar } from "../../evaluate/progress.js";
import { openTorchCheckpoint } from "../../learner/torch/open-checkpoint.js";
import { isTorchCheckpoint, readCheckpointMeta } from "../../model/checkpoint.js";
import { type OpenedPolicy, openPolicy } from "../../policy/factory.js";
import { parsePolicySpec } from "../../policy/spec.js";
import { EVAL_SAMPLING } from "../../policy/types.js";
import {
  CONTEXT_OVERFLOW_POLICIES,
  type ContextOverflow,
  RolloutAbortedError,
} from "../../rollout/runner.js";
import { checkOpponentSpec, loadTask, TASK_NAMES, type TaskDefinition } from "../../tasks/registry.js";
import { openRemoteTask } from "../../tasks/remote.js";
import { REFLECTION_TYPES } from "../../tasks/types.js";
import {
  KNOB_GAMES,
  parseKnobsArg,
  readConfigFile,
  type TaskKnobs,
  taskKnobOptions,
} from "../../train/config.js";
import { DEFAULT_POOLS, PRETRAIN_GAMES, type PretrainGame } from "../../train/pretrain/corpus.js";
import { REPORT_FILE } from "../../train/pretrain/run.js";
import { parseFlags } from "../args.js";
import { checkpointArg } from "../checkpoint-arg.js";
import type { Command } from "../command.js";
import { openTorchModelDir } from "../open-torch-model.js";

const USAGE = [
  "mage eval (--checkpoint DIR | --policy SPEC | --model DIR [--threads N]) [--game G] --opponent SPEC[,SPEC...] [--seat first|second|both]",
  "          [--attempts K] [--trials N] [--reflection TYPE|none] [--style compact|full] [--max-tokens N]",
  "          [--temperature T] [--top-p P] [--top-k K] [--seed S] [--out FILE.jsonl] [--json] [--quiet]",
  "          [--context-overflow stop|drop-oldest] [--seen SPEC[,SPEC...]|none] [--knobs YAML] [--harder]",
  "          [--game remote --env-url URL --env-name NAME [--env-config JSON] [--env-api-key-env NAME]]",
  "  --game remote: an environment served over docs/env-protocol.md (e.g. by mage env-serve); a",
  "          checkpoint trained on one remembers its server and environment",
  '  --knobs: puzzle difficulty, e.g. "roomSize: [7, 7], boxes: 2" (sokoban) or "mines: 5" (minesweeper),',
  '          or TicTacToe\'s cell format, "cells: digits"; default: the knobs the checkpoint or warm start',
  "          trained with (else the reference's 6x6 levels and (row, col) cells)",
  "  --harder: draw the levels from the harder set's seed range [2^32, 2^33) instead of [2^16, 2^32)",
  "  --policy: checkpoint:DIR, openai:URL#MODEL[?apiKeyEnv=NAME&...], gguf:PATH",
  "  --model: a Hugging Face model directory sampled by the PyTorch worker (e.g. a warm start of",
  "          `mage pretrain --backend torch`, whose game, compact prompts and 48-token replies it keeps);",
  "          --threads: the worker's CPU threads (default: one per core)",
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

/** A torch run checkpoint as a policy: prompts in the style it trained with, replies as long as in training. */
async function openTorchEval(dir: string, meta: Record<string, unknown> | null): Promise<OpenedPolicy> {
  const opened = await openTorchCheckpoint(dir);
  return {
    policy: opened.policy,
    kind: "torch",
    promptStyle: meta?.promptStyle === "compact" ? "compact" : "full",
    close: opened.close,
  };
}

function defaultMaxTokens(opened: OpenedPolicy, meta: Record<string, unknown> | null): number {
  if (opened.kind === "embedded") return 48;
  if (opened.kind === "torch" && typeof meta?.maxResponseTokens === "number") return meta.maxResponseTokens;
  return 1024;
}

export const command: Command = {
  name: "eval",
  summary:
    "Evaluate a policy (embedded checkpoint, OpenAI-compatible server, GGUF) against opponents over multi-attempt trials",
  usage: USAGE,
  async run(argv) {
    const { values } = parseFlags(
      argv,
      {
        checkpoint: { type: "string" },
        policy: { type: "string" },
        model: { type: "string" },
        threads: { type: "string" },
        game: { type: "string" },
        "env-url": { type: "string" },
        "env-name": { type: "string" },
        "env-api-key-env": { type: "string" },
        "env-config": { type: "string" },
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
      },
      USAGE,
    );
    const given = [values.checkpoint, values.policy, values.model].filter((v) => v !== undefined);
    if (given.length !== 1) {
      throw new UsageError(
        `give exactly one of --checkpoint DIR, --policy SPEC or --model DIR\nusage: ${USAGE}`,
      );
    }
    if (values.threads !== undefined && values.model === undefined)
      throw new UsageError(
        "--threads goes with --model DIR (a torch run checkpoint's worker uses its run's settings)",
      );
    const modelDir = values.model;
    const requested = values.policy ?? `checkpoint:${values.checkpoint ?? ""}`;
    const checkpointDir =
      modelDir === undefined
        ? ((p) => (p.kind === "checkpoint" ? p.dir : undefined))(parsePolicySpec(requested))
        : undefined;
    let game = values.game;
    let meta: Record<string, unknown> | null = modelDir === undefined ? null : modelDirMeta(modelDir);
    if (game === undefined && typeof meta?.game === "string") game = meta.game;
    if (game === undefined && checkpointDir !== undefined) {
      meta = await readCheckpointMeta(checkpointDir);
      if (typeof meta.game === "string") game = meta.game;
    }
    // A served environment: --game remote with --env-url/--env-name, or a checkpoint trained on one.
    const metaEnv = meta?.env as
      | { url?: string; name?: string; config?: Record<string, unknown>; apiKeyEnv?: string | null }
      | undefined;
    const served =
      game === "remote" ||
      values["env-url"] !== undefined ||
      values["env-name"] !== undefined ||
      (values.game === undefined && metaEnv !== undefined);
    let task: TaskDefinition;
    if (served) {
      const url = values["env-url"] ?? metaEnv?.url;
      const name = values["env-name"] ?? metaEnv?.name;
      if (!url || !name)
        throw new UsageError(`--game remote needs --env-url URL and --env-name NAME\nusage: ${USAGE}`);
      let config = metaEnv?.config ?? {};
      if (values["env-config"] !== undefined) {
        try {
          config = JSON.parse(values["env-config"]);
        } catch {
          throw new UsageError(`--env-config must be a JSON object, got ${values["env-config"]}`);
        }
        if (typeof config !== "object" || config === null || Array.isArray(config))
          throw new UsageError(`--env-config must be a JSON object, got ${values["env-config"]}`);
      }
      const apiKeyEnv = values["env-api-key-env"] ?? metaEnv?.apiKeyEnv ?? null;
      task = await openRemoteTask({ url, name, config, apiKeyEnv });
      game = task.name;
    } else {
      if (game === undefined)
        throw new UsageError(`--game is required; valid choices: ${[...TASK_NAMES, "remote"].join(", ")}`);
      task = await loadTask(game);
    }
    const checkOpponent = async (spec: string, seat?: "first" | "second") => {
      if (task.checkOpponent) await task.checkOpponent(spec, seat);
      else checkOpponentSpec(game!, spec);
    };
    const seatArg = values.seat ?? "first";
    if (!["first", "second", "both"].includes(seatArg)) {
      throw new UsageError(`unknown --seat "${seatArg}"; valid choices: first, second, both`);
    }
    const seats: ("first" | "second")[] =
      seatArg === "both" ? ["first", "second"] : [seatArg as "first" | "second"];
    let cells: EvalCell[];
    if (task.twoPlayer) {
      const opponents = (values.opponent ?? task.defaultOpponent ?? "")
        .split(",")
        .filter((s) => s.length > 0);
      if (opponents.length === 0) throw new UsageError("--opponent is required");
      for (const o of opponents) for (const seat of seats) await checkOpponent(o, seat);
      cells = opponents.flatMap((opponent) => seats.map((seat) => ({ opponent, seat, unseen: true })));
    } else {
      if (values.opponent !== undefined)
        throw new UsageError(`${game} is single-player and takes no --opponent`);
      cells = [{ opponent: null, seat: null, unseen: true }];
    }
    const reflection = values.reflection ?? "reflection_only";
    if (reflection !== "none" && !(REFLECTION_TYPES as readonly string[]).includes(reflection)) {
      throw new UsageError(
        `unknown --reflection "${reflection}"; valid choices: none, ${REFLECTION_TYPES.join(", ")}`,
      );
    }
    const overflow = values["context-overflow"] ?? "stop";
    if (!(CONTEXT_OVERFLOW_POLICIES as readonly string[]).includes(overflow)) {
      throw new UsageError(
        `unknown --context-overflow "${overflow}"; valid choices: ${CONTEXT_OVERFLOW_POLICIES.join(", ")}`,
      );
    }
    let declaredSeen: Set<string> | undefined;
    if (values.seen !== undefined) {
      if (!task.twoPlayer) throw new UsageError(`${game} is single-player and takes no --seen`);
      const specs = values.seen === "none" ? [] : values.seen.split(",").filter((x) => x.length > 0);
      if (specs.length === 0 && values.seen !== "none")
        throw new UsageError("--seen needs opponent specs (comma-separated) or none");
      for (const o of specs) await checkOpponent(o);
      declaredSeen = new Set(specs);
    }
    // Every flag is checked before the checkpoint's pool is read.
    if (task.twoPlayer && (declaredSeen !== undefined || checkpointDir !== undefined)) {
      let seen = declaredSeen;
      if (seen === undefined && checkpointDir !== undefined) {
        meta ??= await readCheckpointMeta(checkpointDir);
        seen = trainingOpponents(meta, game, checkpointDir);
      }
      const known = seen ?? new Set<string>();
      cells = cells.map((c) => ({ ...c, unseen: c.opponent === null || !known.has(c.opponent) }));
    }
    // parseKnobsArg refuses --knobs for a game without knobs; taskKnobOptions gives {} for one.
    let knobs: TaskKnobs = {};
    if (values.knobs !== undefined) knobs = parseKnobsArg(game, values.knobs);
    else if ((KNOB_GAMES as readonly string[]).includes(game)) {
      if (checkpointDir !== undefined) meta ??= await readCheckpointMeta(checkpointDir);
      if (meta?.taskKnobs && typeof meta.taskKnobs === "object") knobs = meta.taskKnobs as TaskKnobs;
    }
    const taskOptions = taskKnobOptions(game, knobs);
    if (task.twoPlayer && values.harder) throw new UsageError(`${game} takes no --harder (puzzles only)`);
    const resolvedCheckpoint = checkpointDir === undefined ? undefined : await checkpointArg(checkpointDir);
    const spec =
      modelDir !== undefined
        ? `model:${modelDir}`
        : resolvedCheckpoint === undefined
          ? requested
          : `checkpoint:${resolvedCheckpoint}`;
    // A checkpoint of model.backend: torch plays through the PyTorch worker.
    const torchCheckpoint = resolvedCheckpoint !== undefined && isTorchCheckpoint(resolvedCheckpoint);
    if (torchCheckpoint) meta ??= await readCheckpointMeta(resolvedCheckpoint);
    const opened =
      modelDir !== undefined
        ? await openModelEval(modelDir, num("threads", values.threads, 0, true), meta)
        : torchCheckpoint
          ? await openTorchEval(resolvedCheckpoint, meta)
          : await openPolicy(spec);
    const style = values.style ?? opened.promptStyle;
    if (style !== "compact" && style !== "full") {
      throw new UsageError(`unknown --style "${style}"; valid choices: compact, full`);
    }
    const seed = num("seed", values.seed, 0, true);
    const out = values.out ?? `runs/eval/${game}-s${seed}.jsonl`;
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, "");
    const progress = values.quiet ? null : new EvalProgressBar({ label: "eval" });
    try {
      let result: Awaited<ReturnType<typeof evaluate>>;
      try {
        result = await evaluate(opened.policy, {
          task,
          cells,
          trials: num("trials", values.trials, 100, true),
          attempts: num("attempts", values.attempts, 3, true),
          reflection: reflection as never,
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
          ...(values.harder ? { seedRange: HARDER_SEED_RANGE } : {}),
          contextOverflow: overflow as ContextOverflow,
          concurrency: opened.kind === "embedded" || opened.kind === "torch" ? 1 : 8,
          ...(progress ? { onProgress: progress.update } : {}),
          onTrial: (t) =>
            appendFileSync(
              out,
              `${JSON.stringify({ trialId: t.trialId, opponent: t.opponent, seat: t.seat, taskSeed: t.taskSeed, attempts: t.attempts, aborted: t.aborted, ...(t.stopReason ? { stopReason: t.stopReason } : {}), memory: t.memory })}\n`,
            ),
        });
      } catch (err) {
        progress?.finish();
        if (!(err instanceof RolloutAbortedError)) throw err;
        // Every trial, finished or in flight, is already in the file (in-flight ones marked
        // "aborted": true); no metric is computed, so aborted trials never count as losses.
        const cause = err.cause instanceof Error ? err.cause.message : String(err.cause);
        const url = (opened.policy as { url?: unknown }).url;
        console.error(
          `mage eval: the policy backend ${opened.policy.name}${typeof url === "string" ? ` at ${url}` : ""} failed: ${cause}\n` +
            `mage eval: ${err.finished.length} trials finished, ${err.aborted.length} aborted (written with "aborted": true to ${out}); no metrics reported`,
        );
        return 1;
      }
      progress?.finish();
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
