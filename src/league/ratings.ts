/**
 * Skill ratings of the agent and its opponents: a Weng-Lin Bayesian rating per player (openskill's
 * Plackett-Luce model; docs/design.md says why this library), updated one game at a time, with
 * win/draw/loss counts. Plain data in and out, so a run checkpoint holds the table exactly.
 */
import { predictWin, rate, rating } from "openskill";
import type { RatingConfig } from "./config.js";

export interface PlayerRating {
  /** Mean skill. */
  mu: number;
  /** Uncertainty of the skill (its standard deviation). */
  sigma: number;
  games: number;
  wins: number;
  draws: number;
  losses: number;
}

/** A game's result from the first player's side: its return's sign. */
export type Outcome = 1 | 0 | -1;

export function outcomeOf(score: number): Outcome {
  return score > 0 ? 1 : score < 0 ? -1 : 0;
}

/** z of a two-sided 95% interval: a rating's interval is mu ± 1.96 sigma. */
export const INTERVAL_Z = 1.96;

export interface RatingsJson {
  options: RatingConfig;
  /** In the order the players were first rated (kept, so the table reads the same after a resume). */
  players: [string, PlayerRating][];
}

export const DEFAULT_RATING_OPTIONS: RatingConfig = { beta: 25 / 6, tau: 25 / 300 };

export class Ratings {
  private readonly players = new Map<string, PlayerRating>();

  constructor(readonly options: RatingConfig = DEFAULT_RATING_OPTIONS) {}

  static fromJSON(json: RatingsJson): Ratings {
    const r = new Ratings(json.options);
    for (const [name, p] of json.players) r.players.set(name, { ...p });
    return r;
  }

  toJSON(): RatingsJson {
    return { options: { ...this.options }, players: [...this.players].map(([n, p]) => [n, { ...p }]) };
  }

  has(name: string): boolean {
    return this.players.has(name);
  }

  /** The player's rating; a new player starts at openskill's prior (mu 25, sigma 25/3) or at `start`. */
  ensure(name: string, start?: { mu: number; sigma: number }): PlayerRating {
    let p = this.players.get(name);
    if (!p) {
      const r = start ?? rating();
      p = { mu: r.mu, sigma: r.sigma, games: 0, wins: 0, draws: 0, losses: 0 };
      this.players.set(name, p);
    }
    return p;
  }

  get(name: string): PlayerRating | undefined {
    return this.players.get(name);
  }

  names(): string[] {
    return [...this.players.keys()];
  }

  /** Updates both players' ratings after one game of `a` against `b` (`outcome` from a's side). */
  record(a: string, b: string, outcome: Outcome): void {
    if (a === b) throw new RangeError(`ratings: ${a} cannot play itself`);
    const pa = this.ensure(a);
    const pb = this.ensure(b);
    const rank = outcome === 1 ? [1, 2] : outcome === -1 ? [2, 1] : [1, 1];
    const [[ra], [rb]] = rate([[{ mu: pa.mu, sigma: pa.sigma }], [{ mu: pb.mu, sigma: pb.sigma }]], {
      ...this.options,
      rank,
    });
    pa.mu = ra.mu;
    pa.sigma = ra.sigma;
    pb.mu = rb.mu;
    pb.sigma = rb.sigma;
    tally(pa, outcome);
    tally(pb, -outcome as Outcome);
  }

  /** P(a beats b) by the current ratings (players not rated yet count at the prior). */
  winProbability(a: string, b: string): number {
    const ra = this.players.get(a) ?? rating();
    const rb = this.players.get(b) ?? rating();
    const [p] = predictWin(
      [[{ mu: ra.mu, sigma: ra.sigma }], [{ mu: rb.mu, sigma: rb.sigma }]],
      this.options,
    );
    return p;
  }

  /** Every player, best mean first (ties: the order they were first rated). */
  table(): ({ name: string; lo: number; hi: number } & PlayerRating)[] {
    return [...this.players]
      .map(([name, p], i) => ({
        name,
        i,
        ...p,
        lo: p.mu - INTERVAL_Z * p.sigma,
        hi: p.mu + INTERVAL_Z * p.sigma,
      }))
      .sort((x, y) => y.mu - x.mu || x.i - y.i)
      .map(({ i: _i, ...row }) => row);
  }
}

function tally(p: PlayerRating, outcome: Outcome): void {
  p.games += 1;
  if (outcome === 1) p.wins += 1;
  else if (outcome === -1) p.losses += 1;
  else p.draws += 1;
}
