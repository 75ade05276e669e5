/**
 * `mage league`'s games: a round robin among scripted opponents and models (checkpoints, a run's
 * snapshots) with paired deals. Deal (or board) d is the same for every pair, and each pair plays
 * it twice, once with each player first, so luck of the cards cancels within a pair. Every game
 * updates the players' openskill ratings, in a fixed order (pairs in listed order, then deals,
 * then seats), and all randomness is keyed by the seed: the same seed gives the same table.
 */
import { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import { createOpponent } from "../opponents/registry.js";
import type { Opponent } from "../opponents/types.js";
import type { TaskDefinition } from "../tasks/registry.js";
import { type ModelMoveStats, ModelOpponent, type ModelPlayer } from "./model-opponent.js";
import { type PlayerRating, Ratings } from "./ratings.js";

/** A player of the league: a scripted opponent spec, or a model. */
export type LeaguePlayer = { name: string; spec: string } | { name: string; model: ModelPlayer };

export interface LeagueOptions {
  game: Game<unknown, unknown>;
  task: TaskDefinition;
  players: readonly LeaguePlayer[];
  /** Deals (boards) per pair; each is played with both seatings. */
  deals: number;
  seed: number;
  /** Called after each pair's games (for progress). */
  onPair?: (done: number, total: number) => void;
}

export interface PairResult {
  player: string;
  opponent: string;
  games: number;
  wins: number;
  draws: number;
  losses: number;
  /** Mean of the player's return (Kuhn: chips). */
  meanReturn: number;
}

export interface LeagueRow extends PlayerRating {
  name: string;
  /** 95% interval of the skill: mu ± 1.96 sigma. */
  lo: number;
  hi: number;
  meanReturn: number;
  /** Models: the share of their answers that were no legal move (replaced by a random one). */
  invalidRate?: number;
}

export interface LeagueResult {
  game: string;
  seed: number;
  deals: number;
  /** Best mean rating first. */
  table: LeagueRow[];
  /** Every pair, from the earlier-listed player's side. */
  pairs: PairResult[];
}

/** Plays one game from `state` with `seats[p]` choosing player p's moves; the final returns. */
async function playOut(
  game: Game<unknown, unknown>,
  seats: readonly Opponent<unknown, unknown>[],
  state: unknown,
) {
  let s = state;
  while (!game.isTerminal(s)) {
    const p = game.currentPlayer(s);
    const move = await seats[p].act(s);
    if (!game.legalMoves(s).some((m) => m === move))
      throw new Error(`${seats[p].name} played an illegal move ${game.moveToString(move)}`);
    s = game.apply(s, move);
  }
  return game.returns(s);
}

export async function runLeague(o: LeagueOptions): Promise<LeagueResult> {
  const names = o.players.map((p) => p.name);
  if (new Set(names).size !== names.length)
    throw new Error(`league: players share a name (${names.join(", ")})`);
  const root = Rng.seeded(o.seed).derive("league");
  const ratings = new Ratings();
  for (const n of names) ratings.ensure(n);
  const sums = new Map<string, number>(names.map((n) => [n, 0]));
  const stats = new Map<string, ModelMoveStats>(names.map((n) => [n, { moves: 0, invalid: 0 }]));
  const pairs: PairResult[] = [];
  const total = (names.length * (names.length - 1)) / 2;
  for (let i = 0; i < o.players.length; i++) {
    for (let j = i + 1; j < o.players.length; j++) {
      const pair: PairResult = {
        player: names[i],
        opponent: names[j],
        games: 0,
        wins: 0,
        draws: 0,
        losses: 0,
        meanReturn: 0,
      };
      for (let d = 0; d < o.deals; d++) {
        const start = o.game.initialState(root.derive("deal", d));
        for (const iFirst of [true, false]) {
          const r = root.derive("game", i, j, d, iFirst ? 0 : 1);
          const a = makePlayer(o, o.players[i], r.derive("player", i), stats.get(names[i])!);
          const b = makePlayer(o, o.players[j], r.derive("player", j), stats.get(names[j])!);
          const returns = await playOut(o.game, iFirst ? [a, b] : [b, a], start);
          const ri = returns[iFirst ? 0 : 1];
          const rj = returns[iFirst ? 1 : 0];
          ratings.record(names[i], names[j], ri > 0 ? 1 : ri < 0 ? -1 : 0);
          sums.set(names[i], sums.get(names[i])! + ri);
          sums.set(names[j], sums.get(names[j])! + rj);
          pair.games += 1;
          if (ri > 0) pair.wins += 1;
          else if (ri < 0) pair.losses += 1;
          else pair.draws += 1;
          pair.meanReturn += ri;
        }
      }
      pair.meanReturn = pair.games > 0 ? pair.meanReturn / pair.games : 0;
      pairs.push(pair);
      o.onPair?.(pairs.length, total);
    }
  }
  const table = ratings.table().map((row) => {
    const s = stats.get(row.name)!;
    return {
      ...row,
      meanReturn: row.games > 0 ? sums.get(row.name)! / row.games : 0,
      ...(s.moves > 0 ? { invalidRate: s.invalid / s.moves } : {}),
    };
  });
  return { game: o.game.name, seed: o.seed, deals: o.deals, table, pairs };
}

function makePlayer(
  o: LeagueOptions,
  p: LeaguePlayer,
  rng: Rng,
  stats: ModelMoveStats,
): Opponent<unknown, unknown> {
  if ("spec" in p) return createOpponent(o.task.name, p.spec, { rng });
  return new ModelOpponent(p.name, o.game, o.task, p.model, rng, false, stats);
}

function fixed(x: number, digits = 2): string {
  return x.toFixed(digits);
}

/** The table as text: rank, player, mean rating with its 95% interval, games, W-D-L, mean return. */
export function formatLeague(res: LeagueResult): string {
  const header = [
    "#",
    "player",
    "rating",
    "95% interval",
    "sigma",
    "games",
    "W-D-L",
    "score",
    "mean return",
    "invalid",
  ];
  const rows = res.table.map((r, k) => [
    String(k + 1),
    r.name,
    fixed(r.mu),
    `[${fixed(r.lo)}, ${fixed(r.hi)}]`,
    fixed(r.sigma),
    String(r.games),
    `${r.wins}-${r.draws}-${r.losses}`,
    r.games > 0 ? fixed((r.wins + r.draws / 2) / r.games, 3) : "-",
    `${r.meanReturn >= 0 ? "+" : ""}${fixed(r.meanReturn, 3)}`,
    r.invalidRate !== undefined ? `${fixed(100 * r.invalidRate, 1)}%` : "-",
  ]);
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((row) => row[c].length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (c === 1 ? cell.padEnd(widths[c]) : cell.padStart(widths[c])))
      .join("  ")
      .trimEnd();
  return [
    `league: ${res.game}, ${res.table.length} players, ${res.deals} paired deals per pair (each played in both seats), seed ${res.seed}`,
    "rating: openskill (Weng-Lin) mean skill, 95% interval mu ± 1.96 sigma; score = (wins + draws/2) / games",
    "",
    line(header),
    ...rows.map(line),
  ].join("\n");
}
