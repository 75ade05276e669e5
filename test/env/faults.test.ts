import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { EnvClient, EnvServerError, SessionVanishedError } from "../../src/env/client.js";
import { ProtocolError } from "../../src/env/protocol.js";
import { RolloutAbortedError, runTrials } from "../../src/rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../../src/rollout/types.js";
import { type EnvServerHandle, startEnvServer } from "../../src/serve/env-server.js";
import { openRemoteTask, RestartMismatchError } from "../../src/tasks/remote.js";
import { type EnvFaultScript, type FaultEnvServer, startFaultEnvServer } from "./fault-env-server.js";
import { RUNNER, scriptedPolicy } from "./helpers.js";

let upstream: EnvServerHandle;
const opened: FaultEnvServer[] = [];
before(async () => {
  upstream = await startEnvServer();
});
after(async () => {
  for (const f of opened) await f.close();
  await upstream.close();
});

async function faulty(script: EnvFaultScript): Promise<FaultEnvServer> {
  const f = await startFaultEnvServer(upstream.url, script);
  opened.push(f);
  return f;
}

/** Two retries; a generous timeout (the machine is shared), short only where a test needs one. */
const FAST = { timeoutMs: 5000, retries: 2 };

const KUHN_TRIALS: TrialSpec[] = Array.from({ length: 8 }, (_, i) => ({
  trialId: i,
  groupId: i,
  taskSeed: 100 + i,
  opponent: "intermediate",
  seat: i % 2 === 0 ? ("first" as const) : ("second" as const),
}));

async function play(
  url: string,
  trials = KUHN_TRIALS,
  hooks: { onTrialEnd?: (t: TrialRecord) => void } = {},
  timeoutMs = FAST.timeoutMs,
) {
  // A 1 ms backoff: the default schedule (up to 2 s) would only slow the tests down.
  const def = await openRemoteTask({ url, name: "kuhn", ...FAST, timeoutMs }, { baseDelayMs: 1 });
  return runTrials(
    trials,
    (s) => def.create({ opponent: s.opponent!, seat: s.seat! }),
    scriptedPolicy("kuhn"),
    Rng.seeded(3),
    { ...RUNNER, maxBatch: 4 },
    hooks,
  );
}

