import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command } from "../../src/cli/commands/eval.js";
import { Rng } from "../../src/core/rng.js";
import { saveCheckpoint } from "../../src/model/checkpoint.js";
import { presetConfig } from "../../src/model/config.js";
import { initParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";

async function evalLines(argv: string[]): Promise<string> {
  const out: string[] = [];
  const log = console.log;
  console.log = (...a: unknown[]) => out.push(a.join(" "));
  try {
    assert.equal(await command.run(argv), 0);
    return out.join("\n");
  } finally {
    console.log = log;
  }
}

describe("mage eval", () => {
  it("labels an opponent seen when the checkpoint trained against it, unseen otherwise", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mage-eval-seen-"));
    try {
      const tok = byteTokenizer();
      const model = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 256, nLayers: 1 });
      const checkpoint = join(dir, "ck");
      await saveCheckpoint(checkpoint, {
        config: model,
        params: paramsToMap(initParams(model, Rng.seeded(1))),
        tokenizer: tok,
        meta: { game: "kuhn", trainingOpponents: ["aggressive", "conservative"] },
      });
      const out = await evalLines([
        ...["--checkpoint", checkpoint, "--opponent", "aggressive,cfr", "--seat", "second"],
        ...["--trials", "2", "--attempts", "1", "--max-tokens", "4", "--out", join(dir, "t.jsonl")],
      ]);
      assert.match(out, /^aggressive \(agent second, seen\)/m);
      assert.match(out, /^cfr \(agent second, unseen\)/m);

      // A checkpoint written before the pool was recorded: its run directory's config.yaml says.
      const older = join(dir, "run", "checkpoints", "iter-000001");
      await saveCheckpoint(older, {
        config: model,
        params: paramsToMap(initParams(model, Rng.seeded(1))),
        tokenizer: tok,
        meta: { game: "kuhn" },
      });
      await writeFile(
        join(dir, "run", "config.yaml"),
        "game: kuhn\npopulation:\n  opponents:\n    - { spec: conservative }\n",
      );
      const fromRun = await evalLines([
        ...["--checkpoint", older, "--opponent", "conservative,aggressive", "--seat", "first"],
        ...["--trials", "1", "--attempts", "1", "--max-tokens", "4", "--out", join(dir, "u.jsonl")],
      ]);
      assert.match(fromRun, /^conservative \(agent first, seen\)/m);
      assert.match(fromRun, /^aggressive \(agent first, unseen\)/m);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
