import type { StepResult, TaskPromptText, TextTask } from "../../src/tasks/types.js";

/** A one-turn task: answering with a single ASCII character wins (+10), anything else loses (−10). */
export class AsciiTask implements TextTask {
  readonly name = "ascii";
  readonly opponent = null;
  readonly seat = null;
  done = false;
  async reset(): Promise<void> {
    this.done = false;
  }
  restart(): void {
    this.done = false;
  }
  async step(response: string): Promise<StepResult> {
    const won = response.length === 1 && response.charCodeAt(0) < 128;
    this.done = true;
    const base = {
      action: response,
      feedback: "",
      observation: "",
      compactFeedback: "",
      compactObservation: "",
    };
    return {
      ...base,
      reward: won ? 10 : -10,
      done: true,
      won,
      draw: false,
      score: won ? 1 : -1,
      valid: true,
    };
  }
  observation(): string {
    return "Say one character.";
  }
  compactObservation(): string {
    return "Say one character.";
  }
  anchor(): string {
    return "start";
  }
  reflectionAnchor(): string {
    return "reflection";
  }
  info() {
    return { task: "ascii", won: false, draw: false, score: 0, done: this.done, opponent: null, seat: null };
  }
  promptText(): TaskPromptText {
    return { rules: "r", playInstruction: "p", compactRules: "Game.", compactAsk: "Go.", actionWord: "Move" };
  }
}
