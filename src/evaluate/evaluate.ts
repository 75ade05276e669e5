import { Rng } from "../core/rng.js";
import type { Policy, SamplingParams } from "../policy/types.js";
import { type ContextOverflow, type RunnerOptions, runTrials } from "../rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../rollout/types.js";
import type { TaskDefinition } from "../tasks/registry.js";
import type { PromptStyle, ReflectionType, TaskOptions } from "../tasks/types.js";
import type { EvalCell } from "./cell.js";
import {
  categoryMetrics,
  computeTrialMetrics,
  reflectionCounts,
  type TrialMetrics,
  type TrialOutcome,
} from "./metrics.js";
import { countingAnswers, type EvalProgress, ProgressTally } from "./progress.js";

/**
 * Evaluation protocol: for every cell (opponent × seat) play `trials` trials of `attempts`
 * attempts with group size 1, on task seeds from the held-out range [2^16, 2^32) (training
 * draws from [0, 2^16); the puzzles' harder set from [2^32, 2^33)), and report the measures of
 * `metrics.ts` with 95% bootstrap intervals.
 */
export type { EvalCell };

export interface EvalOptions {
  task: TaskDefinition;
  cells: readonly EvalCell[];
  trials: number;
  attempts: number;
  reflection: ReflectionType | "none";
  promptStyle: PromptStyle;
  hindsight?: boolean;
  maxTurns: number;
  sampling: SamplingParams;
  seed: number;
  maxBatch?: number;
  concurrency?: number;
  replayOpponent?: boolean;
  /** When a trial outgrows the model's context: stop it (default) or drop the oldest attempts from the prompt. */
  contextOverflow?: ContextOverflow;
  /** Task knobs for the task constructor: puzzle difficulty, TicTacToe's cells (`taskKnobOptions`). */
  taskOptions?: Pick<TaskOptions, "knobs" | "movesPerTurn" | "maxSteps">;
  /**
   * Two-player games: builds each trial's opponent from its cell's spec instead of the registry
   * (league snapshots as opponents, `src/league/eval-snapshots.ts`).
   */
  makeOpponent?: TaskOptions["makeOpponent"];
  /** Task seeds' range (default HELD_OUT_SEED_RANGE; the harder set uses HARDER_SEED_RANGE). */
  seedRange?: readonly [number, number];
  /**
   * A served task's instances to play, each once (`TaskDefinition.instanceSeeds`): trial i of every
   * cell plays instance `instanceSeeds[i]` (its task seed), and `trials` is their number.
   */
  instanceSeeds?: readonly number[];
  /** Called with every finished trial as it ends (e.g. to append it to a JSONL file), with its index in its cell. */
  onTrial?: (trial: TrialRecord, cell: EvalCell, index: number) => void;
  /** Checked between generation batches; true stops the evaluation (see isRolloutStop). */
  shouldStop?: () => boolean;
  /**
   * Called at the start, after every batch of answers and after every finished trial, with the
   * counts so far (e.g. `EvalProgressBar.update`); the last call has every trial done.
   */
  onProgress?: (progress: EvalProgress) => void;
}

export interface CellResult {
  opponent: string;
  seat: string;
  unseen: boolean;
  metrics: TrialMetrics;
  /** The measures per category (`categoryMetrics`: ALFWorld's split, and split/task type), when trials have one. */
  byCategory?: Record<string, TrialMetrics>;
  /** A `snapshot:latest` cell: the league snapshot it played (`snapshot:<iteration>`). */
  snapshot?: string;
}

/**
 * Task seed ranges, half-open and pairwise disjoint: training [0, 2^16), evaluation
 * [2^16, 2^32), the puzzles' harder held-out set [2^32, 2^33). A task instance is a pure function
 * of (the runner's root key, task seed, knobs), and the roots differ too (training:
 * `iteration/i/rollout`, evaluation: `eval`), so the ranges are a second, checkable wall.
 */
export const HELD_OUT_SEED_RANGE: readonly [number, number] = [0x10000, 0x100000000];
export const TRAIN_SEED_RANGE: readonly [number, number] = [0, 0x10000];
export const HARDER_SEED_RANGE: readonly [number, number] = [0x100000000, 0x200000000];

/** The task seed of evaluation trial `i` (the same in every cell) in `range`. */
export function evalTaskSeed(root: Rng, i: number, range: readonly [number, number]): number {
  const [lo, hi] = range;
  return lo + root.derive("task-seed", i).int(hi - lo);
}

export function toOutcome(t: TrialRecord): TrialOutcome {
  return {
    opponent: t.opponent,
    seat: t.seat,
    taskId: String(t.taskSeed),
    ...(t.category !== undefined ? { category: t.category } : {}),
    attempts: t.attempts,
    reflections: reflectionCounts(t.rows),
  };
}

