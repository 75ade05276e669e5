/**
 * Remark quality: whether a reflection is valid (it carries something) and whether it is
 * informative (it names something the attempt itself saw). Pure functions of strings that never
 * throw; the attempt-level helpers that gather the strings are in `tasks/remark-quality.ts`.
 *
 * Valid (`judgeRemark`): `parseRemark`'s rules (a complete, non-empty `<remark>` in the answer,
 * without markup, within MAX_REMARK_CHARS), and the remark is not only action commands: its text,
 * compared without case, whitespace and the punctuation around commands, is not one of the
 * attempt's commands (the actions it played, the legal actions it was offered) nor a sequence of
 * them (`move south. move north.`). An invalid remark is an invalid answer: its reflect row has
 * `valid: false` and pays the invalid-answer penalty, as an invalid play answer does.
 *
 * Informative: a separate judgement by the task's rule, reported as a rate and never penalised.
 * The default rule for served environments (`observedTerms`): the remark names a term that occurs
 * in what the attempt observed but not in the task's rules and instructions, where a term is a
 * word of at least 4 letters that is no stop word (`STOP_WORDS`: function words, directions and
 * the words any reflection uses, such as "attempt" or "nothing"), or two adjacent words, neither a
 * stop word, that the observations hold side by side (`mug 1`, `wood door`).
 */
import { parseRemark, type RemarkResult } from "./tags.js";

export type { RemarkFailure, RemarkResult } from "./tags.js";

export interface RemarkContext {
  /**
   * Action commands a remark must not merely repeat: the attempt's played actions and the legal
   * action strings it was offered. Empty or absent: no echo check.
   */
  commands?: readonly string[];
  /** The task's informative rule, given the valid remark's text; absent or null: not judged. */
  informative?: ((text: string) => boolean) | null;
}

/** The result of judging a reflection: `{valid, text, invalidReason?, failure?, informative?}`. */
export type RemarkJudgement = RemarkResult;

/**
 * Judges a reflection response: valid (well-formed and not only action commands) and, when the
 * context gives a rule, informative (false for an invalid remark). Never throws: an informative
 * rule that throws leaves `informative` false.
 */
export function judgeRemark(response: string, context: RemarkContext = {}): RemarkJudgement {
  const parsed = parseRemark(String(response));
  const rule = context.informative ?? null;
  let out: RemarkJudgement = parsed;
  if (parsed.valid && context.commands && context.commands.length > 0) {
    const echoed = echoedCommand(parsed.text, context.commands);
    if (echoed !== null) {
      out = {
        valid: false,
        text: "",
        invalidReason: `the remark only repeats action commands ("${echoed.slice(0, 60)}")`,
        failure: "echo",
      };
    }
  }
  if (rule === null) return out;
  let informative = false;
  if (out.valid) {
    try {
      informative = rule(out.text) === true;
    } catch {
      informative = false;
    }
  }
  return { ...out, informative };
}

// ---------------------------------------------------------------------------------------------
// echo: a remark that is only action commands

