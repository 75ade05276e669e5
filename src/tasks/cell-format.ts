/**
 * How a board task's answers name a cell: `pair` writes `(2, 3)` (the references' format),
 * `digits` writes `23`, which the compact boards of TicTacToe and MineSweeper then show in every
 * cell an answer may name. A real model copies a cell off the board far more reliably when the
 * answer is the board's own text (docs/design.md, "TicTacToe cells as digits").
 */
export const CELL_FORMATS = ["pair", "digits"] as const;
export type CellFormat = (typeof CELL_FORMATS)[number];

/** A 1-based cell's text: `(2, 3)` or `23`. */
export function cellName(row: number, col: number, format: CellFormat): string {
  return format === "digits" ? `${row}${col}` : `(${row}, ${col})`;
}

/** The `cells` entry of a task's knobs, checked; `pair` when unset. */
export function cellFormatKnob(game: string, value: unknown): CellFormat {
  const cells = value ?? "pair";
  if (!CELL_FORMATS.includes(cells as CellFormat))
    throw new RangeError(
      `${game} knob cells must be one of ${CELL_FORMATS.join(", ")}, got ${String(cells)}`,
    );
  return cells as CellFormat;
}
