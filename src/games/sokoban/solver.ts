import {
  cellDelta,
  isSolved,
  SOKOBAN_MOVES,
  type SokobanMove,
  type SokobanRoom,
  type SokobanState,
  TARGET,
  WALL,
} from "./level.js";

/**
 * Sokoban search: a breadth-first solver for shortest solutions in primitive moves, an
 * exhaustive push-level solvability check, and cheap dead-lock tests.
 *
 * Pruning used by both searches never discards a solvable state: a box pushed onto a dead
 * square (a non-target cell from which no push sequence reaches any target, even alone in
 * the room) or a 2×2 block made only of walls and boxes with a box off target.
 */

// ---- per-room caches (rooms are immutable, so these never go stale) ----

interface RoomCache {
  dead: Uint8Array;
  deltas: number[];
  /** Normalised (player region, boxes) key → solvable. Filled by `solvability`. */
  memo: Map<number | string, boolean>;
}

const caches = new WeakMap<SokobanRoom, RoomCache>();
const MEMO_LIMIT = 200_000;

function cacheOf(room: SokobanRoom): RoomCache {
  let c = caches.get(room);
  if (!c) {
    c = {
      dead: computeDeadSquares(room),
      deltas: SOKOBAN_MOVES.map((m) => cellDelta(m, room.cols)),
      memo: new Map(),
    };
    caches.set(room, c);
  }
  return c;
}

function computeDeadSquares(room: SokobanRoom): Uint8Array {
  const n = room.rows * room.cols;
  const deltas = SOKOBAN_MOVES.map((m) => cellDelta(m, room.cols));
  const live = new Uint8Array(n);
  const queue: number[] = [];
  for (const t of room.targets) {
    live[t] = 1;
    queue.push(t);
  }
  // A box at `from = cell + d` can be pushed onto `cell` by a player standing at `cell + 2d`.
  for (let h = 0; h < queue.length; h++) {
    const cell = queue[h];
    for (const d of deltas) {
      const from = cell + d;
      const stand = cell + 2 * d;
      if (live[from] || room.tiles[from] === WALL || room.tiles[stand] === WALL) continue;
      live[from] = 1;
      queue.push(from);
    }
  }
  const dead = new Uint8Array(n);
  for (let i = 0; i < n; i++) dead[i] = room.tiles[i] !== WALL && !live[i] ? 1 : 0;
  return dead;
}

/** Floor cells (never targets) from which a lone box can never be pushed onto any target. */
export function deadSquares(room: SokobanRoom): number[] {
  const dead = cacheOf(room).dead;
  const out: number[] = [];
  for (let i = 0; i < dead.length; i++) if (dead[i]) out.push(i);
  return out;
}

/** True when a box is off target in a corner (two orthogonal wall neighbours). */
export function hasCornerDeadlock(state: SokobanState): boolean {
  const { room } = state;
  const [up, down, left, right] = cacheOf(room).deltas;
  const w = (i: number) => room.tiles[i] === WALL;
  for (const b of state.boxes) {
    if (room.tiles[b] === TARGET) continue;
    if ((w(b + up) || w(b + down)) && (w(b + left) || w(b + right))) return true;
  }
  return false;
}

/**
 * 2×2 freeze test at the four squares containing `cell`: true when one of them is made only
 * of walls and boxes and holds a box off target (no box in it can ever move again).
 */
function frozenSquareAt(room: SokobanRoom, occ: Uint8Array, cell: number): boolean {
  const cols = room.cols;
  const tiles = room.tiles;
  for (const tl of [cell, cell - 1, cell - cols, cell - cols - 1]) {
    if (tl < 0) continue;
    let blocked = true;
    let offTarget = false;
    for (const c of [tl, tl + 1, tl + cols, tl + cols + 1]) {
      if (c >= tiles.length) {
        blocked = false;
        break;
      }
      if (tiles[c] === WALL) continue;
      if (!occ[c]) {
        blocked = false;
        break;
      }
      if (tiles[c] !== TARGET) offTarget = true;
    }
    if (blocked && offTarget) return true;
  }
  return false;
}

/**
 * Cheap, sound dead-lock tests (a `true` is always a real dead lock): a box off target on a
 * dead square (which covers non-target corners), or a frozen 2×2 block of walls and boxes
 * (e.g. two boxes side by side against a wall).
 */
export function hasSimpleDeadlock(state: SokobanState): boolean {
  const { room } = state;
  const { dead } = cacheOf(room);
  const occ = new Uint8Array(room.rows * room.cols);
  for (const b of state.boxes) occ[b] = 1;
  for (const b of state.boxes) {
    if (dead[b]) return true;
    if (frozenSquareAt(room, occ, b)) return true;
  }
  return false;
}

// ---- state keys ----

type Keyer = (player: number, boxes: ArrayLike<number>, offset: number) => number | string;

