/**
 * Unlikely tokens for the warm start's unlikelihood term (`--unlikelihood`, worker op `sft`):
 * where a play answer could have turned into an illegal one, the token that would have started
 * the illegal answer is pushed down. SmolLM2 warm-started on TicTacToe by plain SFT still puts a
 * few percent of its probability on taken cells; the corpus only ever shows legal moves, so
 * nothing in the cross-entropy says "not that one" (docs/design.md).
 *
 * Token-level and exact: at the answer's token d, an illegal answer N that agrees with the answer
 * A on tokens 0..d−1 and differs at d makes N[d] unlikely, unless some legal answer also starts
 * with N[0..d] (pushing N[d] down would push that legal answer down too). For `(r, c)` cells this
 * gives the taken columns of the answer's row at the column digit, and the full rows at the row
 * digit.
 */
import { answerChoices, type CorpusTrial, type PretrainGame } from "./corpus.js";

/** Offsets within the answer's tokens → the token ids unlikely there. */
export function unlikelyAtDivergence(
  answer: readonly number[],
  legal: readonly (readonly number[])[],
  illegal: readonly (readonly number[])[],
): Map<number, number[]> {
  const out = new Map<number, number[]>();
  for (const bad of illegal) {
    let d = 0;
    while (d < answer.length && d < bad.length && answer[d] === bad[d]) d++;
    if (d >= answer.length || d >= bad.length) continue; // a prefix of the other: no single token tells them apart
    const stem = bad.slice(0, d + 1);
    if (legal.some((ok) => startsWith(ok, stem))) continue;
    const at = out.get(d) ?? [];
    if (!at.includes(bad[d])) at.push(bad[d]);
    out.set(d, at);
  }
  return out;
}

function startsWith(xs: readonly number[], prefix: readonly number[]): boolean {
  if (xs.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (xs[i] !== prefix[i]) return false;
  return true;
}

/** The token ids of answer texts as the chat template writes an assistant message's body. */
export type AnswerTokenizer = (texts: readonly string[]) => Promise<number[][]>;

/**
 * For each trial, its unlikely tokens as positions in its rendered ids → token ids: every
 * well-formed play answer whose decision has illegal answers (TicTacToe: taken cells; MineSweeper:
 * revealed cells; a served environment: the answers its expert judged a waste there, carried by
 * the trial as `choices`).
 * `spans` are the trial's assistant spans in the rendered ids, in message order.
 */
export async function trialUnlikelyTokens(
  game: PretrainGame | "remote",
  trial: CorpusTrial,
  ids: readonly number[],
  spans: readonly { start: number; end: number }[],
  tokenize: AnswerTokenizer,
): Promise<Map<number, number[]>> {
  const out = new Map<number, number[]>();
  let answerIndex = 0;
  for (let m = 0; m < trial.messages.length; m++) {
    if (trial.messages[m].role !== "assistant") continue;
    const k = answerIndex++;
    if (trial.kinds[k] !== "action") continue;
    const choices = trial.choices
      ? (trial.choices[k] ?? null)
      : game === "remote"
        ? null
        : answerChoices(game, trial.messages.slice(0, m));
    if (!choices) continue;
    const span = spans[k];
    const answer = ids.slice(span.start, span.end);
    const tokens = await tokenize([...choices.legal, ...choices.illegal]);
    const legal = tokens.slice(0, choices.legal.length);
    const illegal = tokens.slice(choices.legal.length);
    // An answer the template wrote otherwise than the scripted text tokenizes alone: leave it be.
    if (!legal.some((l) => l.length === answer.length && startsWith(l, answer))) continue;
    for (const [offset, tokens] of unlikelyAtDivergence(answer, legal, illegal))
      out.set(span.start + offset, tokens);
  }
  return out;
}

/** A tokenizer that asks `render` once per distinct text. */
export function cachedTokenizer(render: (texts: string[]) => Promise<number[][]>): AnswerTokenizer {
  const cache = new Map<string, number[]>();
  return async (texts) => {
    const missing = [...new Set(texts.filter((t) => !cache.has(t)))];
    if (missing.length > 0) {
      const got = await render(missing);
      for (const [i, t] of missing.entries()) cache.set(t, got[i]);
    }
    return texts.map((t) => cache.get(t)!);
  };
}
