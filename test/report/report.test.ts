import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { command, writeReport } from "../../src/cli/commands/report.js";
import { UsageError } from "../../src/core/errors.js";
import { categoryMetrics, type Estimate, type TrialOutcome } from "../../src/evaluate/metrics.js";
import { loadSummaries } from "../../src/report/load.js";
import { buildReport } from "../../src/report/markdown.js";
import type { RunSummary } from "../../src/train/summary.js";
import { type FixtureOptions, makeSummary } from "./fixtures.js";
import { checkXml } from "./xml.js";

const roots: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "mage-report-test-"));
  roots.push(d);
  return d;
}
after(() => {
  for (const d of roots) rmSync(d, { recursive: true, force: true });
});

function put(path: string, value: unknown): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, typeof value === "string" ? value : `${JSON.stringify(value, null, 1)}\n`);
}

function putRun(dir: string, o: FixtureOptions): RunSummary {
  const s = makeSummary(o);
  put(join(dir, "summary.json"), s);
  return s;
}

// Independent formatting of the expected numbers (not the module's own helpers).
const pct = (x: number) => `${(x * 100).toFixed(1)}`;
const rate = (e: { mean: number; lo: number; hi: number }) => `${pct(e.mean)}% [${pct(e.lo)}, ${pct(e.hi)}]`;
const signed = (x: number) => {
  const t = x.toFixed(3);
  return x >= 0 || /^-0\.000$/.test(t) ? `+${t.replace("-", "")}` : t;
};
const score = (e: { mean: number; lo: number; hi: number }) =>
  `${signed(e.mean)} [${signed(e.lo)}, ${signed(e.hi)}]`;

/** The markdown tables following a heading that starts with `heading`, as header → row maps keyed by the first cell. */
function tableAfter(md: string, heading: string): Map<string, Record<string, string>> {
  const lines = md.split("\n");
  const start = lines.findIndex((l) => l.startsWith(heading));
  assert.ok(start >= 0, `heading ${heading} not found`);
  let i = start + 1;
  while (i < lines.length && !lines[i].startsWith("|")) i++;
  const split = (l: string) =>
    l
      .slice(2, -2)
      .split(" | ")
      .map((c) => c.trim());
  const head = split(lines[i]);
  const rows = new Map<string, Record<string, string>>();
  for (i += 2; i < lines.length && lines[i].startsWith("|"); i++) {
    const cells = split(lines[i]);
    assert.equal(cells.length, head.length, `row width: ${lines[i]}`);
    rows.set(cells[0], Object.fromEntries(head.map((h, j) => [h, cells[j]])));
  }
  return rows;
}

function svgsOf(md: string, mdDir: string): string[] {
  const links = [...md.matchAll(/!\[[^\]]*\]\(([^)]+\.svg)\)/g)].map((m) => m[1]);
  assert.ok(links.length > 0, "the report shows plots");
  return links.map((l) => readFileSync(join(mdDir, l), "utf8"));
}

const CELLS = [
  { opponent: "cfr", seat: "first" as const, unseen: false },
  { opponent: "caller", seat: "second" as const, unseen: true },
];

