/**
 * Every server of the environment protocol probed as a hostile or careless client would, one
 * suite run against each: `mage env-serve`, and the Python adapters (OpenSpiel, TextArena, and
 * TextWorldExpress's Simon Says, a single-player environment on a JVM) on their shared server
 * (python/mage_envs/server.py). ScienceWorld is not probed: a create loads a whole world in its JVM
 * (about 0.4 s), so the 3,000-create flood alone would take 20 minutes; ALFWorld likewise (a create
 * loads a PDDL game). Loopback only, every loop bounded: the session
 * cap with Retry-After (the client waits it out), malformed and oversize bodies, stalled sockets,
 * dropped connections, floods (400 at once; 3,000 creates 32 at once with no connection reset),
 * the API key, a keyed training run against a server at its cap, and SIGTERM during a request.
 * Last, mage's client against a Python adapter whose engine overruns the server's time budget.
 * env-serve's own probes (opponent limits, its worker pool) are in env-serve-probes.test.ts; the
 * Python server's time budget and stalled engines in python/tests/test_server.py.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { ENV_CLIENT_TOTALS } from "../../src/env/client.js";
import { openRemoteTask } from "../../src/tasks/remote.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";
import {
  type Served,
  type ServerOptions,
  startEnvServe,
  startPythonAdapter,
  startPythonServer,
} from "./adapters.js";
import { type CliServer, exchange, stalledSockets, startCli, terminate, timedGet, upload } from "./probes.js";

interface Target {
  name: string;
  /** A cheap environment of this server (two-player unless `opponents` is empty). */
  env: string;
  /** The i-th distinct valid seed (default i), and the seed range a client draws from (default all). */
  seed?: (i: number) => number;
  seeds?: { min: number; max: number };
  start(o?: ServerOptions): Promise<Served>;
  /** A training run's opponents, and its evaluation cell's (none for a single-player environment). */
  opponents: string[];
  evalOpponent: string | null;
  /** The server started as a user starts it, with a time budget a long request stays within. */
  cli(): Promise<CliServer>;
  /** A /create that keeps the server busy for seconds (none when the server has no slow work). */
  longCreate?: Record<string, unknown>;
  /** Whether that create always outlasts the 2 s grace (else it may finish within it). */
  longCreateOutlastsGrace?: boolean;
}

const OPENSPIEL = [
  "mage_envs.openspiel_server",
  "--games",
  "kuhn_poker,tic_tac_toe",
  "--cfr-iterations",
  "5",
];
const TEXTARENA = ["mage_envs.textarena_server", "--games", "KuhnPoker-v0,TicTacToe-v0"];
const TWX = ["mage_envs.textworld_express_server", "--games", "simonsays"];

const TARGETS: Target[] = [
  {
    name: "env-serve",
    env: "kuhn",
    start: (o = {}) => startEnvServe(o),
    opponents: ["aggressive", "cfr-mixed:200"],
    evalOpponent: "cfr",
    cli: () =>
      startCli([
        "env-serve",
        "--port",
        "0",
        "--opponent-limit",
        "mcts=50000000",
        "--time-budget-ms",
        "120000",
      ]),
    longCreate: { env: "tictactoe", seed: 1, opponent: "mcts:50000000", seat: "second" },
    longCreateOutlastsGrace: true,
  },
  {
    name: "python openspiel",
    env: "kuhn_poker",
    start: (o = {}) => startPythonAdapter(OPENSPIEL[0], OPENSPIEL.slice(1), o),
    opponents: ["random", "cfr:5"],
    evalOpponent: "cfr:5",
    // Connect Four's opening search at the adapter's largest MCTS (100,000 simulations) takes
    // seconds, so it may end within the grace; the Python server cutting a request at the grace is
    // tested on an engine that stalls for 30 s (python/tests/test_server.py).
    cli: () =>
      startPythonServer(OPENSPIEL[0], [
        "--games",
        "connect_four",
        "--cfr-iterations",
        "",
        "--time-budget-ms",
        "120000",
      ]),
    longCreate: { env: "connect_four", seed: 1, opponent: "mcts:100000", seat: "second" },
  },
  {
    name: "python textarena",
    env: "KuhnPoker-v0",
    start: (o = {}) => startPythonAdapter(TEXTARENA[0], TEXTARENA.slice(1), o),
    opponents: ["random"],
    evalOpponent: "random",
    cli: () => startPythonServer(TEXTARENA[0], TEXTARENA.slice(1)),
  },
  {
    name: "python textworld-express",
    // Simon Says: the shortest texts of TextWorldExpress's games, so the keyed training run's
    // embedded model stays quick (the coin collector's room descriptions took it past 10 minutes).
    env: "twx-simonsays",
    seed: (i) => i % 1000, // the train split's seeds
    seeds: { min: 0, max: 999 },
    start: (o = {}) => startPythonAdapter(TWX[0], TWX.slice(1), o),
    opponents: [],
    evalOpponent: null,
    cli: () => startPythonServer(TWX[0], TWX.slice(1)),
  },
];

