import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { writeFileAtomic } from "../../core/atomic-write.js";
import { UsageError } from "../../core/errors.js";
import {
  DIVERSITY_DEFAULT_OPPONENTS,
  DIVERSITY_DEFAULT_SAMPLES,
  DIVERSITY_GAMES,
  DIVERSITY_SAMPLING,
  type DiversityGame,
  type DiversityResult,
  formatDiversity,
  measureDiversity,
} from "../../evaluate/diversity.js";
import { readCheckpointMeta } from "../../model/checkpoint.js";
import { openPolicy } from "../../policy/factory.js";
import { checkOpponentSpec } from "../../tasks/registry.js";
import { KNOB_GAMES, parseKnobsArg, taskKnobOptions } from "../../train/config.js";
import { parseFlags } from "../args.js";
import { checkpointArg } from "../checkpoint-arg.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage diversity (--checkpoint DIR | --policy SPEC) --game kuhn|tictactoe|sokoban|minesweeper [--samples N] [--opponent SPEC]",
  "               [--temperature T] [--top-p P] [--top-k K] [--max-tokens N] [--style compact|full]",
  "               [--seed S] [--out FILE.json] [--json]",
  "  Entropy (bits) of the distribution of attempt-1 action sequences, N single-attempt games per cell",
  `  (default ${DIVERSITY_DEFAULT_SAMPLES}): Kuhn per agent seat and card (opponent default ${DIVERSITY_DEFAULT_OPPONENTS.kuhn}),`,
  `  TicTacToe from the empty board, agent first (opponent default ${DIVERSITY_DEFAULT_OPPONENTS.tictactoe});`,
  "  puzzles: 10 held-out levels, each played N/10 times, with the knobs the checkpoint trained on",
  '  or --knobs YAML (e.g. "boxes: 1, maxSolSteps: 8").',
  "  --policy: checkpoint:DIR, openai:URL#MODEL[?apiKeyEnv=NAME&...], gguf:PATH",
].join("\n");

function num(
  name: string,
  v: string | undefined,
  fallback: number,
  kind: "number" | "integer" | "positive integer" = "number",
): number {
  if (v === undefined) return fallback;
  const x = Number(v);
  const bad =
    v.trim() === "" ||
    !Number.isFinite(x) ||
    x < 0 ||
    (kind !== "number" && !Number.isInteger(x)) ||
    (kind === "positive integer" && x < 1);
  if (bad) {
    const what =
      kind === "number" ? "non-negative number" : kind === "integer" ? "non-negative integer" : kind;
    throw new UsageError(`--${name} must be a ${what}, got "${v}"`);
  }
  return x;
}

/** The game and the measurement's settings, from the flags and a checkpoint's own meta. */
async function diversitySettings(values: DiversityFlags) {
  if ((values.checkpoint === undefined) === (values.policy === undefined)) {
    throw new UsageError(`give exactly one of --checkpoint DIR or --policy SPEC\nusage: ${USAGE}`);
  }
  let game = values.game;
  let meta: Record<string, unknown> | null = null;
  if (values.checkpoint !== undefined) {
    meta = await readCheckpointMeta(values.checkpoint);
    if (game === undefined && typeof meta.game === "string") game = meta.game;
  }
  if (game === undefined) {
    throw new UsageError(`--game is required; valid choices: ${DIVERSITY_GAMES.join(", ")}`);
  }
  if (!(DIVERSITY_GAMES as readonly string[]).includes(game)) {
    throw new UsageError(`unknown --game "${game}"; valid choices: ${DIVERSITY_GAMES.join(", ")}`);
  }
  const g = game as DiversityGame;
  const samples = num("samples", values.samples, DIVERSITY_DEFAULT_SAMPLES, "positive integer");
  const seed = num("seed", values.seed, 0, "integer");
  const puzzle = g === "sokoban" || g === "minesweeper";
  if (puzzle && values.opponent !== undefined)
    throw new UsageError(`${g} is single-player and takes no --opponent`);
  const opponent = values.opponent ?? DIVERSITY_DEFAULT_OPPONENTS[g];
  if (opponent !== undefined) checkOpponentSpec(g, opponent);
  const knobs =
    values.knobs !== undefined
      ? taskKnobOptions(g, parseKnobsArg(g, values.knobs))
      : !(KNOB_GAMES as readonly string[]).includes(g)
        ? undefined
        : meta?.taskKnobs && typeof meta.taskKnobs === "object"
          ? taskKnobOptions(g, meta.taskKnobs as Parameters<typeof taskKnobOptions>[1])
          : undefined;
  const style = values.style;
  if (style !== undefined && style !== "compact" && style !== "full") {
    throw new UsageError(`unknown --style "${style}"; valid choices: compact, full`);
  }
  const temperature = num("temperature", values.temperature, DIVERSITY_SAMPLING.temperature);
  const topP = num("top-p", values["top-p"], DIVERSITY_SAMPLING.topP);
  if (topP > 1) throw new UsageError(`--top-p must be in [0, 1], got "${values["top-p"]}"`);
  const topK = num("top-k", values["top-k"], DIVERSITY_SAMPLING.topK, "integer");
  return { g, samples, seed, opponent, knobs, style, temperature, topP, topK };
}

/** Writes the result to --out and prints it (as JSON with --json). */
async function reportDiversity(result: DiversityResult, values: DiversityFlags): Promise<void> {
  const json = JSON.stringify(result, null, 2);
  if (values.out !== undefined) {
    await mkdir(dirname(values.out), { recursive: true });
    await writeFileAtomic(values.out, `${json}\n`);
  }
  if (values.json) {
    console.log(json);
  } else {
    console.log(formatDiversity(result));
    if (values.out !== undefined) console.log(`written to ${values.out}`);
  }
}

const FLAGS = {
  checkpoint: { type: "string" },
  policy: { type: "string" },
  game: { type: "string" },
  samples: { type: "string" },
  opponent: { type: "string" },
  temperature: { type: "string" },
  "top-p": { type: "string" },
  "top-k": { type: "string" },
  "max-tokens": { type: "string" },
  style: { type: "string" },
  seed: { type: "string" },
  knobs: { type: "string" },
  out: { type: "string" },
  json: { type: "boolean" },
} as const;

type DiversityFlags = ReturnType<typeof parseFlags<typeof FLAGS>>["values"];

export const command: Command = {
  name: "diversity",
  usage: USAGE,
  async run(argv) {
    const { values } = parseFlags(argv, FLAGS, USAGE);
    const { g, samples, seed, opponent, knobs, style, temperature, topP, topK } =
      await diversitySettings(values);
    const spec = values.policy ?? `checkpoint:${await checkpointArg(values.checkpoint as string)}`;
    const opened = await openPolicy(spec);
    try {
      const maxTokens = num(
        "max-tokens",
        values["max-tokens"],
        opened.kind === "embedded" ? DIVERSITY_SAMPLING.maxTokens : 1024,
        "positive integer",
      );
      const result = await measureDiversity(opened.policy, {
        game: g,
        samples,
        ...(opponent !== undefined ? { opponent } : {}),
        ...(knobs ? { taskOptions: knobs } : {}),
        sampling: { temperature, topP, topK, maxTokens, stop: [] },
        seed,
        // Compact prompts by default (the brief's protocol), whatever the backend prefers.
        promptStyle: (style as "compact" | "full" | undefined) ?? "compact",
        policyLabel: values.policy ?? (values.checkpoint as string),
        concurrency: opened.kind === "embedded" ? 1 : 8,
      });
      await reportDiversity(result, values);
      return 0;
    } finally {
      await opened.close();
    }
  },
};
