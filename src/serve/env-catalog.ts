/**
 * What `mage env-serve` offers (its /info): every task in mage's registry, the config fields each
 * declares and how they become task options, with this server's opponent limits.
 */
import type { ConfigField, EnvDescription } from "../env/protocol.js";
import { loadTask, TASKS } from "../tasks/registry.js";
import { BUILTIN_REMARK_RULES, NO_RULE } from "../tasks/remark-quality.js";
import type { TaskOptions } from "../tasks/types.js";
import { describeServedOpponents, type OpponentLimits, opponentLimits } from "./served-opponents.js";

export const SEEDS = { min: 0, max: 0xffffffff };

/** Config fields each served task declares, and how they become task options. */
const TWO_PLAYER_CONFIG: Record<string, ConfigField> = {
  replayOpponent: {
    type: "boolean",
    default: false,
    description: "the opponent answers the same moves the same way in every attempt",
  },
};

const PUZZLE_CONFIG: Record<string, Record<string, ConfigField>> = {
  sokoban: {
    movesPerTurn: { type: "integer", min: 1, max: 10, default: 3, description: "moves per turn" },
    maxSteps: { type: "integer", min: 1, max: 200, default: 30, description: "primitive moves per attempt" },
    numBoxes: { type: "integer", min: 1, max: 4, default: 2, description: "boxes (and targets) per level" },
  },
  minesweeper: {
    rows: { type: "integer", min: 2, max: 16, default: 6, description: "board rows" },
    cols: { type: "integer", min: 2, max: 16, default: 6, description: "board columns" },
    mines: { type: "integer", min: 1, max: 40, default: 3, description: "mines (fewer than the cells)" },
  },
};

export function taskOptions(name: string, config: Record<string, unknown>): TaskOptions {
  if (name === "sokoban") {
    return {
      ...(config.movesPerTurn !== undefined ? { movesPerTurn: config.movesPerTurn as number } : {}),
      ...(config.maxSteps !== undefined ? { maxSteps: config.maxSteps as number } : {}),
      ...(config.numBoxes !== undefined ? { knobs: { numBoxes: config.numBoxes } } : {}),
    };
  }
  if (name === "minesweeper") {
    const knobs: Record<string, unknown> = {};
    for (const k of ["rows", "cols", "mines"] as const) if (config[k] !== undefined) knobs[k] = config[k];
    return Object.keys(knobs).length > 0 ? { knobs } : {};
  }
  return config.replayOpponent !== undefined ? { replayOpponent: config.replayOpponent as boolean } : {};
}

/** /info's environment list: every task in mage's registry, opponents with this server's limits. */
export async function describeEnvironments(
  limits: OpponentLimits = opponentLimits(),
): Promise<EnvDescription[]> {
  const out: EnvDescription[] = [];
  for (const name of Object.keys(TASKS).sort()) {
    const def = await loadTask(name);
    out.push({
      name,
      description: def.description,
      twoPlayer: def.twoPlayer,
      seats: def.twoPlayer ? ["first", "second"] : [],
      opponents: def.twoPlayer ? describeServedOpponents(name, limits) : [],
      defaultOpponent: def.defaultOpponent ?? null,
      maxTurns: def.maxTurns,
      seeds: SEEDS,
      config: def.twoPlayer ? TWO_PLAYER_CONFIG : (PUZZLE_CONFIG[name] ?? {}),
      legalActions: def.twoPlayer,
      // The rule mage judges the task's reflections by in-process, so served play is judged alike.
      remarks: { informative: BUILTIN_REMARK_RULES[name] ?? NO_RULE },
    });
  }
  return out;
}
