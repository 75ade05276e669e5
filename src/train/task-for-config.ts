/**
 * The task a config trains and evaluates on: a built-in task by name, or for `game: remote` the
 * served environment, checked against its server before any trial is played (the environment,
 * its config, the seed range, and every opponent and seat the population and the evaluation
 * cells name: UsageErrors with the server's own choices).
 */
import { UsageError } from "../core/errors.js";
import { loadTask, type TaskDefinition } from "../tasks/registry.js";
import { openRemoteTask } from "../tasks/remote.js";
import type { Seat } from "../tasks/types.js";
import type { MageConfig } from "./config.js";

/** The game name a run's summary and checkpoints record: the served environment's for `remote`. */
export function gameName(config: MageConfig): string {
  return config.game === "remote" && config.env ? config.env.name : config.game;
}

export async function taskForConfig(config: MageConfig): Promise<TaskDefinition> {
  if (config.game !== "remote") return loadTask(config.game);
  return checkedOpponents(config, await openRemoteTask(config.env!));
}

/**
 * The task the run's evaluations play: the training task, or with `eval.env` the served
 * environment with that config laid over `env.config` and those seeds (checked the same way).
 */
export async function evalTaskForConfig(config: MageConfig, task: TaskDefinition): Promise<TaskDefinition> {
  const over = config.eval.env;
  if (config.game !== "remote" || over === null) return task;
  return servedVariant(config, [over], "eval.env (laid over env)");
}

/**
 * The task a served run's harder held-out set plays: `eval.harder.env` laid over the evaluation's
 * environment (`eval.env` over `env`); null for the puzzles, whose harder set is knobs.
 */
export async function harderTaskForConfig(config: MageConfig): Promise<TaskDefinition | null> {
  const over = config.eval.harder?.env ?? null;
  if (config.game !== "remote" || over === null) return null;
  const layers = config.eval.env === null ? [over] : [config.eval.env, over];
  return servedVariant(config, layers, "eval.harder.env (laid over eval.env and env)");
}

type EnvLayer = NonNullable<MageConfig["eval"]["env"]>;

/** The served environment with each layer's config laid over the last, the last seeds that are set. */
async function servedVariant(config: MageConfig, layers: EnvLayer[], what: string): Promise<TaskDefinition> {
  const env = config.env!;
  let envConfig = env.config;
  let seeds = env.seeds;
  for (const layer of layers) {
    envConfig = { ...envConfig, ...layer.config };
    seeds = layer.seeds ?? seeds;
  }
  try {
    return await checkedOpponents(config, await openRemoteTask({ ...env, config: envConfig, seeds }));
  } catch (err) {
    if (err instanceof UsageError) throw new UsageError(`${what}: ${err.message}`);
    throw err;
  }
}

async function checkedOpponents(config: MageConfig, def: TaskDefinition): Promise<TaskDefinition> {
  if (!def.twoPlayer || !def.checkOpponent) return def;
  const pairs = new Map<string, { spec: string; seat: Seat }>();
  const add = (spec: string, seat: Seat) => pairs.set(`${spec}\u0000${seat}`, { spec, seat });
  const seats: Seat[] =
    config.population.seats === "mixed" ? ["first", "second"] : [config.population.seats as Seat];
  for (const o of config.population.opponents) for (const s of seats) add(o.spec, s);
  for (const c of [...config.eval.cells, ...(config.eval.scaling?.cells ?? [])]) add(c.opponent, c.seat);
  for (const { spec, seat } of pairs.values()) await def.checkOpponent(spec, seat);
  return def;
}