describe("mage report: markdown for two synthetic runs", async () => {
  const dir = tempDir();
  const a = putRun(join(dir, "runs", "a"), {
    name: "mage-diff",
    seed: 0,
    cells: CELLS,
    credit: "differential",
    adapt: 0.15,
  });
  const b = putRun(join(dir, "runs", "b"), {
    name: "grpo-base",
    seed: 3,
    cells: CELLS,
    credit: "per-attempt",
    lr: 3e-4,
    adapt: 0.02,
  });
  const out = join(dir, "out", "report.md");
  const res = await writeReport([join(dir, "runs")], { out, title: "Two runs" });
  const md = readFileSync(out, "utf8");

  it("has a title and a runs table with the method-relevant config", () => {
    assert.ok(md.startsWith("# Two runs\n"));
    const runs = tableAfter(md, "## Runs");
    const ra = runs.get("[mage-diff](../runs/a/summary.json)");
    const rb = runs.get("[grpo-base](../runs/b/summary.json)");
    assert.ok(ra && rb, `rows: ${[...runs.keys()]}`);
    assert.equal(ra.game, "kuhn");
    assert.equal(ra.seed, "0");
    assert.equal(rb.seed, "3");
    assert.equal(ra.credit, "differential");
    assert.equal(rb.credit, "per-attempt");
    assert.equal(ra.lr, "1e-4");
    assert.equal(rb.lr, "3e-4");
    assert.equal(ra.attempts, "3");
    assert.equal(ra.group, String(a.config.rollout.groupSize));
    assert.equal(ra.scope, a.config.advantage.scope);
    assert.equal(ra.reflection, a.config.task.reflection);
    assert.equal(ra.preset, "tiny");
    assert.equal(ra.iterations, `${a.iterationsDone}/${a.config.train.iterations}`);
    assert.equal(ra["wall-clock"], "2m 05s");
    assert.equal(ra.kernels, "wasm");
    assert.equal(ra.commit, "0123456");
  });

  it("lists every final-evaluation number of every cell with its interval", () => {
    for (const [ci, cell] of CELLS.entries()) {
      const heading = `#### kuhn: vs ${cell.opponent}, agent ${cell.seat}, ${cell.unseen ? "unseen" : "seen"}`;
      const rows = tableAfter(md, heading);
      for (const s of [a, b]) {
        const m = s.finalEval!.cells[ci].metrics;
        const row = rows.get(`${s.name} (seed ${s.seed})`);
        assert.ok(row, `row for ${s.name} under ${heading}`);
        assert.equal(row.trials, String(m.trials));
        for (let k = 1; k <= 3; k++) {
          assert.equal(row[`success@${k}`], rate(m.successAt[k - 1]));
          assert.equal(row[`non-loss@${k}`], rate(m.nonLossAt[k - 1]));
          assert.equal(row[`chips@${k}`], score(m.scoreAt[k - 1]));
        }
        assert.equal(row.final, score(m.final));
        assert.equal(row["in-trial gain"], score(m.gain));
        assert.equal(row.invalid, `${pct(m.invalidRate)}%`);
      }
    }
  });

  it("puts chips@1 → chips@K in the headline table", () => {
    const rows = tableAfter(md, "Headline (final evaluation)");
    for (const s of [a, b]) {
      const row = rows.get(s.name)!;
      const m = s.finalEval!.cells[1].metrics;
      assert.equal(
        row["vs caller, agent second, unseen"],
        `${signed(m.scoreAt[0].mean)} → ${signed(m.scoreAt[2].mean)}`,
      );
    }
  });

  it("writes well-formed SVG plots, linked relatively, that contain the series", () => {
    const svgs = svgsOf(md, join(dir, "out"));
    assert.equal(svgs.length, res.plotPaths.length, "every plot written is linked and vice versa");
    assert.equal(readdirSync(join(dir, "out", "plots")).length, res.plotPaths.length);
    for (const svg of svgs) {
      const { problems } = checkXml(svg);
      assert.deepEqual(problems, []);
    }
    // The per-attempt bars of the first cell name both methods and print their success@1 values.
    const bars = readFileSync(join(dir, "out", "plots", "kuhn-final-success-k-cfr-first.svg"), "utf8");
    for (const s of [a, b]) {
      assert.ok(bars.includes(`>${s.name}</text>`), `legend entry ${s.name}`);
      assert.ok(bars.includes(`>${pct(s.finalEval!.cells[0].metrics.successAt[0].mean)}%</text>`));
    }
    // Training curves per opponent exist for both training opponents.
    const files = readdirSync(join(dir, "out", "plots"));
    for (const opp of ["cfr", "always-bet"]) assert.ok(files.includes(`kuhn-train-success-${opp}.svg`), opp);
  });

  it("is byte-identical when rebuilt, and carries no timestamps", async () => {
    const out2 = join(dir, "out2", "report.md");
    const res2 = await writeReport([join(dir, "runs")], { out: out2, title: "Two runs" });
    assert.equal(readFileSync(out2, "utf8"), md);
    assert.deepEqual(
      res2.plotPaths.map((p) => p.slice(join(dir, "out2").length)),
      res.plotPaths.map((p) => p.slice(join(dir, "out").length)),
    );
    for (let i = 0; i < res.plotPaths.length; i++) {
      assert.ok(readFileSync(res.plotPaths[i]).equals(readFileSync(res2.plotPaths[i])), res.plotPaths[i]);
    }
    assert.doesNotMatch(md, /\d{4}-\d\d-\d\dT\d\d:/);
  });
});

