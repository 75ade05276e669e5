import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { medianIterationSeconds } from "../../src/report/bf16-targets.js";
import { HierarchicalBootstrap } from "../../src/report/bootstrap.js";
import { experimentGames } from "../../src/report/compare.js";
import type { Experiment } from "../../src/report/experiments.js";
import { computeTargets, type TargetLine } from "../../src/report/targets.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";
import { metricsOf } from "./histograms.js";

const LABEL = "bf16 + upper-layer LoRA (real LLM, Kuhn)";
const CELLS = [
  { opponent: "cfr", seat: "second" as const, unseen: true },
  { opponent: "intermediate", seat: "first" as const, unseen: false },
];

/** A recipe: of 400 trials, how many end on +1 chip (the rest on −1); `step` seconds an iteration. */
interface Recipe {
  wins: number;
  step: number;
}

function summary(name: string, seed: number, r: Recipe): RunSummary {
  const s = makeSummary({ name, seed, game: "kuhn", cells: CELLS, iterations: 4, evalEvery: 0 });
  // Seeds shift every recipe alike: differences between recipes are the same on every seed.
  const wins = r.wins + 10 * seed;
  const metrics = metricsOf({ W1: wins, "L-1 L-1 L-1": 400 - wins });
  return {
    ...s,
    history: s.history.map((h, i) => ({ ...h, wall_s: 30 + i * r.step + (i === 2 ? 1 : 0) })),
    finalEval: {
      iteration: 4,
      attempts: 3,
      trialsPerCell: 400,
      cells: CELLS.map((c) => ({ ...c, metrics })),
    },
  };
}

function grid(recipes: Record<string, Recipe>, name = "kuhn-real-bf16"): Experiment {
  const runs = Object.entries(recipes).flatMap(([m, r]) =>
    [0, 1, 2].map((seed) => ({ path: `/x/${name}/${m}-s${seed}.json`, summary: summary(m, seed, r) })),
  );
  return { name, dir: `/x/${name}`, info: null, runs, diversity: [] };
}

function lines(e: Experiment): TargetLine[] {
  const all = computeTargets({
    bootstrap: new HierarchicalBootstrap(),
    games: experimentGames(e),
    diversity: [],
  });
  return all.filter((l) => l.game === LABEL);
}

const find = (ls: TargetLine[], re: RegExp) => {
  const found = ls.filter((l) => re.test(l.target));
  assert.equal(found.length, 1, `one line matching ${re}`);
  return found[0];
};
const HOLDS = /learning holds/;
const REF = /f32-all final chips − the warm start's/;
const CHEAP = /bf16-upper final chips − the warm start's/;

describe("issue 56 part 6: bf16 and upper-layer LoRA", () => {
  it("says learning holds when both recipes beat the base and bf16 is not clearly worse", () => {
    const ls = lines(
      grid({
        base: { wins: 100, step: 0 },
        "f32-all": { wins: 200, step: 40 },
        "bf16-upper": { wins: 195, step: 20 },
      }),
    );
    assert.equal(ls.length, 3);
    assert.equal(find(ls, REF).verdict, "met");
    assert.equal(find(ls, CHEAP).verdict, "met");
    // 100 more of 400 trials end on +1 instead of −1: +0.5 chips.
    assert.match(find(ls, REF).measured, /^\+?0\.500 \[[^\]]+\] \(3 seeds\); median iteration 40\.0 s$/);
    assert.match(find(ls, CHEAP).measured, /median iteration 20\.0 s$/);
    assert.equal(find(ls, HOLDS).verdict, "met");
  });

  it("misses when bf16 learns less than float32 on every seed", () => {
    const ls = lines(
      grid({
        base: { wins: 100, step: 0 },
        "f32-all": { wins: 260, step: 40 },
        "bf16-upper": { wins: 180, step: 20 },
      }),
    );
    assert.equal(find(ls, CHEAP).verdict, "met");
    const t = find(ls, HOLDS);
    assert.equal(t.verdict, "missed");
    assert.match(t.measured, /^bf16-upper − f32-all -0\.400 /);
  });

  it("cannot judge when float32 itself does not beat the base", () => {
    const ls = lines(
      grid({
        base: { wins: 200, step: 0 },
        "f32-all": { wins: 190, step: 40 },
        "bf16-upper": { wins: 200, step: 20 },
      }),
    );
    assert.equal(find(ls, REF).verdict, "missed");
    assert.equal(find(ls, HOLDS).verdict, "not judged");
  });

  it("says not run before the grid has summaries, and ignores other Kuhn grids", () => {
    const ls = lines(
      grid({ base: { wins: 100, step: 0 }, "f32-all": { wins: 200, step: 40 } }, "kuhn-other"),
    );
    assert.equal(ls.length, 3);
    for (const l of ls) {
      assert.equal(l.verdict, "not run");
      assert.match(l.measured, /configs\/experiments\/kuhn-real-bf16\.yaml/);
    }
  });

  it("takes the median gap between iterations, leaving out the first iteration's start-up", () => {
    const s = summary("f32-all", 0, { wins: 1, step: 10 });
    // wall_s 30, 40, 51, 60: gaps 10, 11, 9.
    assert.equal(
      medianIterationSeconds({
        experiment: "e",
        game: "kuhn",
        name: "f32-all",
        runs: [{ path: "p", summary: s }],
      }),
      10,
    );
  });
});
