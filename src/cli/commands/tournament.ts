import { parseArgs } from "node:util";
import { UsageError } from "../../core/errors.js";
import { Rng } from "../../core/rng.js";
import { GAMES, loadGame } from "../../games/registry.js";
import type { Game } from "../../games/types.js";
import { createOpponent, describeOpponentSpecs, opponentKindsFor } from "../../opponents/registry.js";
import type { Opponent } from "../../opponents/types.js";
import type { Command } from "../command.js";

/** Results of one player against one opponent in one seat (or both: `total`). */
export interface SeatRecord {
  games: number;
  wins: number;
  draws: number;
  losses: number;
  /** Mean of the player's return over these games (0 when there are none). */
  meanReturn: number;
}

export interface PairRecord {
  player: string;
  opponent: string;
  /** The player moved first (seat 0). */
  asFirst: SeatRecord;
  /** The player moved second (seat 1). */
  asSecond: SeatRecord;
  total: SeatRecord;
}

export interface TournamentResult {
  game: string;
  seed: number;
  gamesPerPair: number;
  players: string[];
  /** Every ordered pair (player ≠ opponent), from the player's perspective, in listed order. */
  pairs: PairRecord[];
  /** Per player over all its games. */
  standings: ({ player: string } & SeatRecord)[];
  /** Whether some return was not -1/0/+1 (then mean returns are worth reading). */
  nonUnitReturns: boolean;
}

export interface TournamentOptions {
  game: string;
  players: string[];
  gamesPerPair: number;
  seed: number;
}

interface Tally {
  games: number;
  wins: number;
  draws: number;
  losses: number;
  sum: number;
}

const emptyTally = (): Tally => ({ games: 0, wins: 0, draws: 0, losses: 0, sum: 0 });

function addResult(t: Tally, ret: number): void {
  t.games++;
  t.sum += ret;
  if (ret > 0) t.wins++;
  else if (ret < 0) t.losses++;
  else t.draws++;
}

function toRecord(t: Tally): SeatRecord {
  return {
    games: t.games,
    wins: t.wins,
    draws: t.draws,
    losses: t.losses,
    meanReturn: t.games > 0 ? t.sum / t.games : 0,
  };
}

function merge(a: Tally, b: Tally): Tally {
  return {
    games: a.games + b.games,
    wins: a.wins + b.wins,
    draws: a.draws + b.draws,
    losses: a.losses + b.losses,
    sum: a.sum + b.sum,
  };
}

/** Plays one game between `seats[0]` (moves first) and `seats[1]`; returns the final returns. */
export async function playGame<S, M>(
  game: Game<S, M>,
  seats: readonly Opponent<S, M>[],
  rng: Rng,
): Promise<number[]> {
  let state = game.initialState(rng);
  while (!game.isTerminal(state)) {
    const p = game.currentPlayer(state);
    const move = await seats[p].act(state);
    const text = game.moveToString(move);
    if (!game.legalMoves(state).some((m) => game.moveToString(m) === text)) {
      throw new Error(
        `${seats[p].name} played illegal move ${text} in ${game.name} at\n${game.render(state)}`,
      );
    }
    state = game.apply(state, move);
  }
  return game.returns(state);
}

/**
 * Every pair of listed players plays `gamesPerPair` games, alternating seats (game g: the
 * earlier-listed player moves first when g is even). Game g of pair (i, j) draws all its
 * randomness from `Rng.seeded(seed).derive("tournament", i, j, g)`: the deal from
 * `.derive("initial")`, player k's generator from `.derive("player", k)`.
 */
export async function runTournament(opts: TournamentOptions): Promise<TournamentResult> {
  const game = await loadGame(opts.game);
  const n = opts.players.length;
  const root = Rng.seeded(opts.seed);
  const tallies: Tally[][][] = opts.players.map(() => opts.players.map(() => [emptyTally(), emptyTally()]));
  let nonUnit = false;
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      for (let g = 0; g < opts.gamesPerPair; g++) {
        const r = root.derive("tournament", i, j, g);
        const pi = createOpponent<unknown, unknown>(opts.game, opts.players[i], {
          rng: r.derive("player", i),
        });
        const pj = createOpponent<unknown, unknown>(opts.game, opts.players[j], {
          rng: r.derive("player", j),
        });
        const iFirst = g % 2 === 0;
        const returns = await playGame(game, iFirst ? [pi, pj] : [pj, pi], r.derive("initial"));
        const ri = returns[iFirst ? 0 : 1];
        const rj = returns[iFirst ? 1 : 0];
        for (const x of [ri, rj]) if (x !== 1 && x !== -1 && x !== 0) nonUnit = true;
        addResult(tallies[i][j][iFirst ? 0 : 1], ri);
        addResult(tallies[j][i][iFirst ? 1 : 0], rj);
      }
    }
  }
  const pairs: PairRecord[] = [];
  const standings: TournamentResult["standings"] = [];
  for (let i = 0; i < n; i++) {
    let all = emptyTally();
    for (let j = 0; j < n; j++) {
      if (i === j) continue;
      const [first, second] = tallies[i][j];
      const total = merge(first, second);
      all = merge(all, total);
      pairs.push({
        player: opts.players[i],
        opponent: opts.players[j],
        asFirst: toRecord(first),
        asSecond: toRecord(second),
        total: toRecord(total),
      });
    }
    standings.push({ player: opts.players[i], ...toRecord(all) });
  }
  return {
    game: opts.game,
    seed: opts.seed,
    gamesPerPair: opts.gamesPerPair,
    players: [...opts.players],
    pairs,
    standings,
    nonUnitReturns: nonUnit,
  };
}