function makeKeyer(n: number, k: number): Keyer {
  if (n ** (k + 1) <= Number.MAX_SAFE_INTEGER) {
    return (player, boxes, offset) => {
      let key = 0;
      for (let i = k - 1; i >= 0; i--) key = key * n + boxes[offset + i];
      return key * n + player;
    };
  }
  return (player, boxes, offset) => {
    let s = String.fromCharCode(player);
    for (let i = 0; i < k; i++) s += String.fromCharCode(boxes[offset + i]);
    return s;
  };
}

/** Replaces `from` by `to` in the sorted boxes starting at `offset`, writing the result sorted into `out`. */
function movedBoxes(
  src: ArrayLike<number>,
  offset: number,
  k: number,
  from: number,
  to: number,
  out: number[],
): void {
  let j = 0;
  for (let i = 0; i < k; i++) {
    const b = src[offset + i];
    if (b !== from) out[j++] = b;
  }
  // insert `to` keeping ascending order
  let pos = k - 1;
  while (pos > 0 && out[pos - 1] > to) {
    out[pos] = out[pos - 1];
    pos--;
  }
  out[pos] = to;
}

// ---- breadth-first shortest solution ----

export interface SolveOptions {
  /** Longest solution considered, in primitive moves (default unlimited). */
  maxDepth?: number;
  /** Stop after storing this many states (default 1,000,000). */
  maxStates?: number;
}

export type SolveResult =
  | { status: "solved"; moves: SokobanMove[]; statesExplored: number }
  /** Proven: no solution exists at any length. */
  | { status: "unsolvable"; statesExplored: number }
  /** No solution within `maxDepth` or before `maxStates`; a longer one may exist. */
  | { status: "cutoff"; statesExplored: number };

/** Breadth-first search over (player, boxes) with primitive moves: a shortest solution. */
export function solve(state: SokobanState, options: SolveOptions = {}): SolveResult {
  const maxDepth = options.maxDepth ?? Number.POSITIVE_INFINITY;
  const maxStates = options.maxStates ?? 1_000_000;
  if (isSolved(state)) return { status: "solved", moves: [], statesExplored: 1 };
  if (hasSimpleDeadlock(state)) return { status: "unsolvable", statesExplored: 1 };
  const { room } = state;
  const n = room.rows * room.cols;
  const k = state.boxes.length;
  const { dead, deltas } = cacheOf(room);
  const tiles = room.tiles;
  const keyer = makeKeyer(n, k);

  const players: number[] = [state.player];
  const boxStore: number[] = [...state.boxes];
  const parent: number[] = [-1];
  const moveOf: number[] = [-1];
  const depth: number[] = [0];
  const seen = new Map<number | string, number>();
  seen.set(keyer(state.player, boxStore, 0), 0);
  const occ = new Uint8Array(n);
  const next: number[] = new Array(k).fill(0);
  let cutoff = false;

  const finish = (idx: number): SolveResult => {
    const moves: SokobanMove[] = [];
    for (let i = idx; parent[i] >= 0; i = parent[i]) moves.push(SOKOBAN_MOVES[moveOf[i]]);
    moves.reverse();
    return { status: "solved", moves, statesExplored: players.length };
  };

  for (let head = 0; head < players.length; head++) {
    if (depth[head] >= maxDepth) {
      cutoff = true;
      break;
    }
    const p = players[head];
    const base = head * k;
    for (let i = 0; i < k; i++) occ[boxStore[base + i]] = 1;
    for (let m = 0; m < 4; m++) {
      const d = deltas[m];
      const np = p + d;
      if (tiles[np] === WALL) continue;
      let key: number | string;
      let pushed = false;
      if (occ[np]) {
        const nb = np + d;
        if (tiles[nb] === WALL || occ[nb] || dead[nb]) continue;
        movedBoxes(boxStore, base, k, np, nb, next);
        occ[np] = 0;
        occ[nb] = 1;
        const frozen = frozenSquareAt(room, occ, nb);
        occ[nb] = 0;
        occ[np] = 1;
        if (frozen) continue;
        key = keyer(np, next, 0);
        pushed = true;
      } else {
        key = keyer(np, boxStore, base);
      }
      if (seen.has(key)) continue;
      const idx = players.length;
      seen.set(key, idx);
      players.push(np);
      parent.push(head);
      moveOf.push(m);
      depth.push(depth[head] + 1);
      if (pushed) {
        let onTarget = 0;
        for (let i = 0; i < k; i++) {
          boxStore.push(next[i]);
          if (tiles[next[i]] === TARGET) onTarget++;
        }
        if (onTarget === k) return finish(idx);
      } else {
        for (let i = 0; i < k; i++) boxStore.push(boxStore[base + i]);
      }
      if (players.length >= maxStates) cutoff = true;
    }
    for (let i = 0; i < k; i++) occ[boxStore[base + i]] = 0;
    if (cutoff) break;
  }
  return cutoff
    ? { status: "cutoff", statesExplored: players.length }
    : { status: "unsolvable", statesExplored: players.length };
}

// ---- exhaustive push-level solvability ----