export async function evaluate(
  policy: Policy,
  o: EvalOptions,
): Promise<{ cells: CellResult[]; trials: TrialRecord[]; trialsPerCell: number }> {
  const root = Rng.seeded(o.seed).derive("eval");
  const range = o.seedRange ?? HELD_OUT_SEED_RANGE;
  const instances = o.instanceSeeds;
  if (instances !== undefined && instances.length === 0)
    throw new Error("evaluate: instanceSeeds is empty (no instance to play)");
  const trials = instances?.length ?? o.trials;
  const specs: TrialSpec[] = [];
  const cellOf = new Map<number, EvalCell>();
  o.cells.forEach((cell, c) => {
    for (let i = 0; i < trials; i++) {
      const trialId = c * trials + i;
      // The same task seeds in every cell, so cells differ only by opponent and seat.
      const taskSeed = instances ? instances[i] : evalTaskSeed(root, i, range);
      specs.push({ trialId, groupId: trialId, taskSeed, opponent: cell.opponent, seat: cell.seat });
      cellOf.set(trialId, cell);
    }
  });
  const tally = o.onProgress ? new ProgressTally(o.cells, trials, policy) : null;
  const reportProgress = () => {
    if (tally) o.onProgress?.(tally.snapshot());
  };
  const sampler = tally
    ? countingAnswers(policy, (count) => {
        tally.answered(count);
        reportProgress();
      })
    : policy;
  const runner: RunnerOptions = {
    attempts: o.attempts,
    maxTurns: o.maxTurns,
    reflection: o.reflection,
    promptStyle: o.promptStyle,
    hindsight: o.hindsight ?? false,
    sampling: o.sampling,
    maxBatch: o.maxBatch ?? 64,
    concurrency: o.concurrency ?? 1,
    ...(o.contextOverflow ? { contextOverflow: o.contextOverflow } : {}),
  };
  reportProgress();
  const records = await runTrials(
    specs,
    (s) =>
      o.task.create({
        ...(s.opponent !== null ? { opponent: s.opponent } : {}),
        ...(s.seat !== null ? { seat: s.seat } : {}),
        replayOpponent: o.replayOpponent ?? false,
        ...(o.taskOptions ?? {}),
        ...(o.makeOpponent ? { makeOpponent: o.makeOpponent } : {}),
        ...(instances ? { instance: s.taskSeed } : {}),
      }),
    sampler,
    root,
    runner,
    {
      onTrialEnd: (t) => {
        o.onTrial?.(t, cellOf.get(t.trialId)!, t.trialId % trials);
        tally?.trialEnded(Math.floor(t.trialId / trials), t);
        reportProgress();
      },
      ...(o.shouldStop ? { shouldStop: o.shouldStop } : {}),
    },
  );
  const cells = o.cells.map((cell, c) => {
    const mine = records.slice(c * trials, (c + 1) * trials).map(toOutcome);
    const byCategory = categoryMetrics(mine, o.attempts, o.seed);
    return {
      opponent: cell.opponent ?? "none",
      seat: cell.seat ?? "none",
      unseen: cell.unseen,
      metrics: computeTrialMetrics(mine, o.attempts, o.seed),
      ...(Object.keys(byCategory).length > 0 ? { byCategory } : {}),
    };
  });
  return { cells, trials: records, trialsPerCell: trials };
}

/** One line per cell: success@k, non-loss@k, score@k, gain, with intervals. */
export function formatCells(cells: readonly CellResult[]): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const num = (x: number) => (x >= 0 ? "+" : "") + x.toFixed(3);
  const lines: string[] = [];
  for (const c of cells) {
    const m = c.metrics;
    lines.push(
      `${c.opponent} (agent ${c.seat}, ${c.unseen ? "unseen" : "seen"}): ${m.trials} trials`,
      `  success@k  ${m.successAt.map((e) => `${pct(e.mean)} [${pct(e.lo)}, ${pct(e.hi)}]`).join("  ")}`,
      `  non-loss@k ${m.nonLossAt.map((e) => pct(e.mean)).join("  ")}`,
      `  score@k    ${m.scoreAt.map((e) => `${num(e.mean)} [${num(e.lo)}, ${num(e.hi)}]`).join("  ")}`,
      `  final ${num(m.final.mean)}  in-trial gain ${num(m.gain.mean)} [${num(m.gain.lo)}, ${num(m.gain.hi)}]  invalid ${pct(m.invalidRate)}`,
    );
    const remarks = remarkRatesText(m);
    if (remarks) lines.push(`  ${remarks}`);
    for (const [category, cm] of Object.entries(c.byCategory ?? {})) {
      lines.push(
        `  ${category} (${cm.trials} trials): success@k ${cm.successAt.map((e) => `${pct(e.mean)} [${pct(e.lo)}, ${pct(e.hi)}]`).join("  ")}`,
      );
    }
  }
  return lines.join("\n");
}

/** "remarks 12: valid 91.7%, informative 58.3%" (informative only where judged); "" without reflect calls. */
export function remarkRatesText(
  m: Pick<TrialMetrics, "reflections" | "validReflectionRate" | "informativeReflectionRate">,
): string {
  if (m.reflections === undefined || m.validReflectionRate === undefined) return "";
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const informative =
    m.informativeReflectionRate !== undefined ? `, informative ${pct(m.informativeReflectionRate)}` : "";
  return `remarks ${m.reflections}: valid ${pct(m.validReflectionRate)}${informative}`;
}

/** Before/after lines per cell: attempt-1 score, final score, in-trial gain and success@K, with intervals. */
export function formatBeforeAfter(before: readonly CellResult[], after: readonly CellResult[]): string {
  const num = (x: number) => (x >= 0 ? "+" : "") + x.toFixed(3);
  const est = (e: { mean: number; lo: number; hi: number }) => `${num(e.mean)} [${num(e.lo)}, ${num(e.hi)}]`;
  const lines = [
    "cell                              when     score@1                   final                     gain                      success@K",
  ];
  for (const a of after) {
    const b = before.find((x) => x.opponent === a.opponent && x.seat === a.seat);
    const label = `${a.opponent} (agent ${a.seat}${a.unseen ? ", unseen" : ""})`.padEnd(34);
    for (const [when, c] of [
      ["before", b],
      ["after", a],
    ] as const) {
      if (!c) continue;
      const m = c.metrics;
      const k = m.successAt.length;
      lines.push(
        `${when === "before" ? label : "".padEnd(34)}${when.padEnd(9)}${est(m.scoreAt[0]).padEnd(26)}${est(m.final).padEnd(26)}${est(m.gain).padEnd(26)}${(100 * m.successAt[k - 1].mean).toFixed(1)}%`,
      );
    }
  }
  return lines.join("\n");
}
