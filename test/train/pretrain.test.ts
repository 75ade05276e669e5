import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { command as pretrainCommand } from "../../src/cli/commands/pretrain.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { extractTag } from "../../src/core/tags.js";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { paramsFromMap, paramsToMap } from "../../src/model/params-io.js";
import { trainTokenizer } from "../../src/model/tokenizer.js";
import { EmbeddedPolicy } from "../../src/policy/embedded.js";
import { TRAIN_SAMPLING } from "../../src/policy/types.js";
import {
  buildCorpus,
  type Corpus,
  corpusTexts,
  malformedKinds,
  unskilledBehaviour,
} from "../../src/train/pretrain/corpus.js";
import { PRETRAIN_DEFAULTS, REPORT_FILE, runPretrain } from "../../src/train/pretrain/run.js";
import { encodeTrial } from "../../src/train/pretrain/sft.js";

const STRATEGY_WORDS = /\b(should|better|best|optimal|instead|next time|mistake|always|never)\b/i;

function assistantTexts(c: Corpus, kind: string): string[] {
  const out: string[] = [];
  for (const t of c.trials) {
    const a = t.messages.filter((m) => m.role === "assistant");
    t.kinds.forEach((k, i) => {
      if (k === kind) out.push(a[i].content);
    });
  }
  return out;
}

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("pretrain corpus", () => {
  it("plays only legal moves when nothing is malformed (the legal moves are read correctly)", async () => {
    for (const game of ["tictactoe", "minesweeper", "kuhn", "sokoban"]) {
      const c = await buildCorpus({ game, trials: 40, rng: Rng.seeded(1), malformedRate: 0 });
      assert.equal(c.stats.malformed, 0, `${game}: a random legal move was rejected`);
      assert.ok(c.stats.playResponses >= 40, game);
      for (const a of assistantTexts(c, "action")) assert.match(a, /^<action>[^<>]+<\/action>$/, game);
    }
  });

  it("writes malformed answers the tasks reject, of varied kinds", async () => {
    for (const game of ["kuhn", "tictactoe", "sokoban", "minesweeper"]) {
      const c = await buildCorpus({ game, trials: 12, rng: Rng.seeded(2), malformedRate: 1, attempts: 1 });
      assert.ok(c.stats.playResponses > 0);
      assert.equal(
        c.stats.malformed,
        c.stats.playResponses,
        `${game}: a deliberately malformed answer was accepted`,
      );
      const shapes = new Set(
        assistantTexts(c, "malformed").map((a) =>
          !a.includes("<action>") ? "no-tags" : !a.includes("</action>") ? "unclosed" : "tagged",
        ),
      );
      assert.deepEqual([...shapes].sort(), ["no-tags", "tagged", "unclosed"], game);
      assert.ok(malformedKinds(game).length >= 4, game);
    }
  });

  it("has about 2% malformed play answers by default", async () => {
    const c = await buildCorpus({ game: "tictactoe", trials: 150, rng: Rng.seeded(3) });
    const share = c.stats.malformed / c.stats.playResponses;
    assert.ok(c.stats.playResponses > 900, `only ${c.stats.playResponses} play answers`);
    // Binomial(≈1000, 0.02): sd ≈ 0.45 points; [0.8%, 3.6%] is beyond 2.5 sd either side.
    assert.ok(share > 0.008 && share < 0.036, `malformed share ${share}`);
  });

  it("reflects with a remark that describes the attempt (card, moves, result), never strategy", async () => {
    const c = await buildCorpus({ game: "kuhn", trials: 80, rng: Rng.seeded(4) });
    assert.ok(c.stats.reflections > 40);
    for (const t of c.trials) {
      const msgs = t.messages;
      for (let i = 0; i < msgs.length; i++) {
        if (msgs[i].role !== "assistant" || !msgs[i - 1].content.includes("Reflect:")) continue;
        const r = extractTag(msgs[i].content, "remark");
        assert.ok(r.ok && r.content.length > 0, msgs[i].content);
        if (!r.ok) continue;
        assert.match(msgs[i].content, /^<remark>[^<>]+<\/remark>$/);
        assert.doesNotMatch(r.content, STRATEGY_WORDS);
        // The card held in this attempt and how it ended.
        let lead = "";
        for (let j = i - 1; j >= 0; j--) {
          if (msgs[j].role === "user" && /^Attempt \d+\.$/m.test(msgs[j].content)) {
            lead = msgs[j].content;
            break;
          }
        }
        const card = /Card: ([JQK])\./.exec(lead)?.[1];
        assert.ok(card && r.content.includes(card), `${r.content} lacks card ${card}`);
        const outcome = /(Won \+\d|Lost -\d)\./.exec(msgs[i - 1].content)?.[0];
        assert.ok(outcome && r.content.includes(outcome), `${r.content} lacks ${outcome}`);
      }
    }
  });

  it("TicTacToe remarks name cells that were played and the result", async () => {
    const c = await buildCorpus({ game: "tictactoe", trials: 40, rng: Rng.seeded(5) });
    let n = 0;
    for (const t of c.trials) {
      const msgs = t.messages;
      for (let i = 1; i < msgs.length; i++) {
        if (msgs[i].role !== "assistant" || !msgs[i - 1].content.includes("Reflect:")) continue;
        n++;
        const r = extractTag(msgs[i].content, "remark");
        assert.ok(r.ok);
        if (!r.ok) continue;
        assert.doesNotMatch(r.content, STRATEGY_WORDS);
        assert.match(r.content, /(Won|Lost|Draw|Out of turns)\./);
        const cells = r.content.match(/\(\d, \d\)/g) ?? [];
        const before = msgs
          .slice(0, i)
          .map((m) => m.content)
          .join("\n");
        for (const cell of cells) assert.ok(before.includes(cell), `${cell} was never played`);
      }
    }
    assert.ok(n > 20);
  });

  it("with tacticalRate 1 the TicTacToe player takes a one-move win, else blocks, else plays at random", () => {
    const ask = (board: string, tacticalRate: number, seed: number) => {
      const messages = [{ role: "user" as const, content: `Attempt 1.\n${board}\nYour move?` }];
      const behaviour = unskilledBehaviour("tictactoe", { malformedRate: 0, tacticalRate });
      return extractTag(behaviour.play(messages, Rng.seeded(seed)), "action");
    };
    const winOrBlock = "X X 13\nO O 23\n31 32 33"; // X wins at (1, 3); O threatens (2, 3)
    const quietBoard = "X 12 13\n21 O 23\n31 32 O"; // O's diagonal is blocked; nothing to take
    const threat = "X 12 13\n21 O 23\n31 O 33"; // O threatens (1, 2)
    const seen = {
      win: new Set<string>(),
      block: new Set<string>(),
      quiet: new Set<string>(),
      off: new Set<string>(),
    };
    for (let seed = 0; seed < 40; seed++) {
      const win = ask(winOrBlock, 1, seed);
      const block = ask(threat, 1, seed);
      const quiet = ask(quietBoard, 1, seed);
      const off = ask(threat, 0, seed);
      for (const [k, t] of [
        ["win", win],
        ["block", block],
        ["quiet", quiet],
        ["off", off],
      ] as const) {
        assert.ok(t.ok);
        if (t.ok) seen[k].add(t.content);
      }
    }
    assert.deepEqual([...seen.win], ["(1, 3)"], "a win goes before a block");
    assert.deepEqual([...seen.block], ["(1, 2)"]);
    assert.ok(seen.quiet.size > 3, "no win or threat: random legal moves");
    assert.ok(seen.off.size > 3, "tacticalRate 0: random legal moves");
    assert.throws(() => unskilledBehaviour("tictactoe", { tacticalRate: 1.5 }), /tacticalRate/);
  });

  it("is deterministic for a seed and changes with it", async () => {
    const a = await buildCorpus({ game: "kuhn", trials: 30, rng: Rng.seeded(9) });
    const b = await buildCorpus({ game: "kuhn", trials: 30, rng: Rng.seeded(9) });
    const c = await buildCorpus({ game: "kuhn", trials: 30, rng: Rng.seeded(10) });
    assert.deepEqual(a, b);
    assert.notDeepEqual(a.trials, c.trials);
    const opponents = new Set(a.trials.map((t) => t.opponent));
    assert.deepEqual([...opponents].sort(), ["aggressive", "conservative", "intermediate"]);
    assert.deepEqual([...new Set(a.trials.map((t) => t.seat))].sort(), ["first", "second"]);
  });

  it("scores assistant tokens only, and not the malformed answers", async () => {
    const c = await buildCorpus({ game: "tictactoe", trials: 20, rng: Rng.seeded(6), malformedRate: 0.3 });
    const tok = trainTokenizer(corpusTexts(c), { vocabSize: 600 });
    const end = tok.endId;
    for (const t of c.trials) {
      const e = encodeTrial(tok, t, { contextLength: 1024 });
      const text = tok.decode(Array.from(e.ids).filter((_, i) => e.mask[i] === 1 && e.ids[i] !== end));
      const want = t.messages
        .filter((m) => m.role === "assistant")
        .filter((_, i) => t.kinds[i] !== "malformed")
        .map((m) => m.content)
        .join("");
      assert.equal(text, want);
      const all = encodeTrial(tok, t, { contextLength: 1024, trainOnMalformed: true });
      assert.ok(all.scored >= e.scored);
      if (t.kinds.includes("malformed")) assert.ok(all.scored > e.scored);
    }
  });

  it("with contextLoss scores the prompts and feedback too, but still not the malformed answers", async () => {
    const c = await buildCorpus({ game: "tictactoe", trials: 20, rng: Rng.seeded(6), malformedRate: 0.3 });
    const tok = trainTokenizer(corpusTexts(c), { vocabSize: 600 });
    let sawMalformed = false;
    for (const t of c.trials) {
      const answers = encodeTrial(tok, t, { contextLength: 1024 });
      const e = encodeTrial(tok, t, { contextLength: 1024, contextLoss: true });
      assert.equal(e.mask[0], 0, "the first token has no prediction");
      // every answer token stays scored
      for (let i = 0; i < e.mask.length; i++) if (answers.mask[i]) assert.equal(e.mask[i], 1);
      const unscored = tok.decode(Array.from(e.ids).filter((_, i) => i > 0 && e.mask[i] === 0));
      const malformed = t.messages
        .filter((m) => m.role === "assistant")
        .filter((_, i) => t.kinds[i] === "malformed")
        .map((m) => m.content);
      // what is left unscored is exactly the malformed answers (each with its end token)
      assert.equal(unscored.replaceAll("<|end|>", ""), malformed.join(""));
      const boards = t.messages.filter((m) => m.role === "user").map((m) => m.content);
      assert.ok(e.scored > answers.scored + boards.length, "the user messages are scored");
      if (malformed.length > 0) sawMalformed = true;
    }
    assert.ok(sawMalformed);
  });

  it("weighs the play answers' tokens by actionWeight, remarks and context by 1, malformed answers by 0", async () => {
    const c = await buildCorpus({ game: "tictactoe", trials: 10, rng: Rng.seeded(8), malformedRate: 0.3 });
    const tok = trainTokenizer(corpusTexts(c), { vocabSize: 600 });
    const textOf = (e: { ids: Int32Array; mask: Uint8Array }, w: number) =>
      tok.decode(Array.from(e.ids).filter((id, i) => e.mask[i] === w && id !== tok.endId));
    for (const t of c.trials) {
      const e = encodeTrial(tok, t, { contextLength: 1024, contextLoss: true, actionWeight: 4 });
      const assistant = t.messages.filter((m) => m.role === "assistant");
      const ofKind = (k: string) =>
        assistant
          .filter((_, i) => t.kinds[i] === k)
          .map((m) => m.content)
          .join("");
      assert.equal(textOf(e, 4), ofKind("action"));
      assert.ok(textOf(e, 1).includes(ofKind("reflection").slice(0, 20)));
      assert.equal(
        e.scored,
        encodeTrial(tok, t, { contextLength: 1024, contextLoss: true }).scored,
        "weights change no token's scored status",
      );
    }
    const t = c.trials[0];
    assert.throws(() => encodeTrial(tok, t, { contextLength: 1024, actionWeight: 0 }), /actionWeight/);
    assert.throws(() => encodeTrial(tok, t, { contextLength: 1024, actionWeight: 256 }), /actionWeight/);
  });
});

