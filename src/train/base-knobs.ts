/**
 * A base model's warm start plays with task knobs (TicTacToe's and MineSweeper's cell format)
 * that its report or checkpoint records; a run whose config asks for other ones would prompt it in
 * a format it never learned.
 */
import { join } from "node:path";
import { UsageError } from "../core/errors.js";
import { readJsonOrNull } from "../core/json-file.js";
import { CHECKPOINT_FILES } from "../model/checkpoint.js";
import type { MageConfig } from "./config.js";
import { readPretrainReport } from "./pretrain/run.js";

/** The games whose knobs name a cell format (`task.<game>.cells`). */
const CELL_GAMES = ["tictactoe", "minesweeper"] as const;
type CellGame = (typeof CELL_GAMES)[number];

type WithKnobs = { taskKnobs?: Partial<Record<CellGame, { cells?: unknown }>> } | null;

/**
 * The cell format a base model directory learned for `game`: its `pretrain-report.json` (a warm
 * start of either backend), else its checkpoint's `meta.json` (a trained run's checkpoint); null
 * when neither names one (bases made before the format was recorded, or a MineSweeper warm start
 * played in the default format, whose knobs are empty).
 */
export function warmStartCells(dir: string, game: CellGame = "tictactoe"): string | null {
  const recorded = (readPretrainReport(dir) ?? readJsonOrNull(join(dir, CHECKPOINT_FILES.meta))) as WithKnobs;
  const cells = recorded?.taskKnobs?.[game]?.cells;
  if (typeof cells === "string") return cells;
  // A recorded MineSweeper warm start without `cells` played the default format.
  return game === "minesweeper" && recorded?.taskKnobs !== undefined ? "pair" : null;
}

/** Throws a UsageError naming `task.<game>.cells` when it differs from the base model's. */
export function checkBaseKnobs(config: MageConfig): void {
  const dir = config.model.backend === "torch" ? config.model.torch.path : config.model.checkpoint;
  const game = config.game as CellGame;
  if (!CELL_GAMES.includes(game) || !dir) return;
  const learned = warmStartCells(dir, game);
  const asked = config.task[game].cells ?? "pair";
  if (learned !== null && learned !== asked)
    throw new UsageError(
      `task.${game}.cells is ${asked}, but ${dir} was warm-started with cells: ${learned}; ` +
        `set task.${game}.cells: ${learned} (or --set task.${game}.cells=${learned})`,
    );
}
