import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { trainTokenizer } from "../../src/model/tokenizer.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import { RolloutAbortedError, type RunnerOptions, runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import type { StepResult, TextTask } from "../../src/tasks/types.js";
import { buildTokenBatch } from "../../src/train/batch.js";

/** Answers with a random legal-looking action from a generator keyed by the request seed. */
function scriptedPolicy(
  game: "kuhn" | "tictactoe",
  failAfter = Number.POSITIVE_INFINITY,
): Policy & { calls: number } {
  const p = {
    name: "scripted",
    calls: 0,
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        p.calls += 1;
        if (p.calls > failAfter) throw new Error("backend down");
        const rng = Rng.seeded(r.seed);
        const last = r.messages[r.messages.length - 1].content.toLowerCase();
        let text: string;
        if (last.includes("reflect") || last.includes("remark")) text = "<remark>try something else</remark>";
        else if (game === "kuhn") text = `<action>${rng.pick(["PASS", "BET"])}</action>`;
        else text = `<action>(${1 + rng.int(3)}, ${1 + rng.int(3)})</action>`;
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
      });
    },
  };
  return p;
}

const OPTS: RunnerOptions = {
  attempts: 3,
  maxTurns: 6,
  reflection: "reflection_only",
  promptStyle: "compact",
  hindsight: false,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 32, stop: [] },
  maxBatch: 64,
  concurrency: 1,
};

/** A policy that gives the same answer to every request (never a valid move, in these tests). */
function answersAlways(text: string): Policy {
  return {
    name: "stall",
    async generate(requests) {
      return requests.map(() => ({
        text,
        tokenIds: [1],
        logprobs: [-1],
        finishReason: "stop",
        promptTokens: 1,
      }));
    },
  };
}

function specs(n: number, opponents: string[]): TrialSpec[] {
  return Array.from({ length: n }, (_, i) => ({
    trialId: i,
    groupId: Math.floor(i / 4),
    taskSeed: 100 + Math.floor(i / 4),
    opponent: opponents[Math.floor(i / 4) % opponents.length],
    seat: Math.floor(i / 4) % 2 === 0 ? "first" : "second",
  }));
}

