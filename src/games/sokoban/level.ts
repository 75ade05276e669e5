import { UsageError } from "../../core/errors.js";

/**
 * Sokoban boards as plain immutable data.
 *
 * A room is the fixed part (walls, floor, targets) on a rows×cols grid addressed by cell
 * index `r * cols + c`. A state is a room plus the player cell and the sorted box cells.
 * States are frozen and never mutated: keeping a reference is a snapshot, so restarting an
 * attempt is handing back the initial state object.
 */

/** Tile kinds of the fixed room. */
export const WALL = 0;
export const FLOOR = 1;
export const TARGET = 2;
export type Tile = typeof WALL | typeof FLOOR | typeof TARGET;

export interface SokobanRoom {
  readonly rows: number;
  readonly cols: number;
  /** `rows * cols` tiles, row-major. The outer border is always wall. */
  readonly tiles: readonly Tile[];
  /** Target cells, ascending. */
  readonly targets: readonly number[];
}

export interface SokobanState {
  readonly room: SokobanRoom;
  /** Player cell index. */
  readonly player: number;
  /** Box cell indices, ascending (boxes are interchangeable). */
  readonly boxes: readonly number[];
}

export const SOKOBAN_MOVES = ["up", "down", "left", "right"] as const;
export type SokobanMove = (typeof SOKOBAN_MOVES)[number];

/** Row/column offset of each move. */
export const MOVE_DELTA: Readonly<Record<SokobanMove, readonly [number, number]>> = {
  up: [-1, 0],
  down: [1, 0],
  left: [0, -1],
  right: [0, 1],
};

/** Cell-index offset of a move in a room with `cols` columns. */
export function cellDelta(move: SokobanMove, cols: number): number {
  const [dr, dc] = MOVE_DELTA[move];
  return dr * cols + dc;
}

/** Builds a frozen room; throws UsageError when the border is not all wall. */
export function makeRoom(rows: number, cols: number, tiles: readonly Tile[]): SokobanRoom {
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 3 || cols < 3)
    throw new UsageError(`sokoban room must be at least 3×3 (rows=${rows}, cols=${cols})`);
  if (tiles.length !== rows * cols)
    throw new UsageError(`sokoban room has ${tiles.length} tiles, expected rows×cols = ${rows * cols}`);
  const targets: number[] = [];
  for (let i = 0; i < tiles.length; i++) {
    const t = tiles[i];
    if (t !== WALL && t !== FLOOR && t !== TARGET)
      throw new UsageError(`sokoban tile ${i} is ${t}; valid: 0, 1, 2`);
    const r = Math.floor(i / cols);
    const c = i % cols;
    if (t !== WALL && (r === 0 || c === 0 || r === rows - 1 || c === cols - 1))
      throw new UsageError(`sokoban room cell (${r}, ${c}) is on the border but not a wall`);
    if (t === TARGET) targets.push(i);
  }
  return Object.freeze({
    rows,
    cols,
    tiles: Object.freeze([...tiles]),
    targets: Object.freeze(targets),
  });
}

/** Builds a frozen state; boxes are sorted. Throws UsageError on overlaps or walls. */
export function makeState(room: SokobanRoom, player: number, boxes: readonly number[]): SokobanState {
  const n = room.rows * room.cols;
  const sorted = [...boxes].sort((a, b) => a - b);
  const check = (what: string, cell: number) => {
    if (!Number.isInteger(cell) || cell < 0 || cell >= n)
      throw new UsageError(`sokoban ${what} cell ${cell} is outside the room`);
    if (room.tiles[cell] === WALL) throw new UsageError(`sokoban ${what} cell ${cell} is a wall`);
  };
  check("player", player);
  for (let i = 0; i < sorted.length; i++) {
    check("box", sorted[i]);
    if (i > 0 && sorted[i] === sorted[i - 1]) throw new UsageError(`two sokoban boxes on cell ${sorted[i]}`);
    if (sorted[i] === player) throw new UsageError(`sokoban player and a box share cell ${player}`);
  }
  if (sorted.length !== room.targets.length)
    throw new UsageError(`sokoban state has ${sorted.length} boxes but ${room.targets.length} targets`);
  return Object.freeze({ room, player, boxes: Object.freeze(sorted) });
}

/** Internal: a state from already-validated parts (boxes sorted, frozen here). */
export function stateUnchecked(room: SokobanRoom, player: number, boxes: number[]): SokobanState {
  return Object.freeze({ room, player, boxes: Object.freeze(boxes) });
}

