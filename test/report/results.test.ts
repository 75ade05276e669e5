import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { command } from "../../src/cli/commands/report.js";
import type { CellResult } from "../../src/evaluate/evaluate.js";
import { kuhnCalibration } from "../../src/evaluate/kuhn-calibration.js";
import { HierarchicalBootstrap } from "../../src/report/bootstrap.js";
import { experimentGames, methodSettings } from "../../src/report/compare.js";
import { type Experiment, isExperimentsFolder, loadExperiments } from "../../src/report/experiments.js";
import { loadSummaries } from "../../src/report/load.js";
import { buildResults } from "../../src/report/results.js";
import { computeTargets, mainExperiment, type TargetLine } from "../../src/report/targets.js";
import { type MageConfig, validateConfig } from "../../src/train/config.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";
import { metricsOf } from "./histograms.js";
import { checkXml } from "./xml.js";

const roots: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "mage-results-test-"));
  roots.push(d);
  return d;
}
after(() => {
  for (const d of roots) rmSync(d, { recursive: true, force: true });
});

function put(path: string, value: unknown): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, typeof value === "string" ? value : `${JSON.stringify(value)}\n`);
}

const N = 1000;

/** Kuhn trials with in-trial gain `gain` (a fraction of trials go −2 → −1) and final `final`. */
function kuhnOutcomes(gain: number, final: number): Record<string, number> {
  // "L-2 L-1 L-1": gain +1, final −1; "W1": final +1; "L-1 L-1 L-1": final −1; "D0 D0 D0": 0.
  const up = Math.round(gain * N);
  const lose = Math.max(200, Math.ceil(-final * N) + 100);
  const win = Math.round(final * N) + lose + up;
  const draw = N - up - lose - win;
  assert.ok(win >= 0 && draw >= 0, `feasible histogram for gain ${gain}, final ${final}`);
  return { "L-2 L-1 L-1": up, "L-1 L-1 L-1": lose, W1: win, "D0 D0 D0": draw };
}

function cell(
  opponent: string,
  seat: string,
  unseen: boolean,
  outcomes: Record<string, number>,
  attempts = 3,
): CellResult {
  return { opponent, seat, unseen, metrics: metricsOf(outcomes, attempts) };
}

interface MethodSpec {
  /** In-trial gain and final chips vs cfr (agent second), per seed (seed index → shift). */
  gain: number;
  final: number;
  /** Final chips vs conservative (agent second), the seen pool cell. */
  pool?: number;
  /** Test-time scaling: success@5 − success@3 share of trials won at attempt 4. */
  scaling?: number;
  /** A second scaling cell (cfr, agent first), as `scaling`. */
  scalingFirst?: number;
}

function summaryOf(name: string, seed: number, m: MethodSpec, withScaling: boolean): RunSummary {
  const base = makeSummary({
    name,
    seed,
    iterations: 6,
    evalEvery: 0,
    finalTrials: 4,
    opponents: ["conservative", "aggressive", "intermediate"],
    cells: [{ opponent: "cfr", seat: "second", unseen: true }],
  });
  const jitter = 0.01 * (seed - 1);
  const cells = [cell("cfr", "second", true, kuhnOutcomes(m.gain + jitter, m.final + jitter))];
  if (m.pool !== undefined) cells.push(cell("conservative", "second", false, kuhnOutcomes(0, m.pool)));
  const s: RunSummary = {
    ...base,
    finalEval: { iteration: 6, attempts: 3, trialsPerCell: N, cells },
  };
  if (withScaling) {
    const late = Math.round((m.scaling ?? 0) * N);
    s.scalingEval = {
      iteration: 6,
      attempts: 5,
      trialsPerCell: N,
      cells: [
        cell(
          "cfr",
          "second",
          true,
          { W1: 300, "L-1 L-1 L-1 W1": late, "L-1 L-1 L-1 L-1 L-1": N - 300 - late },
          5,
        ),
      ],
    };
    if (m.scalingFirst !== undefined) {
      const lateFirst = Math.round(m.scalingFirst * N);
      s.scalingEval.cells.push(
        cell(
          "cfr",
          "first",
          true,
          { W1: 300, "L-1 L-1 L-1 W1": lateFirst, "L-1 L-1 L-1 L-1 L-1": N - 300 - lateFirst },
          5,
        ),
      );
    }
  }
  return s;
}

function experimentOf(
  name: string,
  methods: Record<string, MethodSpec>,
  o: { scaling?: boolean; base?: string } = {},
): Experiment {
  const runs = Object.entries(methods).flatMap(([m, spec]) =>
    [0, 1, 2].map((seed) => {
      const summary = summaryOf(m, seed, spec, o.scaling ?? false);
      const checkpoint = `runs/pretrained/kuhn-tiny-${o.base ?? "b1"}-s${seed}`;
      summary.config = { ...summary.config, model: { ...summary.config.model, checkpoint } };
      return { path: `/x/${name}/${m}-s${seed}.json`, summary };
    }),
  );
  return { name, dir: `/x/${name}`, info: null, runs, diversity: [] };
}

/** A run on the served coin collector (one cell, no opponent), from the puzzle fixture's history. */
function coinSummary(method: string, seed: number): RunSummary {
  const base = makeSummary({
    name: method,
    seed,
    game: "sokoban",
    opponents: [],
    cells: [{ opponent: "none", seat: "none", unseen: false }],
    iterations: 2,
    evalEvery: 0,
  });
  const config = validateConfig({
    ...base.config,
    game: "remote",
    env: { url: "http://127.0.0.1:1", name: "twx-coin" },
  });
  return { ...base, game: "twx-coin", config };
}

function targets(e: Experiment[]): TargetLine[] {
  return computeTargets({
    bootstrap: new HierarchicalBootstrap(),
    games: e.flatMap(experimentGames),
    diversity: e.flatMap((x) => x.diversity),
  });
}

function verdict(lines: TargetLine[], match: RegExp): TargetLine {
  const l = lines.find((x) => match.test(x.target));
  assert.ok(l, `a target matching ${match}`);
  return l;
}

const best = kuhnCalibration().fixed.find((r) => r.opponent === "conservative" && r.seat === "second")!.best;