/** Characters around a command that do not change it: whitespace, punctuation, quotes, emphasis. */
const EDGE = /^[\s.,;:!?"'`*_“”‘’]+|[\s.,;:!?"'`*_“”‘’]+$/gu;
/** What may stand between two commands of a remark made only of commands. */
const SEPARATOR = /[\s.,;:!?"'`*_“”‘’\-–—>]+/u;

/** A command's comparison key: lower case, no whitespace, no punctuation or quotes at its ends. */
export function commandKey(text: string): string {
  return String(text).normalize("NFKC").toLowerCase().replace(EDGE, "").replace(/\s+/g, "");
}

/**
 * The command `text` consists of, when it is nothing but commands (one, or several separated by
 * punctuation or spaces), as the first one written; null otherwise.
 */
export function echoedCommand(text: string, commands: readonly string[]): string | null {
  const byKey = new Map<string, string>();
  for (const c of commands) {
    const k = commandKey(c);
    if (k.length > 0 && !byKey.has(k)) byKey.set(k, c);
  }
  if (byKey.size === 0) return null;
  const whole = commandKey(text);
  if (whole.length === 0) return null;
  const direct = byKey.get(whole);
  if (direct !== undefined) return direct;
  // A sequence of commands: segment the text, separators skipped, into command keys.
  const keys = [...byKey.keys()].sort((a, b) => b.length - a.length);
  const s = String(text).normalize("NFKC").toLowerCase();
  const first = segmentFirst(s, keys);
  return first === null ? null : byKey.get(first)!;
}

/** The first key of a segmentation of `s` into keys and separators (whitespace inside keys ignored), or null. */
function segmentFirst(s: string, keys: readonly string[]): string | null {
  const n = s.length;
  // first[i]: the first key of a segmentation of s[0, i) ("" at 0), undefined when none ends at i.
  const first: (string | undefined)[] = new Array(n + 1);
  first[0] = "";
  const sep = new RegExp(SEPARATOR.source, "uy");
  for (let i = 0; i <= n; i++) {
    const at = first[i];
    if (at === undefined) continue;
    sep.lastIndex = i;
    const j = sep.exec(s) ? sep.lastIndex : i;
    if (j >= n) {
      if (at !== "") return at;
      continue;
    }
    for (const k of keys) {
      const end = matchKey(s, j, k);
      if (end !== null && first[end] === undefined) first[end] = at === "" ? k : at;
    }
  }
  return null;
}

/** Where `key` (no whitespace) ends when it starts at `s[i]`, whitespace in `s` skipped; null if it does not. */
function matchKey(s: string, i: number, key: string): number | null {
  let p = i;
  for (let q = 0; q < key.length; q++) {
    while (p < s.length && /\s/.test(s[p])) p++;
    if (p >= s.length || s[p] !== key[q]) return null;
    p++;
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// informative: the default rule, terms the attempt observed

/**
 * Words that never make a remark informative by themselves: English function words, numbers
 * spelled out, compass and board directions, and the words a reflection uses about itself or the
 * game rather than about what it saw.
 */
export const STOP_WORDS: ReadonlySet<string> = new Set(
  (
    "a about above after again against all also am an and another any anything are around as at " +
    "be because been before being below between both but by can cannot could did didn do does doesn " +
    "doing don done down during each either else enough even ever every everything few first for " +
    "from further had has hasn have haven having he her here hers him his how however i if in into is " +
    "isn it its itself just least less let like made make many may maybe me might mine more most much " +
    "must my myself need needed needs neither never next no nor not nothing now of off on once one " +
    "only onto or other others our out over own perhaps quite rather really same she should shouldn " +
    "since so some something still such than that the their them then there these they thing things " +
    "this those though through thus to too under until up upon us very was wasn way we were weren " +
    "what when where whether which while who whom whose why will with within without won would " +
    "wouldn yet you your yours two three four five six seven eight nine ten zero " +
    "north south east west northeast northwest southeast southwest left right upward downward " +
    "attempt attempts tried try trying failed fail fails failure success successful succeeded " +
    "game games task tasks goal goals step steps turn turns action actions move moves moved moving " +
    "play played playing win wins winning lost lose losing loss result results " +
    "found find finding seen see saw look looked looking useful useless worth keeping keep kept " +
    "went go going gone came come got get getting took take taking tries time times " +
    "explore explored exploring search searched searching check checked checking visit visited " +
    "place places room rooms area areas item items object objects location locations spot " +
    "better best good bad wrong correct mistake mistakes instead again later earlier last " +
    "know knew known think thought remember note notes lesson learned learn plan strategy " +
    "nothing anywhere somewhere everywhere elsewhere yes okay ok sure"
  ).split(" "),
);

/** The words of `text`: lower-case runs of letters and digits (so `corridor's` gives `corridor`, `s`). */
export function words(text: string): string[] {
  return (
    String(text)
      .normalize("NFKC")
      .toLowerCase()
      .match(/[\p{L}\p{N}]+/gu) ?? []
  );
}

/** A word's comparison form: plural endings dropped (`drawers` → `drawer`, `boxes` → `box`). */
export function wordStem(w: string): string {
  if (w.length <= 3) return w;
  if (w.endsWith("ies") && w.length > 4) return `${w.slice(0, -3)}y`;
  if (w.endsWith("es") && /(s|x|z|ch|sh)$/.test(w.slice(0, -2))) return w.slice(0, -2);
  if (w.endsWith("s") && !w.endsWith("ss") && !w.endsWith("us") && !w.endsWith("is")) return w.slice(0, -1);
  return w;
}

const isStop = (w: string, extra: ReadonlySet<string>) => STOP_WORDS.has(w) || extra.has(w);
const hasLetter = (w: string) => /\p{L}/u.test(w);

/** The stems and adjacent stem pairs of a text, for `observedTerms`. */
export interface TermIndex {
  stems: Set<string>;
  pairs: Set<string>;
}

export function termIndex(texts: readonly string[]): TermIndex {
  const stems = new Set<string>();
  const pairs = new Set<string>();
  for (const t of texts) {
    const ws = words(t).map(wordStem);
    ws.forEach((w, i) => {
      stems.add(w);
      if (i > 0) pairs.add(`${ws[i - 1]} ${w}`);
    });
  }
  return { stems, pairs };
}

/**
 * The terms of `remark` that the attempt observed (in `observed`) and the rules do not state (not
 * in `rules`): words of at least 4 letters that are no stop words, and adjacent pairs of words,
 * neither a stop word and one with a letter, that stand side by side in the observations.
 * `ignore`: more words to treat as stop words (an environment's declared `ignoreWords`).
 */
export function observedTerms(
  remark: string,
  observed: TermIndex,
  rules: TermIndex,
  ignore: ReadonlySet<string> = new Set(),
): string[] {
  const ws = words(remark);
  const out: string[] = [];
  for (let i = 0; i < ws.length; i++) {
    const w = ws[i];
    const stem = wordStem(w);
    if (
      !isStop(w, ignore) &&
      !isStop(stem, ignore) &&
      /^\p{L}{4,}$/u.test(w) &&
      observed.stems.has(stem) &&
      !rules.stems.has(stem)
    ) {
      out.push(w);
    }
    if (i === 0) continue;
    const v = ws[i - 1];
    if (isStop(v, ignore) || isStop(w, ignore) || !(hasLetter(v) || hasLetter(w))) continue;
    const pair = `${wordStem(v)} ${stem}`;
    if (observed.pairs.has(pair) && !rules.pairs.has(pair)) out.push(`${v} ${w}`);
  }
  return out;
}
