import { UsageError } from "../../core/errors.js";
import type { Rng } from "../../core/rng.js";
import {
  FLOOR,
  makeRoom,
  makeState,
  type SokobanMove,
  type SokobanRoom,
  type SokobanState,
  TARGET,
  type Tile,
  WALL,
} from "./level.js";
import { solve } from "./solver.js";

/**
 * Level generation by reverse playing, after gym-sokoban:
 * 1. room topology by a random walk that stamps one of five 3×3 masks at every step,
 *    changing direction with probability 0.35, for ⌊1.7·(rows+cols)⌋ steps; border = wall;
 * 2. player and boxes on distinct random floor cells; the box cells become the targets;
 * 3. reverse play from that solved position (player moves, optionally pulling the box
 *    behind it), depth-first up to `searchDepth` moves and 300,000 states, keeping the
 *    reachable position that maximises box swaps × total Manhattan displacement of each box
 *    from its own target, with every box off target;
 * 4. a short random walk of the player (no revisits, ≤ 3 steps);
 * 5. accept when the BFS shortest solution length is in [minSteps, maxSolSteps].
 * Attempt `a` draws everything from `rng.derive("level", a)`, so a level is a pure function
 * of (rng key, knobs). Deliberate differences from the reference: box swaps count changes
 * of the pulled box along the search path (the reference never updates its "last pulled
 * box" and so counts every pull), a player standing on a target is allowed, and running out
 * of attempts throws instead of keeping an out-of-window level.
 */

export interface SokobanKnobs {
  /** [rows, cols] including the wall border (default [6, 6]). */
  roomSize: readonly [number, number];
  numBoxes: number;
  /** Shortest solution must be at least this many moves (default 5). */
  minSteps: number;
  /** … and at most this many (default 21). */
  maxSolSteps: number;
  /** Reverse-play depth and BFS depth limit (default 100). */
  searchDepth: number;
  /** Derived seeds tried before giving up (default 100). */
  maxTries: number;
  /** Direction-change probability of the topology walk (default 0.35). */
  pChangeDirection: number;
  /** Topology walk length (default ⌊1.7·(rows+cols)⌋). */
  topologySteps?: number;
}

export const DEFAULT_SOKOBAN_KNOBS: Readonly<SokobanKnobs> = Object.freeze({
  roomSize: [6, 6] as const,
  numBoxes: 2,
  minSteps: 5,
  maxSolSteps: 21,
  searchDepth: 100,
  maxTries: 100,
  pChangeDirection: 0.35,
});

export interface SokobanLevel {
  readonly room: SokobanRoom;
  /** The start state; `restartSokoban(level)` returns exactly this object. */
  readonly initial: SokobanState;
  /** A shortest solution (BFS), within [minSteps, maxSolSteps]. */
  readonly solution: readonly SokobanMove[];
  /** Index of the derived seed that produced the level. */
  readonly attempt: number;
  readonly knobs: Readonly<SokobanKnobs>;
}

const REVERSE_PLAY_STATE_CAP = 300_000;

/** The five 3×3 stamps of the topology walk. */
const MASKS: readonly (readonly number[])[] = [
  [0, 0, 0, 1, 1, 1, 0, 0, 0],
  [0, 1, 0, 0, 1, 0, 0, 1, 0],
  [0, 0, 0, 1, 1, 0, 0, 1, 0],
  [0, 0, 0, 1, 1, 0, 1, 1, 0],
  [0, 0, 0, 0, 1, 1, 0, 1, 0],
];
const DIRECTIONS: readonly (readonly [number, number])[] = [
  [1, 0],
  [0, 1],
  [-1, 0],
  [0, -1],
];

export function resolveSokobanKnobs(partial: Partial<SokobanKnobs> = {}): SokobanKnobs {
  const k: SokobanKnobs = { ...DEFAULT_SOKOBAN_KNOBS, ...partial };
  const [rows, cols] = k.roomSize;
  const int = (name: string, v: number, min: number) => {
    if (!Number.isInteger(v) || v < min)
      throw new UsageError(`sokoban ${name} must be an integer ≥ ${min}, got ${v}`);
  };
  int("roomSize rows", rows, 3);
  int("roomSize cols", cols, 3);
  int("numBoxes", k.numBoxes, 1);
  int("minSteps", k.minSteps, 0);
  int("maxSolSteps", k.maxSolSteps, 1);
  int("searchDepth", k.searchDepth, 1);
  int("maxTries", k.maxTries, 1);
  if (k.topologySteps !== undefined) int("topologySteps", k.topologySteps, 1);
  if (k.minSteps > k.maxSolSteps)
    throw new UsageError(`sokoban minSteps (${k.minSteps}) must be ≤ maxSolSteps (${k.maxSolSteps})`);
  if (!(k.pChangeDirection >= 0 && k.pChangeDirection <= 1))
    throw new UsageError(`sokoban pChangeDirection must be in [0, 1], got ${k.pChangeDirection}`);
  if (k.numBoxes + 1 > (rows - 2) * (cols - 2))
    throw new UsageError(
      `sokoban numBoxes ${k.numBoxes} + player do not fit in a ${rows}×${cols} room (${(rows - 2) * (cols - 2)} inner cells)`,
    );
  return { ...k, roomSize: [rows, cols] };
}

