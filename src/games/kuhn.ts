import type { Rng } from "../core/rng.js";
import type { Game } from "./types.js";

/**
 * Two-player Kuhn poker with OpenSpiel's conventions (`kuhn_poker`): cards 0 = Jack,
 * 1 = Queen, 2 = King; both players ante 1; moves 0 = PASS (check / fold) and 1 = BET
 * (bet / call); player 0 acts first. The deal is the only chance event and happens in
 * `initialState`, one of the 6 ordered deals with equal probability.
 *
 * Terminal histories (p = PASS, b = BET) and player 0's chips:
 *   pp  showdown, pot 2 → ±1        bp  player 1 folds → +1        bb  showdown, pot 4 → ±2
 *   pbp player 0 folds → −1         pbb showdown, pot 4 → ±2
 * (the winner gets pot − own bet, the loser loses its own bet).
 */

export type KuhnCard = 0 | 1 | 2;
export type KuhnMove = 0 | 1;

export const PASS: KuhnMove = 0;
export const BET: KuhnMove = 1;

export const CARD_NAMES = ["Jack", "Queen", "King"] as const;
export const CARD_LETTERS = ["J", "Q", "K"] as const;
export const MOVE_NAMES = ["PASS", "BET"] as const;

export interface KuhnState {
  /** cards[p] is player p's private card. */
  readonly cards: readonly [KuhnCard, KuhnCard];
  /** Moves made so far, in order (player 0 moves at even positions). */
  readonly moves: readonly KuhnMove[];
}

/** The 6 ordered deals [card of player 0, card of player 1], in OpenSpiel's chance order. */
export const KUHN_DEALS: readonly (readonly [KuhnCard, KuhnCard])[] = [
  [0, 1],
  [0, 2],
  [1, 0],
  [1, 2],
  [2, 0],
  [2, 1],
];

/**
 * The 12 information states in a fixed order (index = position): player 0's six
 * ("0","1","2","0pb","1pb","2pb") then player 1's six ("0p","0b","1p","1b","2p","2b").
 */
export const KUHN_INFOSETS = [
  "0",
  "1",
  "2",
  "0pb",
  "1pb",
  "2pb",
  "0p",
  "0b",
  "1p",
  "1b",
  "2p",
  "2b",
] as const;
export type KuhnInfoSet = (typeof KUHN_INFOSETS)[number];

const TERMINAL_HISTORIES = new Set(["pp", "bp", "bb", "pbp", "pbb"]);

function isCard(c: unknown): c is KuhnCard {
  return c === 0 || c === 1 || c === 2;
}

/** A state right after the deal (player 0 to act). Throws unless the cards are two distinct cards 0..2. */
export function dealState(cards: readonly [number, number]): KuhnState {
  const [a, b] = cards;
  if (!isCard(a) || !isCard(b) || a === b) {
    throw new RangeError(`kuhn: a deal is two different cards in 0..2, got [${a}, ${b}]`);
  }
  return Object.freeze({ cards: Object.freeze([a, b] as [KuhnCard, KuhnCard]), moves: Object.freeze([]) });
}

/** The betting history as OpenSpiel writes it: one letter per move, `p` (PASS) or `b` (BET). */
export function historyString(state: KuhnState): string {
  let s = "";
  for (const m of state.moves) s += m === BET ? "b" : "p";
  return s;
}

export function isTerminalHistory(history: string): boolean {
  return TERMINAL_HISTORIES.has(history);
}

/** OpenSpiel's information-state string: the player's card digit followed by the history (e.g. "1pb"). */
export function infoStateString(state: KuhnState, player: number): string {
  if (player !== 0 && player !== 1) throw new RangeError(`kuhn: player must be 0 or 1, got ${player}`);
  return `${state.cards[player]}${historyString(state)}`;
}

/** Index of an information-state string in `KUHN_INFOSETS`, or -1 when it is not a decision point. */
export function infoSetIndex(infoSet: string): number {
  return (KUHN_INFOSETS as readonly string[]).indexOf(infoSet);
}

