/**
 * Issue 59, part 4: what a league of the agent's own snapshots buys against unseen opponents, on
 * the embedded model (`configs/experiments/kuhn-league.yaml`, `tictactoe-league.yaml`): MAGE with
 * a league (`mage-league`) against MAGE with today's fixed population (`mage`, whose league has
 * `share: 0`: snapshots kept, never played), on paired seeds.
 *
 * Kuhn targets: league − fixed final chips vs the unseen CFR opponent (agent second), paired
 * interval above 0; and the league's exploitability lower (fixed − league, paired over seeds,
 * interval above 0). Beside them, measured without a threshold: TicTacToe success vs MCTS-100
 * (agent first), and each method's in-trial gain against its own league's newest snapshot.
 */
import { Rng } from "../core/rng.js";
import type { BootstrapEstimate, HierarchicalBootstrap } from "./bootstrap.js";
import {
  type ExperimentGame,
  findMethod,
  type MethodRuns,
  methodEstimate,
  pairedDifference,
  seedMetrics,
} from "./compare.js";
import type { ExploitabilityFile } from "./experiments.js";
import { clearlyAbove, formatInterval, type TargetLine, type Verdict } from "./verdicts.js";

export const LEAGUE_GRIDS = {
  kuhn: { name: "kuhn-league", file: "configs/experiments/kuhn-league.yaml" },
  tictactoe: { name: "tictactoe-league", file: "configs/experiments/tictactoe-league.yaml" },
} as const;
export const LEAGUE_METHODS = { fixed: "mage", league: "mage-league" } as const;
const NEWEST = "snapshot:latest";

type LeagueGame = keyof typeof LEAGUE_GRIDS;

export function isLeagueGrid(g: ExperimentGame): boolean {
  const e = g.experiment;
  return Object.values(LEAGUE_GRIDS).some(
    (x) => e.name === x.name || e.info?.name === x.name || e.info?.file === x.file,
  );
}

function gridOf(games: readonly ExperimentGame[], game: LeagueGame): ExperimentGame | undefined {
  return games.find((g) => g.game === game && isLeagueGrid(g));
}

const label = (game: LeagueGame) =>
  game === "kuhn" ? "league vs fixed population (Kuhn)" : "league vs fixed population (TicTacToe)";

function line(game: LeagueGame, target: string, measured: string, v: { verdict: Verdict; note?: string }) {
  return {
    game: label(game),
    target,
    measured,
    verdict: v.verdict,
    ...(v.note ? { note: v.note } : {}),
  } satisfies TargetLine;
}

/**
 * The mean over seeds of paired differences with a percentile interval from resampling the seeds
 * (`resamples` draws, a fixed seed): for one number per run, such as exploitability.
 */
export function seedPairedDifference(
  diffs: readonly { seed: number; value: number }[],
  resamples = 2000,
): BootstrapEstimate {
  const seeds = diffs.map((d) => d.seed).sort((a, b) => a - b);
  if (diffs.length === 0)
    return { mean: Number.NaN, lo: Number.NaN, hi: Number.NaN, seeds, trials: false, trialPairedSeeds: [] };
  const values = diffs.map((d) => d.value);
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const rng = Rng.seeded(0).derive("seed-paired-difference");
  const draws: number[] = [];
  for (let b = 0; b < resamples; b++) {
    let s = 0;
    for (let i = 0; i < values.length; i++) s += values[rng.int(values.length)];
    draws.push(s / values.length);
  }
  draws.sort((a, b) => a - b);
  const at = (q: number) => draws[Math.min(draws.length - 1, Math.max(0, Math.floor(q * draws.length)))];
  return { mean, lo: at(0.025), hi: at(0.975), seeds, trials: false, trialPairedSeeds: [] };
}

/** Fixed − league exploitability per seed both have (positive: the league's model is less exploitable). */
function exploitabilityDrop(files: readonly ExploitabilityFile[]): {
  estimate: BootstrapEstimate;
  fixed: number[];
  league: number[];
} {
  const of = (name: string) =>
    new Map(files.filter((f) => f.label === name && f.seed !== null).map((f) => [f.seed!, f.exploitability]));
  const fixed = of(LEAGUE_METHODS.fixed);
  const league = of(LEAGUE_METHODS.league);
  const seeds = [...fixed.keys()].filter((s) => league.has(s)).sort((a, b) => a - b);
  return {
    estimate: seedPairedDifference(seeds.map((s) => ({ seed: s, value: fixed.get(s)! - league.get(s)! }))),
    fixed: seeds.map((s) => fixed.get(s)!),
    league: seeds.map((s) => league.get(s)!),
  };
}

