import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startEnvServeFromArgs } from "../../src/cli/commands/env-serve.js";
import { command as evalCommand } from "../../src/cli/commands/eval.js";
import { command as replayCommand } from "../../src/cli/commands/replay.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { readTrialLog } from "../../src/replay/read.js";
import { type EnvServerHandle, startEnvServer } from "../../src/serve/env-server.js";
import { loadConfig, validateConfig } from "../../src/train/config.js";
import { evalTaskForConfig, harderTaskForConfig, taskForConfig } from "../../src/train/task-for-config.js";
import { train } from "../../src/train/trainer.js";
import { RunIndex } from "../../src/web/runs.js";
import { runCommand } from "../cli/run-command.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

let server: EnvServerHandle;
let root: string;
before(async () => {
  server = await startEnvServer();
  root = mkdtempSync(join(tmpdir(), "mage-remote-cli-"));
  await saveRandomCheckpoint(join(root, "base"), { contextLength: 1024, seed: 4 });
});
after(async () => {
  await server.close();
});

function remoteConfig(file: string, env: string, extra: string[] = []): string {
  const path = join(root, file);
  writeFileSync(
    path,
    [
      "name: remote-test",
      "seed: 1",
      "game: remote",
      `env: { url: ${JSON.stringify(server.url)}, name: ${env}, timeoutMs: 5000, retries: 1 }`,
      `model: { checkpoint: ${JSON.stringify(join(root, "base"))} }`,
      "task: { attempts: 2, maxTurns: 3 }",
      "population: { opponents: [{ spec: aggressive }, { spec: intermediate }] }",
      "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 6 }",
      "optim: { miniBatchRows: 8 }",
      "train: { iterations: 2, checkpointEvery: 1 }",
      "eval: { every: 0, trials: 2, finalTrials: 3, cells: [{ opponent: cfr, seat: second }] }",
      ...extra,
      "",
    ].join("\n"),
  );
  return path;
}

/** `mage eval ARGS` of one-attempt trials logged to `root/FILE`: each trial's first observation (its level). */
async function evalLevels(file: string, args: string[]): Promise<string[]> {
  const out = join(root, file);
  const ev = await runCommand(evalCommand, [
    ...args,
    "--attempts",
    "1",
    "--max-tokens",
    "4",
    "--out",
    out,
    "--json",
  ]);
  assert.equal(ev.code, 0, ev.err);
  return readTrialLog(out).records.map((r) => r.memory!.attempts[0].initialObservation);
}

/** Runs `mage ARGS` in a child process (the real exit code), without blocking this process's server. */
function mage(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (c) => {
      stderr += String(c);
    });
    child.on("exit", (code) => resolve({ code, stderr }));
  });
}