describe("mage report: seeds of one method", () => {
  it("shows the mean over seeds with the seed range, and every seed", () => {
    const runs = [0, 1, 2].map((seed) => ({
      path: `/x/s${seed}/summary.json`,
      summary: makeSummary({ name: "meta", seed, cells: CELLS, iterations: 8 }),
    }));
    runs.push({
      path: "/x/o/summary.json",
      summary: makeSummary({ name: "other", seed: 0, cells: CELLS, iterations: 8 }),
    });
    const report = buildReport(runs, { plotsLink: "plots" });
    const rows = tableAfter(report.markdown, "#### kuhn: vs cfr, agent first, seen");
    const agg = rows.get("**meta** (mean of 3 seeds)");
    assert.ok(agg, `rows: ${[...rows.keys()]}`);
    const per: Estimate[] = runs.slice(0, 3).map((r) => r.summary.finalEval!.cells[0].metrics.successAt[2]);
    const means = per.map((e) => e.mean);
    const mean = means.reduce((x, y) => x + y, 0) / 3;
    assert.equal(agg["success@3"], `${pct(mean)}% [${pct(Math.min(...means))}, ${pct(Math.max(...means))}]`);
    assert.equal(agg.trials, `3×${runs[0].summary.finalEval!.cells[0].metrics.trials}`);
    for (const seed of [0, 1, 2]) {
      const row = rows.get(`meta seed ${seed}`);
      assert.ok(row, `seed ${seed}`);
      assert.equal(row["success@3"], rate(per[seed]));
    }
    assert.ok(rows.has("other (seed 0)"));
    assert.ok(!rows.has("**other** (mean of 1 seeds)"));
    // Every run is still listed in the runs table, and the legend says how many seeds.
    assert.equal((report.markdown.match(/^\| \[meta\]/gm) ?? []).length, 3);
    const bars = report.plots.find((p) => p.file === "kuhn-final-success-k-cfr-first.svg");
    assert.ok(bars?.svg.includes(">meta (3 seeds)</text>"));
  });

  it("handles a puzzle game and an unfinished run", () => {
    const done = makeSummary({
      name: "soko",
      game: "sokoban",
      opponents: ["none"],
      cells: [{ opponent: "none", seat: "none", unseen: false }],
      iterations: 6,
    });
    const unfinished = makeSummary({
      name: "soko-2",
      game: "sokoban",
      opponents: ["none"],
      cells: [{ opponent: "none", seat: "none", unseen: false }],
      iterations: 6,
      withFinal: false,
    });
    const report = buildReport(
      [
        { path: "a.json", summary: done },
        { path: "b.json", summary: unfinished },
      ],
      { plotsLink: "." },
    );
    assert.match(report.markdown, /No final evaluation \(run unfinished or stopped\): soko-2 \(seed 0\)/);
    const rows = tableAfter(report.markdown, "#### sokoban: all tasks");
    assert.equal(
      rows.get("soko (seed 0)")?.["success@1"],
      rate(done.finalEval!.cells[0].metrics.successAt[0]),
    );
    assert.match(report.markdown, /!\[[^\]]*\]\(sokoban-final-success-k-none-none\.svg\)/);
    for (const p of report.plots) assert.deepEqual(checkXml(p.svg).problems, [], p.file);
  });
});

