import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { command } from "../../src/cli/commands/diversity.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { saveCheckpoint } from "../../src/model/checkpoint.js";
import { presetConfig } from "../../src/model/config.js";
import { initParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";
import { runCommand } from "./run-command.js";

const runDiversity = (argv: string[]) => runCommand(command, argv);

describe("mage diversity", () => {
  let root = "";
  let ckpt = "";
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "mage-diversity-"));
    ckpt = join(root, "tiny");
    const tok = byteTokenizer();
    const config = presetConfig("tiny", {
      vocabSize: tok.vocabSize,
      dModel: 32,
      nHeads: 2,
      nLayers: 1,
      dFf: 64,
      contextLength: 1024,
    });
    await saveCheckpoint(ckpt, {
      config,
      params: paramsToMap(initParams(config, Rng.seeded(7))),
      tokenizer: tok,
    });
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("measures an embedded checkpoint, prints the JSON and writes the same JSON atomically", async () => {
    const file = join(root, "out", "kuhn.json");
    const args = [
      "--checkpoint",
      ckpt,
      "--game",
      "kuhn",
      "--samples",
      "2",
      "--max-tokens",
      "4",
      "--seed",
      "3",
    ];
    const res = await runDiversity([...args, "--out", file, "--json"]);
    assert.equal(res.code, 0);
    const printed = JSON.parse(res.out);
    const written = JSON.parse(await readFile(file, "utf8"));
    assert.deepEqual(printed, written);
    assert.equal(written.format, "mage-diversity-v1");
    assert.equal(written.policy, ckpt);
    assert.equal(written.game, "kuhn");
    assert.equal(written.opponent, "cfr");
    assert.equal(written.samples, 2);
    assert.equal(written.seed, 3);
    assert.deepEqual(written.sampling, { temperature: 1, topP: 1, topK: 0, maxTokens: 4, stop: [] });
    assert.equal(written.cells.length, 6);
    for (const c of written.cells) {
      assert.ok(["first", "second"].includes(c.seat));
      assert.ok(["J", "Q", "K"].includes(c.card));
      assert.equal(c.samples, 2);
      assert.equal(
        Object.values(c.distribution as Record<string, number>).reduce((a, b) => a + b, 0),
        2,
      );
      assert.equal(typeof c.entropyBits, "number");
      assert.equal(typeof c.firstActionEntropyBits, "number");
      assert.ok(c.entropyBits >= 0 && c.entropyBits <= 1, "two samples hold at most one bit");
    }
    assert.deepEqual(Object.keys(written.summary.bySeat).sort(), ["first", "second"]);
    assert.equal(typeof written.summary.meanEntropyBits, "number");

    // Same checkpoint, seed and options: the same file, byte for byte; the table names the summary.
    const again = join(root, "out", "again.json");
    const table = await runDiversity([...args, "--out", again]);
    assert.equal(table.code, 0);
    assert.equal(await readFile(again, "utf8"), await readFile(file, "utf8"));
    assert.match(table.out, /mean H\(seq\)/);
    assert.match(table.out, /second +K/);
  });

  it("rejects bad flags with a UsageError naming the flag and the valid values", async () => {
    const base = ["--policy", `checkpoint:${join(root, "missing")}`];
    await assert.rejects(runDiversity([...base, "--game", "chess"]), (e: unknown) => {
      assert.ok(e instanceof UsageError);
      assert.match(e.message, /--game "chess"/);
      assert.match(e.message, /kuhn, tictactoe/);
      return true;
    });
    for (const bad of ["0", "-3", "2.5", "many"]) {
      await assert.rejects(runDiversity([...base, "--game", "kuhn", `--samples=${bad}`]), (e: unknown) => {
        assert.ok(e instanceof UsageError);
        assert.match(e.message, /--samples must be a positive integer/);
        return true;
      });
    }
    await assert.rejects(runDiversity(["--game", "kuhn"]), /--checkpoint DIR or --policy SPEC/);
    await assert.rejects(
      runDiversity([...base, "--game", "kuhn", "--opponent", "shark"]),
      /shark.*valid specs/,
    );
    await assert.rejects(runDiversity([...base, "--game", "kuhn", "--temperature", "hot"]), /--temperature/);
  });

  it("exits with code 2 from the mage command line", () => {
    const cli = (args: string[]) =>
      spawnSync(process.execPath, ["--import", "tsx", "src/cli/main.ts", "diversity", ...args], {
        encoding: "utf8",
      });
    const badGame = cli(["--policy", "checkpoint:nowhere", "--game", "go"]);
    assert.equal(badGame.status, 2, badGame.stderr);
    assert.match(badGame.stderr, /--game "go"; valid choices: kuhn, tictactoe/);
    const badSamples = cli(["--policy", "checkpoint:nowhere", "--game", "tictactoe", "--samples", "0"]);
    assert.equal(badSamples.status, 2, badSamples.stderr);
    assert.match(badSamples.stderr, /--samples/);
  });
});