export interface SolvabilityOptions {
  /** Give up (answer "unknown") after this many push-level states (default 500,000). */
  maxStates?: number;
}

export type Solvability = "solvable" | "unsolvable" | "unknown";

/** Smallest cell reachable by the player (the region's canonical id); fills `region`. */
function playerRegion(
  tiles: readonly number[],
  deltas: readonly number[],
  occ: Uint8Array,
  start: number,
  region: Uint8Array,
  stack: number[],
): number {
  region.fill(0);
  region[start] = 1;
  stack.length = 0;
  stack.push(start);
  let min = start;
  while (stack.length > 0) {
    const c = stack.pop()!;
    if (c < min) min = c;
    for (const d of deltas) {
      const nc = c + d;
      if (region[nc] || tiles[nc] === WALL || occ[nc]) continue;
      region[nc] = 1;
      stack.push(nc);
    }
  }
  return min;
}

/**
 * Whether any solution exists (any length), by depth-first search over pushes with the
 * player normalised to its reachable region. Results are memoised per room; a proven
 * dead end marks every state it explored as unsolvable.
 */
export function solvability(state: SokobanState, options: SolvabilityOptions = {}): Solvability {
  const maxStates = options.maxStates ?? 500_000;
  if (isSolved(state)) return "solvable";
  if (hasSimpleDeadlock(state)) return "unsolvable";
  const { room } = state;
  const n = room.rows * room.cols;
  const k = state.boxes.length;
  const cache = cacheOf(room);
  const { dead, deltas, memo } = cache;
  const tiles = room.tiles;
  const keyer = makeKeyer(n, k);
  const occ = new Uint8Array(n);
  const region = new Uint8Array(n);
  const scratch: number[] = [];
  const keyOcc = new Uint8Array(n);
  const keyRegion = new Uint8Array(n);

  const normKey = (player: number, boxes: ArrayLike<number>, offset: number): number | string => {
    for (let i = 0; i < k; i++) keyOcc[boxes[offset + i]] = 1;
    const min = playerRegion(tiles, deltas, keyOcc, player, keyRegion, scratch);
    for (let i = 0; i < k; i++) keyOcc[boxes[offset + i]] = 0;
    return keyer(min, boxes, offset);
  };

  const startKey = normKey(state.player, state.boxes, 0);
  const known = memo.get(startKey);
  if (known !== undefined) return known ? "solvable" : "unsolvable";

  const seen = new Set<number | string>([startKey]);
  const stackPlayer: number[] = [state.player];
  const stackBoxes: number[] = [...state.boxes];
  const next: number[] = new Array(k).fill(0);
  let found = false;
  let gaveUp = false;

  outer: while (stackPlayer.length > 0) {
    const p = stackPlayer.pop()!;
    const base = stackBoxes.length - k;
    const boxes = stackBoxes.slice(base);
    stackBoxes.length = base;
    for (let i = 0; i < k; i++) occ[boxes[i]] = 1;
    playerRegion(tiles, deltas, occ, p, region, scratch);
    for (let bi = 0; bi < k; bi++) {
      const b = boxes[bi];
      for (const d of deltas) {
        const nb = b + d;
        if (!region[b - d] || tiles[nb] === WALL || occ[nb] || dead[nb]) continue;
        occ[b] = 0;
        occ[nb] = 1;
        const frozen = frozenSquareAt(room, occ, nb);
        occ[nb] = 0;
        occ[b] = 1;
        if (frozen) continue;
        movedBoxes(boxes, 0, k, b, nb, next);
        let onTarget = 0;
        for (let i = 0; i < k; i++) if (tiles[next[i]] === TARGET) onTarget++;
        if (onTarget === k) {
          found = true;
          for (let i = 0; i < k; i++) occ[boxes[i]] = 0;
          break outer;
        }
        const key = normKey(b, next, 0);
        if (seen.has(key)) continue;
        const m = memo.get(key);
        if (m === false) continue;
        if (m === true) {
          found = true;
          for (let i = 0; i < k; i++) occ[boxes[i]] = 0;
          break outer;
        }
        seen.add(key);
        if (seen.size > maxStates) {
          gaveUp = true;
          for (let i = 0; i < k; i++) occ[boxes[i]] = 0;
          break outer;
        }
        stackPlayer.push(b);
        for (let i = 0; i < k; i++) stackBoxes.push(next[i]);
      }
    }
    for (let i = 0; i < k; i++) occ[boxes[i]] = 0;
  }

  if (memo.size + seen.size > MEMO_LIMIT) memo.clear();
  if (found) {
    memo.set(startKey, true);
    return "solvable";
  }
  if (gaveUp) return "unknown";
  for (const key of seen) memo.set(key, false);
  return "unsolvable";
}

/**
 * A state from which no solution exists. Cheap tests first, then the exhaustive search;
 * when the search hits its state cap the answer is `false` (not proven).
 */
export function isDeadlocked(state: SokobanState, options: SolvabilityOptions = {}): boolean {
  return solvability(state, options) === "unsolvable";
}
