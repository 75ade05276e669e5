/**
 * The checks of a warm start on a served environment: fresh trials of the checks' environment
 * (ALFWorld: valid_seen) sampled from the model at temperature 1 through the trial runner, compact
 * prompts, 3 attempts with reflections, batched: the share of play answers the environment accepts
 * (ALFWorld: an admissible command), the share of reflections that are a valid `<remark>`
 * (`judgeRemark`) and the share that are informative (the environment's rule, by default a term
 * the attempt observed that the rules do not state; `tasks/remark-quality.ts`), and success@1..K
 * overall and per category (a category "a/b" counts in "a" and in "a/b": ALFWorld's split and its
 * split and task type).
 */
import { writeFileAtomic } from "../../core/atomic-write.js";
import type { Rng } from "../../core/rng.js";
import { countingAnswers, type EvalProgress, ProgressTally } from "../../evaluate/progress.js";
import type { Policy } from "../../policy/types.js";
import { runTrials } from "../../rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../../rollout/types.js";
import { assignGroups } from "../../tasks/population.js";
import type { RemoteTaskDefinition } from "../../tasks/remote.js";
import {
  answerRates,
  CHECK_SAMPLING,
  type PretrainEvaluation,
  type PretrainTargets,
  targetChecks,
} from "./evaluate.js";
import { type ServedTargets, servedTargetChecks } from "./served-targets.js";

export interface ServedCheckOptions {
  def: RemoteTaskDefinition;
  policy: Policy;
  rng: Rng;
  trials: number;
  maxBatch: number;
  targets: PretrainTargets;
  /** The served warm start's targets (`served-targets.ts`); absent: `targets` as the built-in games'. */
  servedTargets?: ServedTargets;
  attempts?: number;
  maxTurns?: number;
  /** Trials done, answers received and the valid-answer rate as they come (a real model takes minutes). */
  onProgress?: (progress: EvalProgress) => void;
  /**
   * Where to write every check trial's whole play (`CHECKS_TRANSCRIPTS_FILE` in the warm start's
   * directory), in the final evaluation's transcript format, for `mage replay FILE --remarks`.
   */
  transcriptsPath?: string;
}

/** The checks' trials, as the warm start keeps them beside its report. */
export const CHECKS_TRANSCRIPTS_FILE = "checks-transcripts.jsonl";

/** One JSON line per trial: its outcomes and its memory (what `mage replay` reads). */
export function checkTranscriptLines(records: readonly TrialRecord[]): string {
  return records
    .map((t) =>
      JSON.stringify({
        trialId: t.trialId,
        opponent: t.opponent,
        seat: t.seat,
        attempts: t.attempts,
        memory: t.memory,
      }),
    )
    .map((line) => `${line}\n`)
    .join("");
}

/** Success@1..K: the share of trials won by attempt k (a cumulative or). */
export function successAt(records: readonly TrialRecord[], attempts: number): number[] {
  return Array.from({ length: attempts }, (_, k) => {
    const won = records.filter((r) => r.attempts.slice(0, k + 1).some((a) => a.won)).length;
    return records.length > 0 ? won / records.length : 0;
  });
}

/** Success@k per category and per category prefix (ALFWorld: per split, per split and task type). */
export function successByCategory(
  records: readonly TrialRecord[],
  attempts: number,
): Record<string, { trials: number; successAt: number[] }> {
  const groups = new Map<string, TrialRecord[]>();
  for (const r of records) {
    if (r.category === undefined) continue;
    const parts = r.category.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const key = parts.slice(0, i).join("/");
      groups.set(key, [...(groups.get(key) ?? []), r]);
    }
  }
  const out: Record<string, { trials: number; successAt: number[] }> = {};
  for (const key of [...groups.keys()].sort()) {
    const list = groups.get(key)!;
    out[key] = { trials: list.length, successAt: successAt(list, attempts) };
  }
  return out;
}

function checkSpecs(trials: number, rng: Rng): TrialSpec[] {
  return assignGroups({ numGroups: trials, pool: null, rng: rng.derive("groups") }).map((g) => ({
    trialId: g.group,
    groupId: g.group,
    taskSeed: g.taskSeed,
    opponent: null,
    seat: null,
  }));
}

export async function evaluateServed(opts: ServedCheckOptions): Promise<PretrainEvaluation> {
  const t0 = performance.now();
  const attempts = opts.attempts ?? 3;
  const onProgress = opts.onProgress;
  const tally = onProgress
    ? new ProgressTally([{ opponent: "none", seat: "first", unseen: false }], opts.trials, opts.policy)
    : null;
  const policy = tally
    ? countingAnswers(opts.policy, (count) => {
        tally.answered(count);
        onProgress!(tally.snapshot());
      })
    : opts.policy;
  if (tally) onProgress!(tally.snapshot());
  const records = await runTrials(
    checkSpecs(opts.trials, opts.rng),
    () => opts.def.create({}),
    policy,
    opts.rng.derive("run"),
    {
      attempts,
      maxTurns: opts.maxTurns ?? opts.def.maxTurns,
      reflection: "reflection_only",
      promptStyle: "compact",
      hindsight: false,
      sampling: CHECK_SAMPLING,
      maxBatch: opts.maxBatch,
      concurrency: 1,
    },
    tally
      ? {
          onTrialEnd: (trial) => {
            tally.trialEnded(0, trial);
            onProgress!(tally.snapshot());
          },
        }
      : {},
  );
  const evaluation: PretrainEvaluation = {
    game: "remote",
    ...answerRates(records),
    successAt: successAt(records, attempts),
    byCategory: successByCategory(records, attempts),
    entropy: { states: [], bySeat: {}, sampledBySeat: {} },
    targets: [],
    ms: 0,
  };
  evaluation.targets = opts.servedTargets
    ? servedTargetChecks(evaluation, records, opts.servedTargets)
    : targetChecks(evaluation, opts.targets);
  evaluation.ms = performance.now() - t0;
  if (opts.transcriptsPath) await writeFileAtomic(opts.transcriptsPath, checkTranscriptLines(records));
  return evaluation;
}
