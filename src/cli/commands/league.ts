import { readdir, writeFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { UsageError } from "../../core/errors.js";
import { Rng } from "../../core/rng.js";
import { GAMES, loadGame } from "../../games/registry.js";
import type { ModelPlayer } from "../../league/model-opponent.js";
import { LEAGUE_DIR, snapshotSpec } from "../../league/pool.js";
import { formatLeague, type LeaguePlayer, runLeague } from "../../league/round-robin.js";
import { loadEmbeddedPolicy } from "../../league/snapshots.js";
import { openTorchPlayers, type TorchPlayers } from "../../league/torch-players.js";
import {
  type CheckpointMeta,
  isCheckpointDir,
  isTorchCheckpoint,
  readCheckpointMeta,
} from "../../model/checkpoint.js";
import { selectKernels } from "../../model/kernels/select.js";
import type { Kernels } from "../../model/kernels/types.js";
import { createOpponent, describeOpponentSpecs } from "../../opponents/registry.js";
import type { Policy } from "../../policy/types.js";
import { loadTask } from "../../tasks/registry.js";
import { PROMPT_STYLES, type PromptStyle } from "../../tasks/types.js";
import { checkpointArg } from "../checkpoint-arg.js";
import type { Command } from "../command.js";

const USAGE =
  "mage league [--game NAME] [--players SPEC,...] [--checkpoint DIR]... [--snapshots RUN]... [--deals N] [--seed S]\n" +
  "            [--temperature T] [--kernels K] [--out FILE] [--json]\n\n" +
  "A round robin among scripted opponents, trained models and a run's league snapshots, with paired\n" +
  "deals: deal (or board) d is the same for every pair, and each pair plays it twice, once with each\n" +
  "player first. Prints each player's openskill rating with its 95% interval, games, W-D-L and mean\n" +
  "return. The same seed gives the same table.\n\n" +
  "  --game NAME        tictactoe or kuhn (default: the models' game, else tictactoe)\n" +
  "  --players LIST     scripted opponent specs, comma-separated (e.g. cfr,random,aggressive)\n" +
  "  --checkpoint DIR   a checkpoint (embedded or torch), or a run directory (its newest checkpoint); repeatable\n" +
  "  --snapshots RUN    every snapshot in RUN/league/ (a run trained with population.league); repeatable\n" +
  "  --deals N          deals per pair, each played in both seats (default 20)\n" +
  "  --seed S           root seed of the deals, the opponents' draws and the models' samples (default 0)\n" +
  "  --temperature T    the models' sampling temperature (default 1, as in training rollouts)\n" +
  "  --kernels K        the embedded model's kernels: auto, js, wasm, native (default auto)\n" +
  "  --out FILE         also write the result as JSON to FILE\n" +
  "  --json             print the result as one JSON object instead of the table\n\n" +
  "A model plays from its own seat the attempt-1 prompt of its training prompt style (meta.json), each\n" +
  "move asked as a first turn; an answer that is no legal move is replaced by a random legal one\n" +
  "(the table's invalid column). Torch checkpoints and snapshots play through the PyTorch worker:\n" +
  "LoRA adapters of the same base model share one worker (each swapped in for its own moves), a\n" +
  "fully fine-tuned checkpoint gets a worker of its own. At least two players in all.";

interface LeagueArgs {
  game: string | undefined;
  players: string[];
  checkpoints: string[];
  snapshots: string[];
  deals: number;
  seed: number;
  temperature: number;
  kernels: string;
  out: string | null;
  json: boolean;
}

function nonNegativeInt(flag: string, text: string, positive: boolean): number {
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text)) || (positive && Number(text) === 0))
    throw new UsageError(
      `${flag} must be a ${positive ? "positive" : "non-negative"} integer, got "${text}"`,
    );
  return Number(text);
}

export function parseLeagueArgs(argv: string[]): LeagueArgs {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        game: { type: "string" },
        players: { type: "string" },
        checkpoint: { type: "string", multiple: true },
        snapshots: { type: "string", multiple: true },
        deals: { type: "string" },
        seed: { type: "string" },
        temperature: { type: "string" },
        kernels: { type: "string" },
        out: { type: "string" },
        json: { type: "boolean" },
      },
    }));
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
  }
  const game = values.game as string | undefined;
  if (game !== undefined && !(game in GAMES))
    throw new UsageError(`unknown --game "${game}"; valid choices: ${Object.keys(GAMES).join(", ")}`);
  const players = ((values.players as string | undefined) ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
  const temperature = Number(values.temperature ?? "1");
  if (!Number.isFinite(temperature) || temperature < 0)
    throw new UsageError(`--temperature must be a number >= 0, got "${values.temperature}"`);
  return {
    game,
    players,
    checkpoints: (values.checkpoint as string[] | undefined) ?? [],
    snapshots: (values.snapshots as string[] | undefined) ?? [],
    deals: nonNegativeInt("--deals", (values.deals as string | undefined) ?? "20", true),
    seed: nonNegativeInt("--seed", (values.seed as string | undefined) ?? "0", false),
    temperature,
    kernels: (values.kernels as string | undefined) ?? "auto",
    out: (values.out as string | undefined) ?? null,
    json: (values.json as boolean | undefined) ?? false,
  };
}

/** A model entry before loading: its name, directory and meta.json. */
interface ModelEntry {
  name: string;
  dir: string;
  meta: CheckpointMeta;
}

