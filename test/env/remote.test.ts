import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { EnvClient } from "../../src/env/client.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { type EnvServerHandle, startEnvServer } from "../../src/serve/env-server.js";
import { KuhnTask } from "../../src/tasks/kuhn.js";
import { MinesweeperTask } from "../../src/tasks/minesweeper.js";
import { openRemoteTask } from "../../src/tasks/remote.js";
import { SokobanTask } from "../../src/tasks/sokoban.js";
import { TicTacToeTask } from "../../src/tasks/tictactoe.js";
import type { TaskOptions, TextTask } from "../../src/tasks/types.js";
import { RUNNER, scriptedPolicy, wireSeeded } from "./helpers.js";

/** The built-in tasks, built directly (what env-serve serves). */
const LOCAL: Record<string, (o: TaskOptions) => TextTask> = {
  tictactoe: (o) => new TicTacToeTask(o),
  kuhn: (o) => new KuhnTask(o),
  sokoban: () => new SokobanTask(),
  minesweeper: () => new MinesweeperTask(),
};

function localCreate(game: string, s: TrialSpec): TextTask {
  return LOCAL[game]({
    ...(s.opponent !== null ? { opponent: s.opponent } : {}),
    ...(s.seat !== null ? { seat: s.seat } : {}),
  });
}

let server: EnvServerHandle;
before(async () => {
  server = await startEnvServer();
});
after(async () => {
  await server.close();
});

/** Trials over every opponent/seat pair given, two task seeds each, two trials per group. */
function specs(pairs: { opponent: string | null; seat: "first" | "second" | null }[]): TrialSpec[] {
  const out: TrialSpec[] = [];
  let id = 0;
  pairs.forEach((p, g) => {
    for (const taskSeed of [11, 12]) {
      for (let k = 0; k < 2; k++) out.push({ trialId: id++, groupId: 2 * g + taskSeed, taskSeed, ...p });
    }
  });
  return out;
}

const CASES: { game: string; pairs: { opponent: string | null; seat: "first" | "second" | null }[] }[] = [
  {
    game: "tictactoe",
    pairs: [
      { opponent: "mcts:20", seat: "first" },
      { opponent: "random", seat: "second" },
    ],
  },
  {
    game: "kuhn",
    pairs: [
      { opponent: "cfr-mixed:50", seat: "first" },
      { opponent: "intermediate", seat: "second" },
    ],
  },
  { game: "sokoban", pairs: [{ opponent: null, seat: null }] },
  { game: "minesweeper", pairs: [{ opponent: null, seat: null }] },
];

describe("game: remote against mage env-serve", () => {
  for (const { game, pairs } of CASES) {
    it(`${game}: the same seeded trials give identical transcripts in-process and served`, async () => {
      const trials = specs(pairs);
      const local = await runTrials(
        trials,
        (s) => wireSeeded(localCreate(game, s)),
        scriptedPolicy(game),
        Rng.seeded(5),
        RUNNER,
      );
      const def = await openRemoteTask({ url: server.url, name: game });
      const remote = await runTrials(
        trials,
        (s) =>
          def.create({
            ...(s.opponent !== null ? { opponent: s.opponent } : {}),
            ...(s.seat !== null ? { seat: s.seat } : {}),
          }),
        scriptedPolicy(game),
        Rng.seeded(5),
        RUNNER,
      );
      assert.deepEqual(remote, local);
      // Played for real: several attempts, invalid answers and at least one finished attempt.
      const attempts = local.flatMap((t) => t.attempts);
      assert.ok(attempts.length > trials.length, "some trials restarted");
      assert.ok(
        attempts.some((a) => a.invalidActions > 0),
        "invalid answers crossed the protocol",
      );
      assert.ok(
        attempts.some((a) => a.finished),
        "some attempt finished",
      );
      assert.equal(server.sessions, 0, "every session was closed");
    });
  }

  it("serves /info with every task, its opponents, config fields and seed range", async () => {
    const info = (await (await fetch(`${server.url}/info`)).json()) as {
      protocol: string;
      environments: { name: string; opponents: { spec: string }[]; config: Record<string, unknown> }[];
    };
    assert.equal(info.protocol, "mage-env/1");
    assert.deepEqual(
      info.environments.map((e) => e.name),
      ["kuhn", "minesweeper", "sokoban", "tictactoe"],
    );
    const ttt = info.environments.find((e) => e.name === "tictactoe")!;
    assert.ok(
      ttt.opponents.some((o) => o.spec === "mcts:<simulations>"),
      'ttt.opponents.some((o) => o.spec === "mcts:<simulations>")',
    );
    assert.ok(
      "movesPerTurn" in info.environments.find((e) => e.name === "sokoban")!.config,
      '"movesPerTurn" in info.environments.find((e) => e.name === "sokoban")!.config',
    );
  });

  it("a remote restart comes back to the create's state; legal actions are listed", async () => {
    const def = await openRemoteTask({ url: server.url, name: "tictactoe" });
    const task = def.create({ opponent: "minimax", seat: "second" });
    await task.reset(Rng.seeded(1));
    const first = task.observation();
    const legal = task.legalActions!();
    assert.equal(legal.length, 8, "the opponent opened: 8 free cells");
    assert.ok(
      legal.every((a) => /^\(\d, \d\)$/.test(a)),
      "legal.every((a) => /^\\(\\d, \\d\\)$/.test(a))",
    );
    const taken = [
      "(1, 1)",
      "(1, 2)",
      "(1, 3)",
      "(2, 1)",
      "(2, 2)",
      "(2, 3)",
      "(3, 1)",
      "(3, 2)",
      "(3, 3)",
    ].find((c) => !legal.includes(c))!;
    const bad = await task.step(`<action>${taken}</action>`);
    assert.equal(bad.valid, false);
    assert.match(bad.invalidReason ?? "", /already taken/);
    const r = await task.step(`<action>${legal[0]}</action>`);
    assert.equal(r.valid, true);
    assert.equal(r.action, legal[0]);
    assert.notEqual(r.observation, first);
    await task.restart();
    assert.equal(task.observation(), first);
    await task.close?.();
    assert.equal(server.sessions, 0);
  });
});

