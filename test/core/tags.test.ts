import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import {
  answerText,
  extractTag,
  firstTagContent,
  MAX_REMARK_CHARS,
  parseRemark,
} from "../../src/core/tags.js";

function content(s: string, tag = "action"): string | null {
  const r = extractTag(s, tag);
  return r.ok ? r.content : null;
}

describe("answerText", () => {
  it("is the text after the last </think>", () => {
    assert.equal(answerText("a</think>b</think>c"), "c");
    assert.equal(answerText("<think>x</think> ans"), " ans");
    assert.equal(answerText("no tags at all"), "no tags at all");
    assert.equal(answerText("</THINK>upper"), "upper");
  });

  it("is null when a <think> is never closed afterwards", () => {
    assert.equal(answerText("<think>still thinking"), null);
    assert.equal(answerText("<think>a</think><think>b"), null);
    assert.equal(answerText("answer </think> then <think> again"), null);
    assert.notEqual(answerText("<think>a</think><think>b</think>c"), null);
  });
});

describe("extractTag", () => {
  it("takes the first complete pair in the answer, trimmed", () => {
    assert.equal(content("<action> bet </action>"), "bet");
    assert.equal(content("<action>a</action><action>b</action>"), "a");
    assert.equal(content("<action>a <action>b</action>"), "b");
    assert.equal(content("</action><action>c</action>"), "c");
    assert.equal(content("<ACTION>x</Action>"), "x");
  });

  it("ignores tags inside the reasoning", () => {
    assert.equal(content("<think><action>no</action></think><action>yes</action>"), "yes");
    assert.equal(content("<think><action>no</action></think>nothing"), null);
    assert.equal(content("<think><action>no</action>"), null);
  });

  it("reports why there is no content", () => {
    const a = extractTag("<think>cut off", "action");
    assert.equal(a.ok, false);
    assert.equal(!a.ok && a.failure, "unclosed-think");
    const b = extractTag("plain", "action");
    assert.equal(!b.ok && b.failure, "missing-tag");
    const c = extractTag("<action>  </action>", "action");
    assert.equal(!c.ok && c.failure, "empty-tag");
  });

  it("firstTagContent does not look at think tags", () => {
    assert.equal(firstTagContent("<think><remark>r</remark>", "remark"), "r");
  });
});

describe("parseRemark", () => {
  it("keeps the first remark of the answer, trimmed", () => {
    assert.deepEqual(parseRemark("<think>plan</think><remark> Block early. </remark>"), {
      valid: true,
      text: "Block early.",
    });
    const none = parseRemark("I forgot the tag");
    assert.equal(none.valid, false);
    assert.equal(none.text, "");
    assert.equal(none.failure, "missing-tag");
    assert.ok(none.invalidReason && none.invalidReason.length > 0);
  });

  it("a remark over the cap is invalid, not cut", () => {
    const at = parseRemark(`<remark>${"a".repeat(MAX_REMARK_CHARS)}</remark>`);
    assert.equal(at.valid, true);
    assert.equal(at.text.length, MAX_REMARK_CHARS);
    const long = parseRemark(`<remark>${"a".repeat(5000)}</remark>`);
    assert.equal(long.valid, false);
    assert.equal(long.failure, "over-cap");
    assert.equal(long.text, "");
    assert.match(long.invalidReason ?? "", /5000 characters, over the 2000-character cap/);
  });

  it("counts characters, not UTF-16 units, against the cap", () => {
    const r = parseRemark(`<remark>a${"😀".repeat(MAX_REMARK_CHARS - 1)}</remark>`);
    assert.equal(r.valid, true, "2,000 characters (3,999 UTF-16 units)");
    assert.equal(parseRemark(`<remark>a${"😀".repeat(MAX_REMARK_CHARS)}</remark>`).failure, "over-cap");
  });

  it("an empty remark, or one without a letter or digit, is invalid", () => {
    assert.equal(parseRemark("<remark></remark>").failure, "empty-tag");
    assert.equal(parseRemark("<remark>   \n </remark>").failure, "empty-tag");
    assert.equal(parseRemark("<remark> ... !? </remark>").failure, "empty-tag");
    assert.equal(parseRemark("<remark>4</remark>").valid, true);
  });

  it("a remark holding another tag, or nested in another <remark>, is invalid", () => {
    for (const r of [
      "<remark><action>move south</action></remark>",
      "<remark>I went <action>move south</action> twice</remark>",
      "<remark>the </action> was wrong</remark>",
      "<remark>note<br/>more</remark>",
      '<remark>see <a href="x">here</a></remark>',
      "<remark>outer <remark>inner</remark> rest</remark>",
      "<remark><remark>doubled</remark></remark>",
    ]) {
      const j = parseRemark(r);
      assert.equal(j.valid, false, r);
      assert.equal(j.failure, "markup", r);
    }
    assert.match(parseRemark("<remark><action>move south</action></remark>").invalidReason ?? "", /<action>/);
    // Comparisons and arrows are not markup.
    assert.equal(parseRemark("<remark>x < 3 and y > 2; go -> east</remark>").valid, true);
    // Tags outside the first remark are not its content.
    assert.equal(
      parseRemark("<remark>The kitchen was empty.</remark><action>move south</action>").valid,
      true,
    );
  });
});

describe("tag parsing on random strings", () => {
  const pieces = [
    "<think>",
    "</think>",
    "<action>",
    "</action>",
    "<remark>",
    "</remark>",
    "<",
    ">",
    "/",
    "a",
    " ",
    "\n",
    "BET",
    "(1,2)",
    "\ud800",
    "😀",
    "<THINK>",
  ];
  it("never throws and agrees with a naive reference on 10,000 strings", () => {
    const rng = Rng.seeded("tags-fuzz");
    for (let i = 0; i < 10_000; i++) {
      const n = rng.int(12);
      let s = "";
      for (let j = 0; j < n; j++) s += rng.pick(pieces);
      const r = extractTag(s, "action");
      // Naive reference: answer, then the shortest <action>…</action> span starting at the latest
      // opener before the first closer that has an opener before it.
      const lower = s.toLowerCase();
      const lastClose = lower.lastIndexOf("</think>");
      const ans = lastClose < 0 ? s : s.slice(lastClose + 8);
      let expected: string | null;
      if (ans.toLowerCase().includes("<think>")) expected = null;
      else {
        const m = /<action>((?:(?!<action>)[\s\S])*?)<\/action>/i.exec(ans);
        expected = m ? m[1].trim() : null;
        if (expected === "") expected = null;
      }
      assert.equal(r.ok ? r.content : null, expected, JSON.stringify(s));
      parseRemark(s);
    }
  });
});
