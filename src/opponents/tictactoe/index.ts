import { UsageError } from "../../core/errors.js";
import type { Rng } from "../../core/rng.js";
import { randomPlayoutValue, type TicTacToeState, tictactoe } from "../../games/tictactoe.js";
import { MctsOpponent } from "../mcts.js";
import { MinimaxOpponent, MinimaxSolver } from "../minimax.js";
import { RandomOpponent } from "../random.js";
import { positiveIntArg } from "../spec-args.js";
import type { OpponentKind } from "../types.js";
import { PREFERRED_CELL_ORDERS, PreferredOpponent } from "./preferred.js";

export { PREFERRED_CELL_ORDERS, PREFERRED_ORDERS, PreferredOpponent } from "./preferred.js";

/** Default simulations of `mcts` (MAGE's `mcts_sim_num`). */
export const DEFAULT_MCTS_SIMULATIONS = 100;

let solver: MinimaxSolver<TicTacToeState, number> | undefined;

/** The shared, lazily filled TicTacToe minimax table (all 5,478 reachable states once full). */
export function tictactoeSolver(): MinimaxSolver<TicTacToeState, number> {
  solver ??= new MinimaxSolver(tictactoe, (s) => s);
  return solver;
}

/** An MCTS opponent for TicTacToe with OpenSpiel's bot settings (UCT c = 1.4, one random playout, solver). */
export function tictactoeMcts(
  simulations: number,
  rng: Rng,
  opts: { replay?: boolean; name?: string } = {},
): MctsOpponent<TicTacToeState, number> {
  return new MctsOpponent(
    opts.name ?? `mcts:${simulations}`,
    tictactoe,
    { simulations, uctC: 1.4, maxUtility: 1, playoutValue: randomPlayoutValue },
    rng,
    opts.replay ?? false,
  );
}

type Kind = OpponentKind<TicTacToeState, number>;

export const tictactoeOpponentKinds: Kind[] = [
  {
    name: "random",
    description: "uniformly random empty cell",
    create: (_arg, { rng, replay, spec }) => new RandomOpponent(spec, tictactoe, rng, replay),
  },
  {
    name: "preferred",
    arg: "<1-6>",
    description: "first empty cell in one of MAGE's six fixed preference orders, else random",
    create: (arg, { rng, replay, spec }) => {
      const k = positiveIntArg(spec, arg);
      if (k > PREFERRED_CELL_ORDERS.length) {
        throw new UsageError(
          `opponent spec "${spec}": preference order must be 1..${PREFERRED_CELL_ORDERS.length}, got ${arg}`,
        );
      }
      return new PreferredOpponent(spec, PREFERRED_CELL_ORDERS[k - 1], rng, replay);
    },
  },
  {
    name: "minimax",
    description: "perfect play, uniformly random among the best moves",
    create: (_arg, { rng, replay, spec }) =>
      new MinimaxOpponent(spec, tictactoeSolver(), "random", rng, replay),
  },
  {
    name: "minimax-first",
    description: "perfect play, the first best move in row-major order (deterministic)",
    create: (_arg, { rng, replay, spec }) =>
      new MinimaxOpponent(spec, tictactoeSolver(), "first", rng, replay),
  },
  {
    name: "mcts",
    arg: "<simulations>",
    argOptional: true,
    // Up to 100× the presets' largest (mcts:1000): about 0.1 s a move on one core of the 2-core machine.
    work: { unit: "simulations", serveLimit: 100_000 },
    description: `MCTS with solver (UCT c = 1.4, one random playout per leaf), default ${DEFAULT_MCTS_SIMULATIONS} simulations`,
    create: (arg, { rng, replay, spec }) =>
      tictactoeMcts(positiveIntArg(spec, arg, DEFAULT_MCTS_SIMULATIONS), rng, { replay, name: spec }),
  },
];
