import { DIVERSITY_FORMAT } from "../core/file-formats.js";
import { Rng } from "../core/rng.js";
import type { Policy, SamplingParams } from "../policy/types.js";
import { type RunnerOptions, runTrials } from "../rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../rollout/types.js";
import { loadTask, type TaskDefinition } from "../tasks/registry.js";
import type { PromptStyle, Seat, TaskOptions } from "../tasks/types.js";
import { HELD_OUT_SEED_RANGE } from "./evaluate.js";

/**
 * Diversity of first-attempt play: how varied a policy's action sequences are when it plays a
 * fixed situation many times with nothing to learn from (one attempt, no reflection).
 *
 * Cells: Kuhn poker, one per agent seat (first, second) × agent card (J, Q, K); TicTacToe, one
 * cell with the agent moving first from the empty board. Each cell plays `samples` single-attempt
 * games against a fixed opponent, on held-out task seeds (Kuhn: seeds scanned from a seeded
 * stream, keeping those that deal the agent the cell's card), and records the agent's parsed
 * actions of the attempt as one sequence ("PASS", "PASS,BET", "(2, 2),(1, 1),…"; an unparsable or
 * illegal answer is the symbol "invalid"). The measure is the plug-in (empirical) Shannon entropy
 * in bits of the distribution of those sequences, and of the first action alone.
 *
 * Puzzles (Sokoban, MineSweeper): one cell per held-out level (`PUZZLE_DIVERSITY_LEVELS`, 10),
 * each level played `samples` / 10 times (at least 2); the measure is the mean over levels of the
 * entropy of the distinct attempt-1 action sequences (lamer-reference §6, "reasonable
 * reimplementation"); the cell's `level` is its task seed.
 *
 * Move names are the task's own (Kuhn PASS/BET), not context words (check/fold): a policy that
 * always answers the same thing then has exactly 0 bits whatever the opponent does, so the
 * measure sees the agent's variety, not the opponent's.
 */

export type DiversityGame = "kuhn" | "tictactoe" | "sokoban" | "minesweeper";
export const DIVERSITY_GAMES: readonly DiversityGame[] = ["kuhn", "tictactoe", "sokoban", "minesweeper"];
/** The two-player games' default opponents (puzzles have none). */
export const DIVERSITY_DEFAULT_OPPONENTS: Readonly<Partial<Record<DiversityGame, string>>> = {
  kuhn: "cfr",
  tictactoe: "mcts:100",
};
/** Held-out levels per puzzle diversity measurement. */
export const PUZZLE_DIVERSITY_LEVELS = 10;
export const DIVERSITY_DEFAULT_SAMPLES = 200;
/** Plain sampling at temperature 1 with no truncation: the policy's own distribution. */
export const DIVERSITY_SAMPLING: SamplingParams = {
  temperature: 1,
  topP: 1,
  topK: 0,
  maxTokens: 48,
  stop: [],
};
/** The symbol of an answer that did not parse to a legal move. */
export const INVALID_SYMBOL = "invalid";
/** The sequence of a trial that made no play call (e.g. its first prompt did not fit the context). */
export const NO_MOVE_SYMBOL = "none";

export type KuhnCardLetter = "J" | "Q" | "K";
export const KUHN_CARD_LETTERS: readonly KuhnCardLetter[] = ["J", "Q", "K"];

export interface DiversityOptions {
  game: DiversityGame;
  /** Games per cell (default 200). */
  samples?: number;
  /** Opponent spec (default: Kuhn `cfr`, TicTacToe `mcts:100`). */
  opponent?: string;
  /** Sampling (default `DIVERSITY_SAMPLING`: T 1, top-p 1, top-k 0). */
  sampling?: SamplingParams;
  seed?: number;
  /** Prompt style (default compact). */
  promptStyle?: PromptStyle;
  /** What the result names as the policy (default `policy.name`). */
  policyLabel?: string;
  maxBatch?: number;
  concurrency?: number;
  /** Task knobs: the puzzles' difficulty, TicTacToe's cell format (`taskKnobOptions`). */
  taskOptions?: Pick<TaskOptions, "knobs" | "movesPerTurn" | "maxSteps">;
}

