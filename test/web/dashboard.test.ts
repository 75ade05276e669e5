import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { command } from "../../src/cli/commands/dashboard.js";
import { COMMANDS } from "../../src/cli/commands/index.js";
import { UsageError } from "../../src/core/errors.js";
import type { RunSummary } from "../../src/train/summary.js";
import { activeWindowMs, RunIndex, runState } from "../../src/web/runs.js";
import { type DashboardHandle, startDashboard } from "../../src/web/server.js";
import { runCommand } from "../cli/run-command.js";
import { trial } from "../replay/fixtures.js";
import { makeSummary } from "../report/fixtures.js";

const NOW = Date.parse("2026-06-01T12:00:00Z");

function writeSummary(path: string, s: RunSummary, mtimeMs: number): void {
  writeFileSync(path, JSON.stringify(s));
  utimesSync(path, mtimeMs / 1000, mtimeMs / 1000);
}

/**
 * A folder as `mage train` and `mage experiment` leave it: a run directory still training (no final
 * evaluation, written a minute ago) with a transcript log, a finished committed summary file, a
 * stopped run, and JSON files that are not summaries.
 */
function makeRoot(): { root: string; live: string } {
  const root = mkdtempSync(join(tmpdir(), "mage-dashboard-"));
  const live = join(root, "exp", "mage-s0");
  mkdirSync(live, { recursive: true });
  writeSummary(
    join(live, "summary.json"),
    { ...makeSummary({ name: "mage", iterations: 8, withFinal: false }), iterationsDone: 8 },
    NOW - 60_000,
  );
  writeFileSync(
    join(live, "transcripts.jsonl"),
    `${[
      JSON.stringify(trial(0, ["lost", "won"])),
      JSON.stringify(trial(1, ["lost", "lost"], "random")),
      JSON.stringify(trial(2, ["won"])),
      '{"trialId": 3, "att',
    ].join("\n")}\n`,
  );
  writeFileSync(join(live, "train.log"), "eval @4: mean final score 0.083\ntrain [--] 1/8\rtrain [##] 8/8\n");
  utimesSync(join(live, "train.log"), (NOW - 60_000) / 1000, (NOW - 60_000) / 1000);
  writeSummary(join(root, "exp", "grpo-s0.json"), makeSummary({ name: "grpo", withFinal: true }), NOW - 9e6);
  const stopped = join(root, "old-run");
  mkdirSync(stopped);
  writeSummary(
    join(stopped, "summary.json"),
    { ...makeSummary({ name: "<script>alert(1)</script>", withFinal: false }), iterationsDone: 3 },
    NOW - 3_600_000,
  );
  writeFileSync(join(root, "exp", "experiment.json"), JSON.stringify({ format: "mage-experiment-v1" }));
  writeFileSync(join(root, "notes.json"), "{not json");
  return { root, live };
}

describe("dashboard run states", () => {
  it("a run is finished once its final evaluation is in, active while it writes, stopped after", () => {
    const s = makeSummary({ name: "m", withFinal: false });
    const window = activeWindowMs(s);
    assert.equal(window, 120_000, "short fixture iterations: the two-minute floor");
    assert.equal(runState(s, NOW - 1_000, NOW), "active");
    assert.equal(runState(s, NOW - window - 1, NOW), "stopped");
    assert.equal(runState(makeSummary({ name: "m", withFinal: true }), NOW - 9e9, NOW), "finished");
    const slow = { ...s, history: s.history.map((h) => ({ ...h, rollout_ms: 100_000, update_ms: 20_000 })) };
    assert.equal(activeWindowMs(slow), 360_000, "three iterations of 2 minutes");
    assert.equal(runState(slow, NOW - 300_000, NOW), "active");
  });

  it("finds run directories and summary files under its folders, with ids relative to the working directory", () => {
    const { root } = makeRoot();
    const index = new RunIndex([root], () => NOW, root);
    const runs = index.scan();
    assert.deepEqual(
      runs.map((r) => [r.id, r.summary.name, r.state, r.runDir !== null]),
      [
        ["old-run", "<script>alert(1)</script>", "stopped", true],
        ["exp/grpo-s0.json", "grpo", "finished", false],
        ["exp/mage-s0", "mage", "active", true],
      ],
    );
    assert.deepEqual(runs.find((r) => r.id === "exp/mage-s0")?.logs, ["transcripts"]);
    assert.equal(index.find("nope"), undefined);
    const elsewhere = new RunIndex([root], () => NOW, mkdtempSync(join(tmpdir(), "mage-dashboard-cwd-")));
    assert.ok(
      elsewhere.scan().every((r) => r.id.startsWith(root.split("\\").join("/"))),
      "outside the working directory a run's id is its absolute path",
    );
  });

  it("changes its stamp when a run writes, and only for the runs asked about", () => {
    const { root, live } = makeRoot();
    const index = new RunIndex([root], () => NOW, root);
    const all = index.stamp();
    const one = index.stamp(["exp/grpo-s0.json"]);
    utimesSync(join(live, "summary.json"), (NOW - 1_000) / 1000, (NOW - 1_000) / 1000);
    assert.notEqual(index.stamp(), all);
    assert.equal(index.stamp(["exp/grpo-s0.json"]), one);
  });
});