async function checkpointEntries(dirs: readonly string[]): Promise<ModelEntry[]> {
  const out: ModelEntry[] = [];
  for (const d of dirs) {
    const dir = await checkpointArg(d);
    out.push({ name: `model:${d}`, dir, meta: await readCheckpointMeta(dir) });
  }
  return out;
}

/** Every snapshot folder of each run, oldest first; named snapshot:N (RUN/snapshot:N with several runs). */
async function snapshotEntries(runs: readonly string[]): Promise<ModelEntry[]> {
  const out: ModelEntry[] = [];
  for (const run of runs) {
    const parent = join(resolve(run), LEAGUE_DIR);
    let names: string[];
    try {
      names = (await readdir(parent)).filter((n) => /^snapshot-\d+$/.test(n)).sort();
    } catch {
      throw new UsageError(
        `--snapshots ${run}: no ${LEAGUE_DIR}/ folder (a run trained with population.league has one)`,
      );
    }
    if (names.length === 0) throw new UsageError(`--snapshots ${run}: ${LEAGUE_DIR}/ holds no snapshot`);
    for (const n of names) {
      const dir = join(parent, n);
      if (!(await isCheckpointDir(dir))) continue;
      const spec = snapshotSpec(Number(n.slice("snapshot-".length)));
      out.push({
        name: runs.length > 1 ? `${basename(resolve(run))}/${spec}` : spec,
        dir,
        meta: await readCheckpointMeta(dir),
      });
    }
  }
  return out;
}

/** The game: --game, or the one every model trained on. */
function gameOf(args: LeagueArgs, models: readonly ModelEntry[]): string {
  const games = [
    ...new Set(models.map((m) => m.meta.game).filter((g): g is string => typeof g === "string")),
  ];
  if (args.game === undefined) {
    if (games.length > 1)
      throw new UsageError(
        `the models trained on different games (${games.join(", ")}); choose one with --game`,
      );
    return games[0] ?? "tictactoe";
  }
  for (const m of models) {
    if (typeof m.meta.game === "string" && m.meta.game !== args.game)
      throw new UsageError(`${m.name} was trained on ${m.meta.game}, not --game ${args.game}`);
  }
  return args.game;
}

function modelPlayer(entry: ModelEntry, args: LeagueArgs, policy: Policy): ModelPlayer {
  const style = entry.meta.promptStyle;
  const promptStyle: PromptStyle = PROMPT_STYLES.includes(style as PromptStyle)
    ? (style as PromptStyle)
    : "compact";
  const maxTokens = typeof entry.meta.maxResponseTokens === "number" ? entry.meta.maxResponseTokens : 48;
  const knobs = (entry.meta.taskKnobs as { tictactoe?: Record<string, unknown> } | undefined)?.tictactoe;
  const defined = Object.fromEntries(Object.entries(knobs ?? {}).filter(([, v]) => v !== undefined));
  return {
    policy,
    promptStyle,
    sampling: { temperature: args.temperature, topP: 1, topK: 0, maxTokens, stop: [] },
    taskOptions: Object.keys(defined).length > 0 ? { knobs: defined } : {},
  };
}

/** Each model's policy: torch ones from their workers, embedded ones loaded here. */
async function modelPolicies(
  models: readonly ModelEntry[],
  torch: TorchPlayers,
  kernels: Kernels,
): Promise<Map<string, Policy>> {
  const out = new Map<string, Policy>();
  for (const m of models)
    out.set(m.name, torch.policies.get(m.name) ?? (await loadEmbeddedPolicy(m.dir, m.name, kernels)));
  return out;
}

export const command: Command = {
  name: "league",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    const args = parseLeagueArgs(argv);
    const models = [
      ...(await checkpointEntries(args.checkpoints)),
      ...(await snapshotEntries(args.snapshots)),
    ];
    const game = gameOf(args, models);
    for (const spec of args.players) {
      try {
        createOpponent(game, spec, { rng: Rng.seeded(0) });
      } catch (err) {
        throw new UsageError(
          `--players: ${(err as Error).message}; valid specs: ${describeOpponentSpecs(game)}`,
        );
      }
    }
    const count = args.players.length + models.length;
    if (count < 2)
      throw new UsageError(
        `a league needs at least two players (got ${count}): --players, --checkpoint, --snapshots`,
      );
    const kernels = await selectKernels(args.kernels);
    const torch = await openTorchPlayers(models.filter((m) => isTorchCheckpoint(m.dir)));
    let result: Awaited<ReturnType<typeof runLeague>>;
    try {
      const policies = await modelPolicies(models, torch, kernels);
      const players: LeaguePlayer[] = [
        ...args.players.map((spec) => ({ name: spec, spec })),
        ...models.map((m) => ({ name: m.name, model: modelPlayer(m, args, policies.get(m.name)!) })),
      ];
      result = await runLeague({
        game: await loadGame(game),
        task: await loadTask(game),
        players,
        deals: args.deals,
        seed: args.seed,
        ...(args.json
          ? {}
          : { onPair: (done, total) => console.error(`league: ${done}/${total} pairs played`) }),
      });
    } finally {
      await torch.close();
    }
    if (args.out) await writeFile(args.out, `${JSON.stringify(result, null, 2)}\n`);
    process.stdout.write(`${args.json ? JSON.stringify(result) : formatLeague(result)}\n`);
    return 0;
  },
};
