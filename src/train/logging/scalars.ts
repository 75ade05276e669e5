import type { CellResult } from "../../evaluate/evaluate.js";
import type { Estimate, TrialMetrics } from "../../evaluate/metrics.js";
import type { EvalSnapshot } from "../summary.js";

/**
 * A run's numbers as tagged scalars, the shape TensorBoard and W&B both take. Tags are stable:
 *   train/<metric>                 every number of a metrics.jsonl line, at step = its iteration;
 *   eval/<cell>/<measure>          each periodic evaluation and the final one, at step = iterations done;
 *   eval_scaling/…, eval_harder/…  the test-time scaling and harder-set evaluations, at the last step.
 * `<cell>` is `<opponent>-<seat>` (`puzzle` for a one-player task's single cell). A step is the
 * number of updates behind the model that produced the numbers, so iteration 10's rollout and the
 * evaluation after 10 iterations share step 10.
 */

export type ScalarKind = "train" | "eval" | "eval_scaling" | "eval_harder";

export interface ScalarRecord {
  kind: ScalarKind;
  step: number;
  /** tag → value; only finite numbers (what metrics.jsonl writes as a number, not null). */
  values: Record<string, number>;
}

function finiteEntries(values: Record<string, unknown>): [string, number][] {
  return Object.entries(values).filter((e): e is [string, number] => Number.isFinite(e[1]));
}

/** One iteration's metrics (a metrics.jsonl line) under `train/`, stepped by its `iteration`. */
export function trainRecord(metrics: Record<string, number>): ScalarRecord {
  const values: Record<string, number> = {};
  for (const [key, value] of finiteEntries(metrics)) if (key !== "iteration") values[`train/${key}`] = value;
  return { kind: "train", step: metrics.iteration, values };
}

/** How an evaluation cell is named in tags: `cfr-second`, or `puzzle` when it has no opponent. */
export function cellLabel(cell: Pick<CellResult, "opponent" | "seat">): string {
  if (cell.opponent === "none" && cell.seat === "none") return "puzzle";
  return `${cell.opponent}-${cell.seat}`;
}

/** A cell's measures in a fixed order: per attempt k success@k, non_loss@k, score@k; then the rest. */
export function cellMeasures(m: TrialMetrics): [string, number][] {
  const out: [string, number][] = [];
  const perAttempt = (name: string, xs: Estimate[]) => {
    xs.forEach((e, i) => {
      out.push([`${name}@${i + 1}`, e.mean]);
    });
  };
  perAttempt("success", m.successAt);
  perAttempt("non_loss", m.nonLossAt);
  perAttempt("score", m.scoreAt);
  out.push(["final", m.final.mean], ["final_lo", m.final.lo], ["final_hi", m.final.hi]);
  out.push(["gain", m.gain.mean], ["gain_lo", m.gain.lo], ["gain_hi", m.gain.hi]);
  out.push(["invalid_rate", m.invalidRate], ["attempts_played", m.meanAttemptsPlayed], ["trials", m.trials]);
  // Among the reflect calls (absent without any, and informative where the task judges it).
  if (m.validReflectionRate !== undefined) out.push(["valid_reflection", m.validReflectionRate]);
  if (m.informativeReflectionRate !== undefined)
    out.push(["informative_reflection", m.informativeReflectionRate]);
  return out.filter(([, v]) => Number.isFinite(v));
}

/** An evaluation's cells under `<kind>/<cell>/`, stepped by the iterations done before it. */
export function evalRecord(
  snapshot: EvalSnapshot,
  kind: Exclude<ScalarKind, "train"> = "eval",
): ScalarRecord {
  const values: Record<string, number> = {};
  for (const cell of snapshot.cells) {
    for (const [measure, value] of cellMeasures(cell.metrics)) {
      values[`${kind}/${cellLabel(cell)}/${measure}`] = value;
    }
  }
  return { kind, step: snapshot.iteration, values };
}

/**
 * A run's records so far in the order a run emits them (an evaluation after n iterations comes
 * before iteration n's metrics), rebuilt from a checkpoint's history and periodic evaluations.
 */
export function historyRecords(
  history: readonly Record<string, number>[],
  periodicEval: readonly EvalSnapshot[],
): ScalarRecord[] {
  const records = [...periodicEval.map((e) => evalRecord(e)), ...history.map(trainRecord)];
  const order = (r: ScalarRecord) => (r.kind === "train" ? 1 : 0);
  return records.sort((a, b) => a.step - b.step || order(a) - order(b));
}

/** The final evaluation as a table: one row per cell. */
export function evalTable(snapshot: EvalSnapshot): {
  columns: string[];
  rows: (string | number | boolean)[][];
} {
  const measures = snapshot.cells.map((c) => cellMeasures(c.metrics));
  const names = [...new Set(measures.flatMap((m) => m.map(([name]) => name)))];
  const columns = ["opponent", "seat", "unseen", ...names];
  const rows = snapshot.cells.map((cell, i) => {
    const byName = new Map(measures[i]);
    return [cell.opponent, cell.seat, cell.unseen, ...names.map((n) => byName.get(n) ?? Number.NaN)];
  });
  return { columns, rows };
}
