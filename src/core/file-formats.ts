/**
 * The format tags of the JSON files one command writes and another reads, kept in one place so
 * that writer and reader cannot drift apart.
 */

/** `experiment.json` of a grid (`mage experiment`, read by `mage report`). */
export const EXPERIMENT_FORMAT = "mage-experiment-v1";

/** A diversity measurement (`mage diversity`, read by `mage report`). */
export const DIVERSITY_FORMAT = "mage-diversity-v1";

/** A Kuhn exploitability measurement (`mage exploitability --out`, read by `mage report`). */
export const EXPLOITABILITY_FORMAT = "mage-exploitability-v1";
