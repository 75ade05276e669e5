/**
 * Remark quality from an attempt record: the action commands a reflection must not merely repeat,
 * the default informative rule of served environments (terms the attempt observed that the rules
 * do not state), and the built-in games' rules. `TrialEnv.reflect` judges every reflection with
 * these; the warm-start corpora call `judgeAttemptRemark` and `remarkInformative` to check their
 * generated reflections the same way. See `core/remark.ts` for the rules themselves.
 *
 * Built-in games (`TextTask.remarkInformative`):
 * - Kuhn: the remark names a card (J/Q/K or Jack/Queen/King) the attempt showed: the agent's
 *   card, or the opponent's at a showdown or in hindsight;
 * - TicTacToe: it names a cell, `(r, c)` or `rc`, that a move of the attempt (either side's,
 *   the opening included) took;
 * - MineSweeper: it names a cell the attempt opened;
 * - Sokoban: no rule (`informative` not reported): its remarks can only name directions and box
 *   counts, which every attempt has, so no rule would tell a concrete remark from a vague one.
 *
 * Rules have names (`INFORMATIVE_RULES`), which an environment declares in its `/info` entry
 * (`remarks.informative`, docs/env-protocol.md); `mage env-serve` declares the built-in games'
 * (`BUILTIN_REMARK_RULES`), so served play is judged as in-process play.
 */
import {
  judgeRemark,
  observedTerms,
  type RemarkJudgement,
  type TermIndex,
  termIndex,
} from "../core/remark.js";
import type { AttemptSeen, TaskPromptText } from "./types.js";

/** A task's informative rule: whether a valid remark's text carries something of `attempt`. */
export type InformativeRule = (text: string, attempt: AttemptSeen) => boolean;

/** Everything the attempt showed, as text: observations, feedback, hindsight and outcomes, full and compact. */
export function attemptTexts(attempt: AttemptSeen): string[] {
  const out = [attempt.initialObservation, attempt.compactInitialObservation];
  for (const t of attempt.turns) {
    out.push(t.observation, t.compactObservation, t.feedback, t.compactFeedback);
    for (const x of [t.hindsightObservation, t.compactHindsight, t.outcome, t.compactOutcome])
      if (x !== undefined) out.push(x);
  }
  return out.filter((x) => typeof x === "string" && x.length > 0);
}

/**
 * The commands a remark of `attempt` must not merely repeat: the actions it played (valid or not,
 * as written in the history) and the legal actions it was offered (kept in the record for tasks
 * that list them, plus `legal`: what the task listed at each state, for tasks that do not keep them).
 */
export function attemptCommands(attempt: AttemptSeen, legal: Iterable<string> = []): string[] {
  const out = new Set<string>();
  const add = (x: string | undefined) => {
    if (typeof x === "string" && x.trim().length > 0) out.add(x);
  };
  for (const a of attempt.initialLegalActions ?? []) add(a);
  for (const t of attempt.turns) {
    add(t.action);
    for (const a of t.legalActions ?? []) add(a);
  }
  for (const a of legal) add(a);
  return [...out];
}

/** The texts of the task's rules and instructions, whose terms a remark does not get credit for. */
export function rulesTexts(prompt: TaskPromptText): string[] {
  return [
    prompt.rules,
    prompt.playInstruction,
    prompt.compactRules,
    prompt.compactAsk,
    prompt.actionWord,
    prompt.legalActionsHeading ?? "",
  ].filter((x) => typeof x === "string" && x.length > 0);
}

/**
 * The default rule of served environments, for one task instance's prompt text: the remark names
 * a term the attempt observed that the rules do not state (`observedTerms`). `ignoreWords`: words
 * the environment declared never informative (its `/info` entry's `remarks.ignoreWords`).
 */
export function observedTermsRule(
  prompt: TaskPromptText,
  ignoreWords: readonly string[] = [],
): InformativeRule {
  let rules: TermIndex | undefined;
  const ignore = new Set(ignoreWords.map((w) => w.toLowerCase()));
  return (text, attempt) => {
    rules ??= termIndex(rulesTexts(prompt));
    return observedTerms(text, termIndex(attemptTexts(attempt)), rules, ignore).length > 0;
  };
}

/** The terms that make `text` informative by the default rule (empty: not informative). */
export function informativeTerms(
  text: string,
  attempt: AttemptSeen,
  prompt: TaskPromptText,
  ignoreWords: readonly string[] = [],
): string[] {
  const ignore = new Set(ignoreWords.map((w) => w.toLowerCase()));
  return observedTerms(text, termIndex(attemptTexts(attempt)), termIndex(rulesTexts(prompt)), ignore);
}

/** Whether a remark's text is informative by the default rule (served environments). */
export function remarkInformative(
  text: string,
  attempt: AttemptSeen,
  prompt: TaskPromptText,
  ignoreWords: readonly string[] = [],
): boolean {
  return informativeTerms(text, attempt, prompt, ignoreWords).length > 0;
}

export interface AttemptRemarkOptions {
  /** The task's prompt text: with it and no `informative`, the default rule judges. */
  prompt?: TaskPromptText;
  /** Legal actions the attempt was offered that its record does not keep. */
  legalActions?: Iterable<string>;
  /** The informative rule; null: not judged; absent: the default rule when `prompt` is given. */
  informative?: InformativeRule | null;
}