const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Each method's in-trial gain against its own league's newest snapshot (a measurement). */
function newestGainLine(
  bs: HierarchicalBootstrap,
  game: LeagueGame,
  fixed: MethodRuns | undefined,
  league: MethodRuns | undefined,
  seat: string,
  kind: "score" | "rate",
): TargetLine {
  const target = `in-trial gain against the run's own newest snapshot (${NEWEST}, agent ${seat}): measured, no threshold`;
  const has = (m: MethodRuns | undefined): m is MethodRuns =>
    m !== undefined && seedMetrics(m, NEWEST, seat, "final").length > 0;
  if (!has(fixed) && !has(league))
    return line(game, target, `no ${NEWEST} / ${seat} cell in the summaries yet`, { verdict: "not run" });
  const parts = [fixed, league]
    .filter(has)
    .map(
      (m) => `${m.name} ${formatInterval(methodEstimate(bs, m, { opponent: NEWEST, seat }, "gain"), kind)}`,
    );
  return line(game, target, parts.join("; "), {
    verdict: "met",
    note: "a measurement without a threshold: met means it was measured",
  });
}

function kuhnLines(bs: HierarchicalBootstrap, grid: ExperimentGame | undefined): TargetLine[] {
  const chipsT =
    "vs unseen cfr, agent second: league − fixed population final chips, paired interval above 0";
  const exT =
    "exploitability of the final model's attempt-1 strategy: league lower than the fixed population (fixed − league, paired interval above 0)";
  const fixed = grid ? findMethod(grid.methods, LEAGUE_METHODS.fixed) : undefined;
  const league = grid ? findMethod(grid.methods, LEAGUE_METHODS.league) : undefined;
  const cfr = { opponent: "cfr", seat: "second" };
  const out: TargetLine[] = [];
  const hasCfr = (m: MethodRuns | undefined): m is MethodRuns =>
    m !== undefined && seedMetrics(m, cfr.opponent, cfr.seat, "final").length > 0;
  if (!hasCfr(fixed) || !hasCfr(league)) {
    out.push(
      line(
        "kuhn",
        chipsT,
        `no summaries of mage and mage-league with a cfr / second cell yet (${LEAGUE_GRIDS.kuhn.file})`,
        {
          verdict: "not run",
        },
      ),
    );
  } else {
    const d = pairedDifference(bs, league, fixed, cfr, "final");
    out.push(line("kuhn", chipsT, `mage-league − mage ${formatInterval(d, "score")}`, clearlyAbove(d)));
  }
  const files = grid?.experiment.exploitability ?? [];
  const ex = exploitabilityDrop(files);
  if (ex.estimate.seeds.length === 0) {
    out.push(
      line("kuhn", exT, "no paired exploitability measurements yet (the grid's exploitability)", {
        verdict: "not run",
      }),
    );
  } else {
    const f = (x: number) => x.toFixed(4);
    const e = ex.estimate;
    out.push(
      line(
        "kuhn",
        exT,
        `mage ${f(mean(ex.fixed))}, mage-league ${f(mean(ex.league))} (means); fixed − league ${f(e.mean)} [${f(e.lo)}, ${f(e.hi)}] (${e.seeds.length} seed${e.seeds.length === 1 ? "" : "s"}, seeds only)`,
        clearlyAbove(e),
      ),
    );
  }
  out.push(newestGainLine(bs, "kuhn", fixed, league, "second", "score"));
  return out;
}

function tictactoeLines(bs: HierarchicalBootstrap, grid: ExperimentGame | undefined): TargetLine[] {
  const t = "vs MCTS-100, agent first: league − fixed population success@3, measured, no threshold";
  const fixed = grid ? findMethod(grid.methods, LEAGUE_METHODS.fixed) : undefined;
  const league = grid ? findMethod(grid.methods, LEAGUE_METHODS.league) : undefined;
  const cell = { opponent: "mcts:100", seat: "first" };
  const has = (m: MethodRuns | undefined): m is MethodRuns =>
    m !== undefined && seedMetrics(m, cell.opponent, cell.seat, "final").length > 0;
  const out: TargetLine[] = [];
  if (!has(fixed) || !has(league)) {
    out.push(
      line(
        "tictactoe",
        t,
        `no summaries of mage and mage-league with an MCTS-100 / first cell yet (${LEAGUE_GRIDS.tictactoe.file})`,
        {
          verdict: "not run",
        },
      ),
    );
  } else {
    const d = pairedDifference(bs, league, fixed, cell, "success@3");
    out.push(
      line("tictactoe", t, `mage-league − mage ${formatInterval(d, "rate")}`, {
        verdict: "met",
        note: "a measurement without a threshold: met means it was measured",
      }),
    );
  }
  out.push(newestGainLine(bs, "tictactoe", fixed, league, "first", "score"));
  return out;
}

/** The part-4 lines of both games: met, missed, or not run until the grids' summaries are in. */
export function leagueTargets(bs: HierarchicalBootstrap, games: readonly ExperimentGame[]): TargetLine[] {
  return [...kuhnLines(bs, gridOf(games, "kuhn")), ...tictactoeLines(bs, gridOf(games, "tictactoe"))];
}