/** Whether the game ended at a showdown (pp, bb, pbb) rather than by a fold. */
export function isShowdown(state: KuhnState): boolean {
  const h = historyString(state);
  return h === "pp" || h === "bb" || h === "pbb";
}

/** The player who folded (−1 if nobody folded, including before the end). */
export function folder(state: KuhnState): number {
  const h = historyString(state);
  if (h === "bp") return 1;
  if (h === "pbp") return 0;
  return -1;
}

/**
 * What each player sees of the other player's card: at a showdown both cards are shown to
 * both players; after a fold (or before the end) nothing is shown. Returns [card of player 0,
 * card of player 1] when revealed, else null.
 */
export function revealedCards(state: KuhnState): readonly [KuhnCard, KuhnCard] | null {
  return isShowdown(state) ? state.cards : null;
}

/** Player 0's chips at a terminal state (0 before the end). */
export function payoff0(state: KuhnState): number {
  const h = historyString(state);
  if (!TERMINAL_HISTORIES.has(h)) return 0;
  const high = state.cards[0] > state.cards[1] ? 1 : -1;
  switch (h) {
    case "pp":
      return high;
    case "bp":
      return 1;
    case "pbp":
      return -1;
    default: // "bb", "pbb": both put in 2
      return 2 * high;
  }
}

function currentPlayer(state: KuhnState): number {
  return TERMINAL_HISTORIES.has(historyString(state)) ? -1 : state.moves.length % 2;
}

function describeMoves(state: KuhnState): string {
  if (state.moves.length === 0) return "No actions yet";
  return state.moves.map((m, i) => `Player ${i % 2}: ${m === BET ? "Bet" : "Pass"}`).join(" -> ");
}

function render(state: KuhnState, perspective?: number): string {
  const lines: string[] = [];
  const shown = revealedCards(state);
  if (perspective === 0 || perspective === 1) {
    const other = 1 - perspective;
    lines.push(`You are player ${perspective}. Your card: ${CARD_NAMES[state.cards[perspective]]}`);
    lines.push(`Opponent's card: ${shown ? CARD_NAMES[state.cards[other]] : "hidden"}`);
  } else {
    lines.push(`Player 0 card: ${CARD_NAMES[state.cards[0]]}, Player 1 card: ${CARD_NAMES[state.cards[1]]}`);
  }
  lines.push(`Actions: ${describeMoves(state)}`);
  const p = currentPlayer(state);
  if (p >= 0) {
    lines.push(`Player ${p} to act (PASS or BET)`);
  } else {
    const v = payoff0(state);
    const winner = v > 0 ? 0 : 1;
    const f = folder(state);
    const how = f >= 0 ? `player ${f} folds` : "showdown";
    lines.push(
      `Game over (${how}): player ${winner} wins ${Math.abs(v)} chip${Math.abs(v) === 1 ? "" : "s"}`,
    );
  }
  return lines.join("\n");
}

export const kuhn: Game<KuhnState, KuhnMove> = {
  name: "kuhn",
  numPlayers: 2,
  initialState(rng: Rng): KuhnState {
    return dealState(KUHN_DEALS[rng.int(KUHN_DEALS.length)]);
  },
  currentPlayer,
  legalMoves(state: KuhnState): KuhnMove[] {
    return currentPlayer(state) < 0 ? [] : [PASS, BET];
  },
  apply(state: KuhnState, move: KuhnMove): KuhnState {
    if (currentPlayer(state) < 0) throw new Error("kuhn: the game is over");
    if (move !== PASS && move !== BET)
      throw new RangeError(`kuhn: move must be 0 (PASS) or 1 (BET), got ${move}`);
    return Object.freeze({ cards: state.cards, moves: Object.freeze([...state.moves, move]) });
  },
  isTerminal(state: KuhnState): boolean {
    return currentPlayer(state) < 0;
  },
  returns(state: KuhnState): number[] {
    const v = payoff0(state);
    return [v, v === 0 ? 0 : -v];
  },
  moveToString(move: KuhnMove): string {
    return MOVE_NAMES[move] ?? String(move);
  },
  render,
};
