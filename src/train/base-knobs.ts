/**
 * A real model's warm start plays with task knobs (TicTacToe's cell format) that its report
 * records; a run whose config asks for other ones would prompt it in a format it never learned.
 */
import { UsageError } from "../core/errors.js";
import type { MageConfig } from "./config.js";
import { readPretrainReport } from "./pretrain/run.js";

/** The cell format a warm-started model directory learned, or null when its report names none. */
export function warmStartCells(dir: string): string | null {
  const report = readPretrainReport(dir) as { taskKnobs?: { tictactoe?: { cells?: unknown } } } | null;
  const cells = report?.taskKnobs?.tictactoe?.cells;
  return typeof cells === "string" ? cells : null;
}

/** Throws a UsageError naming `task.tictactoe.cells` when it differs from the base model's. */
export function checkBaseKnobs(config: MageConfig): void {
  const dir = config.model.torch.path;
  if (config.game !== "tictactoe" || config.model.backend !== "torch" || !dir) return;
  const learned = warmStartCells(dir);
  const asked = config.task.tictactoe.cells ?? "pair";
  if (learned !== null && learned !== asked)
    throw new UsageError(
      `task.tictactoe.cells is ${asked}, but ${dir} was warm-started with cells: ${learned}; ` +
        `set task.tictactoe.cells: ${learned} (or --set task.tictactoe.cells=${learned})`,
    );
}