export function isTarget(room: SokobanRoom, cell: number): boolean {
  return room.tiles[cell] === TARGET;
}

export function boxesOnTargets(state: SokobanState): number {
  let n = 0;
  for (const b of state.boxes) if (state.room.tiles[b] === TARGET) n++;
  return n;
}

/** All boxes on targets. */
export function isSolved(state: SokobanState): boolean {
  return boxesOnTargets(state) === state.boxes.length;
}

export function sameState(a: SokobanState, b: SokobanState): boolean {
  if (a.player !== b.player || a.boxes.length !== b.boxes.length) return false;
  for (let i = 0; i < a.boxes.length; i++) if (a.boxes[i] !== b.boxes[i]) return false;
  return a.room === b.room || renderSokoban(a) === renderSokoban(b);
}

/** Render symbols of `text_with_row_numbers`. */
export const SOKOBAN_SYMBOLS = {
  wall: "#",
  floor: "_",
  target: "O",
  box: "X",
  boxOnTarget: "√",
  player: "P",
  playerOnTarget: "S",
} as const;

/** One symbol per cell, rows as strings (no row numbers). */
export function sokobanGrid(state: SokobanState): string[] {
  const { room } = state;
  const boxes = new Set(state.boxes);
  const lines: string[] = [];
  for (let r = 0; r < room.rows; r++) {
    let line = "";
    for (let c = 0; c < room.cols; c++) {
      const i = r * room.cols + c;
      const t = room.tiles[i];
      const s = SOKOBAN_SYMBOLS;
      if (t === WALL) line += s.wall;
      else if (boxes.has(i)) line += t === TARGET ? s.boxOnTarget : s.box;
      else if (i === state.player) line += t === TARGET ? s.playerOnTarget : s.player;
      else line += t === TARGET ? s.target : s.floor;
    }
    lines.push(line);
  }
  return lines;
}

/**
 * The `text_with_row_numbers` observation: one line per row, `"{i}:"` (0-based row index)
 * then `" " + symbol` for every cell.
 */
export function renderSokoban(state: SokobanState): string {
  return sokobanGrid(state)
    .map((line, i) => `${i}:${[...line].map((ch) => ` ${ch}`).join("")}`)
    .join("\n");
}

/**
 * Parses a board drawn with either the render symbols (`# _ O X √ P S`) or standard XSB
 * (`#`, space or `-` floor, `.` target, `$` box, `*` box on target, `@` player, `+` player on
 * target). Lines may carry a `"{i}:"` prefix and spaces between symbols when every symbol is
 * space-separated (the rendered form). Short lines are padded with wall.
 */
export function parseSokoban(text: string | readonly string[]): SokobanState {
  let lines = (typeof text === "string" ? text.split("\n") : [...text]).filter((l) => l.trim() !== "");
  if (lines.length === 0) throw new UsageError("empty sokoban board");
  const rendered = lines.every((l) => /^\s*\d+:/.test(l));
  if (rendered) lines = lines.map((l) => l.replace(/^\s*\d+:/, "").replace(/ (\S)/g, "$1"));
  const rows = lines.length;
  const cols = Math.max(...lines.map((l) => [...l].length));
  const tiles: Tile[] = [];
  const boxes: number[] = [];
  let player = -1;
  for (let r = 0; r < rows; r++) {
    const chars = [...lines[r]];
    for (let c = 0; c < cols; c++) {
      const ch = c < chars.length ? chars[c] : "#";
      const i = r * cols + c;
      let tile: Tile;
      switch (ch) {
        case "#":
          tile = WALL;
          break;
        case "_":
        case " ":
        case "-":
          tile = FLOOR;
          break;
        case "O":
        case ".":
          tile = TARGET;
          break;
        case "X":
        case "$":
          tile = FLOOR;
          boxes.push(i);
          break;
        case "√":
        case "*":
          tile = TARGET;
          boxes.push(i);
          break;
        case "P":
        case "@":
          tile = FLOOR;
          if (player >= 0) throw new UsageError("sokoban board has two players");
          player = i;
          break;
        case "S":
        case "+":
          tile = TARGET;
          if (player >= 0) throw new UsageError("sokoban board has two players");
          player = i;
          break;
        default:
          throw new UsageError(
            `unknown sokoban symbol "${ch}" at (${r}, ${c}); valid: # _ O X √ P S (or XSB # - . $ * @ +)`,
          );
      }
      tiles.push(tile);
    }
  }
  if (player < 0) throw new UsageError("sokoban board has no player");
  return makeState(makeRoom(rows, cols, tiles), player, boxes);
}