describe("mage report: finding summaries", () => {
  it("walks directories recursively, reads run directories' summary.json only, skips other JSON with a note", () => {
    const root = tempDir();
    putRun(join(root, "group1", "run-x"), { name: "x", seed: 1, iterations: 4 });
    put(join(root, "group1", "run-x", "checkpoints", "ckpt-4", "config.json"), { dim: 8 });
    put(
      join(root, "group2", "deep", "er", "named-run.json"),
      makeSummary({ name: "y", seed: 2, iterations: 4 }),
    );
    put(join(root, "misc", "notes.json"), { hello: "world" });
    put(join(root, "broken.json"), "{ not json");
    put(join(root, ".hidden", "copy.json"), makeSummary({ name: "hidden", seed: 9, iterations: 4 }));
    put(join(root, "readme.txt"), "not json at all");

    const { runs, notes } = loadSummaries([root, join(root, "group1")]);
    assert.deepEqual(
      runs.map((r) => [r.summary.name, r.summary.seed]),
      [
        ["x", 1],
        ["y", 2],
      ],
      "both summaries found once, in a stable order, hidden folder ignored",
    );
    assert.equal(notes.length, 2, notes.join("\n"));
    assert.ok(
      notes.some((n) => n.includes(join("misc", "notes.json")) && n.includes("not a mage run summary")),
    );
    assert.ok(notes.some((n) => n.includes("broken.json") && n.includes("not valid JSON")));
    assert.ok(
      !notes.some((n) => n.includes("config.json")),
      "a run directory's other files are not looked at",
    );
  });

  it("writes report.md and plots/ into the first input by default", async () => {
    const runDir = join(tempDir(), "run");
    putRun(runDir, { name: "solo", iterations: 5, evalEvery: 0 });
    const res = await writeReport([runDir]);
    assert.equal(res.markdownPath, join(runDir, "report.md"));
    const md = readFileSync(res.markdownPath, "utf8");
    assert.match(md, /\]\(summary\.json\)/);
    assert.ok(res.plotPaths.every((p) => p.startsWith(join(runDir, "plots"))));
    assert.equal(svgsOf(md, runDir).length, res.plotPaths.length);
    assert.ok(!md.includes("### Evaluation during training"), "no periodic evaluations, no section");
  });

  it("the command writes where --out and --plots-dir say", async () => {
    const dir = tempDir();
    putRun(join(dir, "r"), { name: "cmd", iterations: 4 });
    const code = await command.run([
      join(dir, "r"),
      "--out",
      join(dir, "doc", "res.md"),
      "--plots-dir",
      join(dir, "doc", "img"),
      "--title",
      "Cmd",
      "--smooth",
      "3",
    ]);
    assert.equal(code, 0);
    const md = readFileSync(join(dir, "doc", "res.md"), "utf8");
    assert.ok(md.startsWith("# Cmd\n"));
    assert.match(md, /\]\(img\/kuhn-final-success-k-cfr-first\.svg\)/);
    assert.ok(readdirSync(join(dir, "doc", "img")).length > 0);
  });
});

