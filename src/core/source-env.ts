/**
 * Set by `mage experiment` for the runs it spawns: the commit and dirty state of the source when
 * the grid started. A long grid runs from one build while the checkout moves on, so the checkout's
 * HEAD at a run's start would name code that did not make it. Run summaries and checkpoints both
 * record the commit from here when it is set.
 */
export const SOURCE_COMMIT_ENV = "MAGE_SOURCE_COMMIT";
export const SOURCE_DIRTY_ENV = "MAGE_SOURCE_DIRTY";
