/**
 * Sokoban as a text task (lamer-reference §5.1, mage-reference §7.3): push every box onto a
 * target on a generated 6×6 level, up to 3 moves per turn (`up, left, left`).
 *
 * Rewards come from the engine (gym-sokoban table per primitive move: −0.1 a move, +1 box on
 * target, −1 box off target, +10 solved; a turn scores the SUM of its executed moves, and moves
 * after the end are not executed — the engine's fix of reference defect §10.7).
 * An unreadable turn (no tag, unknown word, more than 3 moves) is a no-op costing −0.1, flagged
 * invalid. The attempt ends when the puzzle is solved (won), when it becomes unsolvable
 * (dead lock, lost), or after `maxSteps` primitive moves (reference 30).
 * Score: 1 when solved, else 0.
 */

import { UsageError } from "../core/errors.js";
import type { Rng } from "../core/rng.js";
import {
  boxesOnTargets,
  generateSokobanLevel,
  renderSokoban,
  SOKOBAN_REWARDS,
  type SokobanKnobs,
  type SokobanLevel,
  type SokobanState,
  sokobanGrid,
  stepMoves,
} from "../games/sokoban/index.js";
import { invalidStep } from "./invalid.js";
import { parseSokobanMoves } from "./parse.js";
import type { StepResult, TaskInfo, TaskPromptText, TextTask } from "./types.js";

export interface SokobanTaskOptions {
  /** Level generator knobs (default: 6×6, 2 boxes, solutions of 5..21 moves). */
  knobs?: Partial<SokobanKnobs>;
  /** Moves per turn (reference 3). */
  movesPerTurn?: number;
  /** Primitive moves per attempt before the attempt ends (reference gym `max_steps` 30). */
  maxSteps?: number;
}

export class SokobanTask implements TextTask {
  readonly name = "sokoban";
  readonly opponent = null;
  readonly seat = null;
  readonly movesPerTurn: number;
  readonly maxSteps: number;
  private readonly knobs: Partial<SokobanKnobs>;
  private level: SokobanLevel | undefined;
  private state!: SokobanState;
  private steps = 0;
  private finished = false;
  private solved = false;

  constructor(options: SokobanTaskOptions = {}) {
    this.knobs = options.knobs ?? {};
    this.movesPerTurn = options.movesPerTurn ?? 3;
    this.maxSteps = options.maxSteps ?? 30;
    if (!Number.isInteger(this.movesPerTurn) || this.movesPerTurn < 1) {
      throw new UsageError(`sokoban movesPerTurn must be a positive integer, got ${this.movesPerTurn}`);
    }
    if (!Number.isInteger(this.maxSteps) || this.maxSteps < 1) {
      throw new UsageError(`sokoban maxSteps must be a positive integer, got ${this.maxSteps}`);
    }
  }

  async reset(rng: Rng): Promise<void> {
    this.level = generateSokobanLevel(rng.derive("level"), this.knobs);
    this.restart();
  }

  restart(): void {
    if (!this.level) throw new Error("sokoban: restart() before reset()");
    this.state = this.level.initial;
    this.steps = 0;
    this.finished = false;
    this.solved = false;
  }

  get done(): boolean {
    return this.finished;
  }

  stateKey(): string {
    return JSON.stringify({ state: this.state, steps: this.steps });
  }

  /** The generated level (for logs and tests). */
  get currentLevel(): SokobanLevel | undefined {
    return this.level;
  }

  get currentState(): SokobanState {
    return this.state;
  }

  private boxesLine(state: SokobanState): string {
    return `${boxesOnTargets(state)} of ${state.boxes.length} boxes on targets`;
  }

  async step(response: string): Promise<StepResult> {
    if (!this.level) throw new Error("sokoban: step() before reset()");
    if (this.finished) throw new Error("sokoban: step() after the attempt is over");
    const parsed = parseSokobanMoves(String(response), this.movesPerTurn);
    if (!parsed.ok) {
      return invalidStep(
        response,
        parsed.reason,
        SOKOBAN_REWARDS.step,
        this.observation(),
        this.compactObservation(),
      );
    }
    const moves = parsed.move.slice(0, this.maxSteps - this.steps);
    const before = this.state;
    const r = stepMoves(this.state, moves);
    this.state = r.state;
    this.steps += r.movesApplied;
    this.solved = r.solved;
    const outOfSteps = !r.solved && !r.deadlocked && this.steps >= this.maxSteps;
    this.finished = r.solved || r.deadlocked || outOfSteps;
    const moved = before !== r.state;
    const feedback = r.solved
      ? "every box is on a target"
      : r.deadlocked
        ? "a box is stuck, so the puzzle can no longer be solved"
        : `${moved ? "" : "you could not move; "}${this.boxesLine(r.state)}`;
    const compactFeedback = r.solved
      ? "All boxes on targets."
      : r.deadlocked
        ? "A box is stuck."
        : `${moved ? "" : "Blocked. "}Boxes on targets: ${boxesOnTargets(r.state)}/${r.state.boxes.length}.`;
    const result: StepResult = {
      reward: r.reward,
      done: this.finished,
      won: r.solved,
      draw: false,
      score: r.solved ? 1 : 0,
      valid: true,
      action: parsed.move.join(", "),
      feedback,
      compactFeedback,
      observation: this.observation(),
      compactObservation: this.compactObservation(),
    };
    if (this.finished) {
      result.outcome = r.solved
        ? "You solved the puzzle."
        : r.deadlocked
          ? "You lost: a box got stuck where it can never reach a target."
          : `You ran out of moves (${this.maxSteps}) before solving the puzzle.`;
      result.compactOutcome = r.solved ? "Solved." : r.deadlocked ? "Stuck, lost." : "Out of moves.";
    }
    return result;
  }

  observation(): string {
    return renderSokoban(this.state);
  }

  compactObservation(): string {
    return sokobanGrid(this.state).join("\n");
  }

  anchor(): string {
    return this.observation();
  }

  reflectionAnchor(): string {
    return "reflection";
  }

  info(): TaskInfo {
    return {
      task: this.name,
      won: this.solved,
      draw: false,
      score: this.solved ? 1 : 0,
      done: this.finished,
      opponent: null,
      seat: null,
    };
  }

  promptText(): TaskPromptText {
    const k = this.movesPerTurn;
    return {
      rules: [
        "You are solving a Sokoban puzzle. You are the player in a small warehouse, and your goal is to push " +
          "every box onto a target.",
        "Symbols: # wall, _ floor, O target, X box, √ box on a target, P you, S you standing on a target. Each " +
          "line starts with its row number.",
        "You move up, down, left or right by one cell. Walking into a box pushes it one cell in the same " +
          "direction if the cell behind it is free; you cannot pull boxes, push two boxes at once, or walk " +
          "through walls. A box pushed into a corner, or along a wall with no target, may never reach a target " +
          "again, and then the puzzle is lost.",
        `Each turn you give up to ${k} moves, which are carried out in order.`,
      ].join("\n"),
      playInstruction:
        "Think step by step about which box goes to which target and in what order to push them, and check " +
        `that no push gets a box stuck. Then give your next 1 to ${k} moves, in order and separated by commas, ` +
        "from up, down, left, right inside <action> </action>, for example <action>up, left, left</action>.",
      compactRules:
        "Sokoban. # wall, _ floor, O target, X box, √ box on target, P you, S you on target. Push every box onto " +
        `a target; boxes cannot be pulled. Reply 1-${k} moves: <action>up, left</action> (up/down/left/right).`,
      compactAsk: "Your moves?",
      actionWord: "Moves",
    };
  }
}