describe("dashboard server", () => {
  let dash: DashboardHandle;
  let live: string;
  const get = async (path: string) => {
    const res = await fetch(new URL(path, dash.url));
    return { status: res.status, type: res.headers.get("content-type") ?? "", text: await res.text() };
  };

  before(async () => {
    const made = makeRoot();
    live = made.live;
    dash = await startDashboard({ roots: [made.root], port: 0, now: () => NOW, cwd: made.root });
  });
  after(() => dash.close());

  it("lists every run with its state and progress, escaping what run names hold", async () => {
    const { status, text } = await get("/");
    assert.equal(status, 200);
    assert.match(text, /href="\/run\?id=exp%2Fmage-s0">mage<\/a>/);
    assert.match(text, /state-active">running/);
    assert.match(text, /state-stopped">stopped/);
    assert.match(text, /8\/8/);
    assert.match(text, /3 runs, 1 running/);
    assert.match(
      text,
      /<h2>exp <a href="\/compare\?id=exp%2Fgrpo-s0\.json&amp;id=exp%2Fmage-s0">compare all 2<\/a><\/h2>/,
      "an experiment folder's runs share a table with a link comparing them",
    );
    assert.match(text, /<h2>\.<\/h2>/, "a lone run has no compare link");
    assert.ok(!text.includes("<script>alert"), "a run name is text, not markup");
    assert.ok(text.includes("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert.match(text, /fetch\("\/api\/stamp"/, "the page polls for changes");
  });

  it("shows a run's report with plots served as SVG, and how to resume a stopped run", async () => {
    const run = await get("/run?id=exp%2Fmage-s0");
    assert.equal(run.status, 200);
    assert.match(
      run.text,
      /<h1>mage · seed 0<\/h1>\n<p><span class="state-active">running/,
      "the state follows the title",
    );
    assert.match(run.text, /<table>/);
    assert.match(run.text, /training trials \(sampled\)/);
    assert.match(
      run.text,
      /<summary>train\.log, last 2 lines<\/summary>\n<pre>eval @4: mean final score 0\.083\ntrain \[##\] 8\/8<\/pre>/,
      "the log's tail, a progress bar at its last state",
    );
    const img = /<img src="([^"]+)"/.exec(run.text);
    assert.ok(img, "the report has plots");
    const plot = await get(img[1].replace(/&amp;/g, "&"));
    assert.equal(plot.status, 200);
    assert.match(plot.type, /image\/svg\+xml/);
    assert.match(plot.text, /^<svg/);
    assert.equal((await get("/plot?id=exp%2Fmage-s0&file=nope.svg")).status, 404);

    const stopped = await get("/run?id=old-run");
    assert.match(stopped.text, /mage train --config old-run\/config\.yaml --out old-run --resume/);
    const committed = await get("/run?id=exp%2Fgrpo-s0.json");
    assert.match(committed.text, /committed summary/);
  });

  it("compares runs in one report", async () => {
    const { status, text } = await get("/compare?id=exp%2Fmage-s0&id=exp%2Fgrpo-s0.json");
    assert.equal(status, 200);
    assert.match(text, /2 runs compared/);
    assert.match(text, /href="\/run\?id=exp%2Fgrpo-s0\.json"/, "the runs table links to each run's page");
  });

  it("lists and filters logged trials, and replays one with its neighbours", async () => {
    const list = await get("/trials?id=exp%2Fmage-s0&log=transcripts");
    assert.match(list.text, /3 of 3 trials match/);
    assert.match(list.text, /1 line\(s\) of the file are not trial records/);
    const won = await get("/trials?id=exp%2Fmage-s0&log=transcripts&outcome=won");
    assert.match(won.text, /2 of 3 trials match/);
    assert.match(
      won.text,
      /<tr><td class="num">2<\/td><td class="num">1<\/td><td class="num">1 \(100\.0%\)<\/td>/,
      "per attempt: one of the two won trials played attempt 2, and won it",
    );
    assert.ok(!won.text.includes("vs random"));
    const one = await get("/trial?id=exp%2Fmage-s0&log=transcripts&outcome=won&line=1");
    assert.equal(one.status, 200);
    assert.match(one.text, /reflection: attempt 1: block the diagonal/);
    assert.match(one.text, /&lt;action&gt;\(9, 9\)&lt;\/action&gt;/);
    assert.match(one.text, /line=3">next</, "the next trial that matches is line 3, not line 2");
    assert.ok(!one.text.includes(">previous<"));
  });

  it("answers unknown runs, logs and pages with 404, bad parameters with 400, writes with 405", async () => {
    assert.equal((await get("/run?id=..%2F..%2Fetc%2Fpasswd")).status, 404);
    assert.equal((await get("/run")).status, 400);
    assert.equal((await get("/trials?id=exp%2Fmage-s0&log=eval")).status, 404);
    assert.equal((await get("/trials?id=exp%2Fgrpo-s0.json&log=transcripts")).status, 404);
    assert.equal((await get("/trials?id=exp%2Fmage-s0&outcome=maybe")).status, 400);
    assert.equal((await get("/trial?id=exp%2Fmage-s0&line=x")).status, 400);
    assert.equal((await get("/trial?id=exp%2Fmage-s0&line=99")).status, 404);
    assert.equal((await get("/nowhere")).status, 404);
    const post = await fetch(dash.url, { method: "POST" });
    assert.equal(post.status, 405);
  });

  it("reports run state as JSON and a stamp that changes when a run writes", async () => {
    const runs = JSON.parse((await get("/api/runs")).text) as { id: string; state: string }[];
    assert.deepEqual(
      runs.map((r) => [r.id, r.state]),
      [
        ["old-run", "stopped"],
        ["exp/grpo-s0.json", "finished"],
        ["exp/mage-s0", "active"],
      ],
    );
    const before = JSON.parse((await get("/api/stamp?id=exp%2Fmage-s0")).text).stamp;
    const s = { ...makeSummary({ name: "mage", iterations: 8, withFinal: true }), iterationsDone: 8 };
    writeSummary(join(live, "summary.json"), s, NOW);
    const afterWrite = JSON.parse((await get("/api/stamp?id=exp%2Fmage-s0")).text).stamp;
    assert.notEqual(afterWrite, before);
    assert.match((await get("/")).text, /state-finished/);
  });
});

describe("mage dashboard", () => {
  it("is a command, and names what is wrong with its folders and flags", async () => {
    assert.equal((await COMMANDS.dashboard.load()).name, "dashboard");
    const missing = join(tmpdir(), "mage-dashboard-missing-folder");
    await assert.rejects(
      runCommand(command, [missing]),
      (e) => e instanceof UsageError && /no such folder/.test(e.message),
    );
    const { root } = makeRoot();
    await assert.rejects(
      runCommand(command, [root, "--port", "70000"]),
      /--port must be an integer from 0 to 65535/,
    );
    await assert.rejects(runCommand(command, [root, "--smooth", "0"]), /--smooth must be at least 1/);
  });
});
