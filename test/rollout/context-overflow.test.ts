import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { evaluate } from "../../src/evaluate/evaluate.js";
import { presetConfig } from "../../src/model/config.js";
import { selectKernels } from "../../src/model/kernels/select.js";
import { initParams } from "../../src/model/params.js";
import { trainTokenizer } from "../../src/model/tokenizer.js";
import { scoreBatch } from "../../src/model/transformer.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { type RunnerOptions, runTrials } from "../../src/rollout/runner.js";
import type { Row, TrialRecord, TrialSpec } from "../../src/rollout/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import { buildTokenBatch, isPrefixChain, prefixChains, rowsPerSequence } from "../../src/train/batch.js";
import { validateConfig } from "../../src/train/config.js";

const chars = (messages: readonly { content: string }[]) =>
  messages.reduce((s, m) => s + m.content.length, 0);
const size = (r: GenerateRequest) => chars(r.messages);
const rowSize = (r: Row) => chars(r.prompt);

/** Kuhn answers keyed by the request seed, and a context of `limit` characters of message text. */
function tinyContextPolicy(limit: number): Policy & { sizes: number[] } {
  const p = {
    name: "tiny-context",
    sizes: [] as number[],
    contextError(r: GenerateRequest): string | null {
      return size(r) > limit ? `prompt of ${size(r)} chars exceeds ${limit}` : null;
    },
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        assert.equal(p.contextError(r), null, "only requests that fit are sent");
        p.sizes.push(size(r));
        const last = r.messages[r.messages.length - 1].content.toLowerCase();
        const text =
          last.includes("reflect") || last.includes("remark")
            ? "<remark>bet with K</remark>"
            : `<action>${Rng.seeded(r.seed).pick(["PASS", "BET"])}</action>`;
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 1 };
      });
    },
  };
  return p;
}

const BASE: RunnerOptions = {
  attempts: 4,
  maxTurns: 2,
  reflection: "history_and_reflection",
  promptStyle: "compact",
  hindsight: false,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 16, stop: [] },
  maxBatch: 64,
  concurrency: 1,
};