describe("bad input to game: remote is a UsageError with the server's choices", () => {
  it("an unknown environment lists the served ones", async () => {
    await assert.rejects(openRemoteTask({ url: server.url, name: "kuhm" }), (err: Error) => {
      assert.ok(err instanceof UsageError, "err instanceof UsageError");
      assert.match(
        err.message,
        /unknown environment "kuhm".*valid choices.*kuhn, minesweeper, sokoban, tictactoe/,
      );
      return true;
    });
  });

  it("a config field that does not exist, or is out of range, is named with what is allowed", async () => {
    await assert.rejects(
      openRemoteTask({ url: server.url, name: "sokoban", config: { boxes: 2 } }),
      (err: Error) => {
        assert.ok(err instanceof UsageError, "err instanceof UsageError");
        assert.match(err.message, /env\.config\.boxes.*valid fields: movesPerTurn, maxSteps, numBoxes/);
        return true;
      },
    );
    await assert.rejects(
      openRemoteTask({ url: server.url, name: "sokoban", config: { movesPerTurn: 0 } }),
      (err: Error) =>
        err instanceof UsageError && /movesPerTurn must be an integer in \[1, 10\], got 0/.test(err.message),
    );
  });

  it("a seed range outside the server's gives the server's range", async () => {
    await assert.rejects(
      openRemoteTask({ url: server.url, name: "kuhn", seeds: { min: -5, max: 10 } }),
      (err: Error) => err instanceof UsageError && /valid range.*\[0, 4294967295\]/.test(err.message),
    );
  });

  it("an opponent the server does not serve lists its specs; a seat on a puzzle is refused", async () => {
    const def = await openRemoteTask({ url: server.url, name: "kuhn" });
    await assert.rejects(def.checkOpponent!("mcts:10", "first"), (err: Error) => {
      assert.ok(err instanceof UsageError, "err instanceof UsageError");
      assert.match(err.message, /unknown kuhn opponent "mcts:10"/);
      assert.match(err.message, /cfr:<iterations>/);
      return true;
    });
    await def.checkOpponent!("cfr:100", "second");
    assert.equal(server.sessions, 0, "the probe's session was closed");
  });

  it("a raw /create with an out-of-range seed or a puzzle seat answers 400 with the kind", async () => {
    const post = async (body: unknown) => {
      const res = await fetch(`${server.url}/create`, { method: "POST", body: JSON.stringify(body) });
      return {
        status: res.status,
        body: (await res.json()) as { error: { kind: string; choices?: string[] } },
      };
    };
    const seed = await post({ env: "kuhn", seed: 2 ** 33 });
    assert.equal(seed.status, 400);
    assert.equal(seed.body.error.kind, "bad_seed");
    const seat = await post({ env: "sokoban", seed: 1, seat: "first" });
    assert.equal(seat.body.error.kind, "bad_seat");
    const env = await post({ env: "chess", seed: 1 });
    assert.deepEqual(env.body.error.choices, ["kuhn", "minesweeper", "sokoban", "tictactoe"]);
  });

  it("a refused seed is a UsageError that says where the seeds are chosen", async () => {
    const client = new EnvClient(server.url, { retries: 0 });
    await assert.rejects(
      client.create({ env: "kuhn", seed: 2 ** 33 }),
      (err: Error) =>
        err instanceof UsageError && /env\.seeds or eval\.env\.seeds.*--env-seeds MIN-MAX/.test(err.message),
    );
  });
});
