/**
 * A base model's warm start plays with task knobs (TicTacToe's cell format) that its report or
 * checkpoint records; a run whose config asks for other ones would prompt it in a format it never
 * learned.
 */
import { join } from "node:path";
import { UsageError } from "../core/errors.js";
import { readJsonOrNull } from "../core/json-file.js";
import { CHECKPOINT_FILES } from "../model/checkpoint.js";
import type { MageConfig } from "./config.js";
import { readPretrainReport } from "./pretrain/run.js";

type WithKnobs = { taskKnobs?: { tictactoe?: { cells?: unknown } } } | null;

/**
 * The cell format a base model directory learned: its `pretrain-report.json` (a warm start of
 * either backend), else its checkpoint's `meta.json` (a trained run's checkpoint); null when
 * neither names one (bases made before the format was recorded).
 */
export function warmStartCells(dir: string): string | null {
  const recorded = (readPretrainReport(dir) ?? readJsonOrNull(join(dir, CHECKPOINT_FILES.meta))) as WithKnobs;
  const cells = recorded?.taskKnobs?.tictactoe?.cells;
  return typeof cells === "string" ? cells : null;
}

/** Throws a UsageError naming `task.tictactoe.cells` when it differs from the base model's. */
export function checkBaseKnobs(config: MageConfig): void {
  const dir = config.model.backend === "torch" ? config.model.torch.path : config.model.checkpoint;
  if (config.game !== "tictactoe" || !dir) return;
  const learned = warmStartCells(dir);
  const asked = config.task.tictactoe.cells ?? "pair";
  if (learned !== null && learned !== asked)
    throw new UsageError(
      `task.tictactoe.cells is ${asked}, but ${dir} was warm-started with cells: ${learned}; ` +
        `set task.tictactoe.cells: ${learned} (or --set task.tictactoe.cells=${learned})`,
    );
}