describe("mage pretrain", () => {
  it("runs end to end on a tiny budget: the loss drops, the checkpoint loads and generates", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mage-pretrain-"));
    dirs.push(dir);
    const out = join(dir, "ck");
    const logged: string[] = [];
    const report = await runPretrain({
      game: "kuhn",
      out,
      seed: 1,
      steps: 16,
      warmupSteps: 2,
      corpusTrials: 60,
      evalTrials: 4,
      batchTokens: 1024,
      progress: { isTTY: false, write: (s: string) => logged.push(s) } as unknown as NodeJS.WriteStream,
    });
    assert.ok(report.sft.lateMeanLoss < report.sft.earlyMeanLoss * 0.7, JSON.stringify(report.sft));
    // The corpus line says how often the scripted player won.
    const corpusLine = logged.find((l) => l.includes("corpus of")) ?? "";
    const won = ((100 * (report.corpus.won ?? 0)) / report.corpus.trials).toFixed(1);
    const first = ((100 * (report.corpus.wonFirst ?? 0)) / report.corpus.trials).toFixed(1);
    assert.ok(corpusLine.includes(`won ${won}% (${first}% at attempt 1)`), `corpus line: ${corpusLine}`);
    assert.ok(report.evaluation && report.evaluation.playAnswers > 0);
    assert.equal(report.evaluation?.targets.length, 4);
    const onDisk = JSON.parse(readFileSync(join(out, REPORT_FILE), "utf8"));
    assert.equal(onDisk.sft.steps, 16);
    // the recorded settings are the recipe's, with the overrides, and nothing of the run options
    assert.deepEqual(Object.keys(onDisk.settings).sort(), Object.keys(PRETRAIN_DEFAULTS.kuhn).sort());
    assert.equal(onDisk.settings.steps, 16);
    assert.equal(onDisk.settings.shards, 2);
    assert.equal(onDisk.kernels, report.kernels);

    const ck = await loadCheckpoint(out);
    assert.equal(ck.preset, "tiny");
    assert.equal(ck.meta.kernel, report.kernels);
    assert.equal(ck.tokenizer.vocabSize, ck.config.vocabSize);
    const params = paramsFromMap(ck.config, ck.params);
    const policy = new EmbeddedPolicy({ params, tokenizer: ck.tokenizer });
    const [gen] = await policy.generate([
      {
        messages: [
          { role: "system", content: "Kuhn poker. You act first." },
          { role: "user", content: "Attempt 1.\nCard: K. You act first.\nYour move?" },
        ],
        sampling: { ...TRAIN_SAMPLING, maxTokens: 16 },
        seed: 3,
      },
    ]);
    assert.ok(gen.tokenIds.length > 0 && gen.tokenIds.length <= 16);
    assert.equal(gen.logprobs.length, gen.tokenIds.length);
    assert.ok(paramsToMap(params).size > 0);
  });

  it("rejects bad input with the valid choices", async () => {
    await assert.rejects(pretrainCommand.run(["--game", "chess"]), (e: unknown) => {
      assert.ok(e instanceof UsageError);
      assert.match(e.message, /valid choices: kuhn, tictactoe, sokoban, minesweeper/);
      return true;
    });
    await assert.rejects(
      pretrainCommand.run(["--game", "kuhn", "--preset", "huge"]),
      /valid choices: tiny, small, base/,
    );
    await assert.rejects(
      pretrainCommand.run(["--game", "kuhn", "--kernels", "gpu"]),
      /valid choices: auto, js, wasm, native/,
    );
    await assert.rejects(pretrainCommand.run(["--game", "kuhn", "--steps", "0"]), UsageError);
    await assert.rejects(pretrainCommand.run(["--game", "kuhn", "--init-std", "-1"]), /init-std/);
    await assert.rejects(pretrainCommand.run([]), /--game is required/);
    assert.ok(!existsSync("runs/pretrain-chess"));
  });
});
