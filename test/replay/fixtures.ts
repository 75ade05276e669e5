/**
 * Trial records as the trainer logs them (transcripts.jsonl): a TicTacToe trial with its memory,
 * one invalid answer and one finishing move per attempt, and a reflection between attempts.
 * Not a test file itself.
 */
const turn = (o: Partial<Record<string, unknown>>) => ({
  reward: 0,
  done: false,
  won: false,
  draw: false,
  score: 0,
  valid: true,
  action: "(1, 1)",
  feedback: "the opponent played (2, 2)",
  observation: "X . .\n. O .\n. . .",
  compactObservation: "X 12 13\n21 O 23\n31 32 33",
  compactFeedback: "Opp: (2, 2).",
  response: "<action>(1, 1)</action>",
  ...o,
});

export function trial(
  id: number,
  outcomes: ("won" | "lost")[],
  opponent = "mcts:100",
): Record<string, unknown> {
  return {
    iteration: 3,
    trialId: id,
    opponent,
    seat: "first",
    attempts: outcomes.map((w) => ({
      won: w === "won",
      draw: false,
      score: w === "won" ? 1 : -1,
      reward: w === "won" ? 10 : -10,
      turns: 2,
      invalidActions: 1,
      finished: true,
    })),
    memory: {
      task: "tictactoe",
      opponent,
      seat: "first",
      attempts: outcomes.map((w, index) => ({
        index,
        initialObservation: ". . .\n. . .\n. . .",
        compactInitialObservation: "11 12 13\n21 22 23\n31 32 33",
        turns: [
          turn({
            valid: false,
            action: "",
            invalidReason: "cell (9, 9) is off the board",
            response: "<action>(9, 9)</action>",
          }),
          turn({ done: true, won: w === "won", outcome: w === "won" ? "You won." : "You lost." }),
        ],
        ...(index < outcomes.length - 1
          ? { reflection: { valid: true, text: `attempt ${index + 1}: block the diagonal`, response: "" } }
          : {}),
      })),
    },
  };
}
