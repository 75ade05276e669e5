import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { evaluate, formatCells, toOutcome } from "../../src/evaluate/evaluate.js";
import { computeTrialMetrics } from "../../src/evaluate/metrics.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { type RunnerOptions, runTrials } from "../../src/rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../../src/rollout/types.js";
import { KuhnTask } from "../../src/tasks/kuhn.js";
import { loadTask } from "../../src/tasks/registry.js";
import { computeRowCredit } from "../../src/train/advantage-pipeline.js";
import { validateConfig } from "../../src/train/config.js";
import { rolloutStats } from "../../src/train/iteration.js";
import { cellMeasures } from "../../src/train/logging/scalars.js";

/** Always PASS; reflects with `remark(card)`, the card read off the compact prompt. */
function kuhnPolicy(remark: (card: string) => string): Policy {
  return {
    name: "scripted",
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        const text = r.trial?.phase === "reflect" ? remark(cardOf(r)) : "<action>PASS</action>";
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
      });
    },
  };
}

function cardOf(r: GenerateRequest): string {
  const all = r.messages.map((m) => m.content).join("\n");
  const cards = [...all.matchAll(/Card: ([JQK])\./g)];
  return cards.length > 0 ? cards[cards.length - 1][1] : "?";
}

const OPTS: RunnerOptions = {
  attempts: 3,
  maxTurns: 6,
  reflection: "reflection_only",
  promptStyle: "compact",
  hindsight: false,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] },
  maxBatch: 64,
  concurrency: 1,
};

const SPECS: TrialSpec[] = Array.from({ length: 6 }, (_, i) => ({
  trialId: i,
  groupId: Math.floor(i / 2),
  taskSeed: 100 + Math.floor(i / 2),
  opponent: "aggressive",
  seat: "first",
}));

async function play(remark: (card: string) => string): Promise<TrialRecord[]> {
  return runTrials(
    SPECS,
    (s) => new KuhnTask({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
    kuhnPolicy(remark),
    Rng.seeded(7),
    OPTS,
  );
}

const ECHO = () => "<remark>PASS.</remark>";
const GOOD = (card: string) => `<remark>Had ${card}, passed and lost the pot.</remark>`;
const VAGUE = () => "<remark>I lost; play better next time.</remark>";

describe("a reflection that only echoes an action", () => {
  it("is an invalid reflect row and pays the invalid-answer penalty", async () => {
    const echo = await play(ECHO);
    const good = await play(GOOD);
    const reflects = (ts: TrialRecord[]) => ts.flatMap((t) => t.rows).filter((r) => r.phase === "reflect");
    assert.ok(reflects(echo).length > 0, "the always-passing agent loses and reflects");
    for (const r of reflects(echo)) {
      assert.equal(r.valid, false);
      assert.match(r.invalidReason ?? "", /only repeats action commands/);
      assert.equal(r.informative, false);
    }
    for (const r of reflects(good)) {
      assert.equal(r.valid, true);
      assert.equal(r.informative, true, "names the card it held");
    }
    const config = validateConfig({
      game: "kuhn",
      population: { opponents: [{ spec: "aggressive" }] },
      penalties: { invalidAction: 0.5 },
    });
    const a = computeRowCredit(echo, config);
    const b = computeRowCredit(good, config);
    const rows = echo.flatMap((t) => t.rows);
    assert.equal(rows.length, good.flatMap((t) => t.rows).length, "the same play, row for row");
    rows.forEach((row, i) => {
      assert.equal(a.episodeReward[i], b.episodeReward[i]);
      const penalty = b.score[i] - a.score[i];
      assert.ok(Math.abs(penalty - (row.phase === "reflect" ? 0.5 : 0)) < 1e-12, `row ${i} (${row.phase})`);
    });
  });
});

describe("remark rates in the metrics", () => {
  it("training metrics: valid_reflection and informative_reflection among reflect calls", async () => {
    const echo = rolloutStats(await play(ECHO), 3);
    assert.equal(echo.valid_reflection, 0);
    assert.equal(echo.informative_reflection, 0);
    const good = rolloutStats(await play(GOOD), 3);
    assert.equal(good.valid_reflection, 1);
    assert.equal(good.informative_reflection, 1);
    const vague = rolloutStats(await play(VAGUE), 3);
    assert.equal(vague.valid_reflection, 1);
    assert.equal(vague.informative_reflection, 0);
  });

  it("evaluation metrics, their TensorBoard names and the printed cells carry the rates", async () => {
    const trials = await play((card) => (card === "K" ? VAGUE() : GOOD(card)));
    const reflects = trials.flatMap((t) => t.rows).filter((r) => r.phase === "reflect");
    const informative = reflects.filter((r) => r.informative).length;
    const m = computeTrialMetrics(trials.map(toOutcome), 3);
    assert.equal(m.reflections, reflects.length);
    assert.equal(m.validReflectionRate, 1);
    assert.equal(m.informativeReflectionRate, informative / reflects.length);
    const names = new Map(cellMeasures(m));
    assert.equal(names.get("valid_reflection"), 1);
    assert.equal(names.get("informative_reflection"), informative / reflects.length);
    // A trial without reflect calls reports no rate.
    const none = computeTrialMetrics(
      trials.map((t) => ({
        ...toOutcome(t),
        reflections: { calls: 0, valid: 0, judged: 0, informative: 0 },
      })),
      3,
    );
    assert.equal(none.validReflectionRate, undefined);
    assert.equal(new Map(cellMeasures(none)).has("valid_reflection"), false);
  });

  it("mage eval's cells print the remark rates", async () => {
    const { cells } = await evaluate(kuhnPolicy(ECHO), {
      task: await loadTask("kuhn"),
      cells: [{ opponent: "aggressive", seat: "first", unseen: false }],
      trials: 4,
      attempts: 2,
      reflection: "reflection_only",
      promptStyle: "compact",
      maxTurns: 6,
      sampling: OPTS.sampling,
      seed: 1,
    });
    const m = cells[0].metrics;
    assert.ok((m.reflections ?? 0) > 0);
    assert.equal(m.validReflectionRate, 0);
    assert.match(formatCells(cells), /remarks \d+: valid 0\.0%, informative 0\.0%/);
  });
});
