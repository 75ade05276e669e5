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
  const env = config.env!;
  try {
    const def = await openRemoteTask({
      ...env,
      config: { ...env.config, ...over.config },
      seeds: over.seeds ?? env.seeds,
    });
    return await checkedOpponents(config, def);
  } catch (err) {
    if (err instanceof UsageError) throw new UsageError(`eval.env (laid over env): ${err.message}`);
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
