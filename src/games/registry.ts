import { UsageError } from "../core/errors.js";
import type { Game } from "./types.js";

/**
 * Two-player games addressable by name (tournaments, opponents, tasks).
 * To add a game: implement `Game<S, M>` in `src/games/NAME.ts` and add one entry here.
 */
export const GAMES: Record<string, () => Promise<Game<any, any>>> = {
  tictactoe: async () => (await import("./tictactoe.js")).tictactoe,
  kuhn: async () => (await import("./kuhn.js")).kuhn,
};

export async function loadGame(name: string): Promise<Game<any, any>> {
  const load = GAMES[name];
  if (!load) throw new UsageError(`unknown game "${name}"; valid choices: ${Object.keys(GAMES).join(", ")}`);
  return load();
}
