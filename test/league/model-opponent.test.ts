import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { dealState, kuhn } from "../../src/games/kuhn.js";
import { EMPTY_BOARD, tictactoe } from "../../src/games/tictactoe.js";
import { ModelOpponent, type ModelPlayer } from "../../src/league/model-opponent.js";
import { ScriptedPolicy } from "../../src/policy/scripted.js";
import { TRAIN_SAMPLING } from "../../src/policy/types.js";
import { loadTask } from "../../src/tasks/registry.js";

function player(policy: ScriptedPolicy, knobs?: Record<string, unknown>): ModelPlayer {
  return {
    policy,
    promptStyle: "compact",
    sampling: { ...TRAIN_SAMPLING, maxTokens: 16 },
    taskOptions: knobs ? { knobs } : {},
  };
}

describe("a model as an opponent", () => {
  it("answers the prompt the agent would see from its seat, and plays the move it names", async () => {
    const def = await loadTask("kuhn");
    const policy = new ScriptedPolicy(() => "<action>BET</action>");
    const opp = new ModelOpponent("snapshot:3", kuhn, def, player(policy), Rng.seeded(1), false);
    // Player 1 (seat second) holds the King and faces player 0's check.
    const state = kuhn.apply(dealState([0, 2]), 0);
    assert.equal(await opp.act(state), 1);
    const prompt = policy.requests[0].messages.map((m) => m.content).join("\n");
    assert.match(prompt, /Card: K\./, "its own card, not the agent's");
    assert.match(prompt, /You act second/);
    assert.match(prompt, /Opp: PASS\./);
    assert.doesNotMatch(prompt, /Card: J/);
    assert.equal(opp.stats.invalid, 0);
  });

  it("an answer that is no legal move becomes a random legal one, counted", async () => {
    const def = await loadTask("tictactoe");
    const policy = new ScriptedPolicy(() => "no idea");
    const opp = new ModelOpponent("snapshot:0", tictactoe, def, player(policy), Rng.seeded(2), false);
    const state = tictactoe.apply(EMPTY_BOARD, 4);
    const moves = new Set<number>();
    for (let k = 0; k < 20; k++) moves.add((await opp.act(state)) as number);
    assert.ok(!moves.has(4) && moves.size > 1, `random legal moves, got ${[...moves]}`);
    assert.deepEqual(opp.stats, { moves: 20, invalid: 20 });
  });

  it("uses the cell format it was trained with, and its seeds replay per attempt with replay", async () => {
    const def = await loadTask("tictactoe");
    const policy = new ScriptedPolicy((_m, ctx) => `<action>${ctx.rng.int(2) === 0 ? "11" : "33"}</action>`);
    const opp = new ModelOpponent(
      "m",
      tictactoe,
      def,
      player(policy, { cells: "digits" }),
      Rng.seeded(5),
      true,
    );
    const state = tictactoe.apply(EMPTY_BOARD, 4);
    const first = [await opp.act(state), await opp.act(state), await opp.act(state)];
    opp.restart();
    const again = [await opp.act(state), await opp.act(state), await opp.act(state)];
    assert.deepEqual(again, first);
    assert.ok(first.every((m) => m === 0 || m === 8));
    assert.equal(opp.stats.invalid, 0);
    assert.ok(policy.requests.slice(0, 3).every((r, i) => r.seed === policy.requests[3 + i].seed));
  });
});