export interface DiversityCell {
  /** The agent's seat ("first" for the puzzles, which have no opponent). */
  seat: Seat;
  /** Puzzles: the level's task seed. */
  level?: number;
  /** The agent's Kuhn card; null for TicTacToe. */
  card: KuhnCardLetter | null;
  samples: number;
  /** Entropy (bits) of the agent's whole attempt-1 action sequence. */
  entropyBits: number;
  /** Entropy (bits) of the agent's first answer alone. */
  firstActionEntropyBits: number;
  /** Sequence (actions joined by ",") → count. */
  distribution: Record<string, number>;
  /** First action → count. */
  firstActionDistribution: Record<string, number>;
  /** Distinct sequences seen. */
  distinctSequences: number;
  /** Share of games with at least one invalid answer. */
  invalidRate: number;
}

export interface DiversityResult {
  format: typeof DIVERSITY_FORMAT;
  policy: string;
  game: DiversityGame;
  /** "none" for the puzzles. */
  opponent: string;
  samples: number;
  seed: number;
  sampling: SamplingParams;
  promptStyle: PromptStyle;
  cells: DiversityCell[];
  summary: {
    /** Mean of the cells' `entropyBits`. */
    meanEntropyBits: number;
    /** Mean of the cells' `firstActionEntropyBits`. */
    meanFirstActionEntropyBits: number;
    /** Mean `entropyBits` over the cells of each seat (Kuhn: over the three cards). */
    bySeat: { first?: number; second?: number };
    /** TicTacToe only: entropy of the agent's opening move from the empty board. */
    firstMoveEntropyBits?: number;
  };
}

/** Plug-in Shannon entropy, in bits, of the empirical distribution given by `counts`. */
export function entropyBits(counts: Iterable<number>): number {
  const cs = [...counts].filter((c) => c > 0);
  const n = cs.reduce((a, b) => a + b, 0);
  if (n === 0) return 0;
  let h = 0;
  for (const c of cs) {
    const p = c / n;
    h -= p * Math.log2(p);
  }
  // -0 and rounding noise below zero read as 0.
  return Math.max(0, h);
}

/** The agent's parsed actions in the trial's first attempt ("invalid" for a bad answer). */
export function attemptOneActions(trial: TrialRecord): string[] {
  const first = trial.memory.attempts[0];
  if (!first) return [];
  return first.turns.map((t) => (t.valid ? t.action : INVALID_SYMBOL));
}

/** The agent's Kuhn card read off a compact Kuhn observation ("Card: Q. …"). */
export function kuhnCardOf(compactObservation: string): KuhnCardLetter {
  const m = /^Card: ([JQK])\./.exec(compactObservation);
  if (!m) throw new Error(`diversity: cannot read the agent's card from "${compactObservation}"`);
  return m[1] as KuhnCardLetter;
}

interface CellPlan {
  seat: Seat;
  card: KuhnCardLetter | null;
  level?: number;
  taskSeeds: number[];
}

/**
 * `count` held-out task seeds whose deal gives the agent (in `seat`) the card `card`: the stream
 * of candidate seeds is `root.derive("task-seed", i)`, i = 0, 1, …, the same for every cell, and a
 * candidate is kept when a task reset exactly as the runner resets it (`root.derive("task", seed)`)
 * deals the wanted card.
 */
export async function kuhnSeedsForCard(
  task: TaskDefinition,
  opponent: string,
  seat: Seat,
  card: KuhnCardLetter,
  count: number,
  root: Rng,
): Promise<number[]> {
  const [lo, hi] = HELD_OUT_SEED_RANGE;
  const seeds: number[] = [];
  const seen = new Set<number>();
  // About one candidate in three deals a given card; the cap only guards against a broken deal.
  const maxCandidates = 100 * count + 1000;
  for (let i = 0; seeds.length < count; i++) {
    if (i >= maxCandidates) {
      throw new Error(`diversity: no ${count} task seeds dealing ${card} to the ${seat} seat`);
    }
    const taskSeed = lo + root.derive("task-seed", i).int(hi - lo);
    if (seen.has(taskSeed)) continue;
    seen.add(taskSeed);
    const t = task.create({ opponent, seat });
    await t.reset(root.derive("task", taskSeed), root.derive("card-check", taskSeed));
    if (kuhnCardOf(t.compactObservation()) === card) seeds.push(taskSeed);
  }
  return seeds;
}

