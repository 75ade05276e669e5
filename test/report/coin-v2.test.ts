import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { HierarchicalBootstrap } from "../../src/report/bootstrap.js";
import { experimentGames } from "../../src/report/compare.js";
import type { Experiment } from "../../src/report/experiments.js";
import { buildResults } from "../../src/report/results.js";
import { computeTargets, type TargetLine } from "../../src/report/targets.js";
import { type CoinV2Spec, coinV2Grid, stopEarly } from "./coin-v2-fixture.js";

const V2 = "coin collector v2 (real LLM, 8 rooms)";

function targets(e: Experiment[]): TargetLine[] {
  return computeTargets({
    bootstrap: new HierarchicalBootstrap(),
    games: e.flatMap(experimentGames),
    diversity: [],
  });
}

function v2(lines: TargetLine[], match: RegExp): TargetLine {
  const found = lines.filter((l) => l.game === V2 && match.test(l.target));
  assert.equal(found.length, 1, `one v2 target matching ${match}`);
  return found[0];
}

const MEMORY_T = /^test seeds: MAGE with its memory − the same model retried independently/;
const LAMER_MEMORY_T = /^test seeds: LaMer-style with its memory/;

/** Memory helps every method that has it: 250 more trials won at attempt 2 with it than without. */
const helps: Record<string, CoinV2Spec> = {
  mage: { late: 300, independent: 50 },
  "mage-history": { late: 200, independent: 50, harder: 150 },
  "mage-both": { late: 350, independent: 50, harder: 100 },
  lamer: { late: 250, independent: 50 },
  reflexion: { late: 100, independent: 50 },
  grpo: { late: 0 },
  gigpo: { late: 0 },
  zeroshot: { late: 20 },
};

const md = (e: Experiment[]) => buildResults(e, { plotsLink: "." }).markdown;

