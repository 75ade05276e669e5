import type { TrialRecord } from "./read.js";
import { outcomeWord } from "./render.js";

/**
 * Outcomes per attempt over a set of logged trials: how many trials played attempt k, and how that
 * attempt ended. It shows what a success@k curve hides: whether later attempts win because the
 * policy tries something new or only because more attempts are played.
 */
export interface AttemptOutcomeRow {
  /** 1-based attempt. */
  attempt: number;
  played: number;
  won: number;
  draw: number;
  lost: number;
  cutOff: number;
  /** Mean score of the attempts played. */
  meanScore: number;
}

export function countAttemptOutcomes(records: readonly TrialRecord[]): AttemptOutcomeRow[] {
  const rows: AttemptOutcomeRow[] = [];
  for (const r of records) {
    r.attempts.forEach((a, k) => {
      rows[k] ??= { attempt: k + 1, played: 0, won: 0, draw: 0, lost: 0, cutOff: 0, meanScore: 0 };
      const row = rows[k];
      row.played += 1;
      row.meanScore += a.score;
      const word = outcomeWord(a);
      if (word === "won") row.won += 1;
      else if (word === "draw") row.draw += 1;
      else if (word === "lost") row.lost += 1;
      else row.cutOff += 1;
    });
  }
  return rows.map((row) => ({ ...row, meanScore: row.played > 0 ? row.meanScore / row.played : 0 }));
}

function pct(n: number, of: number): string {
  return of > 0 ? `${((100 * n) / of).toFixed(1)}%` : "–";
}

/** A plain-text table, one row per attempt, counts with their share of the attempts played. */
export function formatAttemptOutcomes(rows: readonly AttemptOutcomeRow[], trials: number): string {
  const header = ["attempt", "played", "won", "draw", "lost", "cut off", "mean score"];
  const body = rows.map((r) => [
    String(r.attempt),
    String(r.played),
    `${r.won} (${pct(r.won, r.played)})`,
    `${r.draw} (${pct(r.draw, r.played)})`,
    `${r.lost} (${pct(r.lost, r.played)})`,
    `${r.cutOff} (${pct(r.cutOff, r.played)})`,
    (r.meanScore >= 0 ? "+" : "") + r.meanScore.toFixed(3),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]))
      .join("  ")
      .trimEnd();
  const won = rows.reduce((s, r) => s + r.won, 0);
  return [
    `${trials} trial(s); ${won} won (${pct(won, trials)}), by attempt:`,
    line(header),
    ...body.map(line),
  ].join("\n");
}
