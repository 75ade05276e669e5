import { acceptedMoves, pct } from "./outcomes.js";
import type { TrialRecord } from "./read.js";

/**
 * The reflections of logged trials, read back: how many were well formed and informative (by the
 * task's rule, as judged when they were written), whether the attempt after one won, and a few of
 * them quoted. It answers "what does the agent write between attempts, and does the next attempt
 * use it?" from a run's transcripts without replaying every trial.
 */
export interface RemarkRow {
  /** The file the trial came from, as named to the reader. */
  source: string;
  line: number;
  trialId: number;
  /** 1-based attempt the reflection follows. */
  attempt: number;
  /** Whether the attempt it follows was won (a reflection after a won attempt is rare: scaling runs). */
  afterWon: boolean;
  valid: boolean;
  /** Which rule an invalid reflection failed. */
  failure?: string;
  /** By the task's rule; absent when the task has none. */
  informative?: boolean;
  /** The reflection text when valid, else the raw response. */
  text: string;
  /** Whether the next attempt won; null when the trial stopped before it. */
  nextWon: boolean | null;
  /**
   * Whether the next attempt opened with the same moves as the attempt the reflection follows (their
   * first `OPENING_MOVES` accepted actions, fewer where either attempt has fewer); null when there
   * is no next attempt or either has no accepted action. A next attempt that opens the same way
   * against the same task re-walks the path its reflection was about.
   */
  sameOpening: boolean | null;
}

/** Accepted actions compared at the start of consecutive attempts (`RemarkRow.sameOpening`). */
export const OPENING_MOVES = 3;

type MemoryAttempt = NonNullable<TrialRecord["memory"]>["attempts"][number];

function sameOpening(a: MemoryAttempt, b: MemoryAttempt | undefined): boolean | null {
  const x = acceptedMoves(a);
  const y = acceptedMoves(b);
  const k = Math.min(OPENING_MOVES, x.length, y.length);
  if (b === undefined || k === 0) return null;
  return x.slice(0, k).every((action, i) => action === y[i]);
}

export function collectRemarks(records: readonly TrialRecord[], source: string): RemarkRow[] {
  const rows: RemarkRow[] = [];
  for (const r of records) {
    const attempts = r.memory?.attempts ?? [];
    for (const a of attempts) {
      const rec = a.reflection;
      if (!rec) continue;
      const next = r.attempts[a.index + 1];
      rows.push({
        source,
        line: r.line,
        trialId: r.trialId,
        attempt: a.index + 1,
        afterWon: r.attempts[a.index]?.won === true,
        valid: rec.valid,
        ...(rec.failure !== undefined ? { failure: rec.failure } : {}),
        ...(rec.informative !== undefined ? { informative: rec.informative } : {}),
        text: rec.valid ? rec.text : rec.response,
        nextWon: next ? next.won : null,
        sameOpening: sameOpening(
          a,
          attempts.find((b) => b.index === a.index + 1),
        ),
      });
    }
  }
  return rows;
}

export interface NextAttempt {
  /** Remarks followed by another attempt. */
  followed: number;
  /** Of those, how many next attempts won. */
  won: number;
}

export interface RemarkStats {
  remarks: number;
  wellFormed: number;
  /** Well-formed remarks the task's rule judged (null: the task has no rule). */
  judged: number | null;
  informative: number;
  /** Invalid remarks by the rule they failed. */
  failures: Record<string, number>;
  afterInformative: NextAttempt;
  afterOther: NextAttempt;
  /** Remarks whose next attempt's opening could be compared, and those that opened the same way. */
  openings: { compared: number; same: number };
}

function tally(into: NextAttempt, row: RemarkRow): void {
  if (row.nextWon === null) return;
  into.followed += 1;
  if (row.nextWon) into.won += 1;
}

export function remarkStats(rows: readonly RemarkRow[]): RemarkStats {
  const stats: RemarkStats = {
    remarks: rows.length,
    wellFormed: 0,
    judged: null,
    informative: 0,
    failures: {},
    afterInformative: { followed: 0, won: 0 },
    afterOther: { followed: 0, won: 0 },
    openings: { compared: 0, same: 0 },
  };
  for (const row of rows) {
    if (row.valid) stats.wellFormed += 1;
    else {
      const key = row.failure ?? "invalid";
      stats.failures[key] = (stats.failures[key] ?? 0) + 1;
    }
    if (row.valid && row.informative !== undefined) stats.judged = (stats.judged ?? 0) + 1;
    if (row.informative === true) stats.informative += 1;
    tally(row.informative === true ? stats.afterInformative : stats.afterOther, row);
    if (row.sameOpening !== null) {
      stats.openings.compared += 1;
      if (row.sameOpening) stats.openings.same += 1;
    }
  }
  return stats;
}

/** `n` rows spread evenly over all of them (the first, then every len/n-th): deterministic. */
export function spreadEvenly<T>(rows: readonly T[], n: number): T[] {
  if (rows.length <= n) return [...rows];
  return Array.from({ length: n }, (_, i) => rows[Math.floor((i * rows.length) / n)]);
}

function nextLine(label: string, x: NextAttempt): string {
  return `${label} ${x.won} of ${x.followed} (${pct(x.won, x.followed)})`;
}

function outcomeOf(row: RemarkRow): string {
  const before = row.afterWon ? "won" : "lost";
  return row.nextWon === null ? `${before}, no next attempt` : `${before} → ${row.nextWon ? "won" : "lost"}`;
}

function verdictOf(row: RemarkRow): string {
  if (!row.valid) return `invalid (${row.failure ?? "?"})`;
  if (row.informative === undefined) return "well-formed";
  return row.informative ? "informative" : "uninformative";
}

export function quoteLine(row: RemarkRow): string {
  const where = `${row.source}:${row.line} trial ${row.trialId}, after attempt ${row.attempt} (${outcomeOf(row)})`;
  return `- ${where}, ${verdictOf(row)}: ${JSON.stringify(row.text)}`;
}

export function formatRemarks(stats: RemarkStats, quoted: readonly RemarkRow[], trials: number): string {
  if (stats.remarks === 0)
    return `${trials} trial(s), no reflection logged (no trial went on to a second attempt with its memory kept)`;
  const failures = Object.entries(stats.failures)
    .map(([k, v]) => `${k} ${v}`)
    .join(", ");
  const informative =
    stats.judged === null
      ? "the task has no informative rule"
      : `informative ${stats.informative} of ${stats.judged} well-formed (${pct(stats.informative, stats.judged)}), ` +
        `${pct(stats.informative, stats.remarks)} of all`;
  return [
    `${trials} trial(s), ${stats.remarks} remark(s): ${stats.wellFormed} well-formed (${pct(stats.wellFormed, stats.remarks)})` +
      `${failures ? `; invalid: ${failures}` : ""}; ${informative}`,
    `the next attempt won: ${nextLine("after an informative remark", stats.afterInformative)}; ${nextLine("after any other", stats.afterOther)}`,
    `the next attempt opened with the same ${OPENING_MOVES} moves as the one before: ${stats.openings.same} of ${stats.openings.compared} (${pct(stats.openings.same, stats.openings.compared)})`,
    `${quoted.length} quoted, spread evenly over the remarks:`,
    ...quoted.map(quoteLine),
  ].join("\n");
}
