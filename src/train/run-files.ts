import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../core/atomic-write.js";
import { RUN_CHECKPOINTS_DIR } from "../model/checkpoint.js";
import type { TrialRecord } from "../rollout/types.js";
import type { TrainBackend } from "./backend.js";
import type { MageConfig } from "./config.js";
import type { RunProgress } from "./run-state.js";
import type { EvalSnapshot } from "./summary.js";
import { gameName } from "./task-for-config.js";

/**
 * The files of a run directory that grow as it trains: metrics.jsonl (one line per iteration),
 * transcripts.jsonl (a few trials per iteration), eval.jsonl (periodic evaluations), the final
 * evaluation's trial logs, and the checkpoints (the last few and the best kept).
 */
export function ckptName(iteration: number): string {
  return `iter-${String(iteration).padStart(6, "0")}`;
}

function readJsonl(path: string): Record<string, unknown>[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.trim().length > 0)
    .map((l) => JSON.parse(l));
}

/** Keeps only the lines of a JSONL file whose `iteration` is below `limit` (a resumed run rewrites the rest). */
function truncateJsonl(path: string, limit: number): void {
  if (!existsSync(path)) return;
  const kept = readJsonl(path).filter((r) => typeof r.iteration !== "number" || r.iteration < limit);
  writeFileSync(path, kept.map((r) => `${JSON.stringify(r)}\n`).join(""));
}

/**
 * Drops what an interrupted process wrote after the checkpoint a run resumes from at
 * `startIteration`. (Metrics and transcripts count iterations from 0; evaluations are numbered by
 * iterations done, so the evaluation taken right before the checkpoint is kept.)
 */
export function truncateRunLogs(outDir: string, startIteration: number): void {
  truncateJsonl(join(outDir, "metrics.jsonl"), startIteration);
  truncateJsonl(join(outDir, "transcripts.jsonl"), startIteration);
  truncateJsonl(join(outDir, "eval.jsonl"), startIteration === 0 ? 0 : startIteration + 1);
}

/** One iteration's metrics line and its first `transcriptsPerIteration` trials. */
export function appendIteration(
  outDir: string,
  iteration: number,
  metrics: Record<string, number>,
  trials: TrialRecord[],
  transcriptsPerIteration: number,
): void {
  appendFileSync(join(outDir, "metrics.jsonl"), `${JSON.stringify(metrics)}\n`);
  for (const t of trials.slice(0, transcriptsPerIteration)) {
    const { trialId, opponent, seat, attempts, memory } = t;
    appendFileSync(
      join(outDir, "transcripts.jsonl"),
      `${JSON.stringify({ iteration, trialId, opponent, seat, attempts, memory })}\n`,
    );
  }
}

export function appendEval(outDir: string, snap: EvalSnapshot): void {
  appendFileSync(
    join(outDir, "eval.jsonl"),
    `${JSON.stringify({ iteration: snap.iteration, cells: snap.cells })}\n`,
  );
}

/**
 * The final evaluation's trial logs, emptied: every trial's outcome in `eval-trials.jsonl`, and
 * the whole play of each cell's first `transcriptsPerCell` trials by index (not the first to
 * finish, which would favour trials won early) in `eval-transcripts.jsonl`, for `mage replay`.
 */
export async function finalTrialLogs(
  outDir: string,
  transcriptsPerCell: number,
  iteration: number,
): Promise<(t: TrialRecord, index: number) => void> {
  const evalPath = join(outDir, "eval-trials.jsonl");
  const transcriptsPath = join(outDir, "eval-transcripts.jsonl");
  await writeFileAtomic(evalPath, "");
  await writeFileAtomic(transcriptsPath, "");
  return (t, index) => {
    const outcome = {
      iteration,
      trialId: t.trialId,
      opponent: t.opponent,
      seat: t.seat,
      attempts: t.attempts,
    };
    appendFileSync(evalPath, `${JSON.stringify(outcome)}\n`);
    if (index >= transcriptsPerCell) return;
    appendFileSync(transcriptsPath, `${JSON.stringify({ ...outcome, memory: t.memory })}\n`);
  };
}

/** Saves the learner and the run's progress after `iteration`, then prunes old checkpoints. */
export async function saveRunCheckpoint(
  outDir: string,
  config: MageConfig,
  backend: TrainBackend,
  progress: RunProgress,
  iteration: number,
): Promise<void> {
  await backend.learner.save(join(outDir, RUN_CHECKPOINTS_DIR, ckptName(iteration)), {
    json: progress.trainingJson(iteration),
    meta: {
      ...backend.describe,
      run: config.name,
      game: gameName(config),
      ...(config.env ? { env: checkpointEnv(config.env) } : {}),
      iteration,
      // What `mage eval` needs to tell the opponents this model trained against from unseen ones.
      trainingOpponents: config.population.opponents.map((o) => o.spec),
      promptStyle: config.task.promptStyle,
      maxResponseTokens: config.rollout.maxResponseTokens,
      // The task knobs it trained with (puzzle difficulty, TicTacToe's cells), the default of `mage eval --checkpoint`.
      taskKnobs: {
        sokoban: config.task.sokoban,
        minesweeper: config.task.minesweeper,
        tictactoe: config.task.tictactoe,
      },
    },
  });
  await pruneCheckpoints(outDir, config.train.keepLast, progress.best.iteration);
}

/**
 * The served environment a checkpoint remembers for `mage eval --checkpoint`: where and what it
 * trained on, with the seed range and the name of the API key's variable (never the key).
 */
function checkpointEnv(env: NonNullable<MageConfig["env"]>) {
  return {
    url: env.url,
    name: env.name,
    config: env.config,
    ...(env.seeds ? { seeds: env.seeds } : {}),
    ...(env.apiKeyEnv ? { apiKeyEnv: env.apiKeyEnv } : {}),
  };
}

/** Deletes all but the newest `keep` checkpoints, never the best one. */
async function pruneCheckpoints(outDir: string, keep: number, bestIteration: number | null): Promise<void> {
  const dir = join(outDir, RUN_CHECKPOINTS_DIR);
  const names = (await readdir(dir)).filter((n) => /^iter-\d+$/.test(n)).sort();
  const keepSet = new Set(names.slice(-keep));
  if (bestIteration !== null) keepSet.add(ckptName(bestIteration));
  for (const n of names) if (!keepSet.has(n)) await rm(join(dir, n), { recursive: true, force: true });
}