/** Measures the diversity of `policy`'s first-attempt play (see the module comment). */
export async function measureDiversity(policy: Policy, opts: DiversityOptions): Promise<DiversityResult> {
  const samples = opts.samples ?? DIVERSITY_DEFAULT_SAMPLES;
  if (!Number.isInteger(samples) || samples < 1) {
    throw new RangeError(`diversity: samples must be a positive integer, got ${samples}`);
  }
  if (!DIVERSITY_GAMES.includes(opts.game)) {
    throw new RangeError(`diversity: game must be one of ${DIVERSITY_GAMES.join(", ")}, got ${opts.game}`);
  }
  const seed = opts.seed ?? 0;
  const puzzle = isPuzzle(opts.game);
  const opponent = puzzle ? "none" : (opts.opponent ?? DIVERSITY_DEFAULT_OPPONENTS[opts.game] ?? "");
  const sampling = opts.sampling ?? DIVERSITY_SAMPLING;
  const promptStyle = opts.promptStyle ?? "compact";
  const task = await loadTask(opts.game);
  const root = Rng.seeded(seed).derive("diversity", opts.game);
  const plans = await planCells(opts.game, task, opponent, samples, root);
  const { specs, cellOf } = trialSpecs(plans, puzzle ? null : opponent);
  const runner: RunnerOptions = {
    attempts: 1,
    maxTurns: task.maxTurns,
    reflection: "none",
    promptStyle,
    hindsight: false,
    sampling,
    maxBatch: opts.maxBatch ?? 64,
    concurrency: opts.concurrency ?? 1,
  };
  const records = await runTrials(
    specs,
    (s) =>
      puzzle
        ? task.create({ ...(opts.taskOptions ?? {}) })
        : task.create({ opponent, seat: s.seat ?? "first", replayOpponent: false }),
    policy,
    root,
    runner,
  );
  const cells = plans.map((plan, c) =>
    measureCell(
      plan,
      records.filter((r) => cellOf[r.trialId] === c),
    ),
  );
  return {
    format: DIVERSITY_FORMAT,
    policy: opts.policyLabel ?? policy.name,
    game: opts.game,
    opponent,
    samples,
    seed,
    sampling: { ...sampling, stop: [...sampling.stop] },
    promptStyle,
    cells,
    summary: summarize(opts.game, cells),
  };
}

function isPuzzle(game: DiversityGame): boolean {
  return game === "sokoban" || game === "minesweeper";
}

/**
 * The cells and their held-out task seeds: Kuhn, one per seat and card; the puzzles, one per level
 * (each level played several times); TicTacToe, one cell of `samples` openings.
 */
async function planCells(
  game: DiversityGame,
  task: TaskDefinition,
  opponent: string,
  samples: number,
  root: Rng,
): Promise<CellPlan[]> {
  const [lo, hi] = HELD_OUT_SEED_RANGE;
  const plans: CellPlan[] = [];
  if (game === "kuhn") {
    for (const seat of ["first", "second"] as const) {
      for (const card of KUHN_CARD_LETTERS) {
        plans.push({
          seat,
          card,
          taskSeeds: await kuhnSeedsForCard(task, opponent, seat, card, samples, root),
        });
      }
    }
  } else if (isPuzzle(game)) {
    const perLevel = Math.max(2, Math.round(samples / PUZZLE_DIVERSITY_LEVELS));
    for (let l = 0; l < PUZZLE_DIVERSITY_LEVELS; l++) {
      const level = lo + root.derive("task-seed", l).int(hi - lo);
      plans.push({
        seat: "first",
        card: null,
        level,
        taskSeeds: Array.from({ length: perLevel }, () => level),
      });
    }
  } else {
    const taskSeeds = Array.from(
      { length: samples },
      (_, i) => lo + root.derive("task-seed", i).int(hi - lo),
    );
    plans.push({ seat: "first", card: null, taskSeeds });
  }
  return plans;
}

/** One trial per planned task seed, and the cell each trial belongs to; `opponent` null for puzzles. */
function trialSpecs(plans: CellPlan[], opponent: string | null): { specs: TrialSpec[]; cellOf: number[] } {
  const specs: TrialSpec[] = [];
  const cellOf: number[] = [];
  plans.forEach((plan, c) => {
    for (const taskSeed of plan.taskSeeds) {
      const trialId = specs.length;
      cellOf.push(c);
      specs.push({
        trialId,
        groupId: trialId,
        taskSeed,
        opponent,
        seat: opponent === null ? null : plan.seat,
      });
    }
  });
  return { specs, cellOf };
}

