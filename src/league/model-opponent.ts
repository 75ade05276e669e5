/**
 * A language model as an opponent in a two-player game (a league snapshot, or a checkpoint in
 * `mage league`). At each of its moves it sees the position as the agent would from its seat:
 * a task of the same game stands at the state with the model in the seat to move, and the model
 * answers that task's attempt-1 play prompt (rules + the position, which lists every move so
 * far). Its earlier answers are not in the prompt: each move is asked as a first turn, which the
 * Markov positions of TicTacToe and Kuhn poker (the board, the betting so far) allow.
 *
 * An answer that does not parse as a legal move is replaced by a uniformly random legal move
 * (counted in `stats.invalid`). Every request's seed and every fallback draw comes from the
 * opponent's generator, with the usual restart semantics (`replay` rewinds it per attempt).
 */
import { Rng } from "../core/rng.js";
import type { Game } from "../games/types.js";
import { OpponentRng } from "../opponents/random.js";
import type { Opponent } from "../opponents/types.js";
import type { Policy, SamplingParams } from "../policy/types.js";
import { TrialEnv } from "../tasks/env.js";
import type { TaskDefinition } from "../tasks/registry.js";
import { TwoPlayerTask } from "../tasks/two-player.js";
import type { PromptStyle, Seat, TaskOptions } from "../tasks/types.js";

/** A model that plays: what samples it, and how it is prompted. */
export interface ModelPlayer {
  policy: Policy;
  promptStyle: PromptStyle;
  /** Sampling of its answers (maxTokens included). */
  sampling: SamplingParams;
  /** The task options it was trained with besides opponent and seat (TicTacToe's cell format). */
  taskOptions: Pick<TaskOptions, "knobs">;
}

export interface ModelMoveStats {
  moves: number;
  /** Answers that did not parse as a legal move (replaced by a random legal move). */
  invalid: number;
}

/** The opponent a position's view task holds: never asked, since the viewer is to move. */
const NO_REPLY: Opponent<unknown, unknown> = {
  name: "view",
  act() {
    throw new Error("a model opponent's view of the position never asks its own opponent");
  },
  restart() {},
};

/** A task of `def`'s game standing at `state`, the model in `seat` (the seat to move). */
export function viewTask(
  def: TaskDefinition,
  player: ModelPlayer,
  state: unknown,
  seat: Seat,
): TwoPlayerTask<unknown, unknown> {
  const task = def.create({
    ...player.taskOptions,
    seat,
    opponent: "view",
    startState: state,
    makeOpponent: () => NO_REPLY,
  });
  if (!(task instanceof TwoPlayerTask))
    throw new Error(`a model plays as an opponent only in two-player games, not ${def.name}`);
  return task;
}

export class ModelOpponent<S, M> implements Opponent<S, M> {
  private readonly stream: OpponentRng;

  constructor(
    readonly name: string,
    private readonly game: Game<S, M>,
    private readonly def: TaskDefinition,
    private readonly player: ModelPlayer,
    rng: Rng,
    replay: boolean,
    readonly stats: ModelMoveStats = { moves: 0, invalid: 0 },
  ) {
    this.stream = new OpponentRng(rng, replay);
  }

  async act(state: S): Promise<M> {
    const seat: Seat = this.game.currentPlayer(state) === 0 ? "first" : "second";
    const task = viewTask(this.def, this.player, state, seat);
    const env = new TrialEnv(task, { style: this.player.promptStyle, reflectionType: "reflection_only" });
    // The view starts at `state`: nothing is dealt and nobody else moves, so the generator is unused.
    await env.reset(Rng.seeded("model-opponent-view"));
    const seed = this.stream.rng.nextU32();
    const [gen] = await this.player.policy.generate([
      { messages: env.messages("play"), sampling: this.player.sampling, seed },
    ]);
    this.stats.moves += 1;
    const parsed = task.parseAnswer(gen.text);
    if (parsed.ok) return parsed.move as M;
    this.stats.invalid += 1;
    const legal = this.game.legalMoves(state);
    return legal[this.stream.rng.int(legal.length)];
  }

  restart(): void {
    this.stream.restart();
  }
}
