import { type AdvantageRow, computeAdvantages, type RoleBaselines } from "../algo/advantages.js";
import { assignCredit } from "../algo/credit.js";
import { penalisedScore } from "../algo/penalties.js";
import type { TrialRecord } from "../rollout/types.js";
import type { MageConfig } from "./config.js";

/**
 * rows → credit → penalties → advantages, for one iteration's trials (rows in trial order,
 * then call order, the order `planSequences` uses).
 */
export interface RowCredit {
  episodeReward: number[];
  stepReturn: number[];
  score: number[];
  advantage: number[];
}

export function computeRowCredit(
  trials: readonly TrialRecord[],
  config: MageConfig,
  roleBaselines?: RoleBaselines,
): RowCredit {
  const episodeReward: number[] = [];
  const stepReturn: number[] = [];
  const score: number[] = [];
  const advRows: AdvantageRow[] = [];
  for (const trial of trials) {
    const credit = assignCredit(
      trial.rows.map((r) => ({ phase: r.phase, attempt: r.attempt, reward: r.reward })),
      {
        mode: config.credit.mode,
        stepGamma: config.credit.stepGamma,
        trajGamma: config.credit.trajGamma,
        returnForm: config.credit.returnForm,
      },
    );
    trial.rows.forEach((row, i) => {
      const s = penalisedScore(credit.episodeRewards[i], row.valid, row.responseTokenIds.length, {
        invalidActionCoef: config.penalties.invalidAction,
        lengthCoef: config.penalties.length,
        maxResponseTokens: config.rollout.maxResponseTokens,
      });
      episodeReward.push(credit.episodeRewards[i]);
      stepReturn.push(credit.stepReturns[i]);
      score.push(s);
      advRows.push({
        taskId: String(row.taskSeed),
        opponent: row.opponent,
        seat: row.seat,
        attempt: row.attempt,
        anchor: row.anchor,
        score: s,
        stepReturn: credit.stepReturns[i],
      });
    });
  }
  let advantage: number[];
  if (roleBaselines) {
    // Episode level from the running role baseline (game × seat); the step level stays GiGPO's.
    const keys = advRows.map((r) => `${config.game}|${r.seat}`);
    const episode = roleBaselines.apply(keys, score);
    const gi = computeAdvantages(advRows, {
      estimator: config.advantage.estimator,
      scope: config.advantage.scope,
      mode: config.advantage.mode,
      stepAdvantageWeight: config.advantage.stepWeight,
      anchorPerAttempt: config.advantage.anchorPerAttempt,
    });
    advantage = episode.map((e, i) => e + config.advantage.stepWeight * gi.step[i]);
  } else {
    advantage = computeAdvantages(advRows, {
      estimator: config.advantage.estimator,
      scope: config.advantage.scope,
      mode: config.advantage.mode,
      stepAdvantageWeight: config.advantage.stepWeight,
      anchorPerAttempt: config.advantage.anchorPerAttempt,
    }).advantages;
  }
  return { episodeReward, stepReturn, score, advantage };
}