describe("mage report: bad inputs", () => {
  async function usage(fn: () => unknown, pattern: RegExp): Promise<void> {
    try {
      await fn();
    } catch (err) {
      assert.ok(err instanceof UsageError, `expected a UsageError, got ${err}`);
      assert.equal(err.exitCode, 2);
      assert.match(err.message, pattern);
      return;
    }
    assert.fail("no error");
  }

  it("rejects missing paths, empty folders, folders without summaries and non-summary files", async () => {
    const dir = tempDir();
    await usage(() => loadSummaries([join(dir, "nope")]), /cannot read .*nope/);
    mkdirSync(join(dir, "empty"));
    await usage(() => loadSummaries([join(dir, "empty")]), /no run summaries/);
    put(join(dir, "junk", "a.json"), { format: "something-else" });
    await usage(() => loadSummaries([join(dir, "junk")]), /no run summaries.*skipped.*something-else/s);
    await usage(() => loadSummaries([join(dir, "junk", "a.json")]), /a\.json: not a mage run summary/);
    put(join(dir, "bad", "summary.json"), "{");
    await usage(() => loadSummaries([join(dir, "bad")]), /no run summaries.*not valid JSON/s);
  });

  it("rejects bad command lines", async () => {
    await usage(() => command.run([]), /at least one/);
    await usage(() => command.run(["--bogus", "x"]), /bogus/);
    const dir = tempDir();
    putRun(join(dir, "r"), { name: "r", iterations: 2 });
    await usage(() => command.run([join(dir, "r"), "--smooth", "0"]), /--smooth/);
    await usage(() => command.run([join(dir, "r"), "--out", ""]), /--out/);
  });

  it("reports an unreadable folder as a usage error", {
    skip: process.getuid?.() === 0 ? "root reads anything" : false,
  }, async () => {
    const dir = tempDir();
    mkdirSync(join(dir, "locked"));
    chmodSync(join(dir, "locked"), 0o000);
    try {
      await usage(() => loadSummaries([join(dir, "locked")]), /cannot read/);
    } finally {
      chmodSync(join(dir, "locked"), 0o755);
    }
  });

  it("exits with code 2 from the mage binary", () => {
    const r = spawnSync(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "report", join(tempDir(), "missing")],
      {
        encoding: "utf8",
      },
    );
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /mage report: cannot read/);
  });
});

describe("mage report: categories", () => {
  it("a final cell whose trials have categories gets success@k per category (ALFWorld: split, split/task type)", () => {
    const summary = makeSummary({ name: "meta", seed: 0, cells: CELLS, iterations: 4 });
    const trial = (category: string, won: boolean[]): TrialOutcome => ({
      opponent: "cfr",
      seat: "first",
      taskId: "t",
      category,
      attempts: won.map((w) => ({
        won: w,
        draw: false,
        score: w ? 1 : 0,
        reward: 0,
        turns: 2,
        invalidActions: 0,
      })),
    });
    const byCategory = categoryMetrics(
      [
        trial("valid_seen/heat", [false, true]),
        trial("valid_seen/cool", [true]),
        trial("valid_seen/cool", [false, false]),
      ],
      2,
    );
    summary.finalEval!.cells[0].byCategory = byCategory;
    const report = buildReport([{ path: "/x/s0/summary.json", summary }], { plotsLink: "plots" });
    const rows = tableAfter(report.markdown, "Success@k per category");
    assert.deepEqual([...rows.keys()], ["valid_seen", "valid_seen/cool", "valid_seen/heat"]);
    assert.equal(rows.get("valid_seen/cool")!["success@1"], rate(byCategory["valid_seen/cool"].successAt[0]));
    assert.equal(rows.get("valid_seen")!.trials, "3");
    assert.equal(
      report.markdown.split("Success@k per category").length,
      2,
      "only the categorised cell has the table",
    );
  });
});

describe("training diagnostics", () => {
  it("charts informative reflections only for runs that log them", () => {
    const plain = makeSummary({ name: "mage" });
    const charts = (s: typeof plain) =>
      buildReport([{ path: "/x/s0/summary.json", summary: s }], { plotsLink: "plots" }).markdown;
    assert.ok(!charts(plain).includes("informative reflections"));
    const judged = {
      ...plain,
      history: plain.history.map((h, i) => ({ ...h, informative_reflection: 0.5 + 0.02 * i })),
    };
    assert.match(charts(judged), /informative reflections/);
  });
});
