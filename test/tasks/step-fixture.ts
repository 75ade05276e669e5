import type { StepResult } from "../../src/tasks/types.js";

/** A valid, unfinished step with no reward and no feedback; `extra` overrides any field. */
export function stepResult(action: string, observation: string, extra: Partial<StepResult> = {}): StepResult {
  return {
    reward: 0,
    done: false,
    won: false,
    draw: false,
    score: 0,
    valid: true,
    action,
    feedback: "",
    observation,
    compactFeedback: "",
    compactObservation: observation,
    ...extra,
  };
}
