import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { openRemoteTask, type RemoteTask } from "../../src/tasks/remote.js";
import { pythonPath, REPO_ROOT } from "../openspiel/python.js";
import { RUNNER } from "./helpers.js";

/**
 * The Python adapters (python/mage_envs) driven end to end by mage's `game: remote` client: for
 * every adapter game, create, a few steps with legal actions, a restart the client checks against
 * the created state (fingerprint and observation), close; then whole multi-attempt trials through
 * the trial runner, and the server's own choices in mage's usage errors.
 */

interface Served {
  url: string;
  proc: ChildProcess;
}

/** Starts `python -m MODULE --port 0 ARGS` and resolves with the URL it prints. */
function startAdapter(module: string, args: string[]): Promise<Served> {
  return new Promise((resolve, reject) => {
    const proc = spawn(pythonPath(), ["-m", module, "--port", "0", ...args], {
      cwd: join(REPO_ROOT, "python"),
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    const timer = setTimeout(() => reject(new Error(`${module} did not start in 120 s:\n${err}`)), 120_000);
    proc.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1], proc });
      }
    });
    proc.stderr!.on("data", (d: Buffer) => {
      err += d.toString();
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${module} exited with ${code}:\n${err}`));
    });
  });
}

function stop(s: Served | undefined): void {
  if (s && s.proc.exitCode === null) s.proc.kill("SIGTERM");
}

/** A policy that answers a random legal action read off the observation (a remark when asked to reflect). */
function legalPolicy(): Policy {
  return {
    name: "legal-random",
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        const rng = Rng.seeded(r.seed);
        const last = r.messages[r.messages.length - 1].content;
        let text: string;
        if (/reflect|remark/i.test(last)) text = "<remark>play differently</remark>";
        else {
          // The legal list in the observation, else TextArena's quoted moves, else the answers the
          // rules offer (TextArena Kuhn's compact rules: <action>PASS</action> or <action>BET</action>).
          const rules = r.messages[0].content;
          let legal = /Legal(?: actions)?: ([^\n]*?)\.(?:\n|$)/.exec(last)?.[1]?.split(", ") ?? [];
          if (legal.length === 0) legal = [...last.matchAll(/'(\[[^\]]+\])'/g)].map((m) => m[1]);
          if (legal.length === 0) legal = [...rules.matchAll(/<action>([^<]+)<\/action>/g)].map((m) => m[1]);
          text = `<action>${legal.length > 0 ? rng.pick(legal) : "?"}</action>`;
        }
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
      });
    },
  };
}

async function fewStepsAndRestart(url: string, name: string, opponent: string, seat: "first" | "second") {
  const def = await openRemoteTask({ url, name, timeoutMs: 60_000 });
  const task = def.create({ opponent, seat }) as RemoteTask;
  await task.reset(Rng.seeded(`${name}-${seat}`));
  const first = task.observation();
  const legal0 = task.legalActions();
  assert.ok(legal0.length > 0, `${name}: legal actions listed`);
  let steps = 0;
  while (!task.done && steps < 3) {
    const r = await task.step(`<action>${task.legalActions()[0]}</action>`);
    assert.equal(r.valid, true, `${name}: a listed legal action is valid`);
    steps++;
  }
  const invalidState = task.done ? null : task.observation();
  if (invalidState !== null) {
    const r = await task.step("<action>not a move</action>");
    assert.equal(r.valid, false);
    assert.equal(task.observation(), invalidState);
  }
  await task.restart(); // the client throws when the restarted state differs from the created one
  assert.equal(task.observation(), first);
  assert.deepEqual(task.legalActions(), legal0);
  assert.equal(task.done, false);
  const session = task.sessionId!;
  await task.close();
  // The session is gone on the server.
  const res = await fetch(`${url}/step`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ session, seq: 99, action: "x" }),
  });
  assert.equal(res.status, 404);
}

describe("Python adapters through game: remote", () => {
  let openspiel: Served | undefined;
  let textarena: Served | undefined;
  before(async () => {
    [openspiel, textarena] = await Promise.all([
      startAdapter("mage_envs.openspiel_server", ["--cfr-iterations", "3"]),
      startAdapter("mage_envs.textarena_server", []),
    ]);
  });
  after(() => {
    stop(openspiel);
    stop(textarena);
  });

  const OPENSPIEL: [string, string][] = [
    ["kuhn_poker", "cfr:3"],
    ["leduc_poker", "cfr:3"],
    ["tic_tac_toe", "mcts:20"],
    ["connect_four", "mcts:20"],
    ["liars_dice", "random"],
  ];
  for (const [game, opponent] of OPENSPIEL) {
    it(`OpenSpiel ${game} vs ${opponent}: create, steps, restart identity, close (both seats)`, async () => {
      for (const seat of ["first", "second"] as const)
        await fewStepsAndRestart(openspiel!.url, game, opponent, seat);
    });
  }
  for (const game of ["TicTacToe-v0", "KuhnPoker-v0", "ConnectFour-v0"]) {
    it(`TextArena ${game}: create, steps, restart identity, close (both seats)`, async () => {
      for (const seat of ["first", "second"] as const)
        await fewStepsAndRestart(textarena!.url, game, "random", seat);
    });
  }

  it("whole multi-attempt trials through the runner on leduc_poker and TextArena KuhnPoker", async () => {
    for (const [url, name, opponent] of [
      [openspiel!.url, "leduc_poker", "cfr:3"],
      [textarena!.url, "KuhnPoker-v0", "random"],
    ] as const) {
      const def = await openRemoteTask({ url, name });
      const specs: TrialSpec[] = [0, 1, 2, 3].map((i) => ({
        trialId: i,
        groupId: i >> 1,
        taskSeed: i >> 1,
        opponent,
        seat: i % 2 === 0 ? "first" : "second",
      }));
      const records = await runTrials(
        specs,
        (s) => def.create({ opponent: s.opponent!, seat: s.seat! }),
        legalPolicy(),
        Rng.seeded(3),
        {
          ...RUNNER,
          maxTurns: 12,
        },
      );
      assert.equal(records.length, 4);
      for (const r of records) {
        assert.equal(r.aborted, false, `${name}: trial ${r.trialId} not aborted`);
        assert.ok(r.attempts.length >= 1);
        for (const a of r.attempts) assert.ok(a.finished, `${name}: every attempt reached the end`);
        assert.ok(r.rows.some((row) => row.phase === "play" && row.valid));
      }
    }
  });

  it("unknown environment names and bad configs are usage errors with the server's choices", async () => {
    await assert.rejects(
      openRemoteTask({ url: openspiel!.url, name: "chess" }),
      (e: unknown) =>
        e instanceof UsageError &&
        /kuhn_poker, leduc_poker, tic_tac_toe, connect_four, liars_dice/.test(e.message),
    );
    await assert.rejects(
      openRemoteTask({ url: openspiel!.url, name: "leduc_poker", config: { actions: "words" } }),
      (e: unknown) => e instanceof UsageError && /openspiel, pass-bet/.test(e.message),
    );
    const def = await openRemoteTask({ url: textarena!.url, name: "TicTacToe-v0" });
    await assert.rejects(
      def.checkOpponent!("mcts:100", "first"),
      (e: unknown) => e instanceof UsageError && /random/.test(e.message),
    );
  });
});