/** Step 1: wall (0) / floor (1) grid from the masked random walk. */
export function roomTopology(rng: Rng, rows: number, cols: number, pChange: number, steps: number): Tile[] {
  const grid = new Array<number>(rows * cols).fill(0);
  let dir = rng.pick(DIRECTIONS);
  let r = rng.intBetween(1, rows - 2);
  let c = rng.intBetween(1, cols - 2);
  for (let s = 0; s < steps; s++) {
    if (rng.float() < pChange) dir = rng.pick(DIRECTIONS);
    r = Math.max(1, Math.min(rows - 2, r + dir[0]));
    c = Math.max(1, Math.min(cols - 2, c + dir[1]));
    const mask = rng.pick(MASKS);
    for (let i = 0; i < 3; i++)
      for (let j = 0; j < 3; j++) if (mask[i * 3 + j]) grid[(r - 1 + i) * cols + (c - 1 + j)] = 1;
  }
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < cols; j++)
      if (i === 0 || j === 0 || i === rows - 1 || j === cols - 1) grid[i * cols + j] = 0;
  return grid.map((v) => (v ? FLOOR : WALL));
}

interface ReverseResult {
  player: number;
  boxes: number[];
  score: number;
  displacement: number;
}

/**
 * Step 3: depth-first reverse play from the solved position. `boxes[i]` starts on target
 * `targets[i]`; the returned position is the best-scoring one with every box off target.
 */
export function reversePlay(room: SokobanRoom, player: number, searchDepth: number): ReverseResult {
  const { cols, tiles } = room;
  const targets = room.targets;
  const k = targets.length;
  const deltas = DIRECTIONS.map(([dr, dc]) => dr * cols + dc);
  const boxes = [...targets];
  const occ = new Uint8Array(room.rows * cols);
  for (const b of boxes) occ[b] = 1;
  const explored = new Set<number | string>();
  let best: ReverseResult = { player, boxes: [...boxes], score: -1, displacement: 0 };

  const n = room.rows * cols;
  const numeric = n ** (k + 1) <= Number.MAX_SAFE_INTEGER;
  const sorted = new Array<number>(k);
  const keyOf = (p: number): number | string => {
    for (let i = 0; i < k; i++) sorted[i] = boxes[i];
    sorted.sort((a, b) => a - b);
    if (!numeric) return `${p}|${sorted.join(",")}`;
    let key = 0;
    for (let i = k - 1; i >= 0; i--) key = key * n + sorted[i];
    return key * n + p;
  };
  const displacement = () => {
    let s = 0;
    for (let i = 0; i < k; i++) {
      const a = boxes[i];
      const t = targets[i];
      s += Math.abs(Math.floor(a / cols) - Math.floor(t / cols)) + Math.abs((a % cols) - (t % cols));
    }
    return s;
  };

  const dfs = (p: number, swaps: number, lastPulled: number, ttl: number): void => {
    if (ttl <= 0 || explored.size >= REVERSE_PLAY_STATE_CAP) return;
    const key = keyOf(p);
    if (explored.has(key)) return;
    explored.add(key);
    let allOff = true;
    for (const b of boxes) if (tiles[b] === TARGET) allOff = false;
    const disp = displacement();
    const score = allOff ? swaps * disp : 0;
    if (score > best.score) best = { player: p, boxes: [...boxes], score, displacement: disp };
    // Pull variants first (move away from an adjacent box, dragging it), then plain moves.
    for (let pull = 1; pull >= 0; pull--) {
      for (const d of deltas) {
        const np = p + d;
        if (tiles[np] === WALL || occ[np]) continue;
        const behind = p - d;
        const bi = pull ? boxes.indexOf(behind) : -1;
        if (pull && bi < 0) continue; // same successor as the plain move, explored below
        if (bi >= 0) {
          boxes[bi] = p;
          occ[behind] = 0;
          occ[p] = 1;
          dfs(np, swaps + (bi === lastPulled ? 0 : 1), bi, ttl - 1);
          occ[p] = 0;
          occ[behind] = 1;
          boxes[bi] = behind;
        } else {
          dfs(np, swaps, lastPulled, ttl - 1);
        }
      }
    }
  };
  dfs(player, 0, -1, searchDepth);
  return best;
}