const json = (o: unknown) => JSON.stringify(o);
const post = (url: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
  exchange(`${url}${path}`, { method: "POST", body: typeof body === "string" ? body : json(body), headers });
const errorOf = (text: string) => (JSON.parse(text) as { error: { kind: string; message: string } }).error;

/** `total` requests from `width` clients at once, each on a new connection; counts the outcomes. */
async function flood(
  total: number,
  width: number,
  request: (i: number) => Promise<{ status: number; text: string }>,
) {
  const outcomes = new Map<string, number>();
  const replies: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < total) {
        const i = next++;
        let key: string;
        try {
          const r = await request(i);
          key = String(r.status);
          if (r.status === 200) replies.push(r.text);
        } catch (e) {
          key = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
        }
        outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
      }
    }),
  );
  return { outcomes: Object.fromEntries(outcomes), replies };
}

for (const target of TARGETS) {
  const seedOf = target.seed ?? ((i: number) => i);
  describe(`${target.name}: probes`, () => {
    let server: Served;
    before(async () => {
      server = await target.start();
    });
    after(async () => {
      await server.close();
    });

    it("caps live sessions with a retryable 503 and Retry-After; the client waits and gets in", async () => {
      const capped = await target.start({ maxSessions: 40, sessionTtlSeconds: 1 });
      try {
        const replies = await Promise.all(
          Array.from({ length: 100 }, (_, i) =>
            post(capped.url, "/create", { env: target.env, seed: seedOf(i) }),
          ),
        );
        const full = replies.filter((r) => r.status === 503);
        assert.equal(replies.filter((r) => r.status === 200).length, 40);
        assert.equal(full.length, 60);
        assert.equal(errorOf(full[0].text).kind, "too_many_sessions");
        assert.ok(Number(full[0].headers["retry-after"]) >= 1);
        // The client waits what Retry-After asks and gets in once the flood's sessions expire.
        const def = await openRemoteTask({
          url: capped.url,
          name: target.env,
          retries: 3,
          seeds: target.seeds,
        });
        const task = def.create(
          target.opponents.length ? { opponent: target.opponents[0], seat: "first" } : {},
        );
        const t0 = performance.now();
        await task.reset(Rng.seeded(1));
        assert.ok(performance.now() - t0 >= 500, "it waited for a free place");
        await task.close!();
        def.client.destroy();
      } finally {
        await capped.close();
      }
    });

    it("answers every malformed request with its 4xx kind", async () => {
      const env = target.env;
      const cases: [string, unknown, number, string][] = [
        ["/create", "{not json", 400, "bad_request"],
        ["/create", "[1,2]", 400, "bad_request"],
        ["/create", { seed: 1 }, 400, "bad_request"],
        ["/create", { env: "no-such-env", seed: 1 }, 400, "unknown_env"],
        ["/create", { env, seed: "x" }, 400, "bad_seed"],
        ["/create", { env, seed: 1, seat: "third" }, 400, "bad_seat"],
        ["/create", { env, seed: 1, opponent: 7 }, 400, "bad_opponent"],
        ["/create", { env, seed: 1, config: { noSuchField: 3 } }, 400, "bad_config"],
        ["/step", { session: "s-nope", seq: 1, action: "x" }, 404, "unknown_session"],
        ["/step", { session: 5, seq: 1 }, 400, "bad_request"],
        ["/nowhere", {}, 404, "not_found"],
      ];
      for (const [path, body, status, kind] of cases) {
        const r = await post(server.url, path, body);
        assert.equal(r.status, status, `${path} ${json(body)}: ${r.text}`);
        assert.equal(errorOf(r.text).kind, kind, `${path} ${json(body)}`);
      }
    });

    it("answers 413 to an oversize body while the client is still sending it, and to a chunked one", async () => {
      for (const chunked of [false, true]) {
        const r = await upload(`${server.url}/create`, 8 * 1024 * 1024, { chunked });
        assert.equal(r.status, 413, `chunked ${chunked}`);
        assert.match(errorOf(r.text).message, /over 1048576 bytes/);
      }
      assert.equal((await timedGet(`${server.url}/info`)).status, 200);
    });

    it("keeps answering with 100 stalled sockets open, and after clients drop mid-request", async () => {
      const stalled = await stalledSockets(server.url, 100);
      try {
        const { status, ms } = await timedGet(`${server.url}/info`);
        assert.equal(status, 200);
        assert.ok(ms < 1000, `/info took ${ms} ms`);
        const { hostname, port } = new URL(server.url);
        const { connect } = await import("node:net");
        await Promise.all(
          Array.from(
            { length: 20 },
            () =>
              new Promise<void>((resolve) => {
                const s = connect(Number(port), hostname, () => {
                  s.write('POST /create HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"env":');
                  setTimeout(() => {
                    s.destroy();
                    resolve();
                  }, 20);
                });
                s.on("error", () => resolve());
              }),
          ),
        );
        await Promise.all(
          Array.from({ length: 20 }, (_, i) => {
            const ctrl = new AbortController();
            const p = fetch(`${server.url}/create`, {
              method: "POST",
              body: json({ env: target.env, seed: seedOf(i) }),
              signal: ctrl.signal,
            }).catch(() => null);
            setTimeout(() => ctrl.abort(), 5);
            return p;
          }),
        );
        assert.equal((await timedGet(`${server.url}/info`)).status, 200);
      } finally {
        for (const s of stalled) s.destroy();
      }
    });

    it("serves a flood of 400 concurrent requests, every one answered", async () => {
      const replies = await Promise.all(
        Array.from({ length: 400 }, (_, i) =>
          i % 2 === 0
            ? exchange(`${server.url}/info`)
            : post(server.url, "/create", { env: target.env, seed: seedOf(i) }),
        ),
      );
      assert.ok(replies.every((r) => r.status === 200));
      for (const r of replies.filter((_, i) => i % 2 === 1))
        await post(server.url, "/close", { session: JSON.parse(r.text).session });
    });

    it("answers 3,000 creates, 32 at once on new connections, with no connection reset", async (t) => {
      const rss0 = server.rssMb?.();
      const t0 = performance.now();
      const created = await flood(3000, 32, (i) =>
        post(server.url, "/create", { env: target.env, seed: seedOf(i) }),
      );
      const ms = performance.now() - t0;
      const rss1 = server.rssMb?.();
      t.diagnostic(
        `${target.name}: 3,000 creates 32 at once in ${(ms / 1000).toFixed(1)} s: ${json(created.outcomes)}` +
          (rss0 !== undefined ? `; server RSS ${rss0.toFixed(0)} → ${rss1!.toFixed(0)} MB` : ""),
      );
      assert.deepEqual(created.outcomes, { 200: 3000 });
      const sessions = created.replies.map((text) => JSON.parse(text).session as string);
      const closed = await flood(sessions.length, 32, (i) =>
        post(server.url, "/close", { session: sessions[i] }),
      );
      assert.deepEqual(closed.outcomes, { 200: 3000 });
    });
  });

  describe(`${target.name}: API key`, () => {
    const KEY = "probe-key-7f3a";
    const VAR = "MAGE_TEST_ENV_KEY";
    let keyed: Served;
    let root: string;
    before(async () => {
      keyed = await target.start({ apiKey: KEY, maxSessions: 30, sessionTtlSeconds: 2 });
      root = mkdtempSync(join(tmpdir(), "mage-env-probes-"));
      await saveRandomCheckpoint(join(root, "base"), { contextLength: 1024, seed: 5 });
    });
    after(async () => {
      await keyed.close();
    });

    it("without the key every endpoint but /health answers 401; with it they work", async () => {
      assert.equal((await exchange(`${keyed.url}/health`)).status, 200);
      const wrong: Record<string, string>[] = [{}, { authorization: "Bearer wrong" }, { authorization: KEY }];
      for (const headers of wrong) {
        const info = await exchange(`${keyed.url}/info`, { headers });
        assert.equal(info.status, 401);
        assert.equal(errorOf(info.text).kind, "unauthorized");
        for (const path of ["/create", "/step", "/restart", "/close", "/nowhere"]) {
          const body = { env: target.env, seed: 1, session: "s-1", seq: 1, action: "x" };
          const r = await post(keyed.url, path, body, headers);
          assert.equal(r.status, 401, `${path} ${json(headers)}`);
        }
      }
      const auth = { authorization: `Bearer ${KEY}` };
      assert.equal((await exchange(`${keyed.url}/info`, { headers: auth })).status, 200);
      const created = await post(keyed.url, "/create", { env: target.env, seed: 1 }, auth);
      assert.equal(created.status, 200);
      const { session, legalActions } = JSON.parse(created.text) as {
        session: string;
        legalActions: string[];
      };
      const action = `<action>${legalActions[0]}</action>`;
      assert.equal((await post(keyed.url, "/step", { session, seq: 1, action }, auth)).status, 200);
      assert.equal((await post(keyed.url, "/restart", { session, seq: 2 }, auth)).status, 200);
      assert.equal((await post(keyed.url, "/close", { session }, auth)).status, 200);
    });

    it("the client sends env.apiKeyEnv's key; a missing or wrong one is a UsageError", async () => {
      await assert.rejects(
        openRemoteTask({ url: keyed.url, name: target.env, apiKeyEnv: "MAGE_TEST_UNSET_VAR" }),
        (e: Error) => e instanceof UsageError && /MAGE_TEST_UNSET_VAR is not set/.test(e.message),
      );
      await assert.rejects(
        openRemoteTask({ url: keyed.url, name: target.env }),
        (e: Error) => e instanceof UsageError && /missing or wrong API key/.test(e.message),
      );
    });

    it("a remote training run with the key completes against a server a flood has filled", async () => {
      const auth = { authorization: `Bearer ${KEY}` };
      const flooded = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          post(keyed.url, "/create", { env: target.env, seed: seedOf(i) }, auth),
        ),
      );
      assert.equal(flooded.filter((r) => r.status === 503).length, 70);
      process.env[VAR] = KEY;
      try {
        const path = join(root, "keyed.yaml");
        const population = target.opponents.map((spec) => `{ spec: ${json(spec)} }`).join(", ");
        writeFileSync(
          path,
          [
            "name: keyed-remote",
            "seed: 1",
            "game: remote",
            `env: { url: ${json(keyed.url)}, name: ${json(target.env)}, apiKeyEnv: ${VAR}, timeoutMs: 5000, retries: 4${target.seeds ? `, seeds: ${json(target.seeds)}` : ""} }`,
            `model: { checkpoint: ${json(join(root, "base"))} }`,
            "task: { attempts: 2, maxTurns: 3 }",
            ...(population ? [`population: { opponents: [${population}] }`] : []),
            "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 6 }",
            "optim: { miniBatchRows: 8 }",
            "train: { iterations: 1, checkpointEvery: 1 }",
            target.evalOpponent === null
              ? "eval: { every: 0, finalTrials: 2 }"
              : `eval: { every: 0, finalTrials: 2, cells: [{ opponent: ${json(target.evalOpponent)}, seat: second }] }`,
            "",
          ].join("\n"),
        );
        const before = ENV_CLIENT_TOTALS.requests;
        const res = await train({
          config: loadConfig(path),
          outDir: join(root, "run"),
          resume: false,
          progress: false,
          log: () => {},
        });
        assert.equal(res.summary.iterationsDone, 1);
        assert.ok(ENV_CLIENT_TOTALS.requests - before > 20);
      } finally {
        delete process.env[VAR];
      }
    });
  });

  describe(`${target.name}: SIGTERM`, () => {
    it("exits 0 within the stated bound (2 s grace), a long request in flight finished or cancelled", async () => {
      const s = await target.cli();
      const long = target.longCreate
        ? post(s.url, "/create", target.longCreate).catch((e: Error) => ({ status: 0, text: e.message }))
        : undefined;
      // An idle keep-alive connection must not hold the exit either.
      await fetch(`${s.url}/info`);
      await new Promise((r) => setTimeout(r, 1500));
      const { code, ms } = await terminate(s);
      assert.equal(code, 0, s.stderr());
      assert.ok(ms < 5000, `exited ${ms.toFixed(0)} ms after SIGTERM`);
      if (long) {
        const r = await long;
        const ends = target.longCreateOutlastsGrace ? [503, 0] : [200, 503, 0];
        assert.ok(
          ends.includes(r.status),
          `the long request finished or was cancelled: ${r.status} ${r.text}`,
        );
      }
      assert.match(s.stderr(), /SIGTERM, shutting down/);
    });
  });
}

