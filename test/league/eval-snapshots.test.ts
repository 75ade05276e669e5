import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { dealState, kuhn } from "../../src/games/kuhn.js";
import { resolveSnapshotSpec, snapshotCells, snapshotsOnDisk } from "../../src/league/eval-snapshots.js";
import { newSnapshotEntry } from "../../src/league/pool.js";
import { Ratings } from "../../src/league/ratings.js";
import { loadEmbeddedPolicy } from "../../src/league/snapshots.js";
import { TrainingLeague } from "../../src/league/training.js";
import type { GenerateRequest } from "../../src/policy/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import { loadConfig, validateConfig } from "../../src/train/config.js";
import { snapshotPlay } from "../../src/train/league-setup.js";
import type { EvalSnapshot } from "../../src/train/summary.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

const pool = [newSnapshotEntry(0), newSnapshotEntry(4), newSnapshotEntry(8)];

describe("evaluation cells naming league snapshots", () => {
  it("snapshot:latest is the pool's newest; snapshot:N the pool's, else its folder on disk", () => {
    assert.equal(resolveSnapshotSpec("snapshot:latest", pool, [])?.spec, "snapshot:8");
    assert.equal(resolveSnapshotSpec("snapshot:latest", [], [newSnapshotEntry(2)]), null);
    assert.equal(resolveSnapshotSpec("snapshot:4", pool, [])?.dir, "league/snapshot-000004");
    assert.equal(resolveSnapshotSpec("snapshot:2", pool, []), null);
    assert.equal(resolveSnapshotSpec("snapshot:2", pool, [newSnapshotEntry(2)])?.spec, "snapshot:2");
  });

  it("the config refuses snapshot cells without a league, and malformed snapshot specs", () => {
    const base = {
      game: "kuhn",
      population: { opponents: [{ spec: "cfr" }] },
    };
    const cells = (opponent: string) => ({ cells: [{ opponent, seat: "second" }] });
    assert.throws(
      () => validateConfig({ ...base, eval: cells("snapshot:latest") }),
      /eval\.cells\.0\.opponent: snapshot:latest is one of the run's league snapshots: set population\.league/,
    );
    const league = { ...base.population, league: { every: 2, share: 0 } };
    assert.throws(
      () => validateConfig({ ...base, population: league, eval: cells("snapshot:newest") }),
      /"snapshot:newest" names no snapshot/,
    );
    assert.throws(
      () =>
        validateConfig({
          ...base,
          eval: { scaling: { attempts: 5, trials: 2, cells: [{ opponent: "snapshot:3", seat: "first" }] } },
        }),
      /eval\.scaling\.cells\.0\.opponent/,
    );
    const ok = validateConfig({ ...base, population: league, eval: cells("snapshot:latest") });
    assert.equal(ok.eval.cells[0].opponent, "snapshot:latest");
  });

  it("a run's evaluations play its snapshots as training plays them; mage eval --checkpoint RUN plays the same games", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-league-eval-"));
    await saveRandomCheckpoint(join(root, "base"), { contextLength: 256, seed: 4 });
    const cfgPath = join(root, "run.yaml");
    writeFileSync(
      cfgPath,
      [
        "name: league-eval",
        "seed: 5",
        "game: kuhn",
        `model: { checkpoint: ${JSON.stringify(join(root, "base"))} }`,
        "task: { attempts: 2 }",
        "population: { opponents: [{ spec: aggressive }], league: { every: 2, share: 0.5, sampling: latest } }",
        "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 6 }",
        "optim: { lr: 1.0e-3, miniBatchRows: 8 }",
        "train: { iterations: 3, checkpointEvery: 1 }",
        "eval:",
        "  every: 1",
        "  trials: 2",
        "  finalTrials: 6",
        "  cells:",
        "    - { opponent: 'snapshot:latest', seat: second }",
        "    - { opponent: 'snapshot:2', seat: first }",
        "    - { opponent: aggressive, seat: first, unseen: false }",
        "",
      ].join("\n"),
    );
    const config = loadConfig(cfgPath);
    const out = join(root, "run");
    const logs: string[] = [];
    const { summary } = await train({
      config,
      outDir: out,
      resume: false,
      progress: false,
      log: (m) => logs.push(m),
    });
    const cellsOf = (s: EvalSnapshot) => s.cells.map((c) => [c.opponent, c.seat, c.snapshot ?? null]);
    // After 1 iteration only snapshot 0 exists: snapshot:2 is skipped, and said so.
    assert.deepEqual(
      summary.periodicEval.map((s) => [s.iteration, cellsOf(s)]),
      [
        [
          1,
          [
            ["snapshot:latest", "second", "snapshot:0"],
            ["aggressive", "first", null],
          ],
        ],
        [
          2,
          [
            ["snapshot:latest", "second", "snapshot:2"],
            ["snapshot:2", "first", null],
            ["aggressive", "first", null],
          ],
        ],
      ],
    );
    assert.ok(logs.some((l) => /eval @1: skipped snapshot:2 \(agent first\): no such snapshot yet/.test(l)));
    const final = summary.finalEval!;
    assert.deepEqual(cellsOf(final)[0], ["snapshot:latest", "second", "snapshot:2"]);
    // The snapshot played: its moves differ from the scripted cell's opponent, and the trials are logged under the cell's name.
    const evalTrials = readFileSync(join(out, "eval-transcripts.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { opponent: string });
    assert.ok(evalTrials.some((t) => t.opponent === "snapshot:latest"));

    // mage eval of the run's newest checkpoint, with the final evaluation's settings: the same trials.
    const res = spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "eval",
        "--checkpoint",
        out,
        "--opponent",
        "snapshot:latest,snapshot:2",
        "--seat",
        "second",
        "--trials",
        "6",
        "--attempts",
        "2",
        "--max-tokens",
        "6",
        "--seed",
        "5",
        "--out",
        join(root, "eval.jsonl"),
        "--json",
        "--quiet",
      ],
      { encoding: "utf8" },
    );
    assert.equal(res.status, 0, res.stderr);
    const cli = JSON.parse(res.stdout) as { cells: EvalSnapshot["cells"] };
    assert.deepEqual(
      cli.cells.map((c) => [c.opponent, c.seat, c.snapshot ?? null]),
      [
        ["snapshot:latest", "second", "snapshot:2"],
        ["snapshot:2", "second", null],
      ],
    );
    assert.deepEqual(cli.cells[0].metrics, JSON.parse(JSON.stringify(final.cells[0].metrics)));
    // snapshot:latest and snapshot:2 are one snapshot here: the same games.
    assert.deepEqual(cli.cells[1].metrics, cli.cells[0].metrics);

    // A snapshot the run does not have is a usage error naming the ones it keeps.
    const missing = spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "eval",
        "--checkpoint",
        out,
        "--opponent",
        "snapshot:6",
        "--trials",
        "1",
        "--out",
        join(root, "missing.jsonl"),
        "--quiet",
      ],
      { encoding: "utf8" },
    );
    assert.equal(missing.status, 2, missing.stderr);
    assert.match(missing.stderr, /has no snapshot:6 \(snapshots kept: snapshot:0, snapshot:2\)/);

    // The evaluation's snapshot opponent asks what training's asks: the same weights, prompts, sampling and seeds.
    const task = await loadTask("kuhn");
    const requests = { eval: [] as GenerateRequest[], train: [] as GenerateRequest[] };
    const recording = (into: GenerateRequest[]) => async (dir: string, name: string) => {
      const p = await loadEmbeddedPolicy(dir, name);
      return {
        name,
        generate: (rs: readonly GenerateRequest[]) => {
          into.push(...rs);
          return p.generate(rs);
        },
      };
    };
    const snap = await snapshotCells([{ opponent: "snapshot:latest", seat: "second", unseen: true }], {
      runDir: out,
      pool: await snapshotsOnDisk(out),
      play: snapshotPlay(config),
      game: kuhn,
      task,
      load: recording(requests.eval),
    });
    const league = new TrainingLeague({
      league: config.population.league,
      ratings: config.population.ratings,
      scripted: [],
      runDir: out,
      game: kuhn as never,
      task,
      play: snapshotPlay(config),
      store: { save: () => Promise.reject(new Error("no saves here")), load: recording(requests.train) },
      snapshotMeta: {},
      state: { snapshots: await snapshotsOnDisk(out), ratings: new Ratings().toJSON() },
    });
    // Latest sampling with no scripted opponent: the iteration plays snapshot 2 only, so it is loaded.
    await league.forIteration(3, 1, Rng.seeded(1));
    const a = snap.makeOpponent!("snapshot:latest", { rng: Rng.seeded(9), replay: false });
    const b = league.makeOpponent("snapshot:2", { rng: Rng.seeded(9), replay: false });
    const states = [
      kuhn.apply(dealState([0, 2]), 0),
      kuhn.apply(dealState([2, 1]), 1),
      kuhn.apply(dealState([1, 0]), 0),
    ];
    for (const st of states) assert.equal(await a.act(st), await b.act(st));
    assert.equal(requests.eval.length, states.length);
    assert.deepEqual(requests.eval, requests.train);
    assert.equal(requests.eval[0].sampling.maxTokens, 6);
    assert.equal(requests.eval[0].sampling.temperature, config.rollout.sampling.temperature);
  });

  it("a league with share 0 keeps snapshots and ratings but trains exactly as the scripted population alone", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-league-share0-"));
    await saveRandomCheckpoint(join(root, "base"), { contextLength: 256, seed: 4 });
    const run = async (league: string) => {
      const cfgPath = join(root, `${league === "null" ? "fixed" : "share0"}.yaml`);
      writeFileSync(
        cfgPath,
        [
          "name: share0",
          "seed: 3",
          "game: kuhn",
          `model: { checkpoint: ${JSON.stringify(join(root, "base"))} }`,
          "task: { attempts: 2 }",
          `population: { opponents: [{ spec: aggressive, weight: 2 }, { spec: cfr-mixed }], league: ${league} }`,
          "rollout: { tasksPerIteration: 3, groupSize: 2, maxResponseTokens: 6 }",
          "optim: { lr: 1.0e-3, miniBatchRows: 8 }",
          "train: { iterations: 2, checkpointEvery: 2 }",
          "eval: { every: 0, trials: 2, finalTrials: 2 }",
          "",
        ].join("\n"),
      );
      const out = join(root, league === "null" ? "fixed" : "share0");
      await train({
        config: loadConfig(cfgPath),
        outDir: out,
        resume: false,
        progress: false,
        log: () => {},
      });
      return out;
    };
    const fixed = await run("null");
    const share0 = await run("{ every: 1, share: 0 }");
    const rows = (dir: string) =>
      readFileSync(join(dir, "metrics.jsonl"), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Record<string, number>);
    const training = (m: Record<string, number>) =>
      Object.fromEntries(
        Object.entries(m).filter(
          ([k]) =>
            !/^(rating|win_prob|league)\//.test(k) &&
            !["rollout_ms", "update_ms", "env_ms", "wall_s"].includes(k),
        ),
      );
    assert.deepEqual(rows(share0).map(training), rows(fixed).map(training));
    for (const m of rows(share0)) {
      assert.equal(m["league/snapshot_share"], 0);
      assert.ok(Number.isFinite(m["rating/agent"]));
    }
    assert.deepEqual(
      (await snapshotsOnDisk(share0)).map((e) => e.spec),
      ["snapshot:0", "snapshot:1", "snapshot:2"],
    );
  });
});
