import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { evaluate } from "../../src/evaluate/evaluate.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { openRemoteTask, type RemoteTaskDefinition } from "../../src/tasks/remote.js";
import { buildServedCorpus, type ExpertCall } from "../../src/train/pretrain/served-corpus.js";
import { pythonPath, REPO_ROOT } from "../openspiel/python.js";
import { RUNNER } from "./helpers.js";

/**
 * ALFWorld served by python/mage_envs/alfworld_server.py, played by mage's trial runner: the full
 * prompt is the reference's (the initial observation, the last 15 steps with their observations,
 * the admissible commands without `help`), the compact one lists only the commands that act on
 * objects, answers outside the admissible commands are invalid actions (never a crash), and
 * evaluation breaks success@k down per split and per task type.
 */

const engine = spawnSync(
  pythonPath(),
  ["-c", "import textworld, fast_downward, alfworld.agents.environment"],
  {
    encoding: "utf8",
  },
);
const skip =
  engine.status === 0
    ? false
    : `ALFWorld's engine is not installed (node scripts/python-env.mjs installs it)`;

const HEADING = "Your admissible actions in the current situation are:";

/** The admissible list of a full play prompt, or the compact action line's commands. */
function listed(prompt: string): string[] {
  const full = prompt.lastIndexOf(HEADING);
  if (full >= 0)
    return prompt
      .slice(full + HEADING.length)
      .split("]")[0]
      .replace(/^\s*\[/, "")
      .split(", ");
  const compact = /Actions: ([^\n]*)\.\n?[^\n]*$/.exec(prompt)?.[1];
  return compact ? compact.split(", ").filter((a) => a !== "go to PLACE") : [];
}

/** Answers a random listed action (one in five answers is not admissible), a remark when asked to reflect. */
function alfworldPolicy(seen: string[][]): Policy {
  return {
    name: "alfworld-random",
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        const rng = Rng.seeded(r.seed);
        const last = r.messages[r.messages.length - 1].content;
        seen.push(r.messages.map((m) => m.content));
        let text: string;
        if (/<remark>/.test(last)) text = "<remark>Look in the drawers first.</remark>";
        else if (rng.int(5) === 0) text = "<action>teleport to the garden</action>";
        else {
          const acts = listed(last).filter((a) => a.length > 0);
          text = `<action>${acts.length > 0 ? rng.pick(acts) : "go to bed 1"}</action>`;
        }
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
      });
    },
  };
}

