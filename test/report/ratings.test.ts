import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { buildReport } from "../../src/report/markdown.js";
import { finalRating, isRated, ratingChart, ratingTable } from "../../src/report/ratings.js";
import type { RunSummary } from "../../src/train/summary.js";
import { type DashboardHandle, startDashboard } from "../../src/web/server.js";
import { makeSummary } from "./fixtures.js";

/**
 * A fixture run whose iterations carry league ratings: the agent's rating climbs by `step` per
 * iteration with a shrinking sigma; the scripted opponents `aggressive` and `cfr` hold still, and
 * the pool's newest snapshot is the one taken after every second iteration.
 */
function rated(name: string, seed: number, step: number, iterations = 6): RunSummary {
  const s = makeSummary({ name, seed, iterations, opponents: ["aggressive", "cfr"] });
  s.history = s.history.map((h, i) => {
    const newest = 2 * Math.floor(i / 2);
    return {
      ...h,
      "rating/agent": 25 + step * (i + 1),
      "rating/agent_sigma": 6 / (i + 1),
      "rating/aggressive": 24,
      "win_prob/aggressive": 0.5 + 0.05 * i,
      "rating/cfr": 30,
      "win_prob/cfr": 0.2 + 0.01 * i,
      [`rating/snapshot:${newest}`]: 25 + step * newest,
      [`win_prob/snapshot:${newest}`]: 0.5 + 0.02 * (i - newest),
      "league/newest": newest,
      "league/snapshots": newest / 2 + 1,
    };
  });
  return s;
}

describe("league ratings in the report", () => {
  it("the final rating is the last rated iteration's, with mu ± 1.96 sigma and the newest snapshot's P(win)", () => {
    const f = finalRating(rated("mage-league", 0, 0.5))!;
    assert.equal(f.iteration, 6);
    assert.equal(f.mu, 28);
    assert.ok(Math.abs(f.sigma - 1) < 1e-12);
    assert.ok(Math.abs(f.lo - 26.04) < 1e-9 && Math.abs(f.hi - 29.96) < 1e-9);
    assert.equal(f.newest, "snapshot:4");
    assert.deepEqual(Object.keys(f.winProb).sort(), ["aggressive", "cfr", "newest snapshot"]);
    assert.ok(Math.abs(f.winProb["newest snapshot"] - 0.52) < 1e-12);
    assert.ok(Math.abs(f.winProb.aggressive - 0.75) < 1e-12);
    assert.equal(finalRating(makeSummary({ name: "fixed" })), null);
    assert.equal(isRated(makeSummary({ name: "fixed" })), false);
  });

  it("a table row per rated run, unrated runs left out; no table without ratings", () => {
    const t = ratingTable([
      { label: "mage-league", runs: [rated("mage-league", 0, 0.5), rated("mage-league", 1, 1)] },
      { label: "mage", runs: [makeSummary({ name: "mage" })] },
    ])!;
    const lines = t.split("\n");
    assert.equal(lines.length, 4, "head, separator, two rated runs");
    assert.match(
      lines[0],
      /\| method \| seed \| iteration \| agent rating \[95%\] \| P\(win\) vs aggressive \| P\(win\) vs cfr \| P\(win\) vs newest snapshot \|/,
    );
    assert.equal(
      lines[2],
      "| mage-league | 0 | 6 | 28.00 [26.04, 29.96] | 75.0% | 25.0% | 52.0% (snapshot:4) |",
    );
    assert.match(lines[3], /^\| mage-league \| 1 \| 6 \| 31\.00 \[29\.04, 32\.96\] \|/);
    assert.equal(ratingTable([{ label: "mage", runs: [makeSummary({ name: "mage" })] }]), null);
  });

  it("plots the agent's rating per iteration, one run shaded by its interval", () => {
    const svg = ratingChart(
      [{ label: "mage-league", runs: [rated("mage-league", 0, 0.5)] }],
      "agent rating",
    )!;
    assert.match(svg, /^<svg/);
    assert.match(svg, /mage-league \(agent\)/);
    assert.match(svg, />aggressive</, "one method: the scripted opponents' ratings beside");
    assert.match(svg, /<polygon [^>]*fill-opacity/, "a shaded band");
    assert.equal(ratingChart([{ label: "mage", runs: [makeSummary({ name: "mage" })] }], "x"), null);
    // The line follows the ratings: another climb draws another plot.
    const flat = ratingChart([{ label: "a", runs: [rated("a", 0, 0)] }], "t")!;
    assert.notEqual(flat, ratingChart([{ label: "a", runs: [rated("a", 0, 1)] }], "t"));
  });

  it("mage report has a League ratings section and plot only for rated runs", () => {
    const runs = [
      { path: "a/summary.json", summary: rated("mage-league", 0, 0.5) },
      { path: "b/summary.json", summary: makeSummary({ name: "mage" }) },
    ];
    const report = buildReport(runs, { plotsLink: "plots" });
    assert.match(report.markdown, /### League ratings/);
    assert.match(report.markdown, /\| mage-league \| 0 \| 6 \| 28\.00 \[26\.04, 29\.96\] \|/);
    assert.ok(
      !/\| mage \| 0 \|[^\n]*\[/.test(report.markdown.split("### League ratings")[1].split("\n\n")[2]),
    );
    assert.ok(report.plots.some((p) => p.file === "kuhn-rating.svg"));
    assert.match(report.markdown, /!\[agent rating over iterations — kuhn\]\(plots\/kuhn-rating\.svg\)/);
    const plain = buildReport([runs[1]], { plotsLink: "plots" });
    assert.ok(!plain.markdown.includes("League ratings"));
    assert.ok(!plain.plots.some((p) => p.file.includes("rating")));
    // Snapshots get no per-opponent training curve of their own.
    assert.ok(!report.plots.some((p) => p.file.includes("snapshot")));
  });
});

describe("league ratings on the dashboard", () => {
  let dash: DashboardHandle;
  before(async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-dashboard-league-"));
    const dir = join(root, "league-run");
    mkdirSync(dir);
    writeFileSync(join(dir, "summary.json"), JSON.stringify(rated("mage-league", 0, 0.5)));
    dash = await startDashboard({ roots: [root], port: 0, now: () => Date.now(), cwd: root });
  });
  after(() => dash.close());

  it("a rated run's page shows the league table and serves the rating plot", async () => {
    const res = await fetch(new URL("/run?id=league-run", dash.url));
    const text = await res.text();
    assert.equal(res.status, 200);
    assert.match(text, /<h3>League ratings<\/h3>/);
    assert.match(text, /<td[^>]*>28\.00 \[26\.04, 29\.96\]<\/td>/);
    assert.match(text, /52\.0% \(snapshot:4\)/);
    const img = /<img src="([^"]*kuhn-rating\.svg[^"]*)"/.exec(text);
    assert.ok(img, "the rating plot is on the page");
    const plot = await fetch(new URL(img[1].replace(/&amp;/g, "&"), dash.url));
    assert.equal(plot.status, 200);
    assert.match(await plot.text(), /mage-league \(agent\)/);
  });
});
