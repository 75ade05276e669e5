import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command } from "../../src/cli/commands/league.js";
import { UsageError } from "../../src/core/errors.js";
import { kuhn } from "../../src/games/kuhn.js";
import { type LeagueResult, runLeague } from "../../src/league/round-robin.js";
import { loadTask } from "../../src/tasks/registry.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

/** Runs the command in-process; what it wrote to stdout as text. */
async function run(argv: string[]): Promise<{ code: number; out: string }> {
  let out = "";
  const original = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: unknown, ...rest: unknown[]) => {
    if (typeof chunk === "string") {
      out += chunk;
      return true;
    }
    return (original as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    return { code: await command.run(argv), out };
  } finally {
    process.stdout.write = original;
  }
}

async function runJson(argv: string[]): Promise<LeagueResult> {
  const { code, out } = await run([...argv, "--json"]);
  assert.equal(code, 0);
  return JSON.parse(out) as LeagueResult;
}

describe("mage league", () => {
  it("the same seed gives the same league; another seed another one", async () => {
    const argv = ["--game", "tictactoe", "--players", "random,mcts:10,preferred:2", "--deals", "6"];
    const a = await runJson([...argv, "--seed", "7"]);
    const b = await runJson([...argv, "--seed", "7"]);
    const c = await runJson([...argv, "--seed", "8"]);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a.pairs, c.pairs);
    assert.equal(a.table.length, 3);
    for (const row of a.table)
      assert.equal(row.games, 2 * 6 * 2, `${row.name}: 6 deals × 2 seats × 2 opponents`);
  });

  it("rates the stronger player higher, with an interval around the mean", async () => {
    const res = await runJson(["--game", "tictactoe", "--players", "random,minimax", "--deals", "10"]);
    assert.deepEqual(
      res.table.map((r) => r.name),
      ["minimax", "random"],
    );
    const [top, bottom] = res.table;
    assert.equal(top.losses, 0, "minimax never loses");
    assert.ok(top.mu > bottom.mu && top.lo < top.mu && top.mu < top.hi);
    assert.ok(Math.abs(top.hi - top.mu - 1.96 * top.sigma) < 1e-9);
    const text = (await run(["--game", "tictactoe", "--players", "random,minimax", "--deals", "10"])).out;
    assert.match(text, /95% interval/);
    assert.match(text, /^\s*1 {2}minimax/m);
  });

  it("pairs the deals: each deal is played with both seatings, so cards cancel within a pair", async () => {
    // Two players that always bet: every hand is a showdown won by the higher card. With the deal
    // played once from each seat, each player wins exactly one of the two hands of every deal.
    const res = await runLeague({
      game: kuhn,
      task: await loadTask("kuhn"),
      players: [
        { name: "bet-a", spec: "always-bet" },
        { name: "bet-b", spec: "always-bet" },
      ],
      deals: 15,
      seed: 3,
    });
    assert.deepEqual([res.pairs[0].wins, res.pairs[0].losses, res.pairs[0].meanReturn], [15, 15, 0]);
  });

  it("plays checkpoints and a run's snapshots as model players", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-league-cmd-"));
    await saveRandomCheckpoint(join(root, "model"), {
      contextLength: 256,
      seed: 2,
      meta: { game: "kuhn", maxResponseTokens: 4 },
    });
    mkdirSync(join(root, "run", "league"), { recursive: true });
    for (const [it, seed] of [
      [0, 3],
      [5, 4],
    ])
      await saveRandomCheckpoint(join(root, "run", "league", `snapshot-${String(it).padStart(6, "0")}`), {
        contextLength: 256,
        seed,
        meta: { game: "kuhn", maxResponseTokens: 4 },
      });
    const out = join(root, "league.json");
    const argv = [
      "--players",
      "cfr",
      "--checkpoint",
      join(root, "model"),
      "--snapshots",
      join(root, "run"),
      "--deals",
      "3",
      "--out",
      out,
    ];
    const res = await runJson(argv);
    assert.equal(res.game, "kuhn", "the game read from the models");
    assert.deepEqual(
      res.table.map((r) => r.name).sort(),
      ["cfr", `model:${join(root, "model")}`, "snapshot:0", "snapshot:5"].sort(),
    );
    for (const row of res.table) {
      assert.equal(row.games, 3 * 3 * 2);
      if (row.name !== "cfr") assert.ok(row.invalidRate !== undefined && row.invalidRate >= 0);
    }
    assert.deepEqual(JSON.parse(readFileSync(out, "utf8")), res);
    assert.deepEqual(await runJson(argv), res, "the models' samples are seeded too");
  });

  it("refuses too few players and bad specs", async () => {
    await assert.rejects(
      run(["--players", "random"]),
      (e) => e instanceof UsageError && /at least two players/.test(e.message),
    );
    await assert.rejects(
      run(["--game", "kuhn", "--players", "random,bogus"]),
      (e) => e instanceof UsageError && /--players: .*bogus/.test(e.message),
    );
    await assert.rejects(
      run(["--players", "random,minimax", "--deals", "0"]),
      (e) => e instanceof UsageError && /--deals/.test(e.message),
    );
  });
});
