/**
 * The exact figures of a Kuhn poker strategy played by both seats (a table of P(BET) at the 12
 * information sets): value, best responses, NashConv and exploitability (`best-response.ts`), and
 * the expected chips against the `cfr` evaluation opponent in each seat; and their text table.
 */
import { CARD_LETTERS, KUHN_INFOSETS, type KuhnInfoSet } from "../games/kuhn.js";
import { evaluateProfile, expectedValue, type KuhnProfileReport } from "../opponents/kuhn/best-response.js";
import { kuhnPolicyFromSpec } from "../opponents/kuhn/index.js";
import type { KuhnPolicy } from "../opponents/kuhn/policies.js";
import type { KuhnInfosetEstimate } from "./kuhn-model-policy.js";

/** The unseen evaluation opponent the figures are measured against. */
export const KUHN_REFERENCE_OPPONENT = "cfr";

export interface KuhnProfileFigures extends KuhnProfileReport {
  /** P(BET) (bet or call) at each information set. */
  pBet: Record<KuhnInfoSet, number>;
  /** Expected chips per hand against the reference opponent, sitting first (player 0) and second. */
  vsOpponent: { opponent: string; first: number; second: number };
}

export function kuhnProfileFigures(
  profile: KuhnPolicy,
  opponent: string = KUHN_REFERENCE_OPPONENT,
): KuhnProfileFigures {
  const other = kuhnPolicyFromSpec(opponent);
  const pBet = {} as Record<KuhnInfoSet, number>;
  for (const s of KUHN_INFOSETS) pBet[s] = profile[s];
  return {
    ...evaluateProfile(profile),
    pBet,
    vsOpponent: { opponent, first: expectedValue(profile, other), second: -expectedValue(other, profile) },
  };
}

/** Who acts at an information set and what they face, in words ("Q, checked, faces a bet"). */
export function describeInfoset(infoset: KuhnInfoSet): { player: 0 | 1; card: string; situation: string } {
  const card = CARD_LETTERS[Number(infoset[0])];
  const history = infoset.slice(1);
  const situation =
    history === ""
      ? "opens"
      : history === "pb"
        ? "checked, faces a bet"
        : history === "p"
          ? "after a check"
          : "faces a bet";
  return { player: history.length % 2 === 0 ? 0 : 1, card, situation };
}

const f6 = (x: number) => x.toFixed(6);
const signed = (x: number) => `${x >= 0 ? "+" : ""}${x.toFixed(4)}`;
const percent = (x: number) => `${(100 * x).toFixed(1)}%`;

/** The table of P(bet/call) per information set; with estimates, their counts and invalid rates too. */
export function formatKuhnProfileTable(
  figures: KuhnProfileFigures,
  estimates?: readonly KuhnInfosetEstimate[],
): string {
  const head = ["infoset", "player", "card", "situation", "P(bet/call)"];
  if (estimates) head.push("bet", "pass", "forfeit", "answers", "invalid", "prefix");
  const rows = KUHN_INFOSETS.map((s) => {
    const d = describeInfoset(s);
    const row = [s, String(d.player), d.card, d.situation, figures.pBet[s].toFixed(3)];
    const e = estimates?.find((x) => x.infoset === s);
    if (e)
      row.push(
        String(e.bet),
        String(e.pass),
        String(e.forfeit),
        String(e.answers),
        percent(e.invalidRate),
        e.prefix,
      );
    return row;
  });
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows]
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/** The summary lines: value, best responses, NashConv, exploitability, chips against the opponent. */
export function formatKuhnProfileSummary(figures: KuhnProfileFigures): string {
  const v = figures.vsOpponent;
  return [
    `player 0 value: ${f6(figures.value0)} chips/game (player 1: ${f6(figures.value1)}; equilibrium value -1/18 = ${f6(-1 / 18)})`,
    `best-response values: player 0 ${f6(figures.bestResponseValues[0])}, player 1 ${f6(figures.bestResponseValues[1])}`,
    `NashConv: ${f6(figures.nashConv)}`,
    `exploitability: ${f6(figures.exploitability)} (= NashConv / 2)`,
    `vs ${v.opponent}: ${signed(v.first)} chips/hand sitting first, ${signed(v.second)} sitting second (exact)`,
  ].join("\n");
}
