import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { command, type TournamentResult } from "../../src/cli/commands/tournament.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { GAMES } from "../../src/games/registry.js";
import { EMPTY_BOARD, type TicTacToeState, tictactoe } from "../../src/games/tictactoe.js";
import { createOpponent } from "../../src/opponents/registry.js";

/** Runs the command in-process and returns its exit code and what it wrote to stdout as text. */
async function runCommand(argv: string[]): Promise<{ code: number; out: string }> {
  let out = "";
  const original = process.stdout.write.bind(process.stdout);
  // Capture only text: the test runner's own messages to stdout are binary and pass through.
  process.stdout.write = ((chunk: unknown, ...rest: unknown[]) => {
    if (typeof chunk === "string") {
      out += chunk;
      return true;
    }
    return (original as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    const code = await command.run(argv);
    return { code, out };
  } finally {
    process.stdout.write = original;
  }
}

async function runJson(argv: string[]): Promise<TournamentResult> {
  const { code, out } = await runCommand([...argv, "--json"]);
  assert.equal(code, 0);
  assert.equal(out.trim().split("\n").length, 1, "one JSON object on one line");
  return JSON.parse(out) as TournamentResult;
}

async function usageError(argv: string[]): Promise<UsageError> {
  try {
    await command.run(argv);
  } catch (err) {
    assert.ok(err instanceof UsageError, `expected a UsageError for ${argv.join(" ")}, got ${err}`);
    assert.equal(err.exitCode, 2);
    return err;
  }
  assert.fail(`no error for ${argv.join(" ")}`);
}

function playTicTacToe(first: string, second: string, rngFirst: Rng, rngSecond: Rng): number[] {
  const a = createOpponent<TicTacToeState, number>("tictactoe", first, { rng: rngFirst });
  const b = createOpponent<TicTacToeState, number>("tictactoe", second, { rng: rngSecond });
  let s = EMPTY_BOARD;
  while (!tictactoe.isTerminal(s))
    s = tictactoe.apply(s, (tictactoe.currentPlayer(s) === 0 ? a : b).act(s) as number);
  return tictactoe.returns(s);
}

describe("mage tournament", () => {
  it("plays every pair with seats split and consistent, mirrored tallies", async () => {
    const players = ["minimax", "random", "preferred:2", "mcts:20"];
    const res = await runJson([
      "--game",
      "tictactoe",
      "--players",
      players.join(","),
      "--games",
      "30",
      "--seed",
      "3",
    ]);
    assert.deepEqual(res.players, players);
    assert.equal(res.gamesPerPair, 30);
    assert.equal(res.pairs.length, 12);
    assert.equal(res.nonUnitReturns, false);
    for (const p of res.pairs) {
      assert.equal(p.asFirst.games, 15);
      assert.equal(p.asSecond.games, 15);
      assert.equal(p.asFirst.wins + p.asFirst.draws + p.asFirst.losses, 15);
      assert.equal(p.total.wins, p.asFirst.wins + p.asSecond.wins);
      const mirror = res.pairs.find((q) => q.player === p.opponent && q.opponent === p.player);
      assert.ok(mirror);
      assert.equal(p.asFirst.wins, mirror.asSecond.losses);
      assert.equal(p.asFirst.losses, mirror.asSecond.wins);
      assert.equal(p.asSecond.draws, mirror.asFirst.draws);
      assert.ok(Math.abs(p.total.meanReturn + mirror.total.meanReturn) < 1e-12);
    }
    const minimax = res.standings.find((s) => s.player === "minimax");
    assert.equal(minimax?.games, 90);
    assert.equal(minimax?.losses, 0);
    const random = res.standings.find((s) => s.player === "random");
    assert.ok(random && random.losses > random.wins);
  });

  it("derives game g of pair (i, j) from Rng.seeded(seed).derive('tournament', i, j, g)", async () => {
    const res = await runJson(["--players", "random,mcts:10", "--games", "40", "--seed", "11"]);
    const root = Rng.seeded(11);
    const expected = { asFirst: [0, 0, 0], asSecond: [0, 0, 0] };
    for (let g = 0; g < 40; g++) {
      const r = root.derive("tournament", 0, 1, g);
      const randomFirst = g % 2 === 0;
      const returns = randomFirst
        ? playTicTacToe("random", "mcts:10", r.derive("player", 0), r.derive("player", 1))
        : playTicTacToe("mcts:10", "random", r.derive("player", 1), r.derive("player", 0));
      const ret = returns[randomFirst ? 0 : 1];
      const t = randomFirst ? expected.asFirst : expected.asSecond;
      t[ret > 0 ? 0 : ret === 0 ? 1 : 2]++;
    }
    const p = res.pairs[0];
    assert.equal(p.player, "random");
    assert.deepEqual([p.asFirst.wins, p.asFirst.draws, p.asFirst.losses], expected.asFirst);
    assert.deepEqual([p.asSecond.wins, p.asSecond.draws, p.asSecond.losses], expected.asSecond);
  });

  it("is deterministic for a seed and changes with it", async () => {
    const argv = ["--players", "random,minimax,mcts:10", "--games", "20"];
    const a = await runCommand([...argv, "--seed", "5"]);
    const b = await runCommand([...argv, "--seed", "5"]);
    const c = await runCommand([...argv, "--seed", "6", "--json"]);
    const d = await runCommand([...argv, "--seed", "7", "--json"]);
    assert.equal(a.out, b.out);
    assert.notEqual(c.out, d.out);
  });

  it("prints a readable table with seats split and standings", async () => {
    const { code, out } = await runCommand(["--players", "minimax-first,preferred:1", "--games", "4"]);
    assert.equal(code, 0);
    assert.match(out, /tournament: tictactoe, 2 players, 4 games per pair \(2 with each seat\), seed 0/);
    assert.match(out, /player\s+opponent\s+as first W-D-L\s+as second W-D-L\s+total W-D-L\s+score/);
    // Both deterministic: minimax-first beats preferred:1 from either seat.
    assert.match(out, /minimax-first\s+preferred:1\s+2-0-0\s+2-0-0\s+4-0-0\s+1\.000/);
    assert.match(out, /preferred:1\s+minimax-first\s+0-0-2\s+0-0-2\s+0-0-4\s+0\.000/);
    assert.match(out, /standings/);
    assert.doesNotMatch(out, /mean return/);
  });

  it("reports mean returns for games whose returns are not ±1", { skip: !("kuhn" in GAMES) }, async () => {
    const res = await runJson([
      "--game",
      "kuhn",
      "--players",
      "random,aggressive",
      "--games",
      "200",
      "--seed",
      "1",
    ]);
    assert.equal(res.nonUnitReturns, true);
    const p = res.pairs[0];
    assert.ok(p.total.meanReturn !== 0);
    const { out } = await runCommand(["--game", "kuhn", "--players", "random,aggressive", "--games", "20"]);
    assert.match(out, /mean return/);
  });

  it("rejects bad input with usage errors (exit code 2) naming the valid choices", async () => {
    assert.match(
      (await usageError(["--game", "chess", "--players", "a,b"])).message,
      /valid choices: .*tictactoe/,
    );
    assert.match(
      (await usageError(["--players", "minimax,alphazero"])).message,
      /unknown tictactoe opponent "alphazero"; valid specs: .*minimax.*mcts/,
    );
    assert.match((await usageError(["--players", "minimax,preferred:9"])).message, /1\.\.6/);
    assert.match((await usageError([])).message, /--players is required.*random/);
    assert.match((await usageError(["--players", "minimax"])).message, /at least two/);
    assert.match((await usageError(["--players", "minimax,,random"])).message, /empty entry/);
    assert.match((await usageError(["--players", "random,random"])).message, /twice/);
    for (const games of ["0", "3", "x", "-2", "1.5"]) {
      assert.match((await usageError(["--players", "random,minimax", "--games", games])).message, /--games/);
    }
    assert.match((await usageError(["--players", "random,minimax", "--seed", "abc"])).message, /--seed/);
    assert.match((await usageError(["--players", "random,minimax", "--bogus"])).message, /bogus/);
    assert.match((await usageError(["--players", "random,minimax", "extra"])).message, /extra/);
    assert.match((await usageError(["--players"])).message, /players/);
  });

  it("exits with code 2 from the real CLI on a bad game name", () => {
    const r = spawnSync(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "tournament", "--game", "chess"],
      {
        encoding: "utf8",
      },
    );
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /mage tournament: unknown --game "chess"; valid choices: .*tictactoe/);
    assert.equal(r.stdout, "");
  });
});
