/**
 * The standard evaluation of a served split (issue 58, part 3): `instances: every` plays every
 * instance the server offers exactly once, trial i instance i, in a deterministic order, and
 * reports success@k per category (per task type, as ALFWorld reports). A small protocol server in
 * this file offers 7 games whose outcome is fixed by the game, whatever the answers: type0 games
 * are won at attempt 1, type1 games at attempt 2, type2 games never.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { command as evalCommand } from "../../src/cli/commands/eval.js";
import { UsageError } from "../../src/core/errors.js";
import { evaluate } from "../../src/evaluate/evaluate.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { everyInstanceSeeds, MAX_EVERY_INSTANCES, openRemoteTask } from "../../src/tasks/remote.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { runCommand } from "../cli/run-command.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

const GAMES = 7;

interface Played {
  /** Seeds of every /create, in arrival order. */
  creates: number[];
  /** Seeds of the sessions that were stepped (played, not only probed). */
  played: number[];
}

/** A `mage-env/1` server of one single-player environment, `games`: seed s plays game s mod 7. */
async function startGamesServer(
  declare = true,
): Promise<{ url: string; seen: Played; close(): Promise<void> }> {
  const seen: Played = { creates: [], played: [] };
  const sessions = new Map<
    string,
    { game: number; attempt: number; done: boolean; won: boolean; split: string }
  >();
  let counter = 0;
  const state = (s: { game: number; done: boolean }) => ({
    fingerprint: `game-${s.game}`,
    observation: `Game ${s.game}.`,
    legalActions: ["go"],
    toMove: s.done ? null : "agent",
    done: s.done,
  });
  const server: Server = createServer((req, res) => {
    let text = "";
    req.on("data", (c) => {
      text += String(c);
    });
    req.on("end", () => {
      const body = text ? JSON.parse(text) : {};
      const send = (status: number, out: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(out));
      };
      const path = req.url ?? "/";
      if (path === "/info")
        return send(200, {
          protocol: "mage-env/1",
          server: "games",
          environments: [
            {
              name: "games",
              description: "seven games",
              twoPlayer: false,
              seats: [],
              opponents: [],
              defaultOpponent: null,
              maxTurns: 2,
              seeds: { min: 0, max: 4294967295 },
              config: { split: { type: "string", default: "valid", choices: ["valid", "test"] } },
              legalActions: true,
            },
          ],
        });
      if (path === "/create") {
        seen.creates.push(body.seed);
        const sid = `s-${++counter}`;
        const s = {
          game: body.seed % GAMES,
          attempt: 1,
          done: false,
          won: false,
          split: body.config?.split ?? "valid",
        };
        sessions.set(sid, s);
        return send(200, {
          session: sid,
          prompt: { rules: "Play the game.", playInstruction: "Answer <action>go</action>." },
          ...state(s),
          category: `${s.split}/type${s.game % 3}`,
          ...(declare ? { instances: GAMES } : {}),
        });
      }
      const s = sessions.get(body.session);
      if (!s) return send(404, { error: { kind: "unknown_session", message: "no session" } });
      if (path === "/close") {
        sessions.delete(body.session);
        return send(200, { closed: true });
      }
      const cat = { category: `${s.split}/type${s.game % 3}` };
      if (path === "/restart") {
        s.attempt += 1;
        s.done = false;
        s.won = false;
        return send(200, { ...state(s), ...cat });
      }
      if (path === "/step") {
        if (s.attempt === 1) seen.played.push(s.game);
        const type = s.game % 3;
        s.won = type === 0 || (type === 1 && s.attempt >= 2);
        s.done = true;
        return send(200, {
          observation: s.won ? "Won." : "Lost.",
          reward: s.won ? 1 : 0,
          done: true,
          won: s.won,
          score: s.won ? 1 : 0,
          valid: true,
          action: "go",
          legalActions: [],
          toMove: null,
        });
      }
      return send(404, { error: { kind: "not_found", message: path } });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Answers `<action>go</action>`, and a remark when asked to reflect. */
const goPolicy: Policy = {
  name: "go",
  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return requests.map((r) => {
      const last = r.messages[r.messages.length - 1].content.toLowerCase();
      const text = last.includes("remark") ? "<remark>try again</remark>" : "<action>go</action>";
      return { text, tokenIds: [1, 2], logprobs: [-1, -1], finishReason: "stop", promptTokens: 10 };
    });
  },
};

const EVAL = {
  cells: [{ opponent: null, seat: null, unseen: true }],
  trials: 100,
  attempts: 3,
  reflection: "reflection_only" as const,
  promptStyle: "compact" as const,
  maxTurns: 2,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 8, stop: [] },
  seed: 5,
  concurrency: 3,
};

let games: Awaited<ReturnType<typeof startGamesServer>>;
let root: string;
before(async () => {
  games = await startGamesServer();
  root = mkdtempSync(join(tmpdir(), "mage-every-"));
  await saveRandomCheckpoint(join(root, "base"), { contextLength: 1024, seed: 4 });
});
after(async () => {
  await games.close();
});

describe("every instance once (eval.env.instances: every, mage eval --env-instances every)", () => {
  it("plays every game exactly once, trial i game i, and success@k per type", async () => {
    const task = await openRemoteTask({ url: games.url, name: "games" });
    const seeds = await task.instanceSeeds();
    assert.deepEqual(seeds, [0, 1, 2, 3, 4, 5, 6], "the server's count, from one probe session");
    games.seen.played.length = 0;
    const run = () => evaluate(goPolicy, { ...EVAL, task, instanceSeeds: seeds });
    const res = await run();
    assert.equal(res.trialsPerCell, GAMES, "trials = the number of games, not the 100 asked");
    assert.deepEqual(
      res.trials.map((t) => t.taskSeed),
      seeds,
    );
    assert.deepEqual(
      [...games.seen.played].sort((a, b) => a - b),
      seeds,
      "each game played once",
    );
    assert.deepEqual(
      res.trials.map((t) => t.memory?.attempts[0].initialObservation),
      seeds.map((s) => `Game ${s}.`),
      "trial i plays game i",
    );
    const m = res.cells[0].metrics;
    assert.equal(m.trials, GAMES);
    // types 0 (games 0, 3, 6) won at attempt 1; type 1 (1, 4) at 2; type 2 (2, 5) never.
    assert.deepEqual(
      m.successAt.map((e) => e.mean),
      [3 / 7, 5 / 7, 5 / 7],
    );
    const by = res.cells[0].byCategory!;
    assert.deepEqual(Object.keys(by), ["valid", "valid/type0", "valid/type1", "valid/type2"]);
    assert.deepEqual(
      Object.fromEntries(
        Object.entries(by).map(([k, v]) => [k, [v.trials, ...v.successAt.map((e) => e.mean)]]),
      ),
      {
        valid: [7, 3 / 7, 5 / 7, 5 / 7],
        "valid/type0": [3, 1, 1, 1],
        "valid/type1": [2, 0, 1, 1],
        "valid/type2": [2, 0, 0, 0],
      },
    );
    // Deterministic: the same games in the same order, the same results.
    const again = await run();
    assert.deepEqual(
      again.trials.map((t) => [t.taskSeed, t.attempts.map((a) => a.won)]),
      res.trials.map((t) => [t.taskSeed, t.attempts.map((a) => a.won)]),
    );
    // The default draws seeds with replacement: the trials asked, games repeated or missed.
    const drawn = await evaluate(goPolicy, { ...EVAL, task, trials: 14 });
    assert.equal(drawn.trialsPerCell, 14);
    assert.ok(
      drawn.trials.every((t) => t.taskSeed >= 0x10000),
      "drawn task seeds are the held-out range's",
    );
  });

  it("without a declared count, every seed of the range once; an unbounded range is refused", async () => {
    assert.deepEqual(
      everyInstanceSeeds("x", { min: 20000, max: 20004 }, undefined),
      [20000, 20001, 20002, 20003, 20004],
    );
    assert.deepEqual(
      everyInstanceSeeds("x", { min: 3, max: 4 }, 7),
      [3, 4],
      "a range smaller than the count",
    );
    assert.deepEqual(everyInstanceSeeds("x", { min: 10, max: 1000 }, 3), [10, 11, 12]);
    assert.throws(
      () => everyInstanceSeeds("x", { min: 0, max: MAX_EVERY_INSTANCES }, undefined),
      (e: Error) =>
        e instanceof UsageError &&
        /declares no instance count/.test(e.message) &&
        /--env-seeds/.test(e.message),
    );
    const silent = await startGamesServer(false);
    try {
      const task = await openRemoteTask({ url: silent.url, name: "games", seeds: { min: 40, max: 43 } });
      assert.deepEqual(await task.instanceSeeds(), [40, 41, 42, 43]);
      await assert.rejects(
        (await openRemoteTask({ url: silent.url, name: "games" })).instanceSeeds(),
        (e: Error) => e instanceof UsageError && /set the instances to play/.test(e.message),
      );
    } finally {
      await silent.close();
    }
  });

  it("mage eval --env-instances every plays each game once and prints success@k per type", async () => {
    const out = join(root, "eval.jsonl");
    const base = ["--checkpoint", join(root, "base"), "--game", "remote", "--env-url", games.url];
    const ev = await runCommand(evalCommand, [
      ...base,
      "--env-name",
      "games",
      "--env-instances",
      "every",
      "--attempts",
      "2",
      "--max-tokens",
      "4",
      "--out",
      out,
      "--json",
    ]);
    assert.equal(ev.code, 0, ev.err);
    const json = JSON.parse(ev.out);
    assert.equal(json.cells[0].metrics.trials, GAMES);
    assert.deepEqual(Object.keys(json.cells[0].byCategory), [
      "valid",
      "valid/type0",
      "valid/type1",
      "valid/type2",
    ]);
    const lines = readFileSync(out, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((l) => l.taskSeed).sort((a: number, b: number) => a - b),
      [0, 1, 2, 3, 4, 5, 6],
    );
    for (const l of lines) assert.equal(l.memory.attempts[0].initialObservation, `Game ${l.taskSeed}.`);
    await assert.rejects(
      runCommand(evalCommand, [...base, "--env-name", "games", "--env-instances", "every", "--trials", "5"]),
      (e: Error) => e instanceof UsageError && /leave --trials out/.test(e.message),
    );
    await assert.rejects(
      runCommand(evalCommand, [...base, "--env-name", "games", "--env-instances", "all"]),
      (e: Error) =>
        e instanceof UsageError && /--env-instances "all"; valid choices: drawn, every/.test(e.message),
    );
  });

  it("a run's final evaluation plays every game of the evaluation split once, with success@k per type", async () => {
    const path = join(root, "run.yaml");
    writeFileSync(
      path,
      [
        "name: every-test",
        "seed: 1",
        "game: remote",
        `env: { url: ${JSON.stringify(games.url)}, name: games, timeoutMs: 5000, retries: 1 }`,
        `model: { checkpoint: ${JSON.stringify(join(root, "base"))} }`,
        "task: { attempts: 2, maxTurns: 2 }",
        "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 4 }",
        "optim: { miniBatchRows: 8 }",
        "train: { iterations: 1, checkpointEvery: 1 }",
        "eval: { every: 0, trials: 2, finalTrials: 3, transcriptsPerCell: 2, independent: {}, env: { config: { split: test }, instances: every } }",
        "",
      ].join("\n"),
    );
    const out = join(root, "run");
    const res = await train({
      config: loadConfig(path),
      outDir: out,
      resume: false,
      progress: false,
      log: () => {},
    });
    for (const snap of [res.summary.finalEval!, res.summary.independentEval!]) {
      assert.equal(snap.trialsPerCell, GAMES, "every game once, not finalTrials");
      assert.equal(snap.instances, "every");
      assert.deepEqual(Object.keys(snap.cells[0].byCategory!), [
        "test",
        "test/type0",
        "test/type1",
        "test/type2",
      ]);
      assert.deepEqual(
        Object.values(snap.cells[0].byCategory!).map((c) => c.trials),
        [7, 3, 2, 2],
        "games 0-6 once: three of type 0, two of types 1 and 2",
      );
      assert.deepEqual(
        snap.cells[0].byCategory!["test/type1"].successAt.map((e) => e.mean),
        [0, 1],
      );
    }
    const transcripts = readFileSync(join(out, "eval-transcripts.jsonl"), "utf8").trim().split("\n");
    assert.equal(transcripts.length, 2, "the first transcriptsPerCell trials by index");
    const outcomes = readFileSync(join(out, "eval-trials.jsonl"), "utf8").trim().split("\n");
    assert.equal(outcomes.length, GAMES);
  });
});
