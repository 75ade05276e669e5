import { table } from "./markdown.js";
import type { TargetLine } from "./targets.js";

/**
 * The summary at the top of the results document: one row per grid whose targets are computed,
 * with its verdict counts and its headline target (the first computed for it), linking down to
 * the grid's section.
 */

/** A grid the targets are computed from. */
export interface TargetSource {
  /** `TargetLine.game` of its targets. */
  key: string;
  /** The experiment's name, whose section is headed "Experiment `NAME`". */
  grid: string;
}

/** GitHub's anchor of a heading's text. */
function anchor(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

export function summarySection(
  lines: readonly TargetLine[],
  sources: readonly TargetSource[],
  gameTitle: (game: string) => string,
  out: string[],
): void {
  const rows = sources.flatMap(({ key, grid }) => {
    const mine = lines.filter((l) => l.game === key);
    if (mine.length === 0) return [];
    const count = (v: string) => mine.filter((l) => l.verdict === v).length;
    const aside = (["not run", "not judged"] as const)
      .filter((v) => count(v) > 0)
      .map((v) => `${count(v)} ${v}`);
    const head = mine[0];
    return [
      [
        `[\`${grid}\`](#${anchor(`Experiment ${grid}`)})`,
        gameTitle(key),
        `${count("met")} of ${mine.length}${aside.length > 0 ? ` (${aside.join(", ")})` : ""}`,
        head.target,
        head.measured,
        head.verdict === "met" || head.verdict === "missed" ? `**${head.verdict}**` : head.verdict,
      ],
    ];
  });
  if (rows.length === 0) return;
  out.push(
    "## Summary",
    "",
    "Per grid: how many of its targets are met (the [targets](#targets) table has them all) and its headline target, the first computed for it.",
    "",
    table(["grid", "game", "targets met", "headline target", "measured", "verdict"], rows),
    "",
  );
}
