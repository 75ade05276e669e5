import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command } from "../../src/cli/commands/eval.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";
import { runCommand } from "./run-command.js";

describe("mage eval --model DIR (a Hugging Face directory through the PyTorch worker)", () => {
  it("refuses two model sources, and --threads without --model", async () => {
    await assert.rejects(
      runCommand(command, ["--model", "m", "--policy", "gguf:x.gguf", "--opponent", "cfr"]),
      /exactly one of --checkpoint DIR, --policy SPEC or --model DIR/,
    );
    await assert.rejects(
      runCommand(command, ["--policy", "gguf:x.gguf", "--threads", "1", "--opponent", "cfr"]),
      /--threads goes with --model DIR/,
    );
  });

  it("plays a warm start's game with its compact prompts and 48-token replies", {
    skip: NO_WORKER,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "mage-eval-model-"));
    try {
      const model = join(dir, "warm");
      await saveTinyHf(model, { seed: 3 });
      // A warm start of `mage pretrain --backend torch` records its game in pretrain-report.json.
      await writeFile(
        join(model, "pretrain-report.json"),
        JSON.stringify({ backend: "torch", game: "kuhn" }),
      );
      const out = join(dir, "t.jsonl");
      const r = await runCommand(command, [
        ...["--model", model, "--threads", "1", "--opponent", "cfr", "--seat", "second"],
        ...["--trials", "2", "--attempts", "1", "--out", out, "--quiet"],
      ]);
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /^cfr \(agent second, unseen\)/m);
      const trials = (await readFile(out, "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      assert.equal(trials.length, 2);
      const prompt = JSON.stringify(trials[0]);
      assert.match(prompt, /Card: [JQK]\./, "compact observations");
      const json = await runCommand(command, [
        ...["--model", model, "--threads", "1", "--opponent", "cfr", "--seat", "second"],
        ...["--trials", "1", "--attempts", "1", "--out", join(dir, "j.jsonl"), "--json", "--quiet"],
      ]);
      assert.equal(JSON.parse(json.out).policy, `model:${model}`);
      for (const t of trials)
        for (const a of t.memory?.attempts ?? [])
          for (const turn of a.turns) assert.ok(turn.tokenIds.length <= 48, "replies of at most 48 tokens");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