describe("python server: an engine past the time budget", () => {
  it("the client retries the 503 engine_timeout and the step is played once", async () => {
    // python/tests/sleepy_adapter.py: each step sleeps stepSleepMs; the server's budget is 300 ms.
    const s = await startPythonServer("tests.sleepy_adapter", ["--time-budget-ms", "300"]);
    try {
      const def = await openRemoteTask({
        url: s.url,
        name: "sleepy",
        config: { stepSleepMs: 1200 },
        retries: 3,
      });
      const task = def.create({});
      await task.reset(Rng.seeded(1));
      const before = ENV_CLIENT_TOTALS.requests;
      const t0 = performance.now();
      const r = await task.step("<action>count</action>");
      const ms = performance.now() - t0;
      assert.equal(r.valid, true);
      assert.equal(task.observation(), "count 1", "applied once");
      assert.ok(ENV_CLIENT_TOTALS.requests - before >= 2, "the first try answered 503 and was retried");
      assert.ok(ms >= 1000, `the reply is the engine's, after its sleep (${ms.toFixed(0)} ms)`);
      await task.step("<action>count</action>");
      assert.equal(task.observation(), "count 2");
      await task.close!();
      def.client.destroy();
    } finally {
      s.child.kill("SIGTERM");
      await s.exited;
    }
  });
});
