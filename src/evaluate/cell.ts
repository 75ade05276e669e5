/** One evaluation cell: an opponent and the agent's seat (null for puzzles). */
export interface EvalCell {
  opponent: string | null;
  seat: "first" | "second" | null;
  /** The opponent is outside the training pool. */
  unseen: boolean;
}