function wdl(r: SeatRecord): string {
  return `${r.wins}-${r.draws}-${r.losses}`;
}

function score(r: SeatRecord): string {
  return r.games > 0 ? ((r.wins + r.draws / 2) / r.games).toFixed(3) : "-";
}

function signed(x: number): string {
  return `${x >= 0 ? "+" : ""}${x.toFixed(3)}`;
}

function table(header: string[], rows: string[][], leftCols: number): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (c < leftCols ? cell.padEnd(widths[c]) : cell.padStart(widths[c])))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

/** The human-readable report: per ordered pair with seats split, then standings. */
export function formatTournament(res: TournamentResult): string {
  const mean = res.nonUnitReturns;
  const pairHeader = ["player", "opponent", "as first W-D-L", "as second W-D-L", "total W-D-L", "score"];
  if (mean) pairHeader.push("mean return (1st / 2nd / all)");
  const pairRows = res.pairs.map((p) => {
    const row = [p.player, p.opponent, wdl(p.asFirst), wdl(p.asSecond), wdl(p.total), score(p.total)];
    if (mean) {
      row.push(
        `${signed(p.asFirst.meanReturn)} / ${signed(p.asSecond.meanReturn)} / ${signed(p.total.meanReturn)}`,
      );
    }
    return row;
  });
  const standHeader = ["player", "games", "W-D-L", "win", "draw", "loss", "score"];
  if (mean) standHeader.push("mean return");
  const pct = (k: number, total: number) => (total > 0 ? `${((100 * k) / total).toFixed(1)}%` : "-");
  const standRows = res.standings.map((s) => {
    const row = [
      s.player,
      String(s.games),
      wdl(s),
      pct(s.wins, s.games),
      pct(s.draws, s.games),
      pct(s.losses, s.games),
      score(s),
    ];
    if (mean) row.push(signed(s.meanReturn));
    return row;
  });
  return [
    `tournament: ${res.game}, ${res.players.length} players, ${res.gamesPerPair} games per pair ` +
      `(${res.gamesPerPair / 2} with each seat), seed ${res.seed}`,
    "results of the row player against the opponent: wins-draws-losses; score = (wins + draws/2) / games",
    "",
    table(pairHeader, pairRows, 2),
    "",
    "standings (all games):",
    table(standHeader, standRows, 1),
  ].join("\n");
}

const USAGE =
  "mage tournament --players SPEC,SPEC[,...] [--game NAME] [--games N] [--seed S] [--json]\n\n" +
  "  --game NAME     game from the registry (default tictactoe)\n" +
  "  --players LIST  comma-separated opponent specs, at least two distinct (e.g. mcts:100,minimax,random)\n" +
  "  --games N       games per pair, a positive even number, half with each seat (default 100)\n" +
  "  --seed S        root seed; game g of pair (i, j) uses derive('tournament', i, j, g) (default 0)\n" +
  "  --json          print one JSON object instead of the tables";

export async function parseTournamentArgs(argv: string[]): Promise<TournamentOptions & { json: boolean }> {
  let values: { game?: string; players?: string; games?: string; seed?: string; json?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        game: { type: "string" },
        players: { type: "string" },
        games: { type: "string" },
        seed: { type: "string" },
        json: { type: "boolean" },
      },
    }));
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
  }
  const gameName = values.game ?? "tictactoe";
  if (!(gameName in GAMES)) {
    throw new UsageError(`unknown --game "${gameName}"; valid choices: ${Object.keys(GAMES).join(", ")}`);
  }
  opponentKindsFor(gameName);
  if (values.players === undefined) {
    throw new UsageError(
      `--players is required: a comma-separated list of at least two of: ${describeOpponentSpecs(gameName)}`,
    );
  }
  const players = values.players.split(",").map((p) => p.trim());
  if (players.some((p) => p === "")) throw new UsageError(`--players "${values.players}" has an empty entry`);
  if (players.length < 2) {
    throw new UsageError(
      `--players needs at least two players (got ${players.length}); valid specs: ${describeOpponentSpecs(gameName)}`,
    );
  }
  const seen = new Set<string>();
  for (const p of players) {
    if (seen.has(p)) throw new UsageError(`--players lists "${p}" twice; list each player once`);
    seen.add(p);
    // Builds each once so a bad spec fails before any game is played.
    createOpponent(gameName, p, { rng: Rng.seeded(0) });
  }
  const gamesText = values.games ?? "100";
  if (!/^\d+$/.test(gamesText) || Number(gamesText) <= 0 || Number(gamesText) % 2 !== 0) {
    throw new UsageError(`--games must be a positive even number (half with each seat), got "${gamesText}"`);
  }
  const seedText = values.seed ?? "0";
  if (!/^\d+$/.test(seedText) || !Number.isSafeInteger(Number(seedText))) {
    throw new UsageError(`--seed must be a non-negative integer, got "${seedText}"`);
  }
  return {
    game: gameName,
    players,
    gamesPerPair: Number(gamesText),
    seed: Number(seedText),
    json: values.json ?? false,
  };
}

export const command: Command = {
  name: "tournament",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    const opts = await parseTournamentArgs(argv);
    const res = await runTournament(opts);
    process.stdout.write(`${opts.json ? JSON.stringify(res) : formatTournament(res)}\n`);
    return 0;
  },
};
