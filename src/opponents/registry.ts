import { UsageError } from "../core/errors.js";
import type { Rng } from "../core/rng.js";
import { kuhnOpponentKinds } from "./kuhn/index.js";
import { tictactoeOpponentKinds } from "./tictactoe/index.js";
import type { Opponent, OpponentKind } from "./types.js";

export type { OpponentKind };

/** Opponent families per game name. To add one, add an entry to the game's `opponents/<game>/index.ts`. */
export const OPPONENT_KINDS: Record<string, readonly OpponentKind<any, any>[]> = {
  tictactoe: tictactoeOpponentKinds,
  kuhn: kuhnOpponentKinds,
};

export function opponentKindsFor(game: string): readonly OpponentKind<any, any>[] {
  const kinds = OPPONENT_KINDS[game];
  if (!kinds) {
    throw new UsageError(
      `game "${game}" has no opponents; games with opponents: ${Object.keys(OPPONENT_KINDS).join(", ")}`,
    );
  }
  return kinds;
}

export function describeOpponentSpecs(game: string): string {
  return opponentKindsFor(game)
    .map((k) => (k.arg ? `${k.name}:${k.arg}${k.argOptional ? " (optional)" : ""}` : k.name))
    .join(", ");
}

/** A spec split at its first colon: "mcts:100" → { name: "mcts", arg: "100" }. */
export function splitOpponentSpec(spec: string): { name: string; arg: string | undefined } {
  const colon = spec.indexOf(":");
  return colon < 0
    ? { name: spec, arg: undefined }
    : { name: spec.slice(0, colon), arg: spec.slice(colon + 1) };
}

/** Parses and builds an opponent from a spec; a bad spec is a UsageError listing the valid ones. */
export function createOpponent<S, M>(
  game: string,
  spec: string,
  ctx: { rng: Rng; replay?: boolean },
): Opponent<S, M> {
  const kinds = opponentKindsFor(game);
  const { name, arg } = splitOpponentSpec(spec);
  const kind = kinds.find((k) => k.name === name);
  if (!kind) {
    throw new UsageError(`unknown ${game} opponent "${spec}"; valid specs: ${describeOpponentSpecs(game)}`);
  }
  if (kind.arg === undefined && arg !== undefined) {
    throw new UsageError(`${game} opponent "${name}" takes no argument (got "${spec}")`);
  }
  if (kind.arg !== undefined && !kind.argOptional && (arg === undefined || arg === "")) {
    throw new UsageError(`${game} opponent "${name}" needs an argument: ${name}:${kind.arg}`);
  }
  return kind.create(arg, { rng: ctx.rng, replay: ctx.replay ?? false, spec }) as Opponent<S, M>;
}

export { positiveIntArg } from "./spec-args.js";