describe("issue 56's coin-collector v2 targets", () => {
  it("meets 'memory − retried independently' when the final evaluation wins more than its replay", () => {
    const lines = targets([coinV2Grid(helps)]);
    const t = v2(lines, MEMORY_T);
    assert.equal(t.verdict, "met");
    // 300 − 50 late wins of 1,000 on every seed: +25 points, with memory 60% (mean over seeds 0–2).
    assert.match(
      t.measured,
      /^with memory 61\.0%, retried independently 36\.0%; difference 25\.0% \[[^\]]+\] \(3 seeds\)$/,
    );
    assert.equal(v2(lines, LAMER_MEMORY_T).verdict, "met");
    assert.equal(v2(lines, /^test seeds: MAGE in-trial gain/).verdict, "met");
    assert.equal(v2(lines, /^test seeds: MAGE − GiGPO/).verdict, "met");
    assert.equal(v2(lines, /^harder set \(more rooms\): MAGE − zero-shot/).verdict, "met");
  });

  it("misses it with the sign of the difference when memory hurts", () => {
    const lines = targets([coinV2Grid({ ...helps, mage: { late: 50, independent: 300 } })]);
    const t = v2(lines, MEMORY_T);
    assert.equal(t.verdict, "missed");
    assert.match(t.measured, /difference -25\.0% \[/);
  });

  it("says not run where the summaries carry no independent evaluation", () => {
    const lines = targets([coinV2Grid({ ...helps, mage: { late: 300, independent: null } })]);
    const t = v2(lines, MEMORY_T);
    assert.equal(t.verdict, "not run");
    assert.match(t.measured, /no mage summaries with both a final and an independent evaluation/);
    assert.equal(v2(lines, LAMER_MEMORY_T).verdict, "met", "LaMer-style's runs still have theirs");
  });

  it("leaves an incomplete run's seed out of its within-run pair, and cannot judge one seed", () => {
    const lines = targets([stopEarly(coinV2Grid(helps), "mage", [1])]);
    const t = v2(lines, MEMORY_T);
    assert.equal(t.verdict, "met");
    assert.match(t.measured, /\(2 paired seeds; seed 1 left out: mage stopped at 1 of 2 iterations\)$/);
    // Seeds 0 and 2 kept: with memory (300 + 320) / 2 late wins.
    assert.match(t.measured, /^with memory 61\.0%, retried independently 36\.0%;/);
    assert.match(v2(lines, /^test seeds: MAGE − GiGPO/).measured, /seed 1 left out: mage stopped at 1 of 2/);
    const two = v2(targets([stopEarly(coinV2Grid(helps), "mage", [1, 2])]), MEMORY_T);
    assert.equal(two.verdict, "not judged");
    assert.match(two.measured, /\(1 paired seed; seed 1 left out: .*; seed 2 left out: /);
  });

  it("without the grid every v2 target is not run, naming the grid file, and issue 45's lines read their own grid", () => {
    const lines = targets([]);
    const mine = lines.filter((l) => l.game === V2);
    assert.equal(mine.length, 14);
    for (const l of mine) {
      assert.equal(l.verdict, "not run", l.target);
      assert.match(l.measured, /no coin-real-v2 summaries \(configs\/experiments\/coin-real-v2\.yaml\)/);
    }
    const doc = md([]);
    assert.match(
      doc,
      /\n## Coin collector v2 \(real LLM, 8 rooms\)\n\nNot run: no summaries of `coin-real-v2` yet/,
    );
    // Issue 45's grid alone: the v2 lines stay not run, and v1's do not read the v2 grid.
    const v1Only = targets([coinV2Grid(helps, "coin-real-main")]);
    assert.ok(v1Only.filter((l) => l.game === V2).every((l) => l.verdict === "not run"));
    const both = targets([coinV2Grid(helps, "coin-real-main"), coinV2Grid({ ...helps, mage: { late: 0 } })]);
    const v1Gain = both.find(
      (l) => l.game === "coin collector (real LLM)" && /^test seeds: MAGE in-trial/.test(l.target),
    );
    assert.equal(v1Gain?.verdict, "met");
    assert.equal(v2(both, /^test seeds: MAGE in-trial gain/).verdict, "missed");
  });

  it("shows what memory adds per method and which memory mode wins, and gives the grid its summary row", () => {
    const doc = md([coinV2Grid(helps)]);
    const section = doc.slice(doc.indexOf("## Experiment `coin-real-v2`"));
    assert.ok(!doc.includes("## Coin collector v2 (real LLM, 8 rooms)"), "no stub once the grid has run");
    assert.match(section, /### What memory adds/);
    assert.match(
      section,
      /\| mage \| reflection_only \| 3 \| 61\.0% \[[^|]*\| 36\.0% \[[^|]*\| \*\*25\.0% \[[^|]*\*\* \|/,
    );
    assert.match(section, /\| mage-both \| history_and_reflection \| 3 \| /);
    assert.match(section, /\| reflexion \| reflection_only \| 3 \| /);
    assert.ok(!/\| gigpo \| none \|/.test(section), "methods without memory have no row");
    assert.match(section, /### Which memory mode wins/);
    assert.match(
      section,
      /- test seeds: best by mean `mage-both` \(history_and_reflection\) at 66\.0%; mage-both − mage 5\.0% \[[^\]]+\] \(3 seeds\); mage-both − mage-history 15\.0% \[/,
    );
    assert.match(section, /- harder set: best by mean `mage` \(reflection_only\) at 61\.0%;/);
    const row = doc.split("\n").find((l) => l.startsWith("| [`coin-real-v2`](#experiment-coin-real-v2)"));
    assert.match(
      row ?? "",
      /\| coin collector v2 \(real LLM, 8 rooms\) \| 14 of 14 \| test seeds: MAGE with its memory/,
    );
  });

  it("says which seeds the memory table left out", () => {
    const doc = md([stopEarly(coinV2Grid(helps), "lamer", [2])]);
    assert.match(doc, /\| lamer \| reflection_only \| 2 \| /);
    assert.match(doc, /\n- lamer: seed 2 left out: lamer stopped at 1 of 2 iterations/);
  });
});
