import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { ProtocolError, parseExpertReply, parseInfoReply } from "../../src/env/protocol.js";
import { openRemoteTask, RemoteTask, type RemoteTaskDefinition } from "../../src/tasks/remote.js";
import { startPythonServer } from "../serve/adapters.js";

/**
 * `POST /expert` (docs/env-protocol.md) from mage's client against a served environment: the test
 * adapter `sleepy` (python/tests/sleepy_adapter.py), whose expert answers `count`, states one fact
 * per step and echoes the memory it is given.
 */

describe("the expert endpoint through mage's client", () => {
  let server: Awaited<ReturnType<typeof startPythonServer>> | undefined;
  let def: RemoteTaskDefinition;

  before(async () => {
    server = await startPythonServer("tests.sleepy_adapter", []);
    def = await openRemoteTask({ url: server.url, name: "sleepy" });
  });
  after(async () => {
    def?.client.destroy();
    if (server) {
      server.child.kill("SIGTERM");
      await server.exited;
    }
  });

  it("/info declares it; the expert's answers are read-only and carry facts and memory", async () => {
    assert.equal(def.env.expert, true);
    const task = def.create({}) as RemoteTask;
    assert.equal(task.hasExpert, true);
    await task.reset(Rng.seeded(3));
    assert.deepEqual(await task.expert(), { action: "count", facts: [] });
    const r = await task.step("<action>count</action>");
    assert.equal(r.valid, true);
    const advice = await task.expert(["the counter stops at 5."]);
    assert.deepEqual(advice, {
      action: "count",
      facts: ["step 1 counted.", "remembered: the counter stops at 5."],
    });
    // No sequence number was used up: the next step is the second one.
    await task.step(`<action>${advice.action}</action>`);
    assert.equal(task.observation(), "count 2");
    while (!task.done) await task.step("<action>count</action>");
    const over = await task.expert();
    assert.equal(over.action, null);
    assert.equal(over.facts.length, 5);
    await task.restart();
    assert.deepEqual((await task.expert()).facts, []);
    await task.close();
  });

  it("replies that break the protocol, and environments without an expert, are refused", () => {
    assert.throws(() => parseExpertReply({ facts: [] }), ProtocolError);
    assert.throws(() => parseExpertReply({ action: "x", facts: "drawer 1" }), ProtocolError);
    assert.deepEqual(parseExpertReply({ action: null, facts: [] }), { action: null, facts: [] });
    assert.deepEqual(parseExpertReply({ action: "x", facts: [], avoid: ["y"] }), {
      action: "x",
      facts: [],
      avoid: ["y"],
    });
    assert.throws(() => parseExpertReply({ action: "x", facts: [], avoid: "y" }), ProtocolError);
    const info = parseInfoReply({
      protocol: "mage-env/1",
      environments: [{ name: "e", twoPlayer: false, maxTurns: 3, seeds: { min: 0, max: 1 } }],
    });
    assert.equal(info.environments[0].expert, undefined);
  });

  it("an environment that declares no expert is a UsageError before any request", async () => {
    const plain = { ...def.env, expert: false };
    const task = new RemoteTask(def.client, plain, {}, plain.seeds);
    await task.reset(Rng.seeded(1));
    await assert.rejects(task.expert(), UsageError);
    await task.close();
  });
});