async function run(game: "kuhn" | "tictactoe", opts: RunnerOptions, n = 24, policy = scriptedPolicy(game)) {
  const def = await loadTask(game);
  const opponents = game === "kuhn" ? ["conservative", "aggressive", "intermediate"] : ["random", "mcts:100"];
  return runTrials(
    specs(n, opponents),
    (s) => def.create({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
    policy,
    Rng.seeded(5),
    opts,
  );
}

describe("trial runner", () => {
  it("plays attempts with reflections in between and stops a won trial", async () => {
    for (const game of ["kuhn", "tictactoe"] as const) {
      const trials = await run(game, OPTS);
      for (const t of trials) {
        assert.ok(t.attempts.length >= 1 && t.attempts.length <= 3);
        for (const a of t.attempts.slice(0, -1))
          assert.equal(a.won, false, "only the last attempt may be won");
        if (t.attempts.length < 3) assert.equal(t.attempts[t.attempts.length - 1].won, true);
        const reflects = t.rows.filter((r) => r.phase === "reflect");
        assert.equal(reflects.length, t.attempts.length - 1);
        for (const r of reflects) assert.ok(r.attempt >= 1);
        // rows are in attempt order; play turns count up within an attempt
        for (let i = 1; i < t.rows.length; i++) assert.ok(t.rows[i].attempt >= t.rows[i - 1].attempt);
        const playRows = t.rows.filter((r) => r.phase === "play");
        assert.equal(
          playRows.length,
          t.attempts.reduce((s, a) => s + a.turns, 0),
        );
        for (const a of t.attempts) assert.ok(a.turns <= OPTS.maxTurns);
      }
      // Group members share the task: the first observation of a group is identical.
      const byGroup = new Map<number, string>();
      for (const t of trials) {
        const obs = JSON.stringify(t.rows[0].prompt.slice(0, 2));
        if (byGroup.has(t.groupId)) assert.equal(byGroup.get(t.groupId), obs);
        else byGroup.set(t.groupId, obs);
      }
    }
  });

  it("keys every request with its trial, attempt, phase and turn, as the rows record them", async () => {
    const inner = scriptedPolicy("kuhn");
    const seen: string[] = [];
    const keyed = {
      name: "keyed",
      calls: 0,
      generate(requests: readonly GenerateRequest[]) {
        for (const r of requests) seen.push(JSON.stringify(r.trial));
        return inner.generate(requests);
      },
    };
    const trials = await run("kuhn", OPTS, 8, keyed);
    // A reflect row belongs to the attempt it prepares; its request is keyed by the attempt it
    // ends, at the turn count that attempt reached.
    const expected = trials.flatMap((t) =>
      t.rows.map((r) =>
        JSON.stringify(
          r.phase === "play"
            ? { trialId: t.trialId, attempt: r.attempt, phase: "play", turn: r.turn }
            : {
                trialId: t.trialId,
                attempt: r.attempt - 1,
                phase: "reflect",
                turn: t.attempts[r.attempt - 1].turns,
              },
        ),
      ),
    );
    assert.deepEqual([...seen].sort(), [...expected].sort());
  });

  it("gives identical transcripts whatever the batching and concurrency", async () => {
    const a = await run("tictactoe", OPTS);
    const b = await run("tictactoe", { ...OPTS, maxBatch: 1 });
    const c = await run("tictactoe", { ...OPTS, maxBatch: 5, concurrency: 3 });
    const strip = (x: typeof a) => JSON.stringify(x.map((t) => t.rows));
    assert.equal(strip(a), strip(b));
    assert.equal(strip(a), strip(c));
  });

  it("with no reflection, attempts are independent and no reflect calls are made", async () => {
    const trials = await run("kuhn", { ...OPTS, reflection: "none" });
    for (const t of trials) {
      assert.equal(t.rows.filter((r) => r.phase === "reflect").length, 0);
      for (const r of t.rows) {
        const headers = JSON.stringify(r.prompt).match(/Attempt \d/g) ?? [];
        assert.deepEqual(headers, ["Attempt 1"], "earlier attempts stay out of the prompt");
      }
    }
  });

  it("records trials in flight as aborted when the backend fails, keeping finished ones", async () => {
    const ended: number[] = [];
    const def = await loadTask("kuhn");
    const policy = scriptedPolicy("kuhn", 30);
    await assert.rejects(
      runTrials(
        specs(16, ["conservative"]),
        (s) => def.create({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
        policy,
        Rng.seeded(1),
        { ...OPTS, maxBatch: 4 },
        { onTrialEnd: (t) => ended.push(t.trialId) },
      ),
      (err: unknown) => {
        assert.ok(err instanceof RolloutAbortedError);
        assert.ok(err.aborted.length > 0);
        for (const t of err.aborted) assert.equal(t.aborted, true);
        for (const t of err.finished) assert.equal(t.aborted, false);
        assert.equal(err.finished.length + err.aborted.length, 16);
        return true;
      },
    );
    assert.equal(ended.length, 16);
  });

  it("turns a compact trial into one sequence whose scored tokens are exactly the sampled ones", async () => {
    // history_and_reflection: the memory mode whose trial is one append-only chat.
    const trials = await run("kuhn", { ...OPTS, reflection: "history_and_reflection" }, 8);
    const tok = trainTokenizer(["Card: K. Your move? <action>BET</action> <remark>x</remark>"], {
      vocabSize: 300,
    });
    const rows = trials.flatMap((t) => t.rows);
    const adv = rows.map((_, i) => i * 0.5);
    const tb = buildTokenBatch(tok, trials, adv, true);
    assert.equal(tb.batch.sequences.length, trials.length);
    const expectedTokens = rows.reduce((s, r) => s + r.responseTokenIds.length, 0);
    assert.equal(tb.oldLogp.length, expectedTokens);
    // each scored token carries its own row's advantage, rows in order
    let k = 0;
    rows.forEach((r, i) => {
      for (let j = 0; j < r.responseTokenIds.length; j++, k++) {
        assert.equal(tb.advantages[k], adv[i]);
        assert.equal(tb.rowOfToken[k], i);
      }
    });
    const perRow = buildTokenBatch(tok, trials, adv, false);
    assert.equal(perRow.batch.sequences.length, rows.length);
    assert.deepEqual(Array.from(perRow.advantages), Array.from(tb.advantages));
  });
  it("charges a Kuhn hand that ran out of turns as a forfeit, so stalling never beats playing", async () => {
    const def = await loadTask("kuhn");
    const stall = answersAlways("hmm");
    const trials = await runTrials(
      specs(8, ["aggressive"]),
      (s) => def.create({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
      stall,
      Rng.seeded(2),
      { ...OPTS, attempts: 2 },
    );
    for (const t of trials) {
      for (const a of t.attempts) {
        assert.equal(a.forfeited, true);
        assert.ok(a.score <= -1, `forfeit costs at least the ante (${a.score})`);
        assert.equal(a.reward, 5 * a.score);
      }
      const lastPlay = t.rows.filter((r) => r.phase === "play" && r.attempt === 0).at(-1)!;
      assert.equal(lastPlay.reward, 5 * t.attempts[0].score);
    }
  });
  it("charges a TicTacToe game cut off by invalid answers as a loss, not a draw", async () => {
    const def = await loadTask("tictactoe");
    const stall = answersAlways("<action>(9, 9)</action>");
    const trials = await runTrials(
      specs(4, ["mcts:10"]),
      (s) => def.create({ opponent: s.opponent ?? undefined, seat: s.seat ?? undefined }),
      stall,
      Rng.seeded(3),
      { ...OPTS, attempts: 2, maxTurns: 3 },
    );
    for (const t of trials) {
      for (const a of t.attempts) {
        assert.deepEqual([a.finished, a.forfeited, a.won, a.draw], [false, true, false, false]);
        assert.equal(a.score, -1);
        assert.equal(a.reward, -10);
      }
    }
  });

  it("keeps the running score of an attempt cut off after invalid answers", async () => {
    // Served environments with a running score (ScienceWorld) report none for an invalid answer.
    const answers = ["up", "up", "jump", "jump"].map((a) => `<action>${a}</action>`);
    let next = 0;
    const queue: Policy = {
      name: "queue",
      async generate(requests) {
        return requests.map(() => {
          const text = answers[next++];
          return { text, tokenIds: [1], logprobs: [-1], finishReason: "stop", promptTokens: 1 };
        });
      },
    };
    const [trial] = await runTrials(
      [{ trialId: 0, groupId: 0, taskSeed: 1, opponent: null, seat: null }],
      () => new RunningScoreTask(),
      queue,
      Rng.seeded(3),
      { ...OPTS, attempts: 1, maxTurns: 4, reflection: "none" },
    );
    const [a] = trial.attempts;
    assert.deepEqual([a.turns, a.invalidActions, a.finished], [4, 2, false]);
    assert.equal(a.score, 0.5);
  });
});

/** A one-player task whose score climbs 0.25 for each `up`; any other answer is invalid and, as a served environment would report it, carries score 0. */
class RunningScoreTask implements TextTask {
  readonly name = "climb";
  readonly opponent = null;
  readonly seat = null;
  readonly done = false;
  private score = 0;
  async reset(): Promise<void> {
    this.score = 0;
  }
  restart(): void {
    this.score = 0;
  }
  async step(response: string): Promise<StepResult> {
    const valid = response.includes("<action>up</action>");
    if (valid) this.score += 0.25;
    const text = `height ${this.score}`;
    return {
      reward: valid ? 1 : 0,
      done: false,
      won: false,
      draw: false,
      score: valid ? this.score : 0,
      valid,
      ...(valid ? {} : { invalidReason: "not up" }),
      action: valid ? "up" : "",
      feedback: "",
      observation: text,
      compactFeedback: "",
      compactObservation: text,
    };
  }
  observation(): string {
    return `height ${this.score}`;
  }
  compactObservation(): string {
    return this.observation();
  }
  anchor(): string {
    return this.observation();
  }
  reflectionAnchor(): string {
    return "reflection";
  }
  info() {
    return {
      task: this.name,
      won: false,
      draw: false,
      score: this.score,
      done: false,
      opponent: null,
      seat: null,
    };
  }
  promptText() {
    return {
      rules: "Climb.",
      playInstruction: "Answer <action>up</action>.",
      compactRules: "Climb.",
      compactAsk: "Move?",
      actionWord: "Move",
    };
  }
}
