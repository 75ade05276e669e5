import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { TrialEnv } from "../../src/tasks/env.js";
import { assignGroups, expandGroups, type PoolEntry } from "../../src/tasks/population.js";
import { createTask, loadTask } from "../../src/tasks/registry.js";
import type { PromptStyle, TextTask } from "../../src/tasks/types.js";

/** A scripted random agent: the response depends only on (env, call index) and the observation. */
function agentResponse(task: TextTask, rng: Rng): string {
  if (rng.int(6) === 0)
    return rng.pick(["<think>...", "no tag", "<action>(9, 9)</action>", "<action>jump</action>"]);
  switch (task.name) {
    case "tictactoe":
      return `<action>(${1 + rng.int(3)}, ${1 + rng.int(3)})</action>`;
    case "minesweeper":
      return `<think>guess</think><action>(${1 + rng.int(6)}, ${1 + rng.int(6)})</action>`;
    case "kuhn":
      return `<action>${rng.pick(["PASS", "BET"])}</action>`;
    default:
      return `<action>${Array.from({ length: 1 + rng.int(3) }, () => rng.pick(["up", "down", "left", "right"])).join(", ")}</action>`;
  }
}

interface Slot {
  env: TrialEnv;
  agent: Rng;
  maxTurns: number;
  log: unknown[];
  attempt: number;
  turn: number;
  finished: boolean;
}

/**
 * Runs 3-attempt trials (reflect between attempts, stop on a win) for every env in lockstep
 * rounds; `order` picks the order in which the envs are stepped in each round.
 */
async function runAll(seed: number, order: "fixed" | "shuffled" | "reversed"): Promise<string> {
  const root = Rng.seeded(seed);
  const setups: { task: string; pool?: PoolEntry[] }[] = [
    {
      task: "tictactoe",
      pool: [
        { spec: "random", weight: 1 },
        { spec: "mcts:20", weight: 1 },
        { spec: "preferred:3", weight: 1 },
      ],
    },
    {
      task: "kuhn",
      pool: [
        { spec: "random", weight: 1 },
        { spec: "cfr-mixed:30", weight: 1 },
      ],
    },
    { task: "sokoban" },
    { task: "minesweeper" },
  ];
  const slots: Slot[] = [];
  for (const [si, s] of setups.entries()) {
    const groups = assignGroups({
      numGroups: 3,
      pool: s.pool,
      seats: s.pool ? { mode: "mixed" } : null,
      rng: root.derive("population", s.task),
    });
    const maxTurns = (await loadTask(s.task)).maxTurns;
    for (const e of expandGroups(groups, 2)) {
      const task = await createTask(s.task, s.pool ? { opponent: e.opponent!, seat: e.seat! } : {});
      const style: PromptStyle = e.member === 0 ? "full" : "compact";
      const env = new TrialEnv(task, { style, reflectionType: "history_and_reflection", hindsight: true });
      await env.reset(Rng.seeded(e.taskSeed));
      slots.push({
        env,
        agent: root.derive("agent", si, e.env),
        maxTurns,
        log: [{ assignment: e, style }],
        attempt: 0,
        turn: 0,
        finished: false,
      });
    }
  }
  const orderRng = Rng.seeded(`order-${seed}`);
  for (let round = 0; round < 100 && slots.some((s) => !s.finished); round++) {
    let idx = slots.map((_, i) => i);
    if (order === "shuffled") idx = orderRng.shuffle(idx);
    if (order === "reversed") idx.reverse();
    await Promise.all(idx.map((i) => advance(slots[i])));
  }
  return JSON.stringify(slots.map((s) => ({ log: s.log, memory: s.env.memory })));
}

/** One call of one env: a play turn, or the reflect call + restart between attempts. */
async function advance(s: Slot): Promise<void> {
  if (s.finished) return;
  const { env } = s;
  const attemptOver = env.done || s.turn >= s.maxTurns;
  if (attemptOver) {
    if (env.info().won || s.attempt === 2) {
      s.finished = true;
      return;
    }
    const messages = env.messages("reflect");
    const response = `<remark>try ${s.agent.int(1000)}</remark>`;
    s.log.push({ phase: "reflect", messages, anchor: env.anchor("reflect"), response });
    env.reflect(response);
    env.restart();
    s.attempt++;
    s.turn = 0;
    return;
  }
  const messages = env.messages("play");
  const response = agentResponse(env.task, s.agent);
  const anchor = env.anchor("play");
  const result = await env.play(response, [s.agent.int(50000)]);
  s.turn++;
  s.log.push({ phase: "play", messages, anchor, response, result, info: env.info() });
}

describe("determinism", () => {
  it("two runs with one seed give byte-identical transcripts, whatever order the envs are stepped in", async () => {
    const a = await runAll(11, "fixed");
    const b = await runAll(11, "fixed");
    assert.equal(a, b);
    assert.equal(await runAll(11, "shuffled"), a);
    assert.equal(await runAll(11, "reversed"), a);
    const c = await runAll(12, "fixed");
    assert.notEqual(c, a);
    assert.ok(a.length > 50_000, "the transcripts are substantial");
    const parsed = JSON.parse(a) as { log: { phase?: string }[] }[];
    assert.equal(parsed.length, 24);
    assert.ok(parsed.some((p) => p.log.some((l) => l.phase === "reflect")));
  });
});