describe("results targets are computed from the data", () => {
  it("flip from met to missed when MAGE's numbers change", () => {
    const good = targets([
      experimentOf("main", {
        mage: { gain: 0.15, final: 0.02, pool: best - 0.03 },
        lamer: { gain: 0.06, final: -0.05 },
        grpo: { gain: 0.01, final: -0.15 },
        gigpo: { gain: 0.03, final: -0.1 },
      }),
    ]);
    assert.equal(verdict(good, /in-trial gain ≥ \+0\.100/).verdict, "met");
    assert.equal(verdict(good, /final chips ≥/).verdict, "met");
    assert.equal(verdict(good, /seen pool.*conservative, agent second/).verdict, "met");
    const rl = verdict(good, /best single-episode RL/);
    assert.equal(rl.verdict, "met");
    assert.match(rl.measured, /best baseline gigpo/, "the best baseline by mean gain");
    assert.equal(verdict(good, /LaMer/).verdict, "met");

    const bad = targets([
      experimentOf("main", {
        mage: { gain: 0.05, final: -0.1, pool: best - 0.08 },
        lamer: { gain: 0.06, final: -0.05 },
        grpo: { gain: 0.01, final: -0.15 },
        gigpo: { gain: 0.03, final: -0.1 },
      }),
    ]);
    assert.equal(verdict(bad, /in-trial gain ≥ \+0\.100/).verdict, "missed");
    assert.equal(verdict(bad, /final chips ≥/).verdict, "missed");
    assert.equal(verdict(bad, /seen pool.*conservative, agent second/).verdict, "missed");
    assert.equal(verdict(bad, /best single-episode RL/).verdict, "missed");
    assert.equal(verdict(bad, /LaMer/).verdict, "missed");
    // The measured value is what the data say: 0.05 ± the seed jitter, mean exactly 0.050.
    assert.match(verdict(bad, /in-trial gain ≥ \+0\.100/).measured, /^\+0\.050 \[/);
  });

  it("RL margin: an interval above 0 is not enough when the gain difference is below +0.05", () => {
    const lines = targets([
      experimentOf("main", { mage: { gain: 0.2, final: 0 }, grpo: { gain: 0.17, final: 0 } }),
    ]);
    const rl = verdict(lines, /best single-episode RL/);
    assert.equal(rl.verdict, "missed");
    assert.match(rl.note ?? "", /below 0\.05/);
  });

  it("test-time scaling gives every scaling cell its own verdict", () => {
    const lines = targets([
      experimentOf(
        "main",
        {
          mage: { gain: 0.1, final: 0, scaling: 0, scalingFirst: 0.12 },
          grpo: { gain: 0, final: 0, scaling: 0, scalingFirst: 0.05 },
        },
        { scaling: true },
      ),
    ]);
    const second = verdict(lines, /test-time scaling.*vs grpo, vs cfr, agent second/);
    assert.match(second.note ?? "", /success cannot grow here/);
    assert.equal(verdict(lines, /test-time scaling.*vs grpo, vs cfr, agent first/).verdict, "met");
  });

  it("test-time scaling compares MAGE's attempts 4–5 with each RL baseline's", () => {
    const make = (mage: number) =>
      targets([
        experimentOf(
          "main",
          { mage: { gain: 0.1, final: 0, scaling: mage }, grpo: { gain: 0, final: 0, scaling: 0.05 } },
          { scaling: true },
        ),
      ]);
    assert.equal(verdict(make(0.12), /test-time scaling.*vs grpo/).verdict, "met");
    assert.equal(verdict(make(0.05), /test-time scaling.*vs grpo/).verdict, "missed");
    const flat = verdict(
      targets([
        experimentOf(
          "main",
          { mage: { gain: 0.1, final: 0, scaling: 0 }, grpo: { gain: 0, final: 0, scaling: 0 } },
          { scaling: true },
        ),
      ]),
      /test-time scaling.*vs grpo/,
    );
    assert.equal(flat.verdict, "missed");
    assert.match(flat.note ?? "", /success cannot grow here/);
    assert.match(flat.measured, /chips@5 − @3: MAGE − grpo/);
  });

  it("without data every target says not run", () => {
    const lines = targets([experimentOf("main", { grpo: { gain: 0, final: 0 } })]);
    assert.ok(lines.length >= 10);
    for (const l of lines) assert.equal(l.verdict, "not run", l.target);
    assert.ok(lines.some((l) => l.game === "tictactoe"));
  });
});

describe("results document", () => {
  it("loads an experiments folder with experiment.json and diversity files", () => {
    const root = tempDir();
    const dir = join(root, "kuhn-main");
    const spec = { gain: 0.1, final: 0 };
    put(join(dir, "mage-s0.json"), summaryOf("mage", 0, spec, false));
    put(join(dir, "mage-s1.json"), summaryOf("mage", 1, spec, false));
    put(join(dir, "grpo-s0.json"), summaryOf("grpo", 0, spec, false));
    put(join(dir, "experiment.json"), {
      format: "mage-experiment-v1",
      name: "kuhn-main",
      file: "configs/experiments/kuhn-main.yaml",
      seeds: [0, 1],
      runs: [
        { method: "mage", seed: 0, status: "done", wallSeconds: 300 },
        { method: "grpo", seed: 1, status: "pending", wallSeconds: null },
      ],
      pretrained: [
        { dir: "runs/p", seconds: 120.5, targets: { met: true, missed: [] } },
        {
          dir: "runs/q",
          seconds: 130,
          targets: {
            met: false,
            missed: [
              { name: "play answers well-formed", value: 0.91, threshold: 0.95 },
              { name: "no value", threshold: 0.5 },
            ],
          },
        },
      ],
      wallSeconds: 900,
      totalWallSeconds: 4200,
    });
    const diversity = (seed: number, mean: number) => ({
      format: "mage-diversity-v1",
      policy: "runs/x",
      game: "kuhn",
      opponent: "cfr",
      samples: 200,
      seed,
      cells: [
        {
          seat: "first",
          card: "J",
          samples: 200,
          entropyBits: 1.5,
          firstActionEntropyBits: 1,
          distribution: { PASS: 0.5 },
        },
        {
          seat: "second",
          card: "K",
          samples: 200,
          entropyBits: 0.5,
          firstActionEntropyBits: 0.5,
          distribution: {},
          invalidRate: 0.1,
        },
      ],
      summary: { meanEntropyBits: mean, bySeat: { first: 1.5, second: 0.5 } },
    });
    put(join(dir, "diversity", "mage-s0.json"), diversity(0, 0.8));
    put(join(dir, "diversity", "pretrained-s0.json"), diversity(0, 1.4));
    put(join(dir, "notes.json"), { something: "else" });
    // Neither a dangling link, a hidden temporary nor a file that is not JSON stops the load.
    symlinkSync(join(root, "gone"), join(root, "dangling"));
    symlinkSync(join(root, "gone.json"), join(dir, "dangling.json"));
    put(join(dir, ".mage-s2.json.tmp"), { half: "written" });
    writeFileSync(join(dir, "README.txt"), "not a summary");

    assert.ok(isExperimentsFolder(root));
    assert.ok(isExperimentsFolder(dir));
    const { experiments, notes } = loadExperiments(root);
    assert.equal(experiments.length, 1);
    const e = experiments[0];
    assert.equal(e.name, "kuhn-main");
    assert.deepEqual(
      e.runs.map((r) => `${r.summary.name}-${r.summary.seed}`),
      ["grpo-0", "mage-0", "mage-1"],
    );
    assert.equal(e.info?.file, "configs/experiments/kuhn-main.yaml");
    assert.equal(e.info?.runs?.length, 2);
    assert.equal(e.info?.runs?.[1].wallSeconds, undefined, "null wall-clock is dropped");
    assert.equal(e.info?.wallSeconds, 4200, "the grid's time over all its invocations");
    assert.deepEqual(
      e.info?.pretrained?.map((p) => p.missed),
      [[], [{ name: "play answers well-formed", value: 0.91, threshold: 0.95 }]],
      "a missed target without a value is dropped",
    );
    const md = buildResults([e], { plotsLink: "." }).markdown;
    assert.match(
      md,
      /missed their own pretraining targets[^\n]*\n\n- `runs\/q`: play answers well-formed: 91\.0% \(target ≥ 95\.0%\)\n/,
    );
    assert.ok(!md.includes("`runs/p`:"), "a base that met its targets is not listed");
    assert.deepEqual(
      e.diversity.map((d) => [d.label, d.seed, d.meanEntropyBits]),
      [
        ["mage", 0, 0.8],
        ["pretrained", 0, 1.4],
      ],
    );
    assert.equal(e.diversity[0].meanFirstActionEntropyBits, 0.75, "first-action entropy from the cells");
    assert.equal(e.diversity[0].invalidRate, 0.1, "invalid rate over the cells that carry one");
    assert.equal(notes.length, 1);
    assert.match(notes[0], /notes\.json/);

    // The plain loader accepts the same folder: companions are collected, not reported as problems.
    const plain = loadSummaries([root]);
    assert.equal(plain.runs.length, 3);
    assert.deepEqual(plain.companions.map((c) => c.format).sort(), [
      "mage-diversity-v1",
      "mage-diversity-v1",
      "mage-experiment-v1",
    ]);
    assert.equal(plain.notes.length, 1);
  });

  it("renders without NaN when scaling and diversity are absent, and every plot is well-formed", () => {
    const e = experimentOf("kuhn-main", {
      mage: { gain: 0.12, final: 0.01, pool: best },
      lamer: { gain: 0.05, final: -0.05 },
      grpo: { gain: 0, final: -0.16 },
      zeroshot: { gain: 0.02, final: -0.3 },
    });
    const r = buildResults([e], { plotsLink: "plots", reportCommand: "mage report X --out Y" });
    const md = r.markdown;
    for (const bad of ["NaN", "undefined", "Infinity", "[object"]) assert.ok(!md.includes(bad), `no ${bad}`);
    assert.match(md, /mage experiment configs\/experiments\/kuhn-main\.yaml\nmage report X --out Y/);
    assert.match(md, /No test-time scaling evaluation/);
    assert.match(md, /### Diversity\n\nNot run/);
    assert.match(md, /## TicTacToe\n\nNot run/);
    assert.match(
      md,
      /\| Kuhn poker \| vs unseen cfr, agent second: MAGE in-trial gain ≥ \+0\.100 chips per deal \| \+0\.120 \[/,
    );
    assert.match(
      md,
      /\| mage − lamer \| 3 \| \*\*\+0\.070 \[/,
      "the paired difference table, bold when clear of 0",
    );
    // Reference points quoted from the exact calibration.
    assert.match(md, /best response to the training pool, no adaptation \| -0\.167/);
    assert.ok(r.plots.length >= 2);
    for (const p of r.plots) {
      assert.deepEqual(checkXml(p.svg).problems, [], p.file);
      assert.ok(!p.svg.includes("NaN"), `${p.file} has no NaN`);
      assert.ok(md.includes(`(plots/${p.file})`), `${p.file} is shown`);
    }
  });

  it("opens with a summary: one row per grid with its verdict counts and headline, linking to its section", () => {
    const e = experimentOf("kuhn-main", {
      mage: { gain: 0.12, final: 0.01, pool: best },
      lamer: { gain: 0.05, final: -0.05 },
      grpo: { gain: 0, final: -0.16 },
    });
    const md = buildResults([e], { plotsLink: "." }).markdown;
    const row =
      /\n\| \[`kuhn-main`\]\(#experiment-kuhn-main\) \| Kuhn poker \| (\d+) of (\d+)(?: \((\d+) not run\))? \| vs unseen cfr, agent second: MAGE in-trial gain ≥ \+0\.100 chips per deal \| \+0\.120 \[[^|]*\| \*\*met\*\* \|\n/.exec(
        md,
      );
    assert.ok(row, "the kuhn-main row with its headline target");
    const verdicts = [...md.matchAll(/^\| Kuhn poker \| .* \| (\*\*met\*\*|\*\*missed\*\*|not run) \|$/gm)];
    assert.equal(Number(row[2]), verdicts.length, "counts every target of the grid");
    assert.equal(Number(row[1]), verdicts.filter((v) => v[1] === "**met**").length);
    assert.equal(Number(row[3] ?? 0), verdicts.filter((v) => v[1] === "not run").length);
    assert.ok(md.indexOf("## Summary") < md.indexOf("## Reproduce"), "at the top");
    assert.ok(md.includes("\n## Experiment `kuhn-main`\n"), "the section it links to");
  });

  it("says so under a table when a method's summaries carry no outcome histograms", () => {
    const e = experimentOf("kuhn-main", {
      mage: { gain: 0.12, final: 0.01 },
      grpo: { gain: 0, final: -0.1 },
    });
    for (const r of e.runs) {
      if (r.summary.name !== "grpo") continue;
      for (const c of r.summary.finalEval!.cells) delete c.metrics.outcomes;
    }
    const md = buildResults([e], { plotsLink: "." }).markdown;
    assert.match(md, /_Intervals of grpo resample seeds only/);
    assert.match(md, /_Intervals of mage − grpo resample seeds only/);
    assert.match(md, /MAGE − grpo .*\(3 seeds, seeds only\)/);
    assert.match(md, /- kuhn-main: grpo: no outcome histograms in its summaries \(1 cell\)/);
    assert.ok(!md.includes("_Intervals of mage resample"), "mage keeps its trial resampling");
    assert.ok(!md.includes("NaN"));
  });

  it("lists a run that an earlier invocation finished as done, and one without a summary by its status", () => {
    const e = experimentOf("kuhn-main", { mage: { gain: 0.12, final: 0.01 } });
    e.runs = e.runs.filter((r) => r.summary.seed !== 2);
    e.info = {
      name: "kuhn-main",
      runs: [
        { method: "mage", seed: 0, status: "skipped", wallSeconds: 300 },
        { method: "mage", seed: 1, status: "done", wallSeconds: 310 },
        { method: "mage", seed: 2, status: "pending" },
      ],
    } as Experiment["info"];
    const md = buildResults([e], { plotsLink: "." }).markdown;
    const runs = md
      .slice(md.indexOf("### Runs"))
      .split("\n")
      .filter((l) => l.startsWith("| mage |"));
    assert.equal(runs.length, 3);
    assert.match(runs[0], /^\| mage \| 0 \| .* \| done \|/);
    assert.match(runs[1], /^\| mage \| 1 \| .* \| done \|/);
    assert.match(runs[2], /^\| mage \| 2 \| .* \| pending \|/);
    assert.ok(!runs.join("\n").includes("skipped"));
  });

  it("names the seeds whose trained runs stopped after different numbers of iterations", () => {
    const e = experimentOf("kuhn-main", { mage: { gain: 0.12, final: 0.01 }, grpo: { gain: 0, final: 0 } });
    const notes = () => buildResults([e], { plotsLink: "." }).markdown.split("\n");
    assert.ok(!notes().some((l) => l.includes("different numbers of iterations")), "equal runs: no note");
    const grpo1 = e.runs.find((r) => r.summary.name === "grpo" && r.summary.seed === 1)!.summary;
    grpo1.iterationsDone = 4;
    grpo1.config = { ...grpo1.config, train: { ...grpo1.config.train, maxMinutes: 30 } };
    const md = notes();
    const head = md.findIndex((l) => l.includes("different numbers of iterations"));
    assert.ok(head >= 0, "the note is written");
    assert.match(md[head], /train\.maxMinutes/, "a wall-clock box is named as the likely cause");
    assert.equal(md[head + 2], "- seed 1: mage 6/6, grpo 4/6");
    assert.ok(!md[head + 3].startsWith("- seed"), "only the unequal seed is listed");
  });

  it("shows, for games scored by success, how each attempt ended among the trials that played it", () => {
    // Per seed: 100 trials won at once, 50 won at attempt 2 after a draw, 850 drawn three times.
    const outcomes = { W1: 100, "D0 W1": 50, "D0 D0 D0": 850 };
    const runs = [0, 1].map((seed) => {
      const base = makeSummary({
        name: "mage",
        game: "tictactoe",
        seed,
        iterations: 4,
        evalEvery: 0,
        opponents: ["random"],
        cells: [{ opponent: "mcts:100", seat: "first", unseen: false }],
      });
      const summary: RunSummary = {
        ...base,
        finalEval: {
          iteration: 4,
          attempts: 3,
          trialsPerCell: N,
          cells: [cell("mcts:100", "first", false, outcomes)],
        },
      };
      return { path: `/x/ttt/mage-s${seed}.json`, summary };
    });
    const ttt: Experiment = { name: "ttt", dir: "/x/ttt", info: null, runs, diversity: [] };
    const md = buildResults([ttt], { plotsLink: "." }).markdown;
    assert.ok(
      md.includes(
        "| mage | 2 | 10.0% won, 90.0% drawn (of 2000) | 5.6% won, 94.4% drawn (of 1800) | 0.0% won, 100.0% drawn (of 1700) |",
      ),
      md,
    );
    const kuhn = buildResults([experimentOf("kuhn-main", { mage: { gain: 0.1, final: 0 } })], {
      plotsLink: ".",
    });
    assert.ok(
      !kuhn.markdown.includes("among the trials that played it"),
      "Kuhn is read in chips per attempt",
    );
  });

  it("shows scaling, diversity and ablation tables when the data exist", () => {
    const main = experimentOf(
      "kuhn-main",
      { mage: { gain: 0.12, final: 0, scaling: 0.1 }, gigpo: { gain: 0.02, final: -0.1, scaling: 0.02 } },
      { scaling: true },
    );
    main.diversity = ["pretrained", "mage", "gigpo"].map((label, i) => ({
      path: `/x/d/${label}-s0.json`,
      label,
      seed: 0,
      game: "kuhn",
      cells: [],
      meanEntropyBits: 1 - 0.2 * i,
      bySeat: { first: 1, second: 0.5 },
    }));
    const ablations = experimentOf("kuhn-ablations", {
      "mage-wide-pool": { gain: 0.1, final: 0 },
      "mage-gamma0": { gain: 0.02, final: -0.1 },
    });
    const r = buildResults([ablations, main], { plotsLink: "." });
    const md = r.markdown;
    assert.ok(
      md.indexOf("## Experiment `kuhn-main`") < md.indexOf("## Experiment `kuhn-ablations`"),
      "main first",
    );
    assert.match(md, /success gain 4–5/);
    assert.match(md, /\| mage − gigpo \| \*\*8\.0% \[/);
    assert.match(md, /\| pretrained \| 0 \| 1\.000 \|/);
    assert.match(md, /MAGE taken from experiment kuhn-main/);
    assert.match(md, /\| mage-gamma0 \| 3 \| .* \| \*\*-0\.100 \[/);
    assert.match(md, /Does the wider pool raise attempt-1 chips/);
    assert.match(md, /\| Kuhn poker \| diversity: .* \| \*\*met\*\* \|/);
    assert.ok(!md.includes("NaN"));
  });

  it("pairs ablations only with MAGE runs that started from the same base models", () => {
    const spec = { gain: 0.1, final: 0 };
    const rerun = experimentOf("kuhn-main", { mage: spec, grpo: spec }, { base: "new" });
    const old = experimentOf("kuhn-main-recipe1", { mage: spec, grpo: spec }, { base: "old" });
    const ablations = experimentOf("kuhn-ablations", { "mage-gamma0": spec }, { base: "old" });
    const md = buildResults([rerun, old, ablations], { plotsLink: "." }).markdown;
    assert.match(md, /MAGE taken from experiment kuhn-main-recipe1, paired on the seeds whose runs started/);
    assert.match(md, /\| mage \(reference\) \| 3 \|/);

    const orphan = experimentOf("kuhn-ablations", { "mage-gamma0": spec }, { base: "other" });
    const alone = buildResults([rerun, orphan], { plotsLink: "." }).markdown;
    assert.match(alone, /no MAGE run of another experiment started from these runs' base models/);
    assert.ok(!alone.includes("mage (reference)"));
  });

  it("pairs real-model ablations by the base's path, and says where the pair's builds differ", () => {
    const spec = { gain: 0.1, final: 0 };
    const onBase = (e: Experiment, sha: (seed: number) => string | null): Experiment => {
      for (const { summary } of e.runs) {
        const path = `runs/pretrained/kuhn-smollm2-x-s${summary.seed}`;
        const model = {
          ...summary.config.model,
          checkpoint: null,
          torch: { ...summary.config.model.torch, path },
        };
        summary.config = { ...summary.config, model };
        const sha256 = sha(summary.seed);
        summary.baseModel = { dir: path, sha256 };
      }
      return e;
    };
    const main = onBase(experimentOf("kuhn-real-main", { mage: spec, lamer: spec }), (s) => `sha-${s}`);
    const ablations = onBase(experimentOf("kuhn-real-ablations", { "mage-kl1": spec }), (s) => `sha-${s}`);
    const md = buildResults([main, ablations], { plotsLink: "." }).markdown;
    assert.match(md, /MAGE taken from experiment kuhn-real-main, paired on the seeds/);
    assert.match(md, /\| mage \(reference\) \| 3 \|/);
    const ablationsOf = (text: string) => text.slice(text.indexOf("### Ablations"));
    assert.ok(!/^\| lamer \|/m.test(ablationsOf(md)), "LaMer-style only beside its one-change variant");
    const credit = onBase(
      experimentOf("kuhn-real-ablations", { "lamer-agent-scope": spec }),
      (s) => `sha-${s}`,
    );
    const twoByTwo = buildResults([main, credit], { plotsLink: "." }).markdown;
    assert.match(twoByTwo, /- `lamer`: both changes/);
    assert.match(ablationsOf(twoByTwo), /^\| lamer \| 3 \| .* \| \+0\.000 \[/m);

    // Seeds 1 and 2 rebuilt on another machine: same paths, other weights (still paired, and said); seed 0 has no hash.
    const rebuilt = onBase(experimentOf("kuhn-real-ablations", { "mage-kl1": spec }), (s) =>
      s === 0 ? null : `rebuilt-${s}`,
    );
    const partly = buildResults([main, rebuilt], { plotsLink: "." }).markdown;
    assert.match(partly, /\| mage \(reference\) \| 3 \|/);
    assert.match(partly, /on seeds 1, 2 some pairs started from two builds of the base/);
    assert.ok(!md.includes("two builds of the base"));
    assert.ok(!partly.includes("Seeds whose runs started from bases with other weights"));

    // A seed whose runs started from two builds of its base is listed, with each build's methods.
    const split = onBase(experimentOf("kuhn-real-main", { mage: spec, lamer: spec }), (s) => `sha-${s}`);
    const lamer1 = split.runs.find((r) => r.summary.name === "lamer" && r.summary.seed === 1)!.summary;
    lamer1.baseModel = { dir: lamer1.baseModel!.dir, sha256: "rebuilt-1" };
    const listed = buildResults([split], { plotsLink: "." }).markdown;
    assert.match(listed, /Seeds whose runs started from bases with other weights/);
    assert.match(listed, /- seed 1: `sha-1…` \(mage\), `rebuilt-1…` \(lamer\)/);
    assert.ok(!/- seed [02]:/.test(listed));
  });

  it("takes the targets from a rerun once it has as many MAGE seeds as the grid set aside", () => {
    const gamesOf = (xs: Experiment[]) => xs.flatMap(experimentGames);
    const rerun = experimentOf("kuhn-main", { mage: { gain: 0.1, final: 0 } });
    // Sorted after the rerun's folder name would make order decide; the rename must.
    const setAside = experimentOf("a-kuhn-main-recipe1", {
      mage: { gain: 0.1, final: 0 },
      grpo: { gain: 0, final: 0 },
    });
    setAside.info = { name: "kuhn-main" } as Experiment["info"];
    assert.equal(mainExperiment(gamesOf([setAside, rerun]), "kuhn")?.experiment.name, "kuhn-main");
    const md = buildResults([setAside, rerun], { plotsLink: "." }).markdown;
    assert.match(md, /summaries of the main comparison: Kuhn poker from `kuhn-main`\. Point targets/);
    rerun.runs = rerun.runs.filter((r) => r.summary.seed !== 2);
    assert.equal(mainExperiment(gamesOf([setAside, rerun]), "kuhn")?.experiment.name, "a-kuhn-main-recipe1");
  });

  it("names an experiment by its folder, and says when the folder was renamed from the grid's name", async () => {
    const root = tempDir();
    const exp = join(root, "experiments");
    const spec = { gain: 0.1, final: 0 };
    for (const name of ["kuhn-main", "kuhn-main-old"]) {
      put(join(exp, name, "mage-s0.json"), summaryOf("mage", 0, spec, false));
      put(join(exp, name, "experiment.json"), {
        format: "mage-experiment-v1",
        name: "kuhn-main",
        file: "configs/experiments/kuhn-main.yaml",
        machine: { commit: "56b47b30c599842d7c51453e4556a1453182926e" },
      });
    }
    const { experiments } = loadExperiments(exp);
    assert.deepEqual(
      experiments.map((e) => e.name),
      ["kuhn-main", "kuhn-main-old"],
    );
    const out = join(root, "results.md");
    const log = console.log;
    console.log = () => {};
    try {
      assert.equal(await command.run([exp, "--out", out]), 0);
    } finally {
      console.log = log;
    }
    const md = readFileSync(out, "utf8");
    assert.ok(md.includes("## Experiment `kuhn-main-old`"));
    assert.ok(md.includes("Ran as `kuhn-main` at commit 56b47b3, from `configs/experiments/kuhn-main.yaml`"));
    assert.ok(md.includes("# kuhn-main-old: ran as kuhn-main; see its section"));
    assert.equal(md.split("mage experiment configs/experiments/kuhn-main.yaml").length - 1, 1, "listed once");
  });

  it("mage report picks results mode for an experiments folder and writes the files", async () => {
    const root = tempDir();
    const exp = join(root, "experiments");
    const spec = { gain: 0.1, final: 0 };
    for (const seed of [0, 1])
      put(join(exp, "kuhn-main", `mage-s${seed}.json`), summaryOf("mage", seed, spec, false));
    put(join(exp, "kuhn-main", "experiment.json"), { format: "mage-experiment-v1", name: "kuhn-main" });
    const out = join(root, "docs", "results.md");
    const logs: string[] = [];
    const log = console.log;
    console.log = (...a: unknown[]) => logs.push(a.join(" "));
    try {
      assert.equal(await command.run([exp, "--out", out]), 0);
    } finally {
      console.log = log;
    }
    let md = readFileSync(out, "utf8");
    assert.match(md, /^# mage results/);
    assert.ok(md.includes(`mage report ${exp} --out ${out}`), "the exact command");
    assert.ok(!md.includes("## Account"), "no account without ACCOUNT.md");
    writeFileSync(join(exp, "ACCOUNT.md"), "### Why\n\nThe gain comes from a sacrificed first attempt.\n");
    console.log = () => {};
    try {
      assert.equal(await command.run([exp, "--out", out]), 0);
    } finally {
      console.log = log;
    }
    md = readFileSync(out, "utf8");
    const account = md.indexOf("## Account (hand-written)");
    assert.ok(account > md.indexOf("## Targets"), "the account follows the targets");
    assert.ok(md.includes("The gain comes from a sacrificed first attempt."));
    const plots = readdirSync(join(root, "docs", "results-plots"));
    assert.ok(plots.length > 0);
    assert.match(logs.join("\n"), /wrote .*results\.md and \d+ plot/);
    // --runs keeps the plain report for the same folder.
    const plain = join(root, "plain.md");
    console.log = () => {};
    try {
      assert.equal(await command.run([exp, "--runs", "--out", plain]), 0);
    } finally {
      console.log = log;
    }
    assert.match(readFileSync(plain, "utf8"), /^# mage report/);
    await assert.rejects(command.run([exp, "--runs", "--results"]), /exclude each other/);
  });
});

describe("method settings in the results report", () => {
  it("come from each grid's own config, not from a fixed description", () => {
    const sokobanMage = validateConfig({
      game: "sokoban",
      credit: { mode: "differential", trajGamma: 0.9 },
      advantage: { scope: "task" },
      task: { attempts: 3, reflection: "reflection_only" },
    });
    const text = methodSettings(sokobanMage) ?? "";
    assert.match(
      text,
      /^differential credit, γ_step 0\.95, γ_traj 0\.9, GiGPO advantages over task scope/,
      text,
    );
    assert.ok(text.endsWith("3 attempts, reflection_only"), text);
    const gigpo = validateConfig({
      game: "sokoban",
      task: { attempts: 1 },
      eval: { attempts: 3, reflection: "none" },
    });
    assert.ok((methodSettings(gigpo) ?? "").endsWith("1 attempt; evaluated with 3 attempts, no reflection"));
    const zeroshot = validateConfig({
      game: "sokoban",
      train: { updates: false },
      eval: { attempts: 3, reflection: "none" },
    });
    assert.equal(methodSettings(zeroshot), "no training; evaluated with 3 attempts, no reflection");
    const old = { game: "kuhn" } as unknown as MageConfig;
    assert.equal(methodSettings(old), null, "a summary without the fields says nothing");
  });
});

describe("real-model targets (issue 26) read only the real-model grids", () => {
  const real = (e: Experiment): Experiment => ({
    ...e,
    runs: e.runs.map((r) => ({
      ...r,
      summary: {
        ...r.summary,
        config: { ...r.summary.config, model: { ...r.summary.config.model, backend: "torch" } },
      },
    })),
  });
  const realGrid = (mageGain: number, baseFinal: number) =>
    real(
      experimentOf(
        "kuhn-real-main",
        {
          mage: { gain: mageGain, final: 0.05, scaling: 0.2 },
          grpo: { gain: 0.01, final: -0.1, scaling: 0.02 },
          gigpo: { gain: 0.02, final: -0.1 },
          lamer: { gain: 0.1, final: 0.0 },
          reflexion: { gain: 0.0, final: baseFinal },
        },
        { scaling: true },
      ),
    );
  const realVerdict = (lines: TargetLine[], match: RegExp) =>
    verdict(
      lines.filter((l) => l.game === "kuhn (real LLM)"),
      match,
    );

  it("computes gain, MAGE − RL, final over the base, invalid answers and scaling", () => {
    const lines = targets([realGrid(0.2, -0.3)]);
    assert.equal(realVerdict(lines, /MAGE in-trial gain > 0/).verdict, "met");
    assert.equal(realVerdict(lines, /single-episode RL.*vs grpo/).verdict, "met");
    assert.equal(realVerdict(lines, /single-episode RL.*vs gigpo/).verdict, "met");
    assert.match(realVerdict(lines, /vs grpo/).measured, /MAGE − LaMer-style \(reported, no target\)/);
    assert.equal(realVerdict(lines, /warm-started base's \+ \+0\.100/).verdict, "met");
    assert.equal(realVerdict(lines, /invalid answers/).verdict, "met");
    assert.equal(realVerdict(lines, /attempt 4/).verdict, "met");
    // The stand-in's Kuhn targets do not read the real grid.
    assert.equal(verdict(lines, /in-trial gain ≥ \+0\.100/).verdict, "not run");
  });

  it("misses when MAGE's gain falls to the baselines' and its final to the base's", () => {
    const lines = targets([realGrid(0.01, 0.0)]);
    assert.equal(realVerdict(lines, /single-episode RL.*vs grpo/).verdict, "missed");
    assert.equal(realVerdict(lines, /warm-started base's/).verdict, "missed");
  });

  it("says not run without a real-model grid", () => {
    const lines = targets([experimentOf("main", { mage: { gain: 0.15, final: 0.02 } })]);
    assert.equal(realVerdict(lines, /MAGE in-trial gain > 0/).verdict, "not run");
  });

  it("the real grid's section splits each iteration's wall-clock into the worker's parts", () => {
    const e = realGrid(0.2, -0.3);
    const timed = {
      ...e,
      runs: e.runs.map((r) => ({
        ...r,
        summary: {
          ...r.summary,
          history: [
            {
              iteration: 0,
              rollout_ms: 40_000,
              update_ms: 60_000,
              env_ms: 10,
              worker_generate_ms: 39_000,
              worker_logprobs_ms: 15_000,
              worker_update_ms: 44_000,
            },
          ],
        },
      })),
    };
    const md = buildResults([timed], { plotsLink: "." }).markdown;
    const section = md.slice(md.indexOf("## Experiment `kuhn-real-main`"));
    assert.match(section, /### Wall-clock per iteration/);
    assert.match(
      section,
      /\| mage \| 3 \| 100\.0 s \| 40\.0 s \(sampling 39\.0 s\) \| 60\.0 s \(scoring 15\.0 s, step 44\.0 s\) \|/,
    );
    // The stand-in's Kuhn grids have no such section.
    const standIn = buildResults([experimentOf("kuhn-main", { mage: { gain: 0.1, final: 0 } })], {
      plotsLink: ".",
    });
    assert.ok(!standIn.markdown.includes("### Wall-clock per iteration"));
  });

  it("a served environment's grid shows its harder set and the turns its won attempts took", () => {
    const served = (method: string, seed: number, wonTurns: number[]): RunSummary => {
      const base = coinSummary(method, seed);
      const config = validateConfig({
        ...base.config,
        eval: { ...base.config.eval, harder: { trials: 8, env: { config: { numLocations: 6 } } } },
      });
      const metrics = metricsOf({ W1: 2, "L0 W1": 1, "L0 L0 L0": 5 });
      metrics.wonTurnsAt = wonTurns.map((mean, k) => ({ mean, lo: mean, hi: mean, n: k === 0 ? 2 : 1 }));
      const snap = {
        iteration: 2,
        attempts: 3,
        trialsPerCell: 8,
        cells: [{ opponent: "none", seat: "none", unseen: false, metrics }],
      };
      return { ...base, game: "twx-coin", config, finalEval: snap, harderEval: snap };
    };
    const runs = [0, 1].flatMap((seed) => [
      { path: `/x/coin/mage-s${seed}.json`, summary: served("mage", seed, [6, 3 + seed]) },
      { path: `/x/coin/lamer-s${seed}.json`, summary: served("lamer", seed, [7, 4]) },
    ]);
    const md = buildResults([{ name: "coin-real-main", dir: "/x/coin", info: null, runs, diversity: [] }], {
      plotsLink: ".",
    }).markdown;
    assert.match(md, /### Harder held-out set/);
    assert.match(
      md,
      /The served environment with `\{"numLocations":6\}` laid over the evaluation's config, 8 trials per seed\./,
    );
    assert.match(md, /### Turns to the goal per attempt/);
    // Pooled over seeds, weighted by the attempts that won: mage attempt 2 is (3·1 + 4·1) / 2.
    assert.match(md, /\| mage \| 6\.0 \(4\) \| 3\.5 \(2\) \|/);
    assert.match(md, /\| lamer \| 7\.0 \(4\) \| 4\.0 \(2\) \|/);
  });

  /** The Kuhn grid's numbers moved to TicTacToe's cells: MCTS-100 first, scaling vs preferred:1. */
  const asTicTacToe = (e: Experiment): Experiment => {
    const move = (c: CellResult, to: string): CellResult => ({ ...c, opponent: to, seat: "first" });
    return {
      ...e,
      name: "tictactoe-real-main",
      runs: e.runs.map((r) => {
        const s = r.summary;
        const finalEval = s.finalEval && {
          ...s.finalEval,
          cells: s.finalEval.cells.map((c) => move(c, "mcts:100")),
        };
        const scalingEval = s.scalingEval && {
          ...s.scalingEval,
          cells: s.scalingEval.cells.map((c) => move(c, "preferred:1")),
        };
        return { ...r, summary: { ...s, game: "tictactoe", finalEval, scalingEval } };
      }),
    };
  };
  const tttVerdict = (lines: TargetLine[], match: RegExp) =>
    verdict(
      lines.filter((l) => l.game === "tictactoe (real LLM)"),
      match,
    );

  it("computes TicTacToe's at MCTS-100 (agent first), scaling at preferred:1, apart from Kuhn's", () => {
    const lines = targets([asTicTacToe(realGrid(0.2, -0.3))]);
    assert.equal(tttVerdict(lines, /vs mcts:100, agent first: MAGE in-trial gain > 0/).verdict, "met");
    assert.equal(tttVerdict(lines, /single-episode RL.*vs grpo/).verdict, "met");
    assert.equal(tttVerdict(lines, /MAGE final score ≥ the warm-started base's/).verdict, "met");
    const scaling = tttVerdict(lines, /scaling vs preferred:1 \(agent first\).*attempt 5/);
    assert.equal(scaling.verdict, "met");
    assert.match(scaling.measured, /MAGE − GRPO score@5/);
    // Neither Kuhn's real-model targets nor the stand-in's TicTacToe targets read it.
    assert.equal(realVerdict(lines, /MAGE in-trial gain > 0/).verdict, "not run");
    const standIn = lines.filter((l) => l.game === "tictactoe" && l.verdict !== "not run");
    assert.deepEqual(standIn, []);
    const missed = targets([asTicTacToe(realGrid(0.01, 0.0))]);
    assert.equal(tttVerdict(missed, /single-episode RL.*vs grpo/).verdict, "missed");
    assert.equal(tttVerdict(missed, /warm-started base's/).verdict, "missed");
  });

  it("computes Sokoban's on its one held-out cell, apart from the stand-in's Sokoban targets", () => {
    const none = (c: CellResult): CellResult => ({ ...c, opponent: "none", seat: "none" });
    const asSokoban = (e: Experiment): Experiment => ({
      ...e,
      name: "sokoban-real-main",
      runs: e.runs.map((r) => {
        const s = r.summary;
        const finalEval = s.finalEval && { ...s.finalEval, cells: s.finalEval.cells.map(none) };
        const scalingEval = s.scalingEval && { ...s.scalingEval, cells: s.scalingEval.cells.map(none) };
        return { ...r, summary: { ...s, game: "sokoban", finalEval, scalingEval } };
      }),
    });
    const sokVerdict = (lines: TargetLine[], match: RegExp) =>
      verdict(
        lines.filter((l) => l.game === "sokoban (real LLM)"),
        match,
      );
    const lines = targets([asSokoban(realGrid(0.2, -0.3))]);
    assert.equal(sokVerdict(lines, /on held-out levels: MAGE in-trial gain > 0/).verdict, "met");
    assert.equal(sokVerdict(lines, /MAGE final score ≥ the warm-started base's/).verdict, "met");
    assert.equal(sokVerdict(lines, /scaling on held-out levels.*attempt 5/).verdict, "met");
    assert.match(sokVerdict(lines, /invalid answers/).measured, /\(\w+ s\d on all tasks\)$/);
    assert.deepEqual(
      lines.filter((l) => l.game === "sokoban" && l.verdict !== "not run"),
      [],
    );
    const missed = targets([asSokoban(realGrid(0.01, 0.0))]);
    assert.equal(sokVerdict(missed, /warm-started base's/).verdict, "missed");
    assert.equal(tttVerdict(lines, /MAGE in-trial gain > 0/).verdict, "not run");
  });
});

describe("issue 45's coin-collector targets", () => {
  /** A coin run: `late` of 1,000 trials won first at attempt 2, 300 at attempt 1, the rest lost. */
  const coinRun = (method: string, seed: number, late: number): { path: string; summary: RunSummary } => {
    const base = coinSummary(method, seed);
    const config = { ...base.config, model: { ...base.config.model, backend: "torch" } } as MageConfig;
    const n = late + seed * 10;
    const snap = {
      iteration: 2,
      attempts: 3,
      trialsPerCell: N,
      cells: [cell("none", "none", false, { W1: 300, "L0 W1": n, "L0 L0 L0": N - 300 - n })],
    };
    return {
      path: `/x/coin/${method}-s${seed}.json`,
      summary: { ...base, game: "twx-coin", config, finalEval: snap, harderEval: snap },
    };
  };
  const grid = (late: Record<string, number>): Experiment => ({
    name: "coin-real-main",
    dir: "/x/coin",
    info: null,
    runs: Object.entries(late).flatMap(([m, k]) => [0, 1, 2].map((s) => coinRun(m, s, k))),
    diversity: [],
  });
  const coin = (lines: TargetLine[], match: RegExp) =>
    verdict(
      lines.filter((l) => l.game === "coin collector (real LLM)"),
      match,
    );

  it("meets the gains and the paired differences when MAGE and LaMer-style win more by attempt 3", () => {
    const lines = targets([grid({ mage: 300, lamer: 250, gigpo: 0, zeroshot: 20 })]);
    assert.equal(coin(lines, /^test seeds: MAGE in-trial gain/).verdict, "met");
    assert.match(coin(lines, /^test seeds: MAGE in-trial gain/).measured, /^31\.0% \[/);
    assert.equal(coin(lines, /^test seeds: LaMer-style − GiGPO/).verdict, "met");
    assert.equal(coin(lines, /^harder set \(more rooms\): MAGE − zero-shot/).verdict, "met");
  });

  it("misses where the trained method wins no more than GiGPO, and says not run without the method", () => {
    const lines = targets([grid({ mage: 0, gigpo: 0, zeroshot: 0 })]);
    assert.equal(coin(lines, /^test seeds: MAGE in-trial gain/).verdict, "missed");
    assert.equal(coin(lines, /^test seeds: MAGE − GiGPO/).verdict, "missed");
    assert.equal(coin(lines, /^test seeds: LaMer-style in-trial gain/).verdict, "not run");
  });

  /** Stops `method`'s runs of these seeds at 1 of their 2 iterations, as `train.maxMinutes` would. */
  const boxed = (e: Experiment, method: string, seeds: number[], recorded = true): Experiment => {
    for (const r of e.runs) {
      if (r.summary.name !== method || !seeds.includes(r.summary.seed)) continue;
      r.summary.iterationsDone = 1;
      // Summaries written before `complete` existed are judged by their iterations.
      if (recorded) Object.assign(r.summary, { complete: false, stoppedBy: "maxMinutes" });
    }
    return e;
  };
  const late = { mage: 300, lamer: 250, gigpo: 0, zeroshot: 20 };

  it("leaves a seed whose run is incomplete out of its pairs, and says so", () => {
    const lines = targets([boxed(grid(late), "lamer", [1])]);
    const d = coin(lines, /^test seeds: LaMer-style − GiGPO/);
    assert.equal(d.verdict, "met", "two paired seeds are left to judge");
    assert.match(
      d.measured,
      /\(2 paired seeds; seed 1 left out: lamer stopped at 1 of 2 iterations\)$/,
      d.measured,
    );
    assert.match(
      coin(lines, /^test seeds: MAGE − GiGPO/).measured,
      /\(3 seeds\)$/,
      "complete pairs keep every seed",
    );
    // Both sides short: one reason names both.
    const both = targets([boxed(boxed(grid(late), "lamer", [1]), "gigpo", [1], false)]);
    assert.match(
      coin(both, /^test seeds: LaMer-style − GiGPO/).measured,
      /seed 1 left out: lamer stopped at 1 of 2 iterations and gigpo at 1 of 2\)$/,
    );
    assert.match(
      coin(both, /^test seeds: MAGE − GiGPO/).measured,
      /seed 1 left out: gigpo stopped at 1 of 2 iterations/,
    );
  });

  it("cannot judge a comparison left with fewer than two paired seeds", () => {
    const e = boxed(grid(late), "lamer", [1, 2], false);
    const lines = targets([e]);
    const d = coin(lines, /^test seeds: LaMer-style − zero-shot/);
    assert.equal(d.verdict, "not judged");
    assert.match(
      d.note ?? "",
      /only 1 paired seed left once incomplete runs are left out; a paired verdict needs 2/,
    );
    assert.match(
      d.measured,
      /\(1 paired seed; seed 1 left out: .*; seed 2 left out: lamer stopped at 1 of 2 iterations\)$/,
    );
    assert.equal(
      coin(lines, /^test seeds: LaMer-style in-trial gain/).verdict,
      "met",
      "a method's own gain is not paired",
    );
    const none = coin(targets([boxed(grid(late), "lamer", [0, 1, 2])]), /^harder set.*LaMer-style − GiGPO/);
    assert.equal(none.verdict, "not judged");
    assert.match(none.measured, /^no seed left to pair \(seed 0 left out: /);

    const md = buildResults([e], { plotsLink: "." }).markdown;
    const row = md.split("\n").find((l) => l.startsWith("| [`coin-real-main`]"));
    assert.match(row ?? "", /\| 8 of 12 \(4 not judged\) \|/);
    assert.match(md, /\| not judged \|/);
    assert.match(
      md,
      /\n- mage − lamer: seed 1 left out: lamer stopped at 1 of 2 iterations; seed 2 left out: /,
    );
    const runs = md.split("\n").filter((l) => l.startsWith("| lamer | ") && l.includes("[json]"));
    assert.deepEqual(
      runs.map((l) => l.split(" | ")[4]),
      ["done", "incomplete", "incomplete"],
    );
  });

  it("gives the grid its row in the summary, counted over the coin targets", () => {
    const md = buildResults([grid({ mage: 300, lamer: 250, gigpo: 0, zeroshot: 20 })], {
      plotsLink: ".",
    }).markdown;
    const row = md.split("\n").find((l) => l.startsWith("| [`coin-real-main`](#experiment-coin-real-main)"));
    assert.ok(row, "no summary row for coin-real-main");
    assert.match(row, /\| coin collector \(real LLM\) \| 12 of 12 \| test seeds: MAGE in-trial gain/);
    assert.match(
      md,
      /from the summaries of the main comparison: .*the coin collector on a real LLM from `coin-real-main`/,
    );
  });
});
