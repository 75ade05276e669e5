import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import type { TrainBackend } from "../../src/train/backend.js";
import { loadConfig, validateConfig } from "../../src/train/config.js";
import { runEvaluator } from "../../src/train/run-eval.js";
import { train } from "../../src/train/trainer.js";
import { saveRandomCheckpoint } from "../model/random-checkpoint.js";

/** Answers every call with something no task accepts, so every attempt is lost; records the calls. */
class LosingPolicy implements Policy {
  readonly name = "losing";
  readonly calls: GenerateRequest[] = [];
  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    this.calls.push(...requests);
    return requests.map(() => ({
      text: "hmm",
      tokenIds: [],
      logprobs: [],
      finishReason: "stop",
      promptTokens: 0,
    }));
  }
}

describe("eval.independent: the same model retried without memory", () => {
  async function evaluateWith(independent: boolean): Promise<LosingPolicy> {
    const config = validateConfig({
      game: "kuhn",
      task: { attempts: 3, reflection: "history_and_reflection" },
      population: { opponents: [{ spec: "aggressive" }] },
      eval: { cells: [{ opponent: "aggressive", seat: "first" }] },
    });
    const policy = new LosingPolicy();
    const backend = { evalPolicy: policy, learner: {} } as unknown as TrainBackend;
    const task = await loadTask("kuhn");
    const runEval = runEvaluator({ config, task, maxTurns: 2, backend, progress: false });
    const snapshot = await runEval(0, 4, { independent });
    assert.equal(snapshot.attempts, 3);
    return policy;
  }

  it("makes no reflect call and shows each attempt only itself", async () => {
    const leads = (r: GenerateRequest) =>
      r.messages.filter((m) => m.role === "user" && /^Attempt \d+\./.test(m.content)).length;
    const withMemory = await evaluateWith(false);
    assert.ok(withMemory.calls.some((r) => r.trial?.phase === "reflect"));
    const later = withMemory.calls.filter((r) => r.trial?.phase === "play" && r.trial.attempt > 0);
    assert.ok(later.length > 0 && later.every((r) => leads(r) === r.trial!.attempt + 1));

    const alone = await evaluateWith(true);
    assert.equal(alone.calls.filter((r) => r.trial?.phase === "reflect").length, 0);
    const laterAlone = alone.calls.filter((r) => r.trial?.phase === "play" && r.trial.attempt > 0);
    assert.ok(laterAlone.length > 0);
    assert.ok(
      laterAlone.every((r) => leads(r) === 1),
      "each attempt sees only itself",
    );
  });

  it("a run's summary holds it after the final evaluation, and skips it where the evaluation has no memory", async () => {
    const root = mkdtempSync(join(tmpdir(), "mage-independent-"));
    await saveRandomCheckpoint(join(root, "base"), { contextLength: 512, seed: 4 });
    const write = (name: string, reflection: string) => {
      const path = join(root, `${name}.yaml`);
      writeFileSync(
        path,
        `game: kuhn\nmodel: { checkpoint: ${JSON.stringify(join(root, "base"))} }\n` +
          `task: { attempts: 2, maxTurns: 2, reflection: ${reflection} }\n` +
          "population: { opponents: [{ spec: aggressive }] }\n" +
          "rollout: { tasksPerIteration: 1, groupSize: 2, maxResponseTokens: 4 }\ntrain: { iterations: 1 }\n" +
          "eval: { every: 0, finalTrials: 3, cells: [{ opponent: cfr, seat: second }], independent: { trials: 2 } }\n",
      );
      return loadConfig(path);
    };
    const lines: string[] = [];
    const run = await train({
      config: write("memory", "history_and_reflection"),
      outDir: join(root, "memory"),
      resume: false,
      progress: false,
      log: (l) => lines.push(l),
    });
    const independent = run.summary.independentEval;
    assert.ok(independent, "independentEval in the summary");
    assert.equal(independent.trialsPerCell, 2);
    assert.equal(independent.attempts, 2);
    assert.deepEqual(
      independent.cells.map((c) => c.opponent),
      run.summary.finalEval?.cells.map((c) => c.opponent),
    );
    assert.ok(lines.some((l) => l.startsWith("independent retries: 2 trials per cell")));

    const none = await train({
      config: write("none", "none"),
      outDir: join(root, "none"),
      resume: false,
      progress: false,
      log: (l) => lines.push(l),
    });
    assert.equal(none.summary.independentEval, null);
    assert.ok(lines.some((l) => l.startsWith("independent retries: skipped")));
  });
});
