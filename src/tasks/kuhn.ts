/**
 * Kuhn poker as a text task (reference §7.2): one hand, cards J < Q < K, ante 1, moves
 * PASS (check/fold) and BET (bet/call). The agent is player 0 when it sits first.
 * Rewards: 5 × chips at the end of the hand (±5 or ±10), 0 otherwise (invalid steps included).
 * Score: chips won or lost (±1, ±2). Moves are always shown as PASS / BET, never 0 / 1.
 * At a showdown both cards are shown; after a fold the opponent's card stays hidden, except in
 * hindsight observations (`hindsightObservation`), which training reflections may use.
 */
import {
  CARD_LETTERS,
  CARD_NAMES,
  dealState,
  folder,
  infoStateString,
  type KuhnCard,
  type KuhnMove,
  type KuhnState,
  kuhn,
  MOVE_NAMES,
  revealedCards,
} from "../games/kuhn.js";
import { type Parsed, parseKuhnMove } from "./parse.js";
import { kuhnRemarkInformative } from "./remark-quality.js";
import { type EndText, TwoPlayerTask } from "./two-player.js";
import type { AttemptSeen, StepResult, TaskOptions, TaskPromptText } from "./types.js";

export const KUHN_DEFAULT_OPPONENT = "intermediate";

export class KuhnTask extends TwoPlayerTask<KuhnState, KuhnMove> {
  protected readonly rewardScale = 5;

  /**
   * `deal` fixes the cards [player 0's, player 1's] instead of dealing from the reset's generator
   * (`mage exploitability` reaches each information set this way).
   */
  constructor(options: TaskOptions = {}, deal?: readonly [KuhnCard, KuhnCard]) {
    super("kuhn", deal ? fixedDealKuhn(deal) : kuhn, KUHN_DEFAULT_OPPONENT, options);
  }

  /** The agent's information state in OpenSpiel's notation: its card digit and the betting so far ("1pb"). */
  infoState(): string {
    return infoStateString(this.state, this.agent);
  }

  private get opponentPlayer(): number {
    return 1 - this.agent;
  }

  /** An unfinished hand is forfeited: the agent loses its ante and any chip it bet. */
  forfeit(): { reward: number; score: number } | null {
    if (kuhn.isTerminal(this.state)) return null;
    let committed = 1;
    this.state.moves.forEach((m, i) => {
      if (i % 2 === this.agent && m === 1) committed += 1;
    });
    return { reward: -this.rewardScale * committed, score: -committed };
  }

  protected parseMove(response: string, _state: KuhnState): Parsed<KuhnMove> {
    return parseKuhnMove(response);
  }

  protected moveText(move: KuhnMove): string {
    return MOVE_NAMES[move];
  }

  private who(player: number): string {
    return player === this.agent ? `Player ${player} (you)` : `Player ${player} (opponent)`;
  }

  private actionsText(state: KuhnState): string {
    if (state.moves.length === 0) return "No actions yet";
    return state.moves.map((m, i) => `${this.who(i % 2)}: ${MOVE_NAMES[m]}`).join(" -> ");
  }

  /** How the hand ended, from the agent's side ("" before the end). */
  private endingText(state: KuhnState): string {
    if (!kuhn.isTerminal(state)) return "";
    const shown = revealedCards(state);
    if (shown) {
      const mine = CARD_NAMES[shown[this.agent]];
      const theirs = CARD_NAMES[shown[this.opponentPlayer]];
      return `Showdown: your ${mine} against the opponent's ${theirs}`;
    }
    return folder(state) === this.agent ? "You folded" : "The opponent folded";
  }

  protected renderObservation(state: KuhnState): string {
    const parts = [
      `Your card: ${CARD_NAMES[state.cards[this.agent]]}`,
      `Actions: ${this.actionsText(state)}`,
    ];
    const end = this.endingText(state);
    if (end) parts.push(end);
    return parts.join(" | ");
  }

  protected renderCompactObservation(state: KuhnState): string {
    const parts = [`Card: ${CARD_LETTERS[state.cards[this.agent]]}.`];
    if (state.moves.length === 0) parts.push("You act first.");
    for (let i = 0; i < state.moves.length; i++) {
      parts.push(`${i % 2 === this.agent ? "You" : "Opp"}: ${MOVE_NAMES[state.moves[i]]}.`);
    }
    return parts.join(" ");
  }

