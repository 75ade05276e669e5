import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { HierarchicalBootstrap } from "../../src/report/bootstrap.js";
import { experimentGames } from "../../src/report/compare.js";
import { type Experiment, type ExploitabilityFile, loadExperiments } from "../../src/report/experiments.js";
import { seedPairedDifference } from "../../src/report/league-targets.js";
import { computeTargets, type TargetLine } from "../../src/report/targets.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";
import { metricsOf } from "./histograms.js";

const KUHN = "league vs fixed population (Kuhn)";
const TTT = "league vs fixed population (TicTacToe)";
const CELLS = [
  { opponent: "cfr", seat: "second" as const, unseen: true },
  { opponent: "snapshot:latest", seat: "second" as const, unseen: true },
];

/** A run whose final evaluation wins `wins` of 400 trials (+1 chip) and loses the rest (−1) in every cell. */
function summary(name: string, seed: number, wins: number): RunSummary {
  const s = makeSummary({ name, seed, game: "kuhn", cells: [CELLS[0]], iterations: 4, evalEvery: 0 });
  const w = wins + 7 * seed;
  const metrics = metricsOf({ W1: w, "L-1 W1": 40, "L-1 L-1 L-1": 360 - w });
  return {
    ...s,
    finalEval: {
      iteration: 4,
      attempts: 3,
      trialsPerCell: 400,
      cells: CELLS.map((c) => ({ ...c, metrics })),
    },
  };
}

function grid(
  wins: { mage: number; "mage-league": number },
  exploitability: { mage: number; "mage-league": number }[] = [],
  name = "kuhn-league",
): Experiment {
  const runs = Object.entries(wins).flatMap(([m, w]) =>
    [0, 1, 2].map((seed) => ({ path: `/x/${name}/${m}-s${seed}.json`, summary: summary(m, seed, w) })),
  );
  const files: ExploitabilityFile[] = exploitability.flatMap((e, seed) =>
    (["mage", "mage-league"] as const).map((m) => ({
      path: `/x/${name}/exploitability/${m}-s${seed}.json`,
      label: m,
      seed,
      exploitability: e[m],
    })),
  );
  return { name, dir: `/x/${name}`, info: null, runs, diversity: [], exploitability: files };
}

function lines(...es: Experiment[]): TargetLine[] {
  return computeTargets({
    bootstrap: new HierarchicalBootstrap({ resamples: 400 }),
    games: es.flatMap(experimentGames),
    diversity: [],
  });
}

const find = (ls: TargetLine[], game: string, re: RegExp) => {
  const found = ls.filter((l) => l.game === game && re.test(l.target));
  assert.equal(found.length, 1, `one ${game} line matching ${re}`);
  return found[0];
};

describe("league targets (issue 59 part 4)", () => {
  it("not run without the grids' summaries", () => {
    const ls = lines({ name: "other", dir: "/x/other", info: null, runs: [], diversity: [] });
    for (const re of [/final chips/, /exploitability/, /own newest snapshot/])
      assert.equal(find(ls, KUHN, re).verdict, "not run");
    assert.equal(find(ls, TTT, /MCTS-100/).verdict, "not run");
  });

  it("met when the league wins clearly more chips vs cfr and is less exploitable on every seed", () => {
    const ls = lines(
      grid({ mage: 100, "mage-league": 220 }, [
        { mage: 0.3, "mage-league": 0.2 },
        { mage: 0.25, "mage-league": 0.2 },
        { mage: 0.4, "mage-league": 0.3 },
      ]),
    );
    const chips = find(ls, KUHN, /final chips/);
    assert.equal(chips.verdict, "met", chips.measured);
    assert.match(chips.measured, /^mage-league − mage \+0\.600 \[/, "(220 − 100) × 2 / 400 chips");
    const ex = find(ls, KUHN, /exploitability/);
    assert.equal(ex.verdict, "met", ex.measured);
    assert.match(ex.measured, /mage 0\.3167, mage-league 0\.2333 \(means\); fixed − league 0\.0833 \[/);
    const gain = find(ls, KUHN, /own newest snapshot/);
    assert.equal(gain.verdict, "met");
    assert.match(gain.measured, /^mage .*; mage-league /);
  });

  it("missed when the league is worse vs cfr, or more exploitable on some seed", () => {
    const ls = lines(
      grid({ mage: 200, "mage-league": 120 }, [
        { mage: 0.3, "mage-league": 0.2 },
        { mage: 0.25, "mage-league": 0.35 },
        { mage: 0.4, "mage-league": 0.3 },
      ]),
    );
    assert.equal(find(ls, KUHN, /final chips/).verdict, "missed");
    const ex = find(ls, KUHN, /exploitability/);
    assert.equal(ex.verdict, "missed", ex.measured);
    assert.match(ex.note ?? "", /does not lie above 0/);
  });

  it("a league grid is no main comparison: the main Kuhn targets do not read it", () => {
    const ls = lines(grid({ mage: 100, "mage-league": 220 }));
    const main = ls.find((l) => l.game === "kuhn" && /MAGE in-trial gain/.test(l.target));
    assert.equal(main?.verdict, "not run");
    assert.equal(main?.measured, "no Kuhn MAGE summaries");
  });

  it("the seed-paired interval resamples seeds: equal differences give a point, spread ones an interval around the mean", () => {
    const same = seedPairedDifference([
      { seed: 0, value: 0.1 },
      { seed: 1, value: 0.1 },
    ]);
    assert.deepEqual(
      [same.lo, same.mean, same.hi].map((x) => x.toFixed(6)),
      ["0.100000", "0.100000", "0.100000"],
    );
    const spread = seedPairedDifference([
      { seed: 2, value: -0.1 },
      { seed: 0, value: 0.2 },
      { seed: 1, value: 0.5 },
    ]);
    assert.deepEqual(spread.seeds, [0, 1, 2]);
    assert.ok(Math.abs(spread.mean - 0.2) < 1e-12);
    assert.ok(spread.lo < 0.2 && spread.hi > 0.2 && spread.lo > -0.1 - 1e-9 && spread.hi < 0.5 + 1e-9);
    assert.ok(Number.isNaN(seedPairedDifference([]).mean));
  });

  it("mage exploitability --out writes what mage report loads beside a grid's summaries", () => {
    const root = mkdtempSync(join(tmpdir(), "mage-league-targets-"));
    const dir = join(root, "kuhn-league");
    mkdirSync(join(dir, "exploitability"), { recursive: true });
    writeFileSync(join(dir, "mage-s0.json"), JSON.stringify(summary("mage", 0, 100)));
    const out = join(dir, "exploitability", "mage-s0.json");
    const res = spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "exploitability",
        "--policy",
        "always-bet",
        "--out",
        out,
        "--json",
      ],
      { encoding: "utf8" },
    );
    assert.equal(res.status, 0, res.stderr);
    const printed = JSON.parse(res.stdout) as { exploitability: number };
    const { experiments } = loadExperiments(root);
    const files = experiments[0].exploitability ?? [];
    assert.equal(files.length, 1);
    assert.equal(files[0].label, "mage");
    assert.equal(files[0].seed, 0);
    assert.equal(files[0].exploitability, printed.exploitability);
    assert.ok(printed.exploitability > 0.1, "always betting is exploitable");
  });
});