/** Step 4: with probability 0.8 (total displacement 1) or 0.5, walk ≤ 3 fresh floor cells. */
function randomPlayerWalk(
  rng: Rng,
  room: SokobanRoom,
  player: number,
  boxes: readonly number[],
  disp: number,
): number {
  const p = disp === 1 ? 0.8 : 0.5;
  if (!(rng.float() < p)) return player;
  const deltas = DIRECTIONS.map(([dr, dc]) => dr * room.cols + dc);
  const visited = new Set<number>([player]);
  for (let step = 0; step < 3; step++) {
    const options = deltas
      .map((d) => player + d)
      .filter((c) => room.tiles[c] !== WALL && !boxes.includes(c) && !visited.has(c));
    if (options.length === 0) break;
    player = rng.pick(options);
    visited.add(player);
    if (!(rng.float() < 0.5)) break;
  }
  return player;
}

export type CandidateResult =
  | { ok: true; initial: SokobanState; solution: SokobanMove[] }
  | {
      ok: false;
      reason: "too-few-floor-cells" | "no-reverse-play" | "unsolved-within-depth" | "too-short" | "too-long";
    };

/** One generation attempt from its own stream (steps 1–5). */
export function generateCandidate(rng: Rng, knobs: SokobanKnobs): CandidateResult {
  const [rows, cols] = knobs.roomSize;
  const steps = knobs.topologySteps ?? Math.floor(1.7 * (rows + cols));
  const topo = roomTopology(rng, rows, cols, knobs.pChangeDirection, steps);
  const floor: number[] = [];
  for (let i = 0; i < topo.length; i++) if (topo[i] !== WALL) floor.push(i);
  if (floor.length <= knobs.numBoxes + 1) return { ok: false, reason: "too-few-floor-cells" };
  const player = floor.splice(rng.int(floor.length), 1)[0];
  const tiles = topo.slice();
  for (let b = 0; b < knobs.numBoxes; b++) tiles[floor.splice(rng.int(floor.length), 1)[0]] = TARGET;
  const room = makeRoom(rows, cols, tiles);
  const rev = reversePlay(room, player, knobs.searchDepth);
  if (rev.score <= 0) return { ok: false, reason: "no-reverse-play" };
  const start = randomPlayerWalk(rng, room, rev.player, rev.boxes, rev.displacement);
  const initial = makeState(room, start, rev.boxes);
  const res = solve(initial, { maxDepth: knobs.searchDepth });
  if (res.status !== "solved") return { ok: false, reason: "unsolved-within-depth" };
  if (res.moves.length < knobs.minSteps) return { ok: false, reason: "too-short" };
  if (res.moves.length > knobs.maxSolSteps) return { ok: false, reason: "too-long" };
  return { ok: true, initial, solution: res.moves };
}

/**
 * A level whose shortest solution length lies in [minSteps, maxSolSteps], from derived
 * streams `rng.derive("level", 0)`, `("level", 1)`, … Throws UsageError after `maxTries`.
 * `rng` is only used for its key (its position is not read or advanced).
 */
export function generateSokobanLevel(rng: Rng, partialKnobs: Partial<SokobanKnobs> = {}): SokobanLevel {
  const knobs = resolveSokobanKnobs(partialKnobs);
  const reasons: Record<string, number> = {};
  for (let attempt = 0; attempt < knobs.maxTries; attempt++) {
    const res = generateCandidate(rng.derive("level", attempt), knobs);
    if (res.ok) {
      return Object.freeze({
        room: res.initial.room,
        initial: res.initial,
        solution: Object.freeze(res.solution),
        attempt,
        knobs: Object.freeze({ ...knobs }),
      });
    }
    reasons[res.reason] = (reasons[res.reason] ?? 0) + 1;
  }
  const why = Object.entries(reasons)
    .map(([r, n]) => `${r} ×${n}`)
    .join(", ");
  throw new UsageError(
    `could not generate a sokoban level in maxTries=${knobs.maxTries} attempts (${why}) with ` +
      `roomSize=[${knobs.roomSize.join(", ")}], numBoxes=${knobs.numBoxes}, minSteps=${knobs.minSteps}, ` +
      `maxSolSteps=${knobs.maxSolSteps}, searchDepth=${knobs.searchDepth}; ` +
      "widen [minSteps, maxSolSteps], change roomSize/numBoxes, or raise maxTries",
  );
}

/** The start state of the level (restart an attempt exactly). */
export function restartSokoban(level: SokobanLevel): SokobanState {
  return level.initial;
}