/** A cell's distributions of first-attempt action sequences and first actions, and their entropies. */
function measureCell(plan: CellPlan, mine: TrialRecord[]): DiversityCell {
  const seqs = new Map<string, number>();
  const firsts = new Map<string, number>();
  let invalid = 0;
  for (const r of mine) {
    const start = r.memory.attempts[0]?.compactInitialObservation ?? "";
    if (plan.card !== null && kuhnCardOf(start) !== plan.card) {
      throw new Error(
        `diversity: trial ${r.trialId} (seed ${r.taskSeed}) dealt "${start}", not the cell's card ${plan.card}`,
      );
    }
    const actions = attemptOneActions(r);
    if (actions.includes(INVALID_SYMBOL)) invalid += 1;
    const seq = actions.length > 0 ? actions.join(",") : NO_MOVE_SYMBOL;
    const first = actions[0] ?? NO_MOVE_SYMBOL;
    seqs.set(seq, (seqs.get(seq) ?? 0) + 1);
    firsts.set(first, (firsts.get(first) ?? 0) + 1);
  }
  return {
    seat: plan.seat,
    card: plan.card,
    ...(plan.level !== undefined ? { level: plan.level } : {}),
    samples: mine.length,
    entropyBits: entropyBits(seqs.values()),
    firstActionEntropyBits: entropyBits(firsts.values()),
    distribution: sortedCounts(seqs),
    firstActionDistribution: sortedCounts(firsts),
    distinctSequences: seqs.size,
    invalidRate: mine.length > 0 ? invalid / mine.length : 0,
  };
}

function summarize(game: DiversityGame, cells: DiversityCell[]): DiversityResult["summary"] {
  const mean = (xs: number[]) => (xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const bySeat: { first?: number; second?: number } = {};
  for (const seat of ["first", "second"] as const) {
    const own = cells.filter((c) => c.seat === seat);
    if (own.length > 0) bySeat[seat] = mean(own.map((c) => c.entropyBits));
  }
  return {
    meanEntropyBits: mean(cells.map((c) => c.entropyBits)),
    meanFirstActionEntropyBits: mean(cells.map((c) => c.firstActionEntropyBits)),
    bySeat,
    ...(game === "tictactoe" ? { firstMoveEntropyBits: cells[0].firstActionEntropyBits } : {}),
  };
}

/** Counts as a plain object, most frequent first (ties by name), so JSON output is stable. */
function sortedCounts(m: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
    out[k] = v;
  }
  return out;
}

/** A table: one line per cell (entropy, first-action entropy, distinct sequences, top sequences), then the summary. */
export function formatDiversity(r: DiversityResult, top = 4): string {
  const f = (x: number) => x.toFixed(3);
  const lines = [
    `diversity of ${r.policy} on ${r.game}${r.opponent === "none" ? ` (${r.cells.length} held-out levels)` : ` vs ${r.opponent}`}: ${r.opponent === "none" ? (r.cells[0]?.samples ?? 0) : r.samples} single-attempt games per cell, ` +
      `T ${r.sampling.temperature}, top-p ${r.sampling.topP}, top-k ${r.sampling.topK}, seed ${r.seed}`,
    `${(r.opponent === "none" ? "level" : "seat").padEnd(7)}${"card".padEnd(5)}${"H(seq) bits".padEnd(13)}${"H(first) bits".padEnd(15)}${"distinct".padEnd(10)}${"invalid".padEnd(9)}most frequent sequences`,
  ];
  for (const c of r.cells) {
    const common = Object.entries(c.distribution)
      .slice(0, top)
      .map(([k, v]) => `${k} ×${v}`)
      .join("; ");
    lines.push(
      `${(c.level !== undefined ? `#${c.level}`.slice(0, 6) : c.seat).padEnd(7)}${(c.card ?? "-").padEnd(5)}${f(c.entropyBits).padEnd(13)}${f(c.firstActionEntropyBits).padEnd(15)}` +
        `${String(c.distinctSequences).padEnd(10)}${`${(100 * c.invalidRate).toFixed(1)}%`.padEnd(9)}${common}`,
    );
  }
  const s = r.summary;
  const seats = (["first", "second"] as const)
    .filter((k) => s.bySeat[k] !== undefined)
    .map((k) => `${k} ${f(s.bySeat[k]!)}`)
    .join(", ");
  lines.push(
    `mean H(seq) ${f(s.meanEntropyBits)} bits (by seat: ${seats}); mean H(first) ${f(s.meanFirstActionEntropyBits)} bits` +
      (s.firstMoveEntropyBits !== undefined ? `; first move ${f(s.firstMoveEntropyBits)} bits` : ""),
  );
  return lines.join("\n");
}
