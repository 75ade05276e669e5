import { actionContent } from "./parse.js";
import type { StepResult } from "./types.js";

/**
 * The step result of an answer that held no well-formed, legal action: flagged invalid with the
 * reason, the state unchanged, `reward` as the task's rules say (0, −0.1, −1 …). The history shows
 * what the tag held (whitespace collapsed, at most 60 characters).
 */
export function invalidStep(
  response: string,
  reason: string,
  reward: number,
  observation: string,
  compactObservation: string,
): StepResult {
  const content = actionContent(String(response));
  const shown = content.ok ? content.move.replace(/\s+/g, " ") : "";
  return {
    reward,
    done: false,
    won: false,
    draw: false,
    score: 0,
    valid: false,
    invalidReason: reason,
    action: shown.length <= 60 ? shown : `${shown.slice(0, 59)}…`,
    feedback: `invalid: ${reason}`,
    compactFeedback: `Invalid: ${reason}.`,
    observation,
    compactObservation,
  };
}
