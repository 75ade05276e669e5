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

/**
 * The trimmed content of the first complete `<name>…</name>` pair in `text` (no think handling).
 * Returns `null` when there is no complete pair.
 */
export function firstTagContent(text: string, name: string): string | null {
  const open = `<${name}>`;
  const close = `</${name}>`;
  const opens = occurrences(text, open);
  if (opens.length === 0) return null;
  const closes = occurrences(text, close);
  let oi = -1; // index into opens of the last opener ending at or before the current closer
  for (const c of closes) {
    while (oi + 1 < opens.length && opens[oi + 1] + open.length <= c) oi++;
    if (oi >= 0) return text.slice(opens[oi] + open.length, c).trim();
  }
  return null;
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

/** Longest reflection kept (characters), as in the reference. */
export const MAX_REMARK_CHARS = 2000;

export interface RemarkResult {
  /** Whether a non-empty `<remark>…</remark>` was found in the answer. */
  valid: boolean;
  /** The reflection text (trimmed, at most MAX_REMARK_CHARS characters); "" when invalid. */
  text: string;
  invalidReason?: string;
}

/** Parses a reflection response: the first `<remark>…</remark>` of the answer, cut to 2,000 chars. */
export function parseRemark(response: string): RemarkResult {
  const r = extractTag(response, "remark");
  if (!r.ok) return { valid: false, text: "", invalidReason: r.message };
  let text = r.content.slice(0, MAX_REMARK_CHARS);
  // Do not leave half of a surrogate pair at the cut.
  const last = text.charCodeAt(text.length - 1);
  if (text.length === MAX_REMARK_CHARS && last >= 0xd800 && last <= 0xdbff) text = text.slice(0, -1);
  return { valid: true, text: text.trim() };
}
