import {
  cellDelta,
  isSolved,
  type SokobanMove,
  type SokobanState,
  stateUnchecked,
  TARGET,
  WALL,
} from "./level.js";
import { isDeadlocked } from "./solver.js";

/**
 * Sokoban dynamics with the gym-sokoban reward table, per primitive move:
 * −0.1 every move, +1 a box pushed onto a target, −1 a box pushed off a target, +10 when
 * the move leaves every box on a target. A move into a wall, or against a box that cannot
 * be pushed (wall or box behind it), costs −0.1 and changes nothing.
 *
 * Unlike the reference worker (mage-reference §10 item 7), a turn of several moves scores
 * the SUM of its moves, and moves after the episode ended (solved, or dead-locked when
 * `stopOnDeadlock`) are neither executed nor scored.
 */

export const SOKOBAN_REWARDS = {
  step: -0.1,
  boxOnTarget: 1,
  boxOffTarget: -1,
  solved: 10,
} as const;

export interface SokobanMoveResult {
  state: SokobanState;
  reward: number;
  /** The player moved (false for a bump into a wall or an unpushable box). */
  moved: boolean;
  /** A box was pushed. */
  pushed: boolean;
  solved: boolean;
}

/** One primitive move. On an already solved state it still applies (callers stop at solve). */
export function applySokobanMove(state: SokobanState, move: SokobanMove): SokobanMoveResult {
  const { room } = state;
  const d = cellDelta(move, room.cols);
  const np = state.player + d;
  let reward: number = SOKOBAN_REWARDS.step;
  if (room.tiles[np] === WALL) return { state, reward, moved: false, pushed: false, solved: isSolved(state) };
  const bi = state.boxes.indexOf(np);
  if (bi < 0) {
    return {
      state: stateUnchecked(room, np, state.boxes as number[]),
      reward,
      moved: true,
      pushed: false,
      solved: isSolved(state),
    };
  }
  const nb = np + d;
  if (room.tiles[nb] === WALL || state.boxes.includes(nb))
    return { state, reward, moved: false, pushed: false, solved: isSolved(state) };
  const boxes = state.boxes.slice();
  boxes[bi] = nb;
  boxes.sort((a, b) => a - b);
  const from = room.tiles[np] === TARGET;
  const to = room.tiles[nb] === TARGET;
  if (to && !from) reward += SOKOBAN_REWARDS.boxOnTarget;
  if (from && !to) reward += SOKOBAN_REWARDS.boxOffTarget;
  const next = stateUnchecked(room, np, boxes);
  const solved = isSolved(next);
  if (solved) reward += SOKOBAN_REWARDS.solved;
  return { state: next, reward, moved: true, pushed: true, solved };
}

export interface SokobanStepOptions {
  /** Stop executing a turn's moves once the state is dead-locked (default true). */
  stopOnDeadlock?: boolean;
}

export interface SokobanStepResult {
  state: SokobanState;
  /** Sum of the executed moves' rewards. */
  reward: number;
  solved: boolean;
  /** No solution exists from `state` (exhaustive check; false when unproven). */
  deadlocked: boolean;
  /** Moves executed and scored (bumps included; moves after the end excluded). */
  movesApplied: number;
}

/** Rounds away float noise from summing tenths (−0.1 × 3 = −0.3, not −0.30000000000000004). */
function tidy(x: number): number {
  return Math.round(x * 1e9) / 1e9;
}

/** A turn: moves in order, stopping at solve (and at dead lock unless disabled). */
export function stepMoves(
  state: SokobanState,
  moves: readonly SokobanMove[],
  options: SokobanStepOptions = {},
): SokobanStepResult {
  const stopOnDeadlock = options.stopOnDeadlock ?? true;
  let solved = isSolved(state);
  let deadlocked: boolean | undefined;
  let reward = 0;
  let applied = 0;
  for (const move of moves) {
    if (solved) break;
    if (stopOnDeadlock && deadlocked === undefined) deadlocked = isDeadlocked(state);
    if (stopOnDeadlock && deadlocked) break;
    const r = applySokobanMove(state, move);
    state = r.state;
    reward += r.reward;
    applied++;
    solved = r.solved;
    // Only a push can change solvability; keep the previous answer otherwise.
    if (r.pushed) deadlocked = undefined;
  }
  if (solved) deadlocked = false;
  else if (deadlocked === undefined) deadlocked = isDeadlocked(state);
  return { state, reward: tidy(reward), solved, deadlocked, movesApplied: applied };
}

/** A single move as a one-move turn. */
export function stepSokoban(
  state: SokobanState,
  move: SokobanMove,
  options: SokobanStepOptions = {},
): SokobanStepResult {
  return stepMoves(state, [move], options);
}
