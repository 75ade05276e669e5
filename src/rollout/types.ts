import type { ChatMessage } from "../policy/types.js";
import type { TrialMemory } from "../tasks/memory.js";

/** One trial to run: a task instance (seeded), an opponent and a seat, inside a rollout group. */
export interface TrialSpec {
  /** Unique within an iteration or evaluation: keys the sampling seeds of this trial. */
  trialId: number;
  /** Rollout group: trials that share task, opponent and seat. */
  groupId: number;
  /** Task instance key: every trial with the same taskSeed sees the identical task. */
  taskSeed: number;
  opponent: string | null;
  seat: "first" | "second" | null;
}

/** One policy call, as plain data (the unit of training). */
export interface Row {
  trialId: number;
  groupId: number;
  taskSeed: number;
  opponent: string;
  seat: string;
  phase: "play" | "reflect";
  /** 0-based attempt index. */
  attempt: number;
  /** 0-based policy call within the attempt's play phase (0 for reflect rows). */
  turn: number;
  prompt: ChatMessage[];
  response: string;
  responseTokenIds: number[];
  /** Behaviour log-prob of every response token under the sampling distribution used. */
  behaviourLogprobs: number[];
  promptTokens: number;
  finishReason: "stop" | "length";
  /** Environment reward of the call (reflect rows: 0). */
  reward: number;
  /** Play: a well-formed, legal action. Reflect: a valid remark (`judgeRemark`); invalid rows pay the invalid-answer penalty. */
  valid: boolean;
  invalidReason?: string;
  /** Reflect rows: whether the remark is informative by the task's rule (absent when the task has none). */
  informative?: boolean;
  /** Step-group anchor: the observation the call answered + the opponent. */
  anchor: string;
  done: boolean;
  won: boolean;
}

export interface AttemptSummary {
  won: boolean;
  draw: boolean;
  score: number;
  reward: number;
  turns: number;
  invalidActions: number;
  /** The attempt reached a terminal state (not cut off by max turns). */
  finished: boolean;
  /** Cut off by max turns and charged the task's forfeit (Kuhn: the agent's stake). */
  forfeited?: boolean;
}

export interface TrialRecord {
  trialId: number;
  groupId: number;
  taskSeed: number;
  task: string;
  opponent: string;
  seat: string;
  /** The task instance's category (`TaskInfo.category`: a served ALFWorld game's split and task type). */
  category?: string;
  attempts: AttemptSummary[];
  /** A backend failure stopped this trial; it was not played to the end and is no loss. */
  aborted: boolean;
  /** Why the trial stopped early other than by winning (e.g. its prompt outgrew the model's context). */
  stopReason?: string;
  memory: TrialMemory;
  rows: Row[];
}
