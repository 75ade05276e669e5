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

/** Later attempts against the moves that ended earlier lost attempts (see countLosingMoveRepeats). */
export interface LosingMoveRepeats {
  /** Attempts played after at least one lost attempt of their trial. */
  after: number;
  /** Those of them that play again a losing move of an earlier attempt. */
  repeated: number;
}

/**
 * Whether later attempts avoid what lost the earlier ones: a lost attempt's losing move is the
 * agent's last valid move in it (MineSweeper: the mine it revealed; TicTacToe: the move the
 * opponent's winning reply followed). Counts the attempts that come after a lost attempt and those
 * that play one of the trial's losing moves so far again. Null when no trial has its play logged.
 */
export function countLosingMoveRepeats(records: readonly TrialRecord[]): LosingMoveRepeats | null {
  let logged = false;
  const out: LosingMoveRepeats = { after: 0, repeated: 0 };
  for (const r of records) {
    const attempts = r.memory?.attempts;
    if (!attempts) continue;
    logged = true;
    const losing = new Set<string>();
    attempts.forEach((a, k) => {
      const moves = acceptedMoves(a);
      if (losing.size > 0) {
        out.after += 1;
        if (moves.some((m) => losing.has(m))) out.repeated += 1;
      }
      const summary = r.attempts[k];
      if (summary && outcomeWord(summary) === "lost" && moves.length > 0) losing.add(moves[moves.length - 1]);
    });
  }
  return logged ? out : null;
}

type LoggedAttempt = NonNullable<TrialRecord["memory"]>["attempts"][number];

/** The moves an attempt played that the game accepted, in order. */
export function acceptedMoves(a: LoggedAttempt | undefined): string[] {
  return (a?.turns ?? []).filter((t) => t.valid).map((t) => t.action);
}

/** Attempts with logged play, and those of them that walk back and forth (`backAndForth`). */
export interface BackAndForth {
  attempts: number;
  looping: number;
}

/**
 * Whether an attempt's accepted moves hold the same two moves twice in a row (A B A B, A ≠ B): the
 * agent undoes a move, redoes it and undoes it again (the coin collector: two rooms walked between;
 * Sokoban: a push taken back), the loop a small model falls into without memory of the attempt.
 */
export function walksBackAndForth(moves: readonly string[]): boolean {
  for (let i = 0; i + 3 < moves.length; i++)
    if (moves[i] !== moves[i + 1] && moves[i] === moves[i + 2] && moves[i + 1] === moves[i + 3]) return true;
  return false;
}

export function countBackAndForth(records: readonly TrialRecord[]): BackAndForth | null {
  let logged = false;
  const out: BackAndForth = { attempts: 0, looping: 0 };
  for (const r of records) {
    for (const a of r.memory?.attempts ?? []) {
      logged = true;
      out.attempts += 1;
      if (walksBackAndForth(acceptedMoves(a))) out.looping += 1;
    }
  }
  return logged ? out : null;
}

/** `n` as a percentage of `of`, one decimal ("–" when `of` is 0). */
export function pct(n: number, of: number): string {
  return of > 0 ? `${((100 * n) / of).toFixed(1)}%` : "–";
}

/** A plain-text table, one row per attempt, counts with their share of the attempts played. */
export function formatAttemptOutcomes(
  rows: readonly AttemptOutcomeRow[],
  trials: number,
  repeats: LosingMoveRepeats | null = null,
  loops: BackAndForth | null = null,
): string {
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
    ...(repeats && repeats.after > 0
      ? [
          `attempts after a lost one: ${repeats.after}; ${repeats.repeated} (${pct(repeats.repeated, repeats.after)}) ` +
            "play again the last move of an earlier lost attempt (MineSweeper: the mine)",
        ]
      : []),
    ...(loops && loops.attempts > 0
      ? [
          `attempts that walk back and forth (the same two moves twice in a row, A B A B): ${loops.looping} of ${loops.attempts} (${pct(loops.looping, loops.attempts)})`,
        ]
      : []),
  ].join("\n");
}
