import type { TrialMemory } from "../tasks/memory.js";

/**
 * One-move tactics of logged TicTacToe play: of the agent's turns where it could complete a line,
 * how often it did; of those where it could not but the opponent threatened to, how often it
 * blocked. The agent is X in every TicTacToe prompt. Read from trial memory (full observations),
 * so it works on any logged trial: pretraining checks, `mage eval --out` files, transcripts.
 */
export interface TacticsCount {
  /** Turns where some move completes a line of X. */
  winChances: number;
  winsTaken: number;
  /** Turns without a winning move where O threatens to complete a line. */
  blockChances: number;
  blocksMade: number;
}

type Board = string[][];

const LINES: [number, number][][] = [
  ...[0, 1, 2].map((r) => [0, 1, 2].map((c) => [r, c] as [number, number])),
  ...[0, 1, 2].map((c) => [0, 1, 2].map((r) => [r, c] as [number, number])),
  [0, 1, 2].map((i) => [i, i] as [number, number]),
  [0, 1, 2].map((i) => [i, 2 - i] as [number, number]),
];

/** A full-style board (". . X" rows), or null when the text holds none. */
export function parseBoard(text: string): Board | null {
  const rows = text
    .split("\n")
    .map((l) => l.trim().split(" "))
    .filter((cells) => cells.length === 3 && cells.every((c) => c === "X" || c === "O" || c === "."));
  return rows.length >= 3 ? rows.slice(-3) : null;
}

/** The empty cells that would complete a line of `mark` ("(r, c)", 1-based). */
export function completingCells(board: Board, mark: "X" | "O"): Set<string> {
  const out = new Set<string>();
  for (const line of LINES) {
    const marks = line.map(([r, c]) => board[r][c]);
    if (marks.filter((m) => m === mark).length !== 2) continue;
    const empty = line.find(([r, c]) => board[r][c] === ".");
    if (empty) out.add(`(${empty[0] + 1}, ${empty[1] + 1})`);
  }
  return out;
}

/** A logged move as "(r, c)", whichever cell format the task wrote it in ("23" or "(2, 3)"). */
export function pairCellText(action: string): string {
  const digits = /^\s*([1-3])([1-3])\s*$/.exec(action);
  return digits ? `(${digits[1]}, ${digits[2]})` : action;
}

export function countTactics(memories: Iterable<TrialMemory>): TacticsCount {
  const n: TacticsCount = { winChances: 0, winsTaken: 0, blockChances: 0, blocksMade: 0 };
  for (const memory of memories) {
    if (memory.task !== "tictactoe") continue;
    for (const attempt of memory.attempts) {
      let before = attempt.initialObservation;
      for (const turn of attempt.turns) {
        const board = parseBoard(before);
        if (turn.valid && board) {
          const wins = completingCells(board, "X");
          const threats = completingCells(board, "O");
          if (wins.size > 0) {
            n.winChances++;
            if (wins.has(pairCellText(turn.action))) n.winsTaken++;
          } else if (threats.size > 0) {
            n.blockChances++;
            if (threats.has(pairCellText(turn.action))) n.blocksMade++;
          }
        }
        // An invalid answer leaves the board as it was.
        if (turn.valid) before = turn.observation;
      }
    }
  }
  return n;
}

export function formatTactics(n: TacticsCount): string {
  const pct = (a: number, b: number) => (b > 0 ? `${((100 * a) / b).toFixed(1)}%` : "n/a");
  return (
    `immediate wins taken ${n.winsTaken}/${n.winChances} (${pct(n.winsTaken, n.winChances)}), ` +
    `threats blocked ${n.blocksMade}/${n.blockChances} (${pct(n.blocksMade, n.blockChances)})`
  );
}
