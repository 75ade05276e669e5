import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

const TIMING_KEYS = new Set(["rollout_ms", "update_ms", "env_ms", "wall_s"]);

function metrics(dir: string): Record<string, number>[] {
  return readFileSync(join(dir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .map(
      (m) =>
        Object.fromEntries(Object.entries(m).filter(([k]) => !TIMING_KEYS.has(k))) as Record<string, number>,
    );
}

/** The opponents an iteration's trials played (from its per-opponent metrics). */
function opponentsOf(m: Record<string, number>): string[] {
  return Object.keys(m)
    .filter((k) => k.startsWith("success/"))
    .map((k) => k.slice("success/".length))
    .sort();
}

function trainingState(dir: string, iteration: number) {
  const name = `iter-${String(iteration).padStart(6, "0")}`;
  return JSON.parse(readFileSync(join(dir, "checkpoints", name, "training-state.json"), "utf8"));
}

async function setup(league: string, extra: string[] = []) {
  const root = mkdtempSync(join(tmpdir(), "mage-league-"));
  await saveRandomCheckpoint(join(root, "base"), { contextLength: 256, seed: 4 });
  const cfgPath = join(root, "run.yaml");
  writeFileSync(
    cfgPath,
    [
      "name: league-test",
      "seed: 5",
      "game: kuhn",
      `model: { checkpoint: ${JSON.stringify(join(root, "base"))} }`,
      "task: { attempts: 2, maxTurns: 2 }",
      `population: { opponents: [{ spec: aggressive }, { spec: cfr-mixed }], league: ${league} }`,
      "rollout: { tasksPerIteration: 4, groupSize: 2, maxResponseTokens: 6 }",
      "optim: { lr: 1.0e-3, miniBatchRows: 8 }",
      "eval: { every: 0, trials: 2, finalTrials: 2 }",
      ...extra,
      "",
    ].join("\n"),
  );
  return { root, config: loadConfig(cfgPath), cfgPath };
}

describe("league in training", () => {
  it("takes a snapshot every N iterations and plays the newest with latest sampling, in its share of groups", async () => {
    const { root, config } = await setup("{ every: 2, share: 0.5, sampling: latest, maxSnapshots: 2 }", [
      "train: { iterations: 5, checkpointEvery: 1, keepLast: 1, transcriptsPerIteration: 8 }",
    ]);
    const out = join(root, "run");
    await train({ config, outDir: out, resume: false, progress: false, log: () => {} });
    const ms = metrics(out);
    // Snapshots after 0, 2 and 4 iterations; each iteration plays the newest one taken before it.
    assert.deepEqual(
      ms.map((m) => opponentsOf(m).filter((o) => o.startsWith("snapshot:"))),
      [["snapshot:0"], ["snapshot:0"], ["snapshot:2"], ["snapshot:2"], ["snapshot:4"]],
    );
    for (const m of ms) {
      assert.equal(m["league/snapshot_share"], 0.5);
      assert.ok(m["league/snapshot_invalid"] >= 0, "the snapshot answered its moves");
      assert.ok(Number.isFinite(m["rating/agent"]) && Number.isFinite(m["rating/aggressive"]));
    }
    assert.deepEqual(
      ms.map((m) => m["league/snapshots"]),
      [1, 1, 2, 2, 2],
    );
    // The cap: the pool holds 2, and the folder of the snapshot that left (0) is gone once no kept checkpoint names it.
    const state = trainingState(out, 5);
    assert.deepEqual(
      state.league.snapshots.map((s: { iteration: number }) => s.iteration),
      [2, 4],
    );
    assert.deepEqual(readdirSync(join(out, "league")).sort(), ["snapshot-000002", "snapshot-000004"]);
    // A snapshot is the agent's weights at the time: snapshot 4 equals checkpoint 4's model.
    const snap = await loadCheckpoint(join(out, "league", "snapshot-000004"), { trainingState: false });
    assert.equal(
      JSON.parse(readFileSync(join(out, "league", "snapshot-000004", "meta.json"), "utf8")).iteration,
      4,
    );
    const base = await loadCheckpoint(join(root, "base"), { trainingState: false });
    let differs = false;
    for (const [name, t] of snap.params)
      if (!t.every((x, i) => x === base.params.get(name)![i])) differs = true;
    assert.ok(differs, "snapshot 4 holds trained weights, not the base");
    // Every game was rated: each attempt of each trial is one game of the agent against its opponent.
    const rated = new Map<string, { games: number; wins: number; losses: number }>(
      state.league.ratings.players,
    );
    const expected = new Map<string, { games: number; wins: number; losses: number }>();
    const trials = readFileSync(join(out, "transcripts.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.equal(trials.length, 5 * 8, "every trial is in the transcripts");
    for (const t of trials) {
      for (const a of t.attempts as { score: number }[]) {
        for (const who of ["agent", t.opponent]) {
          const e = expected.get(who) ?? { games: 0, wins: 0, losses: 0 };
          const won = who === "agent" ? a.score > 0 : a.score < 0;
          const lost = who === "agent" ? a.score < 0 : a.score > 0;
          expected.set(who, {
            games: e.games + 1,
            wins: e.wins + (won ? 1 : 0),
            losses: e.losses + (lost ? 1 : 0),
          });
        }
      }
    }
    for (const [who, e] of expected) {
      const r = rated.get(who)!;
      assert.deepEqual({ games: r.games, wins: r.wins, losses: r.losses }, e, who);
    }
  });

  it("kill -9 mid-run, then --resume: the same metrics, pool, ratings and snapshots as a run never stopped (lagged sampling)", async () => {
    const league = "{ every: 1, share: 0.75, sampling: lagged, lag: { min: 1, max: 2 }, maxSnapshots: 3 }";
    const { root, config, cfgPath } = await setup(league, [
      "train: { iterations: 6, checkpointEvery: 2, keepLast: 1 }",
    ]);
    const straight = join(root, "straight");
    await train({ config, outDir: straight, resume: false, progress: false, log: () => {} });
    const killed = join(root, "killed");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "train", "--config", cfgPath, "--out", killed, "--no-progress"],
      { stdio: "ignore" },
    );
    const file = join(killed, "metrics.jsonl");
    const lines = () => (existsSync(file) ? readFileSync(file, "utf8").trim().split("\n").length : 0);
    const end = Date.now() + 120_000;
    while (lines() < 3) {
      if (Date.now() > end) throw new Error("the run did not progress");
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 100));
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    assert.ok(lines() < 6, "killed before the end");
    await train({ config, outDir: killed, resume: true, progress: false, log: () => {} });
    assert.deepEqual(metrics(killed), metrics(straight));
    assert.deepEqual(trainingState(killed, 6).league, trainingState(straight, 6).league);
    assert.deepEqual(
      readdirSync(join(killed, "league")).sort(),
      readdirSync(join(straight, "league")).sort(),
    );
    // Lagged: from iteration 2 on, a snapshot 1 or 2 iterations old, never the newest (age 0).
    for (const m of metrics(straight).slice(2)) {
      const ages = opponentsOf(m)
        .filter((o) => o.startsWith("snapshot:"))
        .map((o) => m.iteration - Number(o.slice("snapshot:".length)));
      assert.ok(
        ages.length > 0 && ages.every((a) => a === 1 || a === 2),
        `iteration ${m.iteration}: ages ${ages}`,
      );
    }
  });

  it("a killed run resumes with its pool, ratings and picks exactly (rating-prioritised sampling)", async () => {
    const league = "{ every: 1, share: 0.5, sampling: rating, priority: 2, maxSnapshots: 3 }";
    const { root, config } = await setup(league, [
      "train: { iterations: 5, checkpointEvery: 2, keepLast: 2 }",
    ]);
    const straight = join(root, "straight");
    await train({ config, outDir: straight, resume: false, progress: false, log: () => {} });

    const killed = join(root, "killed");
    // Stops after 3 iterations without a checkpoint (the last one is after 2): snapshot 3 is on disk, not in it.
    await train({
      config,
      outDir: killed,
      resume: false,
      progress: false,
      log: () => {},
      crashAfterIterations: 3,
    });
    assert.ok(existsSync(join(killed, "league", "snapshot-000003")));
    await train({ config, outDir: killed, resume: true, progress: false, log: () => {} });

    assert.deepEqual(metrics(killed), metrics(straight));
    assert.deepEqual(trainingState(killed, 5).league, trainingState(straight, 5).league);
    // More than one snapshot played over the run (the prioritised draws are not all the newest).
    const played = new Set(
      metrics(straight).flatMap((m) => opponentsOf(m).filter((o) => o.startsWith("snapshot:"))),
    );
    assert.ok(played.size >= 2, `snapshots played: ${[...played]}`);
    for (const dir of readdirSync(join(straight, "league"))) {
      const a = await loadCheckpoint(join(straight, "league", dir), { trainingState: false });
      const b = await loadCheckpoint(join(killed, "league", dir), { trainingState: false });
      for (const [name, t] of a.params) assert.deepEqual(b.params.get(name), t, `${dir} ${name}`);
    }
  });
});
