import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { extractTag } from "../../src/core/tags.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { openRemoteTask, type RemoteTaskDefinition } from "../../src/tasks/remote.js";
import {
  loadServedPretrainConfig,
  openServedPretrain,
  ServedPretrainSchema,
} from "../../src/train/pretrain/served-config.js";
import {
  buildServedCorpus,
  checkExpertEnvironment,
  type ExpertCall,
} from "../../src/train/pretrain/served-corpus.js";
import type { TorchPretrainReport } from "../../src/train/pretrain/torch-run.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";
import { startPythonServer } from "../serve/adapters.js";
import { runPretrainCaptured } from "./pretrain-capture.js";

/**
 * The corpus of a served environment with an expert (python/tests/search_adapter.py: find the key
 * in one of four boxes within 3 turns, so the expert's first attempt often fails and a reflection
 * naming the key's box lets the next one win), and `mage pretrain --config` on it end to end.
 */

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "mage-served-corpus-"));
  dirs.push(d);
  return d;
}

/** The attempts of a corpus transcript: each attempt's play answers with what followed, then its remark. */
function attemptsOf(messages: readonly ChatMessage[]) {
  const out: { opened: Set<string>; remark: string | null }[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === "user" && /^Attempt \d+\.$/m.test(m.content))
      out.push({ opened: new Set(), remark: null });
    if (m.role !== "assistant" || out.length === 0) continue;
    const cur = out[out.length - 1];
    const remark = extractTag(m.content, "remark");
    if (remark.ok) {
      cur.remark = remark.content;
      continue;
    }
    const action = extractTag(m.content, "action");
    const reply = messages[i + 1]?.content ?? "";
    const box = action.ok ? /^open box (\d)$/.exec(action.content) : null;
    if (box && !reply.startsWith("Invalid:")) cur.opened.add(box[1]);
  }
  return out;
}

