/**
 * Text tasks by name, with each task's defaults (reference §9: max turns per attempt).
 *
 * To add a task: write `src/tasks/NAME.ts` with a class implementing `TextTask` (two-player
 * games can extend `TwoPlayerTask`), then add ONE entry to `TASKS` below that lazily imports it
 * and states its defaults. Nothing else needs to change: the CLI (`mage play`), the population
 * sampler and the trial runner look tasks up here.
 */
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import { createOpponent, describeOpponentSpecs } from "../opponents/registry.js";
import type { Seat, TaskOptions, TextTask } from "./types.js";

export interface TaskDefinition {
  name: string;
  description: string;
  /** LLM turns per attempt (reference: TicTacToe 8, Kuhn 6, Sokoban 7, MineSweeper 7). */
  maxTurns: number;
  /** Two-player tasks take an opponent spec and a seat; puzzles take neither. */
  twoPlayer: boolean;
  /** Default opponent spec (two-player tasks). */
  defaultOpponent?: string;
  create(options: TaskOptions): TextTask;
  /**
   * Checks an opponent spec (and seat) before any trial is played; a bad one is a UsageError
   * listing the valid specs. Served tasks ask their server; built-in tasks use `checkOpponentSpec`.
   */
  checkOpponent?(spec: string, seat?: Seat): Promise<void>;
  /**
   * Served tasks: the wire seeds of every instance the task offers, each once, in order (an
   * evaluation that plays each game of a split once: `eval.env.instances: every`).
   */
  instanceSeeds?(): Promise<number[]>;
}

export const TASKS: Record<string, () => Promise<TaskDefinition>> = {
  tictactoe: async () => {
    const m = await import("./tictactoe.js");
    return {
      name: "tictactoe",
      description:
        "TicTacToe against an opponent; you are X, moves (row, col), or 23 with the knob cells: digits",
      maxTurns: 8,
      twoPlayer: true,
      defaultOpponent: m.TICTACTOE_DEFAULT_OPPONENT,
      create: (o) => new m.TicTacToeTask(o),
    };
  },
  kuhn: async () => {
    const m = await import("./kuhn.js");
    return {
      name: "kuhn",
      description: "one hand of Kuhn poker against an opponent; moves PASS / BET",
      maxTurns: 6,
      twoPlayer: true,
      defaultOpponent: m.KUHN_DEFAULT_OPPONENT,
      create: (o) => new m.KuhnTask(o),
    };
  },
  sokoban: async () => {
    const m = await import("./sokoban.js");
    return {
      name: "sokoban",
      description: "push every box onto a target; up to 3 moves per turn",
      maxTurns: 7,
      twoPlayer: false,
      create: (o) =>
        new m.SokobanTask({ knobs: o.knobs, movesPerTurn: o.movesPerTurn, maxSteps: o.maxSteps }),
    };
  },
  minesweeper: async () => {
    const m = await import("./minesweeper.js");
    return {
      name: "minesweeper",
      description:
        "open every safe cell of a 6x6 board with 3 mines; one (row, col) per turn, or 34 with the knob cells: digits",
      maxTurns: 7,
      twoPlayer: false,
      create: (o) => new m.MinesweeperTask({ knobs: o.knobs }),
    };
  },
};

export const TASK_NAMES: readonly string[] = Object.keys(TASKS);

export async function loadTask(name: string): Promise<TaskDefinition> {
  const load = TASKS[name];
  if (!load) throw new UsageError(`unknown task "${name}"; valid choices: ${Object.keys(TASKS).join(", ")}`);
  return load();
}

/**
 * Builds a task instance, checking the options: an unknown opponent spec is a UsageError with
 * the valid specs; puzzles reject opponents and seats.
 */
export async function createTask(name: string, options: TaskOptions = {}): Promise<TextTask> {
  const def = await loadTask(name);
  if (!def.twoPlayer) {
    if (options.opponent !== undefined)
      throw new UsageError(`task "${name}" is single-player and takes no opponent`);
    if (options.seat !== undefined) throw new UsageError(`task "${name}" is single-player and takes no seat`);
    return def.create(options);
  }
  if (options.seat !== undefined && options.seat !== "first" && options.seat !== "second") {
    throw new UsageError(`unknown seat "${options.seat}"; valid choices: first, second`);
  }
  const spec = options.opponent ?? def.defaultOpponent;
  if (spec !== undefined) checkOpponentSpec(name, spec);
  return def.create(options);
}

/** Throws a UsageError (listing the valid specs) unless `spec` names an opponent of `task`. */
export function checkOpponentSpec(task: string, spec: string): void {
  try {
    createOpponent(task, spec, { rng: Rng.seeded("spec-check") });
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(
      `bad ${task} opponent "${spec}": ${(err as Error).message}; valid specs: ${describeOpponentSpecs(task)}`,
    );
  }
}
