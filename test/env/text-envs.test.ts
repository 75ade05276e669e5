import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { openRemoteTask, type RemoteTask } from "../../src/tasks/remote.js";
import { pythonPath } from "../openspiel/python.js";
import { startPythonServer } from "../serve/adapters.js";
import { RUNNER } from "./helpers.js";

/**
 * TextWorldExpress and ScienceWorld served by python/mage_envs (textworld_express_server,
 * scienceworld_server), played by mage's trial runner: whole multi-attempt trials on the split's
 * seeds (the client checks every restart's fingerprint and observation), a seed range outside the
 * split refused, and the coin collector's expert followed through mage's client to the coin.
 */

const engines = spawnSync(
  pythonPath(),
  ["-c", "import shutil, textworld_express, scienceworld; assert shutil.which('java')"],
  { encoding: "utf8" },
);
const skip =
  engines.status === 0
    ? false
    : "TextWorldExpress, ScienceWorld or Java 17 is missing (node scripts/python-env.mjs; openjdk-17-jre-headless)";

function reply(text: string): Generation {
  const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
  return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
}

/** A random listed action (TextWorldExpress), a random template over the objects in view (ScienceWorld). */
function randomPolicy(): Policy {
  return {
    name: "text-random",
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        const rng = Rng.seeded(r.seed);
        const last = r.messages[r.messages.length - 1].content;
        if (/<remark>/.test(last)) return reply("<remark>Search the rooms I have not seen.</remark>");
        if (rng.int(6) === 0) return reply("<action>fly north</action>");
        const actions = /Actions: ([^\n]*)\.\n?[^\n]*$/.exec(last)?.[1]?.split(", ");
        if (actions) return reply(`<action>${rng.pick(actions)}</action>`);
        const objects = /Objects in view: ([^\n]*)\./.exec(last)?.[1]?.split(", ") ?? ["agent"];
        const template = rng.pick(["look at OBJ", "open OBJ", "go to OBJ", "pick up OBJ", "look around"]);
        return reply(`<action>${template.replace("OBJ", rng.pick(objects))}</action>`);
      });
    },
  };
}

const specs: TrialSpec[] = [0, 1, 2, 3].map((i) => ({
  trialId: i,
  groupId: i >> 1,
  taskSeed: i >> 1,
  opponent: null,
  seat: null,
}));

describe("TextWorldExpress and ScienceWorld through game: remote", { skip }, () => {
  let twx: Awaited<ReturnType<typeof startPythonServer>> | undefined;
  let sw: Awaited<ReturnType<typeof startPythonServer>> | undefined;
  before(async () => {
    [twx, sw] = await Promise.all([
      startPythonServer("mage_envs.textworld_express_server", ["--games", "coin,cookingworld"]),
      startPythonServer("mage_envs.scienceworld_server", ["--tasks", "find-animal"]),
    ]);
  });
  after(async () => {
    for (const s of [twx, sw]) {
      if (s && s.proc.exitCode === null) s.proc.kill("SIGTERM");
      await s?.exited;
    }
  });

  for (const [name, config, seeds] of [
    ["twx-coin", { numLocations: 6 }, { min: 0, max: 999 }],
    ["twx-cookingworld", { numLocations: 3, numIngredients: 2 }, { min: 20000, max: 20999 }],
    ["sw-find-animal", { openDoors: true }, { min: 0, max: 149 }],
  ] as const) {
    it(`${name}: whole 3-attempt trials, compact and full prompts, every restart identical`, async () => {
      const url = name.startsWith("sw-") ? sw!.url : twx!.url;
      const split = seeds.min >= 20000 ? "test" : "train";
      const def = await openRemoteTask({ url, name, config: { ...config, split }, seeds, timeoutMs: 60_000 });
      assert.equal(def.env.expert, true);
      for (const promptStyle of ["compact", "full"] as const) {
        const records = await runTrials(specs, () => def.create({}), randomPolicy(), Rng.seeded(7), {
          ...RUNNER,
          attempts: 3,
          maxTurns: 5,
          promptStyle,
        });
        assert.equal(records.length, 4);
        for (const r of records) {
          assert.equal(r.aborted, false, `${name}: trial ${r.trialId}`);
          assert.equal(r.attempts.length >= 1, true);
          assert.equal(r.category, name.startsWith("sw-") ? `find-animal/${split}` : split);
        }
      }
      def.client.destroy();
    });
  }

  it("a seed range outside the split is refused at the first create, naming the range", async () => {
    const def = await openRemoteTask({
      url: twx!.url,
      name: "twx-coin",
      config: { split: "train" },
      seeds: { min: 20000, max: 20999 },
    });
    const task = def.create({}) as RemoteTask;
    await assert.rejects(task.reset(Rng.seeded(1)), (e: Error) => {
      assert.ok(e instanceof UsageError, String(e));
      assert.match(e.message, /\[0, 999\]/);
      return true;
    });
    def.client.destroy();
  });

  it("the coin collector's expert, followed through mage's client, takes the coin", async () => {
    const def = await openRemoteTask({
      url: twx!.url,
      name: "twx-coin",
      config: { split: "dev", numLocations: 8 },
      seeds: { min: 10000, max: 10999 },
    });
    for (const seed of [1, 2, 3]) {
      const task = def.create({}) as RemoteTask;
      await task.reset(Rng.seeded(seed));
      let facts: string[] = [];
      let won = false;
      while (!task.done) {
        const advice = await task.expert();
        assert.ok(advice.action !== null);
        facts = advice.facts;
        const r = await task.step(`I follow the map. <action>${advice.action}</action>`);
        assert.equal(r.valid, true);
        won = r.won;
      }
      assert.equal(won, true, `seed ${seed}: the coin taken`);
      assert.ok(facts.some((f) => f.startsWith("The coin was not in the ") || f.includes("leads to the")));
      await task.close();
    }
    def.client.destroy();
  });
});