describe("game: remote when the server misbehaves", () => {
  it("a few 500s on /step are retried and the play is the same as without them", async () => {
    const clean = await play(upstream.url);
    let failures = 0;
    const f = await faulty((r) =>
      r.path === "/step" && r.body.seq === 1 && failures++ < 2 ? { kind: "status", status: 500 } : undefined,
    );
    const played = await play(f.url);
    assert.deepEqual(played, clean);
    const steps = clean.reduce((n, t) => n + t.rows.filter((row) => row.phase === "play").length, 0);
    assert.equal(f.count("/step"), steps + 2, "two injected 500s, each retried once");
  });

  it("500s that persist: bounded retries, then a clear error; finished trials kept, the rest aborted", async () => {
    let steps = 0;
    const f = await faulty((r) => {
      if (r.path !== "/step") return undefined;
      steps += 1;
      return steps > 12 ? { kind: "status", status: 503 } : undefined;
    });
    const ended: TrialRecord[] = [];
    await assert.rejects(play(f.url, KUHN_TRIALS, { onTrialEnd: (t) => ended.push(t) }), (err: Error) => {
      assert.ok(err instanceof RolloutAbortedError, "err instanceof RolloutAbortedError");
      const cause = err.cause as Error;
      assert.ok(cause instanceof EnvServerError, "cause instanceof EnvServerError");
      assert.match(
        cause.message,
        /POST \/step gave up after 3 tries; last: HTTP 503: internal: injected failure/,
      );
      assert.ok(err.finished.length > 0, "trials finished before the failure are kept");
      assert.ok(err.aborted.length > 0, "err.aborted.length > 0");
      for (const t of err.finished) assert.equal(t.aborted, false);
      for (const t of err.aborted) assert.equal(t.aborted, true);
      // No attempt is recorded that was not played: every recorded attempt has its turns. An
      // aborted trial's attempt in progress is not recorded, though its played rows are kept.
      for (const t of [...err.finished, ...err.aborted]) {
        const played = t.rows.filter((row) => row.phase === "play" && row.attempt < t.attempts.length).length;
        if (!t.aborted) assert.ok(t.rows.every((row) => row.attempt < t.attempts.length));
        assert.equal(
          t.attempts.reduce((s, a) => s + a.turns, 0),
          played,
        );
      }
      assert.deepEqual(
        ended.filter((t) => !t.aborted).map((t) => t.trialId),
        err.finished.map((t) => t.trialId),
      );
      return true;
    });
    // 12 good steps, then the failing one tried 1 + 2 times, and nothing after the failure.
    assert.equal(steps, 15);
  });

  it("a server that hangs: each try times out, then a clear error", async () => {
    const f = await faulty((r) => (r.path === "/step" ? { kind: "hang" } : undefined));
    const t0 = Date.now();
    await assert.rejects(play(f.url, KUHN_TRIALS.slice(0, 1), {}, 300), (err: Error) => {
      assert.ok(err instanceof RolloutAbortedError, "err instanceof RolloutAbortedError");
      assert.match(
        (err.cause as Error).message,
        /gave up after 3 tries; last: no HTTP response: timed out after 300 ms/,
      );
      return true;
    });
    assert.equal(f.count("/step"), 3);
    assert.ok(Date.now() - t0 >= 900, "three tries of 300 ms");
  });

  it("a reply that is not JSON is retried, then reported as such", async () => {
    const f = await faulty((r) => (r.path === "/step" ? { kind: "invalid-json" } : undefined));
    await assert.rejects(play(f.url, KUHN_TRIALS.slice(0, 1)), (err: Error) => {
      assert.match(
        (err.cause as Error).message,
        /last: HTTP 200: the reply is not JSON: "<html>502 Bad Gateway<\/html>"/,
      );
      return true;
    });
    assert.equal(f.count("/step"), 3);
  });

  it("a reply missing a required field is a protocol error naming the field, not retried", async () => {
    const f = await faulty((r) => (r.path === "/step" ? { kind: "drop-field", field: "reward" } : undefined));
    await assert.rejects(play(f.url, KUHN_TRIALS.slice(0, 1)), (err: Error) => {
      assert.ok(err.cause instanceof ProtocolError, "err.cause instanceof ProtocolError");
      assert.match(
        (err.cause as Error).message,
        /broke the protocol: POST \/step: field "reward" must be a finite number \(missing\)/,
      );
      return true;
    });
    assert.equal(f.count("/step"), 1);
  });

  it("a session that vanishes stops the trial with a clear error, without retries", async () => {
    const f = await faulty((r) => (r.body?.seq === 2 ? { kind: "vanish" } : undefined));
    await assert.rejects(play(f.url, KUHN_TRIALS), (err: Error) => {
      assert.ok(err.cause instanceof SessionVanishedError, "err.cause instanceof SessionVanishedError");
      assert.match((err.cause as Error).message, /session s-\d+ vanished/);
      return true;
    });
    assert.equal(
      f.received.filter((r) => r.body?.seq === 2).length,
      1,
      "the first vanish stopped the rollout",
    );
  });

  it("a restart that returns a different state is an error, never play on another task", async () => {
    const f = await faulty((r) => (r.path === "/restart" ? { kind: "other-fingerprint" } : undefined));
    await assert.rejects(play(f.url, KUHN_TRIALS), (err: Error) => {
      assert.ok(err instanceof RolloutAbortedError, "err instanceof RolloutAbortedError");
      assert.ok(err.cause instanceof RestartMismatchError, "err.cause instanceof RestartMismatchError");
      assert.match(
        (err.cause as Error).message,
        /restart of session s-\d+ \(kuhn\) returned a different state: fingerprint/,
      );
      // Nothing was played after the bad restart: no trial has a row of a later attempt than it finished.
      for (const t of err.aborted) {
        const attemptsWithRows = new Set(t.rows.filter((r) => r.phase === "play").map((r) => r.attempt));
        assert.ok(attemptsWithRows.size <= t.attempts.length, "attemptsWithRows.size <= t.attempts.length");
      }
      return true;
    });
    assert.ok(f.count("/restart") >= 1, 'f.count("/restart") >= 1');
  });

  it("a timed-out step that the server did apply is not applied twice (seq)", async () => {
    // The first try of step seq 1 answers after the client's timeout; the retry gets the stored reply.
    let slowed = false;
    const f = await faulty((r) => {
      if (r.path === "/step" && r.body.seq === 1 && !slowed) {
        slowed = true;
        return { kind: "slow", delayMs: 1500 };
      }
      return undefined;
    });
    const clean = await play(upstream.url, KUHN_TRIALS.slice(0, 2));
    const played = await play(f.url, KUHN_TRIALS.slice(0, 2), {}, 300);
    assert.deepEqual(played, clean);
    assert.ok(slowed, "slowed");
    assert.ok(
      f.received.filter((r) => r.path === "/step" && r.body.seq === 1).length >= 3,
      "the slow step was retried",
    );
  });

  it("4xx answers are not retried", async () => {
    const f = await faulty((r) =>
      r.path === "/step"
        ? {
            kind: "status",
            status: 409,
            body: JSON.stringify({ error: { kind: "out_of_order", message: "seq 1 after 5" } }),
          }
        : undefined,
    );
    await assert.rejects(play(f.url, KUHN_TRIALS.slice(0, 1)), (err: Error) => {
      assert.match(
        (err.cause as Error).message,
        /POST \/step failed; last: HTTP 409: out_of_order: seq 1 after 5/,
      );
      return true;
    });
    assert.equal(f.count("/step"), 1);
  });

  it("a server that is down: bounded retries, then an error that says so", async () => {
    const f = await faulty(() => undefined);
    const url = f.url;
    await f.close();
    opened.splice(opened.indexOf(f), 1);
    const client = new EnvClient(url, { retries: 2, baseDelayMs: 1 });
    await assert.rejects(client.info(), (err: Error) => {
      assert.ok(err instanceof EnvServerError, "err instanceof EnvServerError");
      assert.match(
        err.message,
        /GET \/info gave up after 3 tries; last: no HTTP response: connection failed \(ECONNREFUSED\); is the server running\?/,
      );
      return true;
    });
    assert.equal(client.requests, 3);
  });

  it("at most `concurrency` requests are in flight", async () => {
    const f = await faulty((r) => (r.path === "/create" ? { kind: "slow", delayMs: 20 } : undefined));
    const def = await openRemoteTask({ url: f.url, name: "kuhn", concurrency: 3 });
    await runTrials(
      KUHN_TRIALS,
      (s) => def.create({ opponent: s.opponent!, seat: s.seat! }),
      scriptedPolicy("kuhn"),
      Rng.seeded(3),
      { ...RUNNER, attempts: 1 },
    );
    assert.equal(f.count("/create"), KUHN_TRIALS.length);
    assert.equal(f.maxInFlight, 3);
  });
});
