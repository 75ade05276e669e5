/**
 * Shared machinery of the two-player text tasks (TicTacToe, Kuhn): a `Game` + an opponent +
 * the agent's seat. The game and its opponent act on game states; subclasses only say how a
 * state reads as text, how a response parses to a move, and how outcomes are worded.
 *
 * Step semantics (reference §7.1/7.2): an invalid response (no tag, bad format, illegal move)
 * consumes the turn with reward 0, leaves the state unchanged and is flagged `valid: false`.
 * Otherwise the agent's move is applied, then the opponent moves until it is the agent's turn
 * again or the game is over. Rewards are paid only at the end: `rewardScale × agent return`.
 */

import type { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import { createOpponent } from "../opponents/registry.js";
import type { Opponent } from "../opponents/types.js";
import { invalidStep } from "./invalid.js";
import type { Parsed } from "./parse.js";
import type { Seat, StepResult, TaskInfo, TaskOptions, TaskPromptText, TextTask } from "./types.js";

/** A move of either player since the start of the attempt (or of the game, for the opening). */
export interface PlayedMove<M> {
  player: number;
  move: M;
}

/** The words of a finished game, from the agent's side. */
export interface EndText {
  feedback: string;
  compactFeedback: string;
  outcome: string;
  compactOutcome: string;
  hindsightObservation?: string;
  compactHindsight?: string;
}

export abstract class TwoPlayerTask<S, M> implements TextTask {
  readonly name: string;
  readonly opponent: string;
  readonly seat: Seat;
  /** The agent's player index in the game (0 when it moves first). */
  readonly agent: number;
  protected readonly game: Game<S, M>;
  protected readonly replay: boolean;
  private readonly makeOpponent: TaskOptions["makeOpponent"];
  private readonly startState: S | undefined;
  /** Reward per unit of the agent's game return (TicTacToe 10, Kuhn 5). */
  protected abstract readonly rewardScale: number;

  protected opp: Opponent<S, M> | undefined;
  protected state!: S;
  private initial!: S;
  /** Moves since the initial state of the game (including the opponent's opening). */
  protected moves: PlayedMove<M>[] = [];
  private initialMoves: PlayedMove<M>[] = [];
  private finished = false;

  constructor(name: string, game: Game<S, M>, defaultOpponent: string, options: TaskOptions = {}) {
    this.name = name;
    this.game = game;
    this.opponent = options.opponent ?? defaultOpponent;
    this.seat = options.seat ?? "first";
    this.agent = this.seat === "first" ? 0 : 1;
    this.replay = options.replayOpponent ?? false;
    this.makeOpponent = options.makeOpponent;
    this.startState = options.startState as S | undefined;
  }

  // ---- hooks -----------------------------------------------------------------------------

  /** Parses a response into a legal move at `state` (the agent is to move). */
  protected abstract parseMove(response: string, state: S): Parsed<M>;
  /** The agent's move as its history shows it. */
  protected abstract moveText(move: M): string;
  /** Full-style feedback after the agent's move `agentMove` and the opponent's replies (non-terminal). */
  protected abstract replyFeedback(replies: readonly M[]): { feedback: string; compactFeedback: string };
  /** Words for the end of the game; `replies` are the opponent's moves after the agent's last move. */
  protected abstract endText(state: S, replies: readonly M[]): EndText;
  protected abstract renderObservation(state: S): string;
  protected abstract renderCompactObservation(state: S): string;
  abstract promptText(): TaskPromptText;
  /** The agent's score at a terminal state (TicTacToe ±1/0, Kuhn chips). */
  protected agentReturn(state: S): number {
    return this.game.returns(state)[this.agent];
  }

  // ---- TextTask ----------------------------------------------------------------------------

  async reset(rng: Rng, opponentRng?: Rng): Promise<void> {
    const ctx = { rng: opponentRng ?? rng.derive("opponent"), replay: this.replay };
    this.opp = this.makeOpponent
      ? (this.makeOpponent(this.opponent, ctx) as Opponent<S, M>)
      : createOpponent<S, M>(this.name, this.opponent, ctx);
    let s = this.startState ?? this.game.initialState(rng.derive("game"));
    const moves: PlayedMove<M>[] = [];
    while (!this.game.isTerminal(s) && this.game.currentPlayer(s) !== this.agent) {
      const player = this.game.currentPlayer(s);
      const m = await this.opponentMove(s);
      s = this.game.apply(s, m);
      moves.push({ player, move: m });
    }
    this.initial = s;
    this.initialMoves = moves;
    this.restoreInitial();
  }

  /** How `response` reads as the agent's move at the current state, without playing it. */
  parseAnswer(response: string): Parsed<M> {
    if (!this.opp) throw new Error(`${this.name}: parseAnswer() before reset()`);
    return this.parseMove(String(response), this.state);
  }

  restart(): void {
    if (!this.opp) throw new Error(`${this.name}: restart() before reset()`);
    this.opp.restart();
    this.restoreInitial();
  }

  private restoreInitial(): void {
    this.state = this.initial;
    this.moves = [...this.initialMoves];
    this.finished = this.game.isTerminal(this.state);
  }

  get done(): boolean {
    return this.finished;
  }

  async step(response: string): Promise<StepResult> {
    if (!this.opp) throw new Error(`${this.name}: step() before reset()`);
    if (this.finished) throw new Error(`${this.name}: step() after the game is over`);
    const parsed = this.parseMove(String(response), this.state);
    if (!parsed.ok) return this.invalid(parsed.reason, response);
    const agentMove = parsed.move;
    // The step is played on copies and kept only when the opponent's replies all came: a reply
    // that fails (a served opponent over its time budget) leaves the task as it was.
    let state = this.game.apply(this.state, agentMove);
    const moves: PlayedMove<M>[] = [...this.moves, { player: this.agent, move: agentMove }];
    const replies: M[] = [];
    while (!this.game.isTerminal(state) && this.game.currentPlayer(state) !== this.agent) {
      const player = this.game.currentPlayer(state);
      const m = await this.opponentMove(state);
      state = this.game.apply(state, m);
      moves.push({ player, move: m });
      replies.push(m);
    }
    this.state = state;
    this.moves = moves;
    const base = {
      valid: true,
      action: this.moveText(agentMove),
      observation: this.renderObservation(this.state),
      compactObservation: this.renderCompactObservation(this.state),
    };
    if (this.game.isTerminal(this.state)) {
      this.finished = true;
      const score = this.agentReturn(this.state);
      const end = this.endText(this.state, replies);
      return {
        ...base,
        reward: this.rewardScale * score,
        done: true,
        won: score > 0,
        draw: score === 0,
        score,
        ...end,
      };
    }
    return {
      ...base,
      reward: 0,
      done: false,
      won: false,
      draw: false,
      score: 0,
      ...this.replyFeedback(replies),
    };
  }

  private invalid(reason: string, response: string): StepResult {
    return invalidStep(
      response,
      reason,
      0,
      this.renderObservation(this.state),
      this.renderCompactObservation(this.state),
    );
  }

  private async opponentMove(state: S): Promise<M> {
    const m = await this.opp!.act(state);
    const legal = this.game.legalMoves(state);
    if (!legal.some((x) => x === m)) {
      throw new Error(`${this.name} opponent "${this.opponent}" chose illegal move ${String(m)}`);
    }
    return m;
  }

  observation(): string {
    return this.renderObservation(this.state);
  }

  stateKey(): string {
    return JSON.stringify({ state: this.state, moves: this.moves });
  }

  legalActions(): string[] {
    if (this.finished) return [];
    return this.game.legalMoves(this.state).map((m) => this.moveText(m));
  }

  compactObservation(): string {
    return this.renderCompactObservation(this.state);
  }

  anchor(): string {
    return `${this.renderObservation(this.state)}\n[opponent: ${this.opponent}]`;
  }

  reflectionAnchor(): string {
    return `reflection\n[opponent: ${this.opponent}]`;
  }

  info(): TaskInfo {
    const score = this.finished ? this.agentReturn(this.state) : 0;
    return {
      task: this.name,
      won: this.finished && score > 0,
      draw: this.finished && score === 0,
      score,
      done: this.finished,
      opponent: this.opponent,
      seat: this.seat,
    };
  }
}