/**
 * Judges a reflection response written after `attempt`: `{valid, text, invalidReason?, failure?,
 * informative?}` (see `judgeRemark`). Pure and never throws.
 */
export function judgeAttemptRemark(
  response: string,
  attempt: AttemptSeen,
  options: AttemptRemarkOptions = {},
): RemarkJudgement {
  const rule =
    options.informative !== undefined
      ? options.informative
      : options.prompt
        ? observedTermsRule(options.prompt)
        : null;
  return judgeRemark(response, {
    commands: attemptCommands(attempt, options.legalActions),
    informative: rule ? (text) => rule(text, attempt) : null,
  });
}

// ---------------------------------------------------------------------------------------------
// the built-in games' rules

const CARD_WORDS: Record<string, string> = { jack: "J", queen: "Q", king: "K" };

/** Kuhn cards named in `text`: single capital letters J, Q, K and the words Jack, Queen, King. */
function cardsIn(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/(?<![\p{L}\p{N}])([JQK])(?![\p{L}\p{N}])/gu)) out.add(m[1]);
  for (const m of text.matchAll(/\b(jack|queen|king)s?\b/gi)) out.add(CARD_WORDS[m[1].toLowerCase()]);
  return out;
}

/** Kuhn: the remark names a card the attempt showed (the agent's, or the opponent's when revealed). */
export const kuhnRemarkInformative: InformativeRule = (text, attempt) => {
  const seen = cardsIn(attemptTexts(attempt).join("\n"));
  return [...cardsIn(text)].some((c) => seen.has(c));
};

/** Cells named in `text`, as "r,c": `(r, c)` pairs and, with `digits`, two-digit tokens `rc`. */
export function cellsIn(text: string, digits = true): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)/g)) out.add(`${+m[1]},${+m[2]}`);
  if (digits) for (const m of text.matchAll(/(?<![\d.,])([1-9])([1-9])(?![\d])/g)) out.add(`${m[1]},${m[2]}`);
  return out;
}

/** The marked cells of the last full TicTacToe board an attempt showed (rows like `X . O`). */
function markedCells(attempt: AttemptSeen): Set<string> {
  const last = attempt.turns.length > 0 ? attempt.turns[attempt.turns.length - 1] : undefined;
  const board = (last?.observation ?? attempt.initialObservation)
    .split("\n")
    .filter((l) => /^[XO.] [XO.] [XO.]$/.test(l.trim()));
  const out = new Set<string>();
  board.slice(0, 3).forEach((row, r) => {
    row
      .trim()
      .split(" ")
      .forEach((mark, c) => {
        if (mark !== ".") out.add(`${r + 1},${c + 1}`);
      });
  });
  return out;
}

/** TicTacToe: the remark names a cell a move of the attempt took (the opening move included). */
export const tictactoeRemarkInformative: InformativeRule = (text, attempt) => {
  const taken = markedCells(attempt);
  for (const t of attempt.turns) if (t.valid) for (const c of cellsIn(t.action)) taken.add(c);
  return [...cellsIn(text)].some((c) => taken.has(c));
};

/** MineSweeper: the remark names a cell the attempt opened. */
export const minesweeperRemarkInformative: InformativeRule = (text, attempt) => {
  const opened = new Set<string>();
  for (const t of attempt.turns) if (t.valid) for (const c of cellsIn(t.action)) opened.add(c);
  return [...cellsIn(text)].some((c) => opened.has(c));
};

// ---------------------------------------------------------------------------------------------
// rules by name (an environment's `/info` declaration)

/** The default rule of served environments. */
export const OBSERVED_TERMS = "observed-terms";
/** The declaration of no rule: informative is not judged or reported. */
export const NO_RULE = "none";

/** The named rules an environment may declare; `observed-terms` reads the prompt and ignored words. */
export const INFORMATIVE_RULES: Record<
  string,
  (prompt: TaskPromptText, ignoreWords: readonly string[]) => InformativeRule
> = {
  [OBSERVED_TERMS]: observedTermsRule,
  "kuhn-cards": () => kuhnRemarkInformative,
  "tictactoe-cells": () => tictactoeRemarkInformative,
  "minesweeper-cells": () => minesweeperRemarkInformative,
};

/** The rule each built-in game judges its reflections by (`none`: not judged). */
export const BUILTIN_REMARK_RULES: Record<string, string> = {
  kuhn: "kuhn-cards",
  tictactoe: "tictactoe-cells",
  minesweeper: "minesweeper-cells",
  sokoban: NO_RULE,
};

/** The rule named `name` for a prompt, or null for `none` and names this version does not know. */
export function informativeRuleNamed(
  name: string,
  prompt: TaskPromptText,
  ignoreWords: readonly string[] = [],
): InformativeRule | null {
  const make = Object.hasOwn(INFORMATIVE_RULES, name) ? INFORMATIVE_RULES[name] : undefined;
  return make ? make(prompt, ignoreWords) : null;
}

/** Whether `name` is a rule this version judges by (not `none`, not unknown). */
export function knownInformativeRule(name: string): boolean {
  return Object.hasOwn(INFORMATIVE_RULES, name);
}