describe("ALFWorld through game: remote", { skip }, () => {
  let proc: ChildProcess | undefined;
  let url = "";
  // The rebuilt 2.1.2 game files go to a folder of the test's own, not the user's cache.
  const cache = mkdtempSync(join(tmpdir(), "mage-alfworld-"));

  before(async () => {
    url = await new Promise<string>((resolve, reject) => {
      proc = spawn(pythonPath(), ["-m", "mage_envs.alfworld_server", "--port", "0"], {
        cwd: join(REPO_ROOT, "python"),
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", MAGE_ALFWORLD_CACHE: cache },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      const timer = setTimeout(() => reject(new Error(`alfworld_server did not start:\n${err}`)), 120_000);
      proc.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      proc.stderr!.on("data", (d: Buffer) => {
        err += d.toString();
      });
    });
  });
  after(() => {
    if (proc && proc.exitCode === null) proc.kill("SIGTERM");
    rmSync(cache, { recursive: true, force: true });
  });

  async function trials(def: RemoteTaskDefinition, style: "full" | "compact", seen: string[][]) {
    const specs: TrialSpec[] = [0, 1].map((i) => ({
      trialId: i,
      groupId: i,
      taskSeed: 10 + i,
      opponent: null,
      seat: null,
    }));
    return runTrials(specs, () => def.create({}), alfworldPolicy(seen), Rng.seeded(5), {
      ...RUNNER,
      attempts: 2,
      maxTurns: 4,
      promptStyle: style,
    });
  }

  it("full prompts: the initial observation, 15 observed steps, the admissible commands; invalid answers are flagged", async () => {
    const def = await openRemoteTask({
      url,
      name: "alfworld",
      config: { split: "valid_seen", taskTypes: "1-4" },
      timeoutMs: 120_000,
    });
    const seen: string[][] = [];
    const records = await trials(def, "full", seen);
    for (const r of records) {
      assert.equal(r.aborted, false);
      assert.match(
        r.category ?? "",
        /^valid_seen\/(pick_and_place_simple|look_at_obj_in_light|pick_clean_then_place_in_recep|pick_heat_then_place_in_recep)$/,
      );
      assert.equal(r.attempts.length, 2);
      const first = r.memory.attempts[0];
      assert.deepEqual(first.initialLegalActions?.includes("help"), false);
      assert.ok(first.initialObservation.includes("Your task is to:"));
    }
    const rows = records.flatMap((r) => r.rows.filter((row) => row.phase === "play"));
    assert.ok(rows.some((row) => !row.valid && /not an admissible action/.test(row.invalidReason ?? "")));
    assert.ok(rows.some((row) => row.valid));
    const play = seen.map((m) => m[0]).filter((p) => p.includes(HEADING));
    assert.ok(play.length > 0);
    for (const p of play) {
      assert.ok(p.includes("Your task is to:") && !listed(p).includes("help"));
      assert.ok(listed(p).includes("look") && listed(p).includes("inventory"));
    }
    // A turn's observation stays in the history window (15 steps, all observed).
    const later = play.find((p) => p.includes("Step 3 - Action:"));
    assert.ok(later && /Step 1 - Action: [^\n]*\nObservation:\n/.test(later), later);
  });

  it("compact prompts list the acting commands only; evaluation reports success@k per split and task type", async () => {
    const def = await openRemoteTask({
      url,
      name: "alfworld",
      config: { split: "valid_unseen", taskTypes: "2,4" },
      timeoutMs: 120_000,
    });
    const seen: string[][] = [];
    const records = await trials(def, "compact", seen);
    assert.ok(records.every((r) => !r.aborted));
    assert.ok(seen.every((m) => m[0].startsWith("ALFWorld household task:")));
    assert.ok(seen.some((m) => m[m.length - 1].includes("Actions: go to PLACE")));
    const result = await evaluate(alfworldPolicy([]), {
      task: def,
      cells: [{ opponent: null, seat: null, unseen: false }],
      trials: 3,
      attempts: 2,
      reflection: "reflection_only",
      promptStyle: "compact",
      maxTurns: 3,
      sampling: RUNNER.sampling,
      seed: 1,
    });
    const by = result.cells[0].byCategory ?? {};
    assert.equal(by.valid_unseen?.trials, 3);
    const types = Object.keys(by).filter((k) => k.includes("/"));
    assert.ok(
      types.length >= 1 &&
        types.every((k) =>
          /^valid_unseen\/pick_(heat_then_place_in_recep)$|^valid_unseen\/look_at_obj_in_light$/.test(k),
        ),
      types.join(),
    );
    assert.equal(
      types.reduce((n, k) => n + by[k].trials, 0),
      3,
    );
    assert.equal(by.valid_unseen.successAt.length, 2);
  });

  it("the warm start's corpus: the expert's play, remarks that state only what the failed attempt looked at", async () => {
    const def = await openRemoteTask({
      url,
      name: "alfworld",
      config: { split: "valid_seen", taskTypes: "1-4", maxSteps: 30 },
      timeoutMs: 120_000,
    });
    assert.equal(def.env.expert, true);
    const calls: ExpertCall[] = [];
    const corpus = await buildServedCorpus({
      def,
      trials: 2,
      rng: Rng.seeded(3),
      maxTurns: 5,
      onExpert: (c) => calls.push(c),
    });
    assert.ok(corpus.stats.reflections > 0, "5 turns are too few for the expert's first attempt");
    // A corpus trial is one chat per prefix chain (reflection_only: one per attempt).
    const stated: string[] = [];
    for (const t of corpus.trials) {
      let looked = new Set<string>();
      for (const m of t.messages) {
        if (m.role === "user" && /^Attempt \d+\.$/m.test(m.content)) looked = new Set();
        if (m.role !== "assistant") continue;
        const place = /^<action>(?:go to|open|examine) (.+)<\/action>$/.exec(m.content)?.[1];
        if (place) looked.add(place);
        const remark = /^<remark>(.*)<\/remark>$/.exec(m.content)?.[1];
        if (!remark) continue;
        const facts = remark.match(/[a-z]+ \d+ (?:held [^.]*|was empty)\./g) ?? [];
        for (const f of facts) {
          const where = /^([a-z]+ \d+) (?:held|was)/.exec(f)![1];
          assert.ok(looked.has(where), `"${f}" is about ${where}, which the attempt never looked at`);
        }
        stated.push(...facts);
      }
      for (const c of calls.filter((x) => x.attempt > 0))
        assert.ok(
          c.memory.every((f) => corpus.trials.some((tr) => tr.messages.some((m) => m.content.includes(f)))),
        );
    }
    assert.ok(stated.length > 0);
    assert.ok(
      calls.some((c) => c.attempt > 0 && c.memory.length > 0),
      "later attempts got the stated facts",
    );
    def.client.destroy();
  });
});