describe("mage train and mage eval with game: remote", () => {
  it("trains through the protocol; the run's checkpoint evaluates and its trials replay", async () => {
    const config = loadConfig(remoteConfig("ok.yaml", "kuhn"));
    const out = join(root, "run");
    const res = await train({ config, outDir: out, resume: false, progress: false, log: () => {} });
    assert.equal(res.summary.game, "kuhn");
    assert.equal(res.summary.iterationsDone, 2);
    const cell = res.summary.finalEval!.cells[0];
    assert.equal(cell.opponent, "cfr");
    assert.equal(cell.seat, "second");
    const log = readTrialLog(join(out, "transcripts.jsonl"));
    assert.ok(log.records.length > 0, "log.records.length > 0");
    assert.equal(log.records[0].memory?.task, "kuhn");
    assert.match(log.records[0].memory!.attempts[0].initialObservation, /Your card: (Jack|Queen|King)/);
    assert.equal(server.sessions, 0, "every session was closed");
    const runs = new RunIndex([root]).scan();
    const listed = runs.find((r) => r.runDir === out);
    assert.equal(listed?.summary.game, "kuhn", "the dashboard lists the served run under its environment");
    assert.equal(listed?.state, "finished");
    assert.ok(listed?.logs.includes("transcripts"), "its trials can be replayed from the dashboard");
    const replay = await runCommand(replayCommand, [out, "--line", "1"]);
    assert.equal(replay.code, 0, replay.err);
    assert.match(replay.out, /Your card: (Jack|Queen|King)/);

    const ckpts = readdirSync(join(out, "checkpoints"));
    const evalOut = join(root, "eval.jsonl");
    const ev = await runCommand(evalCommand, [
      "--checkpoint",
      join(out, "checkpoints", ckpts.sort().at(-1)!),
      "--opponent",
      "conservative",
      "--trials",
      "2",
      "--attempts",
      "2",
      "--max-tokens",
      "6",
      "--out",
      evalOut,
      "--json",
    ]);
    assert.equal(ev.code, 0, ev.err);
    const lines = readFileSync(evalOut, "utf8").trim().split("\n");
    assert.equal(lines.length, 2, "both trials appended");
    assert.equal(JSON.parse(lines[0]).opponent, "conservative");
  });

  it("an unknown environment name exits 2 with the server's choices", async () => {
    const r = await mage([
      "train",
      "--config",
      remoteConfig("bad-env.yaml", "leduc"),
      "--out",
      join(root, "x"),
    ]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      /unknown environment "leduc".*valid choices \(from its \/info\): kuhn, minesweeper, sokoban, tictactoe/,
    );
  });

  it("a server that is down is one clear line and exit code 1, without a stack trace", async () => {
    const file = remoteConfig("down.yaml", "kuhn");
    // Port 1 on loopback: nothing listens there, so every connection is refused.
    writeFileSync(
      file,
      readFileSync(file, "utf8").replace(JSON.stringify(server.url), '"http://127.0.0.1:1"'),
    );
    const r = await mage(["train", "--config", file, "--out", join(root, "down")]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /is the server running\?/, r.stderr);
    assert.doesNotMatch(r.stderr, /^\s+at /m, `a stack trace was printed:\n${r.stderr}`);
  });

  it("a bad env config field, an out-of-range seed range or an unknown opponent is a UsageError", async () => {
    const cfg = (extra: string[]) => loadConfig(remoteConfig("over.yaml", "kuhn"), extra);
    await assert.rejects(
      train({
        config: cfg(["env.config.replayOpponent=3"]),
        outDir: join(root, "o1"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      (e: Error) => e instanceof UsageError && /replayOpponent must be true or false, got 3/.test(e.message),
    );
    await assert.rejects(
      train({
        config: cfg(["env.seeds.min=0", "env.seeds.max=99999999999"]),
        outDir: join(root, "o2"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      (e: Error) => e instanceof UsageError && /valid range .*\[0, 4294967295\]/.test(e.message),
    );
    await assert.rejects(
      train({
        config: cfg(["population.opponents=[{spec: mcts}]"]),
        outDir: join(root, "o3"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      (e: Error) => e instanceof UsageError && /unknown kuhn opponent "mcts".*cfr/.test(e.message),
    );
  });

  it("eval --game remote checks the opponent against the server", async () => {
    const ev = runCommand(evalCommand, [
      "--policy",
      `checkpoint:${join(root, "base")}`,
      "--game",
      "remote",
      "--env-url",
      server.url,
      "--env-name",
      "tictactoe",
      "--opponent",
      "cfr",
    ]);
    await assert.rejects(
      ev,
      (e: Error) =>
        e instanceof UsageError && /unknown tictactoe opponent "cfr"; valid specs: .*mcts/.test(e.message),
    );
  });

  it("eval --env-seeds draws the served instances from that range, checked against the server's", async () => {
    const sokoban = ["--policy", `checkpoint:${join(root, "base")}`, "--game", "remote"];
    sokoban.push("--env-url", server.url, "--env-name", "sokoban");
    const firstObservations = (file: string, seedFlags: string[]) =>
      evalLevels(file, [...sokoban, ...seedFlags, "--trials", "3"]);
    const pinned = await firstObservations("env-seeds-5.jsonl", ["--env-seeds", "5"]);
    assert.equal(pinned.length, 3);
    assert.equal(new Set(pinned).size, 1, "one seed: every trial is the same level");
    const ranged = await firstObservations("env-seeds-5-5.jsonl", ["--env-seeds", "5-5"]);
    assert.deepEqual(ranged, pinned, "5-5 is the same range as 5");
    const drawn = await firstObservations("env-seeds-all.jsonl", []);
    assert.equal(new Set(drawn).size, 3, "without the flag the levels are drawn from all the server's seeds");

    const evalWithSeeds = (seeds: string) => runCommand(evalCommand, [...sokoban, "--env-seeds", seeds]);
    await assert.rejects(
      evalWithSeeds("7-3"),
      (e: Error) => e instanceof UsageError && /--env-seeds must be MIN-MAX/.test(e.message),
    );
    await assert.rejects(
      evalWithSeeds("0-99999999999"),
      (e: Error) => e instanceof UsageError && /valid range .*\[0, 4294967295\]/.test(e.message),
    );
  });

  it("eval --checkpoint plays the served seeds it trained on, and --env-config drops them", async () => {
    const path = remoteConfig("pinned-seeds.yaml", "sokoban", []);
    writeFileSync(
      path,
      readFileSync(path, "utf8")
        .replace(/population: .*\n/, "")
        .replace(/env: \{ (.*) \}\n/, "env: { $1, seeds: { min: 9, max: 9 } }\n")
        .replace("iterations: 2", "iterations: 1"),
    );
    const out = join(root, "pinned-seeds-run");
    await train({ config: loadConfig(path), outDir: out, resume: false, progress: false, log: () => {} });
    const trained = readTrialLog(join(out, "transcripts.jsonl")).records[0].memory!.attempts[0];
    const levels = (file: string, extra: string[]) =>
      evalLevels(file, ["--checkpoint", out, "--trials", "2", ...extra]);
    assert.deepEqual(await levels("pinned-eval.jsonl", []), [
      trained.initialObservation,
      trained.initialObservation,
    ]);
    const other = await levels("pinned-eval-config.jsonl", ["--env-config", "{}"]);
    assert.ok(!other.includes(trained.initialObservation), "a new env config draws from all the seeds");
  });

  it("eval.env: the evaluations play the env config and seeds laid over training's", async () => {
    const sets = [
      "eval: { every: 0, trials: 2, finalTrials: 4, env: { config: { numBoxes: 1 }, seeds: { min: 5, max: 5 } } }",
    ];
    const path = remoteConfig("eval-env.yaml", "sokoban", []);
    const text = readFileSync(path, "utf8")
      .replace(/population: .*\n/, "")
      .replace(/eval: .*\n/, `${sets[0]}\n`);
    writeFileSync(path, text);
    const out = join(root, "eval-env-run");
    await train({ config: loadConfig(path), outDir: out, resume: false, progress: false, log: () => {} });
    const first = (file: string) =>
      readTrialLog(join(out, file)).records.map((r) => r.memory!.attempts[0].initialObservation);
    const evals = first("eval-transcripts.jsonl");
    assert.ok(evals.length >= 2, `${evals.length} evaluation trials kept`);
    assert.equal(new Set(evals).size, 1, "one seed: every evaluation trial is the same level");
    assert.ok(
      first("transcripts.jsonl").every((o) => !evals.includes(o)),
      "training drew its levels from the training env",
    );
    const bad = loadConfig(path);
    bad.eval.env = { config: { numBoxs: 1 }, seeds: null };
    await assert.rejects(
      train({
        config: bad,
        outDir: join(root, "eval-env-bad"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      (e: Error) => e instanceof UsageError && /eval\.env/.test(e.message) && /numBoxs/.test(e.message),
    );
    assert.throws(
      () => validateConfig({ name: "x", game: "sokoban", eval: { env: { config: {} } } }),
      /eval\.env: only game: remote/,
    );
  });

  it("eval.harder.env: a served run's harder set plays its config laid over the evaluation's", async () => {
    const path = remoteConfig("harder-env.yaml", "sokoban", []);
    const text = readFileSync(path, "utf8")
      .replace(/population: .*\n/, "")
      .replace(
        /eval: .*\n/,
        "eval: { every: 0, trials: 2, finalTrials: 2, env: { config: { numBoxes: 1 } }, harder: { trials: 3, attempts: 1, env: { config: { numBoxes: 2 }, seeds: { min: 9, max: 9 } } } }\n",
      );
    writeFileSync(path, text);
    const config = loadConfig(path);
    const harder = await harderTaskForConfig(config);
    assert.ok(harder, "a served config with eval.harder.env has a harder task");
    const level = async (def: NonNullable<typeof harder>) => {
      const t = def.create({});
      await t.reset(Rng.seeded(3));
      const obs = t.observation();
      await t.close?.();
      return obs;
    };
    const boxes = (obs: string) => (obs.match(/X/g) ?? []).length;
    assert.equal(boxes(await level(harder)), 2, "the harder set's levels have the harder env's two boxes");
    assert.equal(boxes(await level(await evalTaskForConfig(config, await taskForConfig(config)))), 1);
    const out = join(root, "harder-env-run");
    const res = await train({ config, outDir: out, resume: false, progress: false, log: () => {} });
    const snap = res.summary.harderEval;
    assert.equal(snap?.attempts, 1);
    assert.equal(snap?.cells[0].metrics.trials, 3);

    const bad = loadConfig(path);
    bad.eval.harder!.env = { config: { numBoxs: 2 }, seeds: null };
    await assert.rejects(
      harderTaskForConfig(bad),
      (e: Error) => /eval\.harder\.env/.test(e.message) && /numBoxs/.test(e.message),
    );
    const remote = { game: "remote", env: { url: "http://127.0.0.1:1", name: "sokoban" } };
    assert.throws(
      () => validateConfig({ ...remote, eval: { harder: { trials: 2 } } }),
      /eval\.harder\.env: a served/,
    );
    assert.throws(
      () => validateConfig({ game: "sokoban", eval: { harder: { trials: 2, env: { config: {} } } } }),
      /eval\.harder\.env: only game: remote/,
    );
  });

  it("the config needs an env section exactly with game: remote", () => {
    const base = { population: { opponents: [{ spec: "random" }] } };
    assert.throws(
      () => validateConfig({ ...base, game: "remote" }),
      /env: game: remote needs an env section/,
    );
    assert.throws(
      () => validateConfig({ ...base, game: "kuhn", env: { url: "http://x", name: "kuhn" } }),
      /only game: remote takes an env section/,
    );
    const ok = validateConfig({ ...base, game: "remote", env: { url: "http://127.0.0.1:1", name: "kuhn" } });
    assert.equal(ok.env?.retries, 3);
  });

  it("mage env-serve starts on the port asked for and refuses a bad one", async () => {
    const h = await startEnvServeFromArgs(["--port", "0"], () => {});
    try {
      const info = (await (await fetch(`${h.url}/info`)).json()) as { protocol: string };
      assert.equal(info.protocol, "mage-env/1");
    } finally {
      await h.close();
    }
    await assert.rejects(
      startEnvServeFromArgs(["--port", "70000"], () => {}),
      UsageError,
    );
  });
});
