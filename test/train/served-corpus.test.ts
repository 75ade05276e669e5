import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { extractTag } from "../../src/core/tags.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { readTrialLog } from "../../src/replay/read.js";
import type { TrialRecord } from "../../src/rollout/types.js";
import { openRemoteTask, type RemoteTaskDefinition } from "../../src/tasks/remote.js";
import type { AnswerChoices } from "../../src/train/pretrain/corpus.js";
import type { PretrainEvaluation } from "../../src/train/pretrain/evaluate.js";
import { CHECKS_TRANSCRIPTS_FILE } from "../../src/train/pretrain/served-checks.js";
import {
  loadServedPretrainConfig,
  openServedPretrain,
  ServedPretrainSchema,
} from "../../src/train/pretrain/served-config.js";
import {
  buildServedCorpus,
  checkExpertEnvironment,
  composeRemark,
  type ExpertCall,
  estimateTokens,
  stuckCommand,
} from "../../src/train/pretrain/served-corpus.js";
import { SERVED_TARGETS, servedTargetChecks } from "../../src/train/pretrain/served-targets.js";
import { sftLossFor, weightedExample } from "../../src/train/pretrain/sft.js";
import { resolveTorchSettings, type TorchPretrainReport } from "../../src/train/pretrain/torch-run.js";
import { splitWeights } from "../../src/train/pretrain/torch-sft.js";
import { trialUnlikelyTokens } from "../../src/train/pretrain/unlikely.js";
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

    // A corpus trial is one chat per prefix chain (reflection_only: one per attempt), so the facts
    // are checked per chat (its attempt's opened boxes) and across the corpus (what remarks stated).
    const stated = new Set<string>();
    for (const t of a.trials) {
      for (const at of attemptsOf(t.messages)) {
        if (at.remark === null) continue;
        // Every box a remark names was opened in that attempt: facts are what it saw.
        for (const m of at.remark.matchAll(/box (\d) (held|was)/g))
          assert.ok(at.opened.has(m[1]), `"${at.remark}" names box ${m[1]}, not opened`);
        for (const f of at.remark.match(/box \d (?:held a key 1|held no key|was empty)\./g) ?? [])
          stated.add(f);
      }
    }
    // The expert of a later attempt was given only facts the corpus's remarks stated.
    const later = calls.filter((c) => c.attempt > 0);
    assert.ok(later.some((c) => c.memory.length > 0));
    for (const c of later) for (const fact of c.memory) assert.ok(stated.has(fact), `${fact} was stated`);
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

  it("scoreRandomMoves false: the ε-random moves stay in the transcripts as unscored detours", async () => {
    const build = (scoreRandomMoves?: boolean) =>
      buildServedCorpus({
        def,
        trials: 12,
        rng: Rng.seeded(7),
        epsilon: 0.5,
        malformedRate: 0,
        ...(scoreRandomMoves === undefined ? {} : { scoreRandomMoves }),
      });
    const scored = await build();
    const detoured = await build(false);
    const kinds = (c: typeof scored) => c.trials.flatMap((t) => t.kinds);
    const count = (c: typeof scored, k: string) => kinds(c).filter((x) => x === k).length;
    const moves = detoured.stats.served.randomMoves ?? 0;
    assert.ok(moves > 0, "ε 0.5 plays random moves");
    assert.equal(detoured.stats.served.randomMovesScored, false);
    assert.equal(scored.stats.served.randomMovesScored, true);
    assert.equal(count(scored, "detour"), 0, "by default every accepted move is a target, as before");
    assert.ok(
      count(detoured, "detour") >= moves,
      "every accepted random move is a detour (in every chat that shows it)",
    );
    // The same corpus otherwise: the same transcripts, the detours moved out of the actions.
    assert.deepEqual(
      detoured.trials.map((t) => t.messages),
      scored.trials.map((t) => t.messages),
    );
    assert.equal(count(detoured, "action") + count(detoured, "detour"), count(scored, "action"));
    assert.equal(detoured.stats.served.actionAnswers, scored.stats.served.actionAnswers - moves);
    // Unscored in the SFT: a detour's span weighs 0.
    const spans = [
      { start: 1, end: 3 },
      { start: 3, end: 5 },
    ];
    const ex = weightedExample([1, 2, 3, 4, 5, 6], spans, ["detour", "action"], {
      contextLength: 8,
      actionWeight: 3,
    });
    assert.deepEqual([...ex.mask], [0, 0, 0, 3, 3, 0]);
  });

  it("the expert's avoid: its answers carry the answers it judged a waste, which the unlikelihood term pushes down", async () => {
    const corpus = await buildServedCorpus({
      def,
      trials: 8,
      rng: Rng.seeded(3),
      epsilon: 0,
      malformedRate: 0,
    });
    const look = "<action>look</action>";
    let expertAnswers = 0;
    for (const t of corpus.trials) {
      assert.equal(t.choices?.length, t.kinds.length);
      const answers = t.messages.filter((m) => m.role === "assistant");
      for (const [k, kind] of t.kinds.entries()) {
        const c: AnswerChoices | null = t.choices?.[k] ?? null;
        if (kind !== "action") {
          assert.equal(c, null);
          continue;
        }
        if (c === null) continue; // a stuck explorer's answer, not the expert's
        expertAnswers++;
        assert.deepEqual(c.illegal, [look]);
        assert.ok(c.legal.includes(answers[k].content) && !c.legal.includes(look), c.legal.join(" "));
      }
    }
    assert.ok(expertAnswers > 0);
    assert.ok((corpus.stats.served.wasted?.answers ?? 0) > 0);
    assert.equal(corpus.stats.served.wasted?.named, corpus.stats.served.wasted?.answers);
    // Token level: each expert answer gets its first token that differs from "look"'s pushed down.
    const chars = async (texts: readonly string[]) => texts.map((x) => [...x].map((ch) => ch.charCodeAt(0)));
    const trial = corpus.trials.find((t) => t.choices?.some((c) => c !== null))!;
    const texts = trial.messages.filter((m) => m.role === "assistant").map((m) => m.content);
    const ids: number[] = [];
    const spans = texts.map((x) => {
      const start = ids.length;
      ids.push(...[...x].map((ch) => ch.charCodeAt(0)));
      return { start, end: ids.length };
    });
    const at = await trialUnlikelyTokens("remote", trial, ids, spans, chars);
    const k = trial.choices!.findIndex((c) => c !== null);
    const offset = "<action>".length; // "<action>open box 2</action>" and "<action>look</action>" part here
    assert.deepEqual(at.get(spans[k].start + offset), ["l".charCodeAt(0)]);
    assert.equal(
      [...at.keys()].length,
      trial.choices!.filter((c) => c !== null).length,
      "one position per expert answer",
    );
    // Without choices, a served trial has no unlikely tokens.
    const { choices: _dropped, ...bare } = trial;
    assert.equal((await trialUnlikelyTokens("remote", bare, ids, spans, chars)).size, 0);
  });

  it("failedShare: that share of trials lose an exploring attempt 1 and reflect; the rest as before", async () => {
    const calls: ExpertCall[] = [];
    const build = (failedShare: number, seed = 4, onExpert?: (c: ExpertCall) => void) =>
      buildServedCorpus({
        def,
        trials: 16,
        rng: Rng.seeded(seed),
        epsilon: 0,
        malformedRate: 0,
        failedShare,
        remarkMaxTokens: 32,
        ...(onExpert ? { onExpert } : {}),
      });
    const none = (await build(0)).stats.served;
    assert.equal(none.explorerTrials, 0);
    assert.equal(none.stuckAnswers, 0);
    const a = await build(0.5, 4, (c) => calls.push(c));
    assert.deepEqual(a, await build(0.5), "the same seed gives the same corpus");
    const s = a.stats.served;
    assert.equal(s.failedShare, 0.5);
    assert.equal(s.explorerTrials, 8, "round(0.5 · 16) trials");
    assert.equal(s.explorerLost, 8, "every exploring attempt 1 is lost");
    assert.ok(s.failedTrialShare >= 0.5, `${s.failedTrialShare} of the trials hold a failed attempt`);
    assert.equal(s.failedTrials, a.stats.reflections > 0 ? s.failedTrials : 0);
    assert.ok(s.stuckAnswers > 0, "explorers that stop short are stuck until the turns run out");
    assert.ok(s.stuckAnswers <= a.stats.malformed, "stuck answers are invalid, so unscored");
    assert.ok(s.lostFirst >= s.explorerTrials && s.wonSecondAfterLostFirst > 0);
    assert.ok(s.actionAnswers > 0 && s.remarkToAction > none.remarkToAction, "more remarks per action");
    assert.equal(s.remarkTokens.cap, 32);
    assert.equal(s.remarkTokens.overCap, 0);
    assert.ok(s.remarkTokens.max <= 32 && s.remarkTokens.mean > 0);
    // Exploring attempts ask the expert with no memory; later attempts get the stated facts.
    for (const c of calls.filter((x) => x.attempt === 0)) assert.deepEqual(c.memory, []);
    for (const t of a.trials)
      for (const m of t.messages)
        if (m.role === "assistant" && m.content.startsWith("<remark>"))
          assert.ok(estimateTokens(m.content) <= 32, m.content);
    await assert.rejects(
      buildServedCorpus({ def, trials: 1, rng: Rng.seeded(1), failedShare: 2 }),
      /failedShare must be in \[0, 1\]/,
    );
    await assert.rejects(
      buildServedCorpus({ def, trials: 1, rng: Rng.seeded(1), remarkMaxTokens: 8 }),
      /remarkMaxTokens must be an integer >= 24/,
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
    // The served checks' three targets, each met or missed, with the config's defaults.
    assert.deepEqual(e.targets.map((t) => t.threshold).slice(0, 2), [0.95, 0.9]);
    assert.match(e.targets[0].name, /play answers admissible/);
    assert.match(e.targets[1].name, /remarks informative/);
    assert.match(e.targets[2].name, /attempt 2 won after a lost attempt 1/);
    // The corpus's teaching counts are stored, the remarks measured in the model's template too.
    assert.equal(report.settings.remarkWeight, 4);
    assert.equal(report.corpus.served?.explorerTrials, 2, "failedShare 0.5 of 4 trials");
    assert.equal(report.corpus.served?.templateRemarkTokens !== undefined, true);
    // Every check trial's play is kept beside the report, in the form `mage replay FILE --remarks` reads.
    const checks = readTrialLog(join(root, "warm", CHECKS_TRANSCRIPTS_FILE));
    assert.equal(checks.records.length, 2, "evalTrials 2");
    assert.ok(checks.records.every((t) => t.attempts.length >= 1 && t.attempts.length <= 3));
    assert.ok(checks.records.every((t) => (t.memory?.attempts.length ?? 0) === t.attempts.length));

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

describe("served corpus reflections, stuck answers, remark weights and check targets", () => {
  it("a remark leads with the environment's first facts and stays under the token cap", () => {
    const facts = [
      "The coin was not in the kitchen or the pantry.",
      "Not tried: the corridor's north door and the kitchen's east exit and the bedroom's west door.",
      "The kitchen's east exit leads to the corridor.",
      "<action>move north</action>",
    ];
    const r = composeRemark(facts, { maxFacts: 4, maxTokens: 48 }, Rng.seeded(1));
    assert.equal(r.stated[0], facts[0], "the first fact leads");
    assert.ok(!r.stated.includes(facts[1]), "a fact past the cap is skipped");
    assert.ok(r.stated.includes(facts[2]), "for a later, shorter one");
    assert.ok(!r.text.includes("<action>"), "never another tag");
    assert.ok(estimateTokens(r.text) <= 48);
    assert.equal(r.text, `<remark>${r.stated.join(" ")}</remark>`, "the facts and nothing else");
    assert.equal(composeRemark(facts, { maxFacts: 1, maxTokens: 48 }, Rng.seeded(1)).stated.length, 1);
    const empty = composeRemark([], { maxFacts: 3, maxTokens: 48 }, Rng.seeded(1));
    assert.deepEqual(empty.stated, []);
    assert.match(empty.text, /^<remark>.*nothing.*<\/remark>$/);
  });

  it("estimateTokens counts no fewer tokens than SmolLM2's tokenizer on the corpora's remarks", () => {
    // Counted with models/smollm2-135m-instruct's tokenizer (no special tokens).
    const measured: [string, number][] = [
      ["<remark>The coin was in the kitchen. The kitchen's east exit leads to the corridor.</remark>", 25],
      [
        "<remark>The coin was not in the kitchen or the pantry. Not tried: the kitchen's south exit.</remark>",
        28,
      ],
      [
        "<remark>The coin was not in the kitchen, the corridor or the bedroom. Not tried: the kitchen's west door.</remark>",
        31,
      ],
      [
        "<remark>sidetable 1 held no cellphone. sidetable 2 held no cellphone. drawer 1 held no cellphone.</remark>",
        33,
      ],
      ["<remark>countertop 1 held a mug 1. cabinet 3 was empty.</remark>", 25],
    ];
    for (const [text, smol] of measured)
      assert.ok(estimateTokens(text) >= smol, `${text}: ${estimateTokens(text)}`);
  });

  it("a stuck answer is a command the game does not accept now: a stale one first", () => {
    const legal = ["move north", "open door to east", "look around"];
    const seen = new Set([...legal, "move south", "take coin"]);
    for (let i = 0; i < 20; i++) {
      const c = stuckCommand(legal, seen, Rng.seeded(i));
      assert.ok(["move south", "take coin"].includes(c), c);
    }
    for (let i = 0; i < 20; i++) {
      const c = stuckCommand(legal, new Set(legal), Rng.seeded(i));
      assert.ok(!legal.includes(c) && c.length > 0, c);
    }
  });

  it("remarkWeight weighs the reflections' tokens in the loss the worker and the embedded model take", () => {
    // A trial of 10 tokens: an action (2-4), a malformed answer (5-6), a reflection (7-9).
    const ids = Array.from({ length: 10 }, (_, i) => i + 1);
    const spans = [
      { start: 2, end: 4 },
      { start: 5, end: 6 },
      { start: 7, end: 9 },
    ];
    const kinds = ["action", "malformed", "reflection"] as const;
    const plain = weightedExample(ids, spans, kinds, { contextLength: 64 });
    const heavy = weightedExample(ids, spans, kinds, { contextLength: 64, remarkWeight: 4, actionWeight: 2 });
    assert.deepEqual([...plain.mask], [0, 0, 1, 1, 0, 0, 0, 1, 1, 0]);
    assert.deepEqual([...heavy.mask], [0, 0, 2, 2, 0, 0, 0, 4, 4, 0]);
    assert.throws(
      () => weightedExample(ids, spans, kinds, { contextLength: 64, remarkWeight: 0 }),
      /remarkWeight/,
    );
    // The torch worker gets the weights as its `weights` array, one per scored token.
    const sequences = [Int32Array.from(ids)];
    assert.deepEqual(
      [...splitWeights({ sequences, lossMask: [heavy.mask], unlikely: [undefined] }).weights],
      [2, 2, 4, 4],
    );
    // The loss: Σ w·(−log p) / Σ w over the scored tokens (the worker's `sft` computes the same, python/tests/test_sft.py).
    const logp = Float64Array.from([-1, -1, -3, -3]);
    const loss = (mask: Uint8Array) =>
      sftLossFor({ sequences, lossMask: [mask] })({ logp, entropy: new Float64Array(4) } as never).loss;
    assert.ok(Math.abs(loss(plain.mask) - 2) < 1e-12, "equal weights: the mean, 2");
    assert.ok(Math.abs(loss(heavy.mask) - (2 * 1 * 2 + 4 * 3 * 2) / 12) < 1e-12, "remarks 4, actions 2: 7/3");
  });

  it("--remark-weight: every torch warm start may set it; served ones default to 4, the others to none (1)", () => {
    assert.equal(resolveTorchSettings("remote", {}).remarkWeight, 4);
    assert.equal(resolveTorchSettings("remote", {}).failedShare, 0.5);
    assert.equal(resolveTorchSettings("remote", {}).remarkMaxTokens, 48);
    assert.equal(resolveTorchSettings("kuhn", {}).remarkWeight, undefined);
    assert.equal(resolveTorchSettings("kuhn", { remarkWeight: 3 }).remarkWeight, 3);
    assert.throws(() => resolveTorchSettings("kuhn", { failedShare: 0.5 }), /served environments/);
    assert.throws(() => resolveTorchSettings("remote", { remarkWeight: 0 }), /--remark-weight/);
  });

  it("the served checks write each target met or missed: admissible, informative, attempt 2 after a lost attempt 1", () => {
    const attempt = (won: boolean) => ({
      won,
      draw: false,
      score: 0,
      reward: 0,
      turns: 1,
      invalidActions: 0,
      finished: true,
    });
    const rec = (...won: boolean[]) => ({ attempts: won.map(attempt) }) as unknown as TrialRecord;
    // Attempt 1 won in 2 of 4 trials (50%); of the 2 lost, 1 was won at attempt 2 (50%): met at margin 0.
    const records = [rec(true, true), rec(true, true), rec(false, true), rec(false, false)];
    const e = { playValidRate: 0.96, remarkValidRate: 0.8 } as PretrainEvaluation;
    const [play, remarks, recovery] = servedTargetChecks(e, records, SERVED_TARGETS);
    assert.deepEqual([play.met, play.threshold], [true, 0.95]);
    assert.deepEqual([remarks.met, remarks.value, remarks.threshold], [false, 0.8, 0.9]);
    assert.match(remarks.name, /not judged here: valid <remark>/);
    assert.deepEqual([recovery.met, recovery.value, recovery.threshold], [true, 0.5, 0.5]);
    assert.match(recovery.name, /1\/2/);
    const stricter = servedTargetChecks(e, records, { ...SERVED_TARGETS, recoveryMargin: 0.1 })[2];
    assert.equal(stricter.met, false);
    // The hook: an informative judge's rate, where the evaluation has one, replaces the valid rate.
    const judged = { ...e, remarkInformativeRate: 0.92 } as PretrainEvaluation;
    const withJudge = servedTargetChecks(judged, records)[1];
    assert.deepEqual([withJudge.name, withJudge.value, withJudge.met], ["remarks informative", 0.92, true]);
    assert.equal(
      servedTargetChecks(e, [rec(true, true)])[2].met,
      true,
      "no attempt 1 lost: nothing to recover",
    );
  });
});