  /** The observation plus the opponent's hidden card, when it is hidden. */
  private hindsight(state: KuhnState): { hindsightObservation?: string; compactHindsight?: string } {
    if (kuhn.isTerminal(state) && revealedCards(state)) return {};
    const card = state.cards[this.opponentPlayer];
    return {
      hindsightObservation: `${this.renderObservation(state)} | Hindsight: the opponent's card was ${CARD_NAMES[card]}`,
      compactHindsight: `Opp had ${CARD_LETTERS[card]}.`,
    };
  }

  protected replyFeedback(replies: readonly KuhnMove[]): { feedback: string; compactFeedback: string } {
    // The compact observation already lists every action, so compact feedback stays empty.
    const r = replies.map((m) => MOVE_NAMES[m]).join(", ");
    return { feedback: replies.length > 0 ? `the opponent answered ${r}` : "", compactFeedback: "" };
  }

  protected endText(state: KuhnState, replies: readonly KuhnMove[]): EndText {
    const chips = this.agentReturn(state);
    const n = Math.abs(chips);
    const unit = n === 1 ? "chip" : "chips";
    const ending = this.endingText(state);
    const answered =
      replies.length > 0 ? `the opponent answered ${replies.map((m) => MOVE_NAMES[m]).join(", ")}; ` : "";
    const shown = revealedCards(state);
    const compactEnding = shown
      ? `Showdown: you ${CARD_LETTERS[shown[this.agent]]}, opp ${CARD_LETTERS[shown[this.opponentPlayer]]}.`
      : folder(state) === this.agent
        ? "You folded."
        : "Opp folded.";
    const compactReplies = replies.map((m) => `Opp: ${MOVE_NAMES[m]}.`).join(" ");
    return {
      feedback: `${answered}${lower(ending)}`,
      compactFeedback: [compactReplies, compactEnding].filter((s) => s).join(" "),
      outcome: `You ${chips > 0 ? "won" : "lost"} ${n} ${unit} (${lower(ending)}).`,
      compactOutcome: chips > 0 ? `Won +${n}.` : `Lost -${n}.`,
      ...this.hindsight(state),
    };
  }

  override async step(response: string): Promise<StepResult> {
    const r = await super.step(response);
    if (!r.done) Object.assign(r, this.hindsight(this.state));
    return r;
  }

  /** Informative: the remark names a card the attempt showed (`remark-quality.ts`). */
  remarkInformative(text: string, attempt: AttemptSeen): boolean {
    return kuhnRemarkInformative(text, attempt);
  }

  promptText(): TaskPromptText {
    const first = this.agent === 0;
    return {
      rules: [
        "You are playing Kuhn poker, a two-player card game, against an opponent.",
        "The deck has three cards: Jack, Queen and King (Jack is the lowest, King the highest). Each player puts " +
          "1 chip into the pot (the ante) and gets one private card; the third card is not used.",
        "Player 0 acts first. On each turn a player chooses PASS or BET:",
        "- with no bet to answer, PASS checks (adds nothing) and BET adds 1 chip to the pot;",
        "- facing a bet, PASS folds (the other player takes the pot) and BET calls (adds 1 chip to match).",
        "If both players check, or a bet is called, the cards are shown and the higher card takes the pot " +
          "(showdown). A player who folds loses the chips already in the pot.",
        `You are Player ${this.agent}: you act ${first ? "first" : "second"}.`,
        "Your goal is to win as many chips as you can in this hand.",
      ].join("\n"),
      playInstruction:
        "Think step by step about your card, what the opponent's actions suggest about its card, and the chips " +
        "at stake. Then answer with exactly one of <action>PASS</action> or <action>BET</action>.",
      compactRules:
        "Kuhn poker. Cards J<Q<K, ante 1. PASS = check/fold, BET = bet/call 1 chip. Both check or a call: " +
        `higher card wins. You act ${first ? "first" : "second"}. Reply <action>PASS</action> or <action>BET</action>.`,
      compactAsk: "Your move?",
      actionWord: "Action",
    };
  }
}

/** Kuhn poker whose every hand is dealt `deal`. */
function fixedDealKuhn(deal: readonly [KuhnCard, KuhnCard]): typeof kuhn {
  const state = dealState(deal);
  return { ...kuhn, initialState: () => state };
}

function lower(s: string): string {
  return s.charAt(0).toLowerCase() + s.slice(1);
}
