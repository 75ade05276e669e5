/**
 * The opponents `mage env-serve` plays, with the server-side bounds on their work: a kind whose
 * work grows with its argument (`work` in the opponent registry: MCTS simulations, CFR iterations)
 * takes arguments up to a limit (the kind's `serveLimit` unless `--opponent-limit` says otherwise),
 * and its moves are played by the worker-thread pool under the request's time budget. Other kinds
 * play on the event loop: a move of theirs is a table lookup or a draw.
 */
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import type { OpponentDescription } from "../env/protocol.js";
import {
  createOpponent,
  OPPONENT_KINDS,
  type OpponentKind,
  opponentKindsFor,
  splitOpponentSpec,
} from "../opponents/registry.js";
import type { Opponent } from "../opponents/types.js";
import { type OpponentPool, PooledOpponent } from "./opponent-pool.js";

/** Largest argument per opponent kind name ("mcts" → 100000). */
export type OpponentLimits = Readonly<Record<string, number>>;

/** Kinds whose work grows with their argument, by name, across every game. */
function workKinds(): Map<string, OpponentKind> {
  const out = new Map<string, OpponentKind>();
  for (const kinds of Object.values(OPPONENT_KINDS)) for (const k of kinds) if (k.work) out.set(k.name, k);
  return out;
}

/** The registry's `serveLimit` of every kind with `work`, overridden by `overrides` (checked). */
export function opponentLimits(overrides: Readonly<Record<string, number>> = {}): OpponentLimits {
  const kinds = workKinds();
  const limits: Record<string, number> = {};
  for (const [name, k] of kinds) limits[name] = k.work!.serveLimit;
  for (const [name, value] of Object.entries(overrides)) {
    const kind = kinds.get(name);
    if (!kind)
      throw new UsageError(
        `--opponent-limit: "${name}" is not an opponent whose work grows with its argument; valid names: ${[...kinds.keys()].join(", ")}`,
      );
    const max = kind.work!.max ?? Number.MAX_SAFE_INTEGER;
    if (!Number.isSafeInteger(value) || value < 1 || value > max)
      throw new UsageError(
        `--opponent-limit ${name}: ${kind.work!.unit} must be an integer from 1 to ${max}, got ${value}`,
      );
    limits[name] = value;
  }
  return limits;
}

/** Parses `--opponent-limit` values: "mcts=200000", several per flag with commas. */
export function parseOpponentLimitFlags(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of values.flatMap((v) => v.split(",")).map((p) => p.trim())) {
    const m = /^([a-z][a-z0-9-]*)=(\d+)$/.exec(part);
    if (!m) throw new UsageError(`--opponent-limit takes NAME=N (e.g. mcts=200000), got "${part}"`);
    out[m[1]] = Number(m[2]);
  }
  return out;
}

/** /info's opponent list of a game: "mcts" and "mcts:<simulations>", with the served range. */
export function describeServedOpponents(game: string, limits: OpponentLimits): OpponentDescription[] {
  return opponentKindsFor(game).flatMap((k) => {
    const limit = limits[k.name];
    const description =
      k.work && limit !== undefined ? `${k.description}; ${k.work.unit} 1 to ${limit} here` : k.description;
    const plain = { spec: k.name, description };
    if (k.arg === undefined) return [plain];
    const withArg: OpponentDescription = {
      spec: `${k.name}:${k.arg}`,
      description,
      ...(k.work && limit !== undefined ? { argumentRange: { min: 1, max: limit } } : {}),
    };
    return k.argOptional ? [plain, withArg] : [withArg];
  });
}

/**
 * Checks a spec against the game's kinds and the limits without doing the kind's work (a CFR
 * policy is computed where its moves are played: in the pool). A bad spec is a UsageError that
 * names the allowed range or the valid specs.
 */
export function checkServedSpec(game: string, spec: string, limits: OpponentLimits): void {
  const { name, arg } = splitOpponentSpec(spec);
  const kind = opponentKindsFor(game).find((k) => k.name === name);
  const limit = limits[name];
  if (!kind?.work || limit === undefined) {
    // Cheap to build: the registry's own checks give the message.
    createOpponent(game, spec, { rng: Rng.seeded("spec-check") });
    return;
  }
  if (arg === undefined || arg === "") {
    if (kind.argOptional) return;
    throw new UsageError(`${game} opponent "${name}" needs an argument: ${name}:${kind.arg}`);
  }
  if (!/^\d+$/.test(arg) || Number(arg) < 1 || Number(arg) > limit) {
    throw new UsageError(
      `opponent "${spec}": ${kind.work.unit} must be an integer from 1 to ${limit} on this server (mage env-serve --opponent-limit ${name}=N raises it), got "${arg}"`,
    );
  }
}

/**
 * The `TaskOptions.makeOpponent` of one session: kinds with `work` become pool opponents that
 * ask `budget()` for the current request's deadline; the others are the registry's opponents.
 */
export function servedOpponentFactory(
  game: string,
  pool: OpponentPool,
  budget: () => { deadline: number; budgetMs: number },
): (spec: string, ctx: { rng: Rng; replay: boolean }) => Opponent<unknown, unknown> {
  return (spec, ctx) => {
    const { name } = splitOpponentSpec(spec);
    const kind = opponentKindsFor(game).find((k) => k.name === name);
    if (kind?.work) return new PooledOpponent(spec, game, pool, ctx.rng, ctx.replay, budget);
    return createOpponent(game, spec, ctx);
  };
}