async function run(opts: RunnerOptions, policy: Policy): Promise<TrialRecord[]> {
  const def = await loadTask("kuhn");
  const specs: TrialSpec[] = Array.from({ length: 12 }, (_, i) => ({
    trialId: i,
    groupId: i,
    taskSeed: 7 + i,
    opponent: "aggressive",
    seat: i % 2 ? "second" : "first",
  }));
  return runTrials(
    specs,
    (s) => def.create({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
    policy,
    Rng.seeded(9),
    opts,
  );
}

/** A limit that fits one attempt with room, but not the whole trial of the longest unlimited run. */
async function pickLimit(opts: RunnerOptions): Promise<{ limit: number; unlimited: TrialRecord[] }> {
  const unlimited = await run(opts, tinyContextPolicy(Number.POSITIVE_INFINITY));
  const firstAttempt = Math.max(
    ...unlimited.flatMap((t) => t.rows.filter((r) => r.attempt === 0).map((r) => rowSize(r))),
  );
  return { limit: Math.ceil(firstAttempt * 1.6), unlimited };
}

describe("prompts longer than the context", () => {
  for (const promptStyle of ["compact", "full"] as const) {
    it(`${promptStyle}: "stop" ends the trial with a stopReason; "drop-oldest" plays on without the oldest attempt`, async () => {
      const opts = { ...BASE, promptStyle };
      const { limit, unlimited } = await pickLimit(opts);
      const longest = Math.max(...unlimited.flatMap((t) => t.rows.map((r) => rowSize(r))));
      assert.ok(longest > limit, "the limit bites");

      const stopped = await run({ ...opts, contextOverflow: "stop" }, tinyContextPolicy(limit));
      const cut = stopped.filter((t) => t.stopReason !== undefined);
      assert.ok(cut.length > 0);
      for (const t of cut) {
        assert.match(t.stopReason!, /^context: prompt of \d+ chars exceeds/);
        assert.equal(t.aborted, false);
        assert.ok(t.attempts.length < opts.attempts || !t.attempts.at(-1)!.finished);
      }
      // The default is "stop".
      const byDefault = await run(opts, tinyContextPolicy(limit));
      assert.deepEqual(
        byDefault.map((t) => t.stopReason),
        stopped.map((t) => t.stopReason),
      );

      const dropping = tinyContextPolicy(limit);
      const dropped = await run({ ...opts, contextOverflow: "drop-oldest" }, dropping);
      assert.ok(Math.max(...dropping.sizes) <= limit);
      for (let i = 0; i < dropped.length; i++) {
        const t = dropped[i];
        assert.equal(t.stopReason, undefined, `trial ${i} played to its end`);
        // Same play as without a limit: dropping changes prompts, not the seeded answers.
        assert.deepEqual(t.attempts, unlimited[i].attempts);
      }
      const trimmed = dropped.filter((t, i) =>
        t.rows.some((r, j) => rowSize(r) < rowSize(unlimited[i].rows[j])),
      );
      assert.ok(trimmed.length > 0, "some prompts were trimmed");
      const first = promptStyle === "compact" ? "Attempt 1." : "Attempt #1";
      for (const t of trimmed) {
        const row = t.rows.at(-1)!;
        const text = row.prompt.map((m) => m.content).join("\n");
        assert.ok(!text.includes(first), "the oldest attempt is gone from the last prompt");
        assert.ok(
          text.includes(promptStyle === "compact" ? `Attempt ${row.attempt + 1}.` : "## Initial state"),
          "the current attempt is still there",
        );
        if (promptStyle === "compact") {
          assert.equal(row.prompt[0].role, "system");
          assert.equal(isPrefixChain(t.rows), false);
        }
      }
      if (promptStyle === "compact") {
        // One-pass scoring cuts a trimmed trial into its prefix chains: one sequence each.
        const tok = trainTokenizer(["Card: K. <action>BET</action> <remark>x</remark>"], { vocabSize: 300 });
        const rows = dropped.flatMap((t) => t.rows);
        const tb = buildTokenBatch(
          tok,
          dropped,
          rows.map(() => 1),
          true,
        );
        const chainCounts = dropped.map((t) => prefixChains(t.rows).length);
        assert.equal(
          tb.batch.sequences.length,
          chainCounts.reduce((a, b) => a + b, 0),
        );
        assert.ok(
          chainCounts.some((n) => n === 1),
          "untrimmed trials stay one sequence",
        );
        const cut = dropped.filter((t) => !isPrefixChain(t.rows));
        assert.ok(cut.length > 0, "some trials were cut");
        assert.ok(
          cut.every((t) => prefixChains(t.rows).length < t.rows.length),
          "a cut trial still scores several rows per sequence (not one sequence per row)",
        );
        assert.deepEqual(
          cut.map((t) => prefixChains(t.rows).flat()),
          cut.map((t) => t.rows),
          "the chains hold every row once, in order",
        );
        assert.equal(
          tb.oldLogp.length,
          rows.reduce((s, r) => s + r.responseTokenIds.length, 0),
        );
        // The same tokens get the same log-probs as scoring every row on its own.
        const config = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 1024, nLayers: 1 });
        const params = initParams(config, Rng.seeded(5), { std: 0.08 });
        const kernels = await selectKernels("js");
        const perRow = buildTokenBatch(
          tok,
          dropped,
          rows.map(() => 1),
          false,
        );
        assert.ok(perRow.batch.sequences.length > tb.batch.sequences.length);
        const byRow = (b: typeof tb) => {
          const logp = scoreBatch(params, b.batch, kernels).logp;
          const out = rows.map(() => [] as number[]);
          b.rowOfToken.forEach((r, i) => {
            out[r].push(logp[i]);
          });
          return out;
        };
        const onePass = byRow(tb);
        const single = byRow(perRow);
        let maxDiff = 0;
        onePass.forEach((xs, r) => {
          assert.equal(xs.length, single[r].length, `row ${r}: same scored tokens`);
          xs.forEach((x, j) => {
            maxDiff = Math.max(maxDiff, Math.abs(x - single[r][j]));
          });
        });
        assert.ok(maxDiff <= 1e-4, `max |chain logp − per-row logp| = ${maxDiff}`);
        const perSeq = rowsPerSequence(dropped, true);
        assert.equal(perSeq.length, tb.batch.sequences.length);
        assert.equal(
          perSeq.reduce((a, b) => a + b, 0),
          rows.length,
        );
      }
    });
  }

  it("a batch's context checks are all asked before any is answered (one round trip for a remote check)", async () => {
    const inner = tinyContextPolicy(Number.POSITIVE_INFINITY);
    let pending = 0;
    const waves: number[] = [];
    const policy: Policy = {
      name: "async-check",
      async contextError(r: GenerateRequest): Promise<string | null> {
        pending += 1;
        await new Promise((res) => setImmediate(res));
        if (pending > 0) waves.push(pending);
        pending = 0;
        return inner.contextError!(r) as string | null;
      },
      generate: (rs) => inner.generate(rs),
    };
    const records = await run(BASE, policy);
    assert.equal(records.length, 12);
    // The first wave is every trial's first request: 12 trials in one batch of 64.
    assert.equal(waves[0], 12);
    assert.ok(Math.max(...waves) === 12 && waves.length < records.flatMap((t) => t.rows).length);
  });

  it("drop-oldest still stops when the current attempt alone does not fit", async () => {
    const small = tinyContextPolicy(200);
    const trials = await run({ ...BASE, contextOverflow: "drop-oldest" }, small);
    for (const t of trials) assert.match(t.stopReason ?? "", /^context: /);
  });

  it("evaluation takes the overflow policy: drop-oldest plays every attempt that stop cuts off", async () => {
    const { limit } = await pickLimit(BASE);
    const task = await loadTask("kuhn");
    const o = {
      task,
      cells: [{ opponent: "aggressive", seat: "first" as const, unseen: false }],
      trials: 12,
      attempts: 4,
      reflection: "history_and_reflection" as const,
      promptStyle: "compact" as const,
      maxTurns: 2,
      sampling: BASE.sampling,
      seed: 3,
    };
    const stopped = await evaluate(tinyContextPolicy(limit), o);
    const dropped = await evaluate(tinyContextPolicy(limit), { ...o, contextOverflow: "drop-oldest" });
    const played = (r: { trials: TrialRecord[] }) => r.trials.reduce((s, t) => s + t.attempts.length, 0);
    assert.ok(
      stopped.trials.some((t) => /^context: /.test(t.stopReason ?? "")),
      "the limit cuts trials off",
    );
    assert.ok(!dropped.trials.some((t) => /^context: /.test(t.stopReason ?? "")));
    assert.ok(played(dropped) > played(stopped));
  });

  it("the config accepts task.contextOverflow, default stop; scaling evaluation defaults to drop-oldest", () => {
    const scaling = { attempts: 5, trials: 2, cells: [{ opponent: "cfr", seat: "second" }] };
    const withScaling = validateConfig({
      game: "kuhn",
      population: { opponents: [{ spec: "aggressive", weight: 1 }] },
      eval: { scaling },
    });
    assert.equal(withScaling.eval.scaling?.contextOverflow, "drop-oldest");
    const minimal = { game: "kuhn", population: { opponents: [{ spec: "aggressive", weight: 1 }] } };
    assert.equal(validateConfig(minimal).task.contextOverflow, "stop");
    const c = validateConfig({ ...minimal, task: { contextOverflow: "drop-oldest" } });
    assert.equal(c.task.contextOverflow, "drop-oldest");
    assert.throws(() => validateConfig({ ...minimal, task: { contextOverflow: "truncate" } }), UsageError);
  });
});
