import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command } from "../../src/cli/commands/eval.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";
import { runCommand } from "./run-command.js";

async function evalLines(argv: string[]): Promise<string> {
  const r = await runCommand(command, argv);
  assert.equal(r.code, 0);
  return r.out;
}

describe("mage eval", () => {
  it("labels an opponent seen when the checkpoint trained against it, unseen otherwise", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mage-eval-seen-"));
    try {
      const checkpoint = join(dir, "ck");
      await saveRandomCheckpoint(checkpoint, {
        contextLength: 256,
        seed: 1,
        meta: { game: "kuhn", trainingOpponents: ["aggressive", "conservative"] },
      });
      const out = await evalLines([
        ...["--checkpoint", checkpoint, "--opponent", "aggressive,cfr", "--seat", "second"],
        ...["--trials", "2", "--attempts", "1", "--max-tokens", "4", "--out", join(dir, "t.jsonl")],
      ]);
      assert.match(out, /^aggressive \(agent second, seen\)/m);
      assert.match(out, /^cfr \(agent second, unseen\)/m);

      const args = (file: string) => [
        ...["--opponent", "aggressive,cfr", "--seat", "second", "--trials", "1", "--attempts", "1"],
        ...["--max-tokens", "4", "--out", join(dir, file)],
      ];
      const viaPolicy = await evalLines(["--policy", `checkpoint:${checkpoint}`, ...args("p.jsonl")]);
      assert.match(
        viaPolicy,
        /^aggressive \(agent second, seen\)/m,
        "--policy checkpoint:DIR reads the pool too",
      );
      // --seen says what the policy trained against (the only way for a served or GGUF model) and wins.
      const declared = await evalLines(["--checkpoint", checkpoint, "--seen", "cfr", ...args("s.jsonl")]);
      assert.match(declared, /^aggressive \(agent second, unseen\)/m);
      assert.match(declared, /^cfr \(agent second, seen\)/m);
      const none = await evalLines(["--checkpoint", checkpoint, "--seen", "none", ...args("n.jsonl")]);
      assert.match(none, /^aggressive \(agent second, unseen\)/m);
      await assert.rejects(
        runCommand(command, ["--checkpoint", checkpoint, "--seen", "sharks", ...args("x.jsonl")]),
        /sharks/,
      );
      await assert.rejects(
        runCommand(command, ["--checkpoint", checkpoint, "--seen", ",", ...args("y.jsonl")]),
        /--seen needs opponent specs/,
      );

      // A checkpoint written before the pool was recorded: its run directory's config.yaml says.
      const older = join(dir, "run", "checkpoints", "iter-000001");
      await saveRandomCheckpoint(older, { contextLength: 256, seed: 1, meta: { game: "kuhn" } });
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
