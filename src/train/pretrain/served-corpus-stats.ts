/** What a served corpus holds for teaching the reflection (`CorpusStats.served`). */
export interface ServedCorpusStats {
  /** The setting, and the trials it made explorer trials. */
  failedShare: number;
  explorerTrials: number;
  /** Explorer trials whose attempt 1 was lost (all of them unless the expert is not deterministic). */
  explorerLost: number;
  /** Trials with a failed attempt and its reflection, and their share of the trials. */
  failedTrials: number;
  failedTrialShare: number;
  /** Trials whose attempt 1 was lost, and those of them won at attempt 2. */
  lostFirst: number;
  wonSecondAfterLostFirst: number;
  /** The explorers' stuck answers (commands not accepted there; unscored, counted in `malformed`). */
  stuckAnswers: number;
  /** The ε-random moves the game accepted, and whether they are SFT targets (else unscored detours). */
  randomMoves?: number;
  randomMovesScored?: boolean;
  /**
   * The expert's answers beside which it named answers a waste (`avoid` in its reply), and how many
   * it named in all: what a warm start's unlikelihood term can push down. 0 and 0 for an expert
   * that names none.
   */
  wasted?: { answers: number; named: number };
  /** Well-formed accepted play answers (the SFT's action targets) and reflections per one of them. */
  actionAnswers: number;
  remarkToAction: number;
  /** Reflection answers' tokens by `estimateTokens` (tags included) against the cap. */
  remarkTokens: { estimate: "conservative"; cap: number; mean: number; max: number; overCap: number };
  /**
   * The same measured in the model's chat template (each reflection's assistant span, its
   * end-of-turn token included); set once a warm start renders the corpus.
   */
  templateRemarkTokens?: { mean: number; max: number; overCap: number };
}
