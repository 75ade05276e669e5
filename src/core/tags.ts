/**
 * Tag parsing for model responses: `<think>…</think>` reasoning, `<action>…</action>` moves,
 * `<remark>…</remark>` reflections. Pure functions that never throw on any string.
 *
 * Rules (one place, used by every task):
 * - The *answer* is the text after the LAST `</think>`. If the response has a `<think>` that no
 *   later `</think>` closes (the model was cut off while reasoning), there is no answer at all.
 *   A response without any think tags is all answer. Tags inside the reasoning never count,
 *   which fixes the reference's habit of picking up an `<action>` the model wrote while thinking.
 * - In the answer the FIRST complete `<tag>…</tag>` pair counts: the first closing tag that has
 *   an opening tag before it, paired with the nearest such opening tag (so in
 *   `<action> <action>b</action>` the content is `b`). Later pairs are ignored.
 * - Tag names match case-insensitively (`<ACTION>` works); the content is trimmed.
 * - A reflection is stricter (`parseRemark`): its remark must carry words, hold no markup (no
 *   other tag, not nested in an earlier `<remark>`) and fit MAX_REMARK_CHARS; `core/remark.ts`
 *   adds the checks that need the attempt (a remark that only repeats an action command).
 */

export type TagFailure = "unclosed-think" | "missing-tag" | "empty-tag";

export type TagResult = { ok: true; content: string } | { ok: false; failure: TagFailure; message: string };

/** Finds every (case-insensitive) occurrence of `needle` in `text`; returns start indices. */
function occurrences(text: string, needle: string): number[] {
  const out: number[] = [];
  const re = new RegExp(escapeRegExp(needle), "gi");
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    out.push(m.index);
    if (m[0].length === 0) re.lastIndex++;
  }
  return out;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * The answer part of a response: the text after the last `</think>`, or `null` when an opened
 * `<think>` is never closed afterwards (no answer).
 */
export function answerText(response: string): string | null {
  const text = String(response);
  const closes = occurrences(text, "</think>");
  const after = closes.length === 0 ? text : text.slice(closes[closes.length - 1] + "</think>".length);
  if (occurrences(after, "<think>").length > 0) return null;
  return after;
}

/** Where the first complete `<name>…</name>` pair of `text` lies (see the rules above). */
interface TagSpan {
  /** The untrimmed content's bounds. */
  start: number;
  end: number;
  /** Openers of the same name before the pair's closer (1 when the pair is not nested in another opener). */
  openersBefore: number;
}

function firstTagSpan(text: string, name: string): TagSpan | null {
  const open = `<${name}>`;
  const close = `</${name}>`;
  const opens = occurrences(text, open);
  if (opens.length === 0) return null;
  const closes = occurrences(text, close);
  let oi = -1; // index into opens of the last opener ending at or before the current closer
  for (const c of closes) {
    while (oi + 1 < opens.length && opens[oi + 1] + open.length <= c) oi++;
    if (oi >= 0) return { start: opens[oi] + open.length, end: c, openersBefore: oi + 1 };
  }
  return null;
}

/**
 * The trimmed content of the first complete `<name>…</name>` pair in `text` (no think handling).
 * Returns `null` when there is no complete pair.
 */
export function firstTagContent(text: string, name: string): string | null {
  const span = firstTagSpan(text, name);
  return span === null ? null : text.slice(span.start, span.end).trim();
}

/** The trimmed content of the first complete `<name>…</name>` in the response's answer. */
export function extractTag(response: string, name: string): TagResult {
  const answer = answerText(response);
  if (answer === null) {
    return {
      ok: false,
      failure: "unclosed-think",
      message: "the response ends inside <think> (no </think>), so it has no answer",
    };
  }
  const content = firstTagContent(answer, name);
  if (content === null) {
    return {
      ok: false,
      failure: "missing-tag",
      message: `no complete <${name}>…</${name}> after the reasoning`,
    };
  }
  if (content.length === 0) return { ok: false, failure: "empty-tag", message: `the <${name}> tag is empty` };
  return { ok: true, content };
}

/**
 * Longest valid reflection, in characters (Unicode code points) of the trimmed remark: a longer
 * one is invalid, not cut. The reference cut remarks at 2,000 characters; a remark that long says
 * more than any attempt needs, and a cut one may end mid-sentence. The token limit of a reply
 * (`rollout.maxResponseTokens`, the checks' 48) usually binds first: a reply cut off before
 * `</remark>` has no complete remark and is invalid as `missing-tag`.
 */
export const MAX_REMARK_CHARS = 2000;

/**
 * Why a reflection is invalid: the tag failures, markup inside the remark (another tag, or a
 * `<remark>` nested in an earlier opener), over `MAX_REMARK_CHARS`, or (judged with the attempt,
 * `judgeRemark` in `core/remark.ts`) nothing but the attempt's action commands.
 */
export type RemarkFailure = TagFailure | "markup" | "over-cap" | "echo";

export interface RemarkResult {
  /** Whether the response's answer holds a well-formed reflection (see `parseRemark`). */
  valid: boolean;
  /** The reflection text (trimmed, at most MAX_REMARK_CHARS characters); "" when invalid. */
  text: string;
  invalidReason?: string;
  /** Which rule an invalid reflection failed (absent when valid). */
  failure?: RemarkFailure;
  /**
   * Whether the remark names something the attempt itself saw, by the task's rule
   * (`TextTask.remarkInformative`); false when invalid; absent when the task has no rule.
   */
  informative?: boolean;
}

/** A `<tag>`, `</tag>` or `<tag …>` / `<tag/>`: markup a reflection must not hold. */
const MARKUP = /<\/?[A-Za-z][A-Za-z0-9_:.-]*(?:\s[^<>]*)?\/?>/;

function invalid(failure: RemarkFailure, message: string): RemarkResult {
  return { valid: false, text: "", invalidReason: message, failure };
}

function codePoints(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

/**
 * Parses a reflection response: the first `<remark>…</remark>` of the answer (after the last
 * `</think>`), trimmed. Invalid, with a reason, when there is none (`unclosed-think`,
 * `missing-tag`), when it holds no letter or digit (`empty-tag`), when it holds markup: another
 * tag such as `<action>…</action>`, or the pair is nested in an earlier `<remark>` opener
 * (`markup`), or when it is longer than MAX_REMARK_CHARS (`over-cap`). A pure function of the
 * string that never throws; `failure` says which rule failed.
 */
export function parseRemark(response: string): RemarkResult {
  const answer = answerText(response);
  if (answer === null) {
    return invalid("unclosed-think", "the response ends inside <think> (no </think>), so it has no answer");
  }
  const span = firstTagSpan(answer, "remark");
  if (span === null) return invalid("missing-tag", "no complete <remark>…</remark> after the reasoning");
  const text = answer.slice(span.start, span.end).trim();
  if (text.length === 0) return invalid("empty-tag", "the <remark> tag is empty");
  if (!/[\p{L}\p{N}]/u.test(text)) return invalid("empty-tag", "the <remark> holds no letter or digit");
  if (span.openersBefore > 1) return invalid("markup", "the <remark> is nested inside another <remark>");
  const tag = MARKUP.exec(text);
  if (tag) return invalid("markup", `the remark holds markup (${tag[0].slice(0, 40)})`);
  const n = text.length > MAX_REMARK_CHARS ? codePoints(text) : text.length;
  if (n > MAX_REMARK_CHARS) {
    return invalid("over-cap", `the remark has ${n} characters, over the ${MAX_REMARK_CHARS}-character cap`);
  }
  return { valid: true, text };
}
