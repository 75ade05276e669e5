import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { remarkRatesTable } from "../../src/web/pages.js";
import { makeSummary } from "../report/fixtures.js";

describe("dashboard: remark rates", () => {
  it("tables the training iterations' and the newest evaluation's valid and informative remark rates", () => {
    const s = makeSummary({ name: "mage", iterations: 12 });
    s.history.forEach((h, i) => {
      h.valid_reflection = i < 11 ? 0.5 : 0.9;
      h.informative_reflection = 0.25;
    });
    const snap = s.finalEval ?? s.periodicEval[s.periodicEval.length - 1];
    snap.cells[0].metrics = {
      ...snap.cells[0].metrics,
      reflections: 40,
      validReflectionRate: 0.75,
      informativeReflectionRate: 0.4,
    };
    const html = remarkRatesTable(s);
    assert.match(html, /<th>valid remarks<\/th><th>informative remarks<\/th>/);
    assert.match(
      html,
      /training, iteration 11<\/td><td class="num">[\d.]+%<\/td><td class="num">90\.0%<\/td><td class="num">25\.0%<\/td>/,
    );
    // The mean of the last 10 iterations: nine at 50%, one at 90%.
    assert.match(html, /mean of the last 10<\/td><td class="num">[\d.]+%<\/td><td class="num">54\.0%<\/td>/);
    assert.match(
      html,
      /\(40 remarks\)<\/span><\/td><td class="num">[\d.]+%<\/td><td class="num">75\.0%<\/td><td class="num">40\.0%<\/td>/,
    );
    assert.equal((html.match(/remarks\)<\/span>/g) ?? []).length, 1, "only the cells that have rates");
  });

  it("is empty for a run that recorded no remark rate", () => {
    assert.equal(remarkRatesTable(makeSummary({ name: "old" })), "");
  });

  it("shows a dash where the task has no informative rule", () => {
    const s = makeSummary({ name: "sokoban" });
    for (const h of s.history) h.valid_reflection = 1;
    assert.match(
      remarkRatesTable(s),
      /training, iteration \d+<\/td><td class="num">[\d.]+%<\/td><td class="num">100\.0%<\/td><td class="num">–<\/td>/,
    );
  });
});
