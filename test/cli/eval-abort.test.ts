import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { command } from "../../src/cli/commands/eval.js";
import { ok, startFaultServer, status } from "../policy/fault-server.js";
import { runCommand } from "./run-command.js";

const runEval = (argv: string[]) => runCommand(command, argv);

describe("mage eval when the backend fails for good", () => {
  it("writes in-flight trials as aborted, reports counts and the backend, exits 1", async () => {
    const failAfter = 9;
    const server = await startFaultServer((index, body) => {
      if (index >= failAfter) return status(500, undefined, '{"error":{"message":"backend exploded"}}');
      const last = String(body?.messages?.at(-1)?.content ?? "");
      return ok({
        text: last.includes("<remark>") ? "<remark>bet with K</remark>" : "<action>PASS</action>",
      });
    });
    const dir = await mkdtemp(join(tmpdir(), "mage-eval-abort-"));
    try {
      const file = join(dir, "trials.jsonl");
      const trials = 6;
      const res = await runEval([
        "--policy",
        `${server.baseUrl.replace(/^/, "openai:")}#fake?retries=1&baseDelay=0&maxDelay=0&timeout=10`,
        "--game",
        "kuhn",
        "--opponent",
        "aggressive",
        "--trials",
        String(trials),
        "--attempts",
        "3",
        "--out",
        file,
      ]);
      assert.equal(res.code, 1);
      assert.equal(res.out, "", "no metrics printed");
      const lines = (await readFile(file, "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { trialId: number; aborted: boolean; attempts: unknown[] });
      assert.equal(lines.length, trials, "every trial is in the file once");
      assert.deepEqual(
        lines.map((l) => l.trialId).sort((a, b) => a - b),
        Array.from({ length: trials }, (_, i) => i),
      );
      const aborted = lines.filter((l) => l.aborted).length;
      const finished = lines.length - aborted;
      assert.ok(aborted > 0, "some trials were in flight");
      assert.match(res.err, new RegExp(`${finished} trials finished, ${aborted} aborted`));
      assert.match(res.err, /openai:fake/);
      assert.ok(res.err.includes(server.baseUrl), "names the backend URL");
      assert.match(res.err, /backend exploded/);
      // The failing request was tried twice (retries=1), then the run stopped.
      assert.equal(server.received.length >= failAfter + 2, true);
    } finally {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("mage eval options", () => {
  it("names the valid context-overflow policies before opening the policy", async () => {
    await assert.rejects(
      runEval([
        "--checkpoint",
        "/nonexistent",
        "--game",
        "kuhn",
        "--opponent",
        "cfr",
        "--context-overflow",
        "truncate",
      ]),
      /unknown --context-overflow "truncate"; valid choices: stop, drop-oldest/,
    );
  });
});