describe("the served corpus player (an ε-imperfect expert)", () => {
  let server: Awaited<ReturnType<typeof startPythonServer>> | undefined;
  let def: RemoteTaskDefinition;

  before(async () => {
    server = await startPythonServer("tests.search_adapter", []);
    def = await openRemoteTask({ url: server.url, name: "boxes" });
  });
  after(async () => {
    def?.client.destroy();
    if (server) {
      server.child.kill("SIGTERM");
      await server.exited;
    }
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it("is deterministic for a seed, states only what failed attempts saw, and hands it to later attempts", async () => {
    const calls: ExpertCall[] = [];
    const build = (seed: number, onExpert?: (c: ExpertCall) => void) =>
      buildServedCorpus({
        def,
        trials: 12,
        rng: Rng.seeded(seed),
        epsilon: 0.2,
        malformedRate: 0.05,
        ...(onExpert ? { onExpert } : {}),
      });
    const a = await build(1, (c) => calls.push(c));
    const b = await build(1);
    assert.deepEqual(a, b, "the same seed gives the same corpus");
    assert.notDeepEqual((await build(2)).trials, a.trials);
    assert.equal(a.game, "remote");
    assert.equal(a.env, "boxes");
    assert.ok(a.stats.reflections > 0, "some attempts failed");
    assert.ok(a.stats.malformed > 0);
    assert.ok((a.stats.won ?? 0) > (a.stats.wonFirst ?? 0), "later attempts won trials the first lost");

    const statedBy = new Map<number, string[]>();
    a.trials.forEach((t, trialId) => {
      const attempts = attemptsOf(t.messages);
      const stated: string[] = [];
      for (const at of attempts) {
        if (at.remark === null) continue;
        // Every box a remark names was opened in that attempt: facts are what it saw.
        for (const m of at.remark.matchAll(/box (\d) (held|was)/g))
          assert.ok(at.opened.has(m[1]), `trial ${trialId}: "${at.remark}" names box ${m[1]}, not opened`);
        stated.push(...(at.remark.match(/box \d (?:held a key 1|held no key|was empty)\./g) ?? []));
      }
      statedBy.set(trialId, stated);
    });
    // The expert of a later attempt was given exactly the facts the trial's earlier remarks stated.
    const later = calls.filter((c) => c.attempt > 0);
    assert.ok(later.some((c) => c.memory.length > 0));
    for (const c of later) {
      for (const fact of c.memory) assert.ok(statedBy.get(c.trialId)?.includes(fact), `${fact} was stated`);
    }
    for (const c of calls.filter((x) => x.attempt === 0)) assert.deepEqual(c.memory, []);
  });

  it("firstEpsilon sets the random share of attempt 1 apart from the later attempts'", async () => {
    const calls: ExpertCall[] = [];
    const corpus = await buildServedCorpus({
      def,
      trials: 12,
      rng: Rng.seeded(5),
      epsilon: 0,
      firstEpsilon: 1,
      malformedRate: 0,
      onExpert: (c) => calls.push(c),
    });
    assert.ok(calls.length > 0, "later attempts follow the expert");
    assert.ok(
      calls.every((c) => c.attempt > 0),
      "attempt 1 plays only random legal actions",
    );
    assert.ok(corpus.stats.reflections > 0);
    assert.ok(
      (corpus.stats.won ?? 0) > (corpus.stats.wonFirst ?? 0),
      "later attempts win what attempt 1 lost",
    );
    await assert.rejects(
      buildServedCorpus({ def, trials: 1, rng: Rng.seeded(1), firstEpsilon: 1.5 }),
      /firstEpsilon must be in \[0, 1\]/,
    );
  });

  it("maxTurns caps a corpus attempt's answers; the file's maxTurns, else the server's, reaches both phases", async () => {
    const corpus = await buildServedCorpus({ def, trials: 8, rng: Rng.seeded(3), epsilon: 0.5, maxTurns: 1 });
    for (const t of corpus.trials) {
      const plays = attemptsOf(t.messages).length;
      const answers = t.messages.filter(
        (m) => m.role === "assistant" && !m.content.includes("<remark>"),
      ).length;
      assert.ok(answers <= plays, `one answer an attempt (${answers} in ${plays} attempts)`);
    }
    const file = (extra: string) =>
      ServedPretrainSchema.parse({
        game: "remote",
        model: "m",
        env: { url: server!.url, name: "boxes" },
        checks: {},
        ...(extra ? { maxTurns: Number(extra) } : {}),
      });
    assert.equal((await openServedPretrain(file("2"))).maxTurns, 2);
    assert.equal((await openServedPretrain(file("2"))).record.maxTurns, 2);
    const dflt = await openServedPretrain(file(""));
    assert.equal(dflt.maxTurns, def.maxTurns, "the server's maxTurns");
    assert.equal(dflt.record.maxTurns, undefined, "the record of a file without it is as before");
  });

  it("refuses environments without an expert or legal actions, and bad config fields by name", async () => {
    const without = { ...def, env: { ...def.env, expert: false } } as RemoteTaskDefinition;
    assert.throws(() => checkExpertEnvironment(without), /declares no expert/);
    const unlisted = { ...def, env: { ...def.env, legalActions: false } } as RemoteTaskDefinition;
    assert.throws(() => checkExpertEnvironment(unlisted), /lists no legal actions/);
    const dir = await tempDir();
    const file = join(dir, "bad.yaml");
    await writeFile(
      file,
      "game: remote\nmodel: m\nenv: {url: 'http://127.0.0.1:1', name: boxes}\nchecks: {}\nsettings: {stepz: 3}\n",
    );
    assert.throws(
      () => loadServedPretrainConfig(file),
      (e: Error) => e instanceof UsageError && /settings/.test(e.message) && /stepz/.test(e.message),
    );
  });

  it("the committed served warm-start configs parse", () => {
    const c = loadServedPretrainConfig("configs/pretrain/alfworld-smollm2.yaml");
    assert.equal(c.env.name, "alfworld");
    assert.deepEqual(c.env.config, { split: "valid_train", taskTypes: "1-4", maxSteps: 30 });
    assert.equal(c.checks.config.split, "valid_seen");
    assert.equal(c.settings.evalTrials, 100);
    const coin = loadServedPretrainConfig("configs/pretrain/coin-smollm2.yaml");
    assert.deepEqual(coin.env.seeds, { min: 0, max: 999 }, "the train split's seeds");
    assert.deepEqual(coin.checks.seeds, { min: 10000, max: 10999 }, "fresh dev seeds for the checks");
    assert.equal(coin.maxTurns, 12, "the training config's task.maxTurns");
    const sw = loadServedPretrainConfig("configs/pretrain/scienceworld-find-animal-smollm2.yaml");
    assert.equal(sw.env.name, "sw-find-animal");
    assert.deepEqual(sw.checks.seeds, { min: 150, max: 224 }, "find-animal's dev variations");
  });

  it("mage pretrain --config warm-starts on the served environment end to end", {
    skip: NO_WORKER,
  }, async () => {
    const root = await tempDir();
    const base = join(root, "base");
    await saveTinyHf(base, { seed: 7, contextLength: 2048 });
    const file = join(root, "boxes.yaml");
    await writeFile(
      file,
      [
        "game: remote",
        `model: ${base}`,
        `out: ${join(root, "warm")}`,
        `env: {url: "${server!.url}", name: boxes, config: {boxes: 4}}`,
        "checks: {config: {boxes: 3}}",
        "settings: {steps: 1, corpusTrials: 4, evalTrials: 2, loraRank: 2, batchTokens: 4000, microBatchTokens: 2048}",
      ].join("\n"),
    );
    const { out, err } = await runPretrainCaptured(["--config", file, "--json"]);
    assert.equal(err, "", "--json: no progress lines");
    const report = JSON.parse(out) as TorchPretrainReport;
    assert.equal(report.game, "remote");
    assert.deepEqual(report.env?.config, { boxes: 4 });
    assert.equal(report.corpus.trials, 4);
    assert.equal(report.sft.steps, 1);
    const e = report.evaluation!;
    assert.equal(e.trials, 2);
    assert.equal(e.successAt?.length, 3);
    assert.deepEqual(Object.keys(e.byCategory ?? {}), ["boxes", "boxes/3"]);
    assert.ok(e.targets.some((t) => /well-formed/.test(t.name)));

    // --corpus-only plays the very corpus the warm start trained on, without the model.
    const preview = JSON.parse(
      (await runPretrainCaptured(["--config", file, "--json", "--corpus-only"])).out,
    ) as {
      corpus: TorchPretrainReport["corpus"];
    };
    for (const k of ["trials", "playResponses", "malformed", "reflections"] as const)
      assert.equal(preview.corpus[k], report.corpus[k], k);
  });
});
