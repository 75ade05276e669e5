import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { exploitabilityOf } from "../../src/cli/commands/exploitability.js";
import { Rng } from "../../src/core/rng.js";
import { kuhnInfosetEnv, kuhnInfosetRoute } from "../../src/evaluate/kuhn-infoset-env.js";
import {
  estimateKuhnModelPolicy,
  type KuhnModelPolicyOptions,
} from "../../src/evaluate/kuhn-model-policy.js";
import { kuhnProfileFigures } from "../../src/evaluate/kuhn-profile-report.js";
import { CARD_NAMES, KUHN_INFOSETS, type KuhnInfoSet } from "../../src/games/kuhn.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";
import { NAMED_KUHN_POLICIES } from "../../src/opponents/kuhn/policies.js";
import { type Script, ScriptedPolicy } from "../../src/policy/scripted.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { loadTask } from "../../src/tasks/registry.js";
import type { PromptStyle } from "../../src/tasks/types.js";

const MAX_TURNS = 6;
const SAMPLING = { temperature: 0.7, topP: 0.8, topK: 20, maxTokens: 48, stop: [] };
const tok = byteTokenizer();

function options(overrides: Partial<KuhnModelPolicyOptions> = {}): KuhnModelPolicyOptions {
  return {
    samples: 8,
    rng: Rng.seeded(0).derive("kuhn-model-policy"),
    promptStyle: "compact",
    sampling: SAMPLING,
    maxTurns: MAX_TURNS,
    ...overrides,
  };
}

const answer = (move: "PASS" | "BET") => `<action>${move}</action>`;

/**
 * The information set a compact play prompt stands at, read as a player would: the seat from the
 * rules, the card and the moves so far from the last observation.
 */
function compactInfoset(messages: readonly ChatMessage[]): KuhnInfoSet {
  const first = /You act first\./.test(messages[0].content);
  const last = messages[messages.length - 1].content;
  const card = "JQK".indexOf(/Card: ([JQK])\./.exec(last)?.[1] ?? "?");
  const moves = [...last.matchAll(/(You|Opp): (PASS|BET)\./g)].map((m) => (m[2] === "BET" ? "b" : "p"));
  assert.ok(card >= 0, `no card in ${last}`);
  // As player 1 the observation starts with the opponent's opening move.
  assert.equal(moves.length % 2 === 0, first, `seat and moves disagree in ${last}`);
  return `${card}${moves.join("")}` as KuhnInfoSet;
}

/** A script that plays a deterministic rule policy from the compact prompt it is shown. */
function ruleScript(name: string): Script {
  const policy = NAMED_KUHN_POLICIES[name];
  return (messages) => answer(policy[compactInfoset(messages)] >= 0.5 ? "BET" : "PASS");
}

/** The information set of a runner row, from its full-style anchor ("Your card: King | Actions: …"). */
function anchorInfoset(anchor: string): KuhnInfoSet {
  const card = CARD_NAMES.findIndex((n) => anchor.startsWith(`Your card: ${n} `));
  const actions = /Actions: ([^|\n]*)/.exec(anchor)?.[1] ?? "";
  const moves = [...actions.matchAll(/: (PASS|BET)/g)].map((m) => (m[1] === "BET" ? "b" : "p"));
  return `${card}${moves.join("")}` as KuhnInfoSet;
}

/** One trial of the real trial runner: Kuhn, agent first against always-bet, one attempt. */
async function oneRunnerTrial(script: Script) {
  const task = await loadTask("kuhn");
  const [trial] = await runTrials(
    [{ trialId: 0, groupId: 0, taskSeed: 1, opponent: "always-bet", seat: "first" }],
    (s) => task.create({ opponent: s.opponent!, seat: s.seat! }),
    new ScriptedPolicy(script, tok),
    Rng.seeded(1),
    {
      attempts: 1,
      maxTurns: MAX_TURNS,
      reflection: "none",
      promptStyle: "compact",
      hindsight: false,
      sampling: SAMPLING,
      maxBatch: 8,
      concurrency: 1,
    },
  );
  return trial;
}

describe("kuhn information sets as task situations", () => {
  it("routes every information set to its seat, a deal with the agent's card, and opponents that lead there", () => {
    for (const s of KUHN_INFOSETS) {
      const r = kuhnInfosetRoute(s);
      const player = r.seat === "first" ? 0 : 1;
      assert.equal(r.deal[player], Number(s[0]));
      assert.notEqual(r.deal[0], r.deal[1]);
      assert.equal(player, (s.length - 1) % 2);
    }
    assert.equal(kuhnInfosetRoute("1p").opponent, "always-pass");
    assert.equal(kuhnInfosetRoute("1b").opponent, "always-bet");
    assert.equal(kuhnInfosetRoute("1pb").afterOwnPass, true);
    assert.throws(() => kuhnInfosetRoute("1bb" as KuhnInfoSet), /not one of the information sets/);
  });

  it("refuses answers that do not lead to the information set", async () => {
    await assert.rejects(
      kuhnInfosetEnv("2pb", "compact", [{ response: answer("BET") }]),
      /lead to "2bb" \(hand over\)/,
    );
    await assert.rejects(kuhnInfosetEnv("2pb", "compact", []), /lead to "2"/);
    await assert.rejects(kuhnInfosetEnv("2", "compact", [{ response: answer("PASS") }]), /lead to "2pb"/);
  });

  for (const style of ["compact", "full"] as PromptStyle[]) {
    it(`builds exactly the prompts a real ${style} rollout shows at attempt 1, at all 12 information sets`, async () => {
      const task = await loadTask("kuhn");
      // Random legal answers and some invalid ones, so prefixes hold invalid turns too.
      const policy = new ScriptedPolicy(
        (_m, { rng }) => (rng.float() < 0.15 ? "<action>FOLD</action>" : answer(rng.pick(["PASS", "BET"]))),
        tok,
      );
      const specs: TrialSpec[] = [];
      for (const [k, opponent] of ["cfr-mixed", "random"].entries()) {
        for (const seat of ["first", "second"] as const) {
          for (let i = 0; i < 30; i++) {
            const trialId = specs.length;
            specs.push({ trialId, groupId: trialId, taskSeed: 1000 * k + i, opponent, seat });
          }
        }
      }
      const trials = await runTrials(
        specs,
        (s) => task.create({ opponent: s.opponent!, seat: s.seat! }),
        policy,
        Rng.seeded(5).derive("eval"),
        {
          attempts: 2,
          maxTurns: MAX_TURNS,
          reflection: "reflection_only",
          promptStyle: style,
          hindsight: false,
          sampling: SAMPLING,
          maxBatch: 64,
          concurrency: 1,
        },
      );
      const seen = new Set<string>();
      let compared = 0;
      for (const t of trials) {
        const turns = t.memory.attempts[0].turns;
        for (const row of t.rows.filter((r) => r.phase === "play" && r.attempt === 0)) {
          const infoset = anchorInfoset(row.anchor);
          const env = await kuhnInfosetEnv(infoset, style, turns.slice(0, row.turn));
          assert.deepEqual(
            env.messages("play"),
            row.prompt,
            `trial ${t.trialId} turn ${row.turn} at ${infoset}`,
          );
          seen.add(infoset);
          compared += 1;
        }
      }
      assert.deepEqual([...seen].sort(), [...KUHN_INFOSETS].sort());
      assert.ok(compared > 120, `${compared} prompts compared`);
    });
  }
});

describe("estimateKuhnModelPolicy", () => {
  for (const style of ["compact", "full"] as PromptStyle[]) {
    it(`a model that always bets or calls has always-bet's profile and exact figures (${style})`, async () => {
      const est = await estimateKuhnModelPolicy(
        new ScriptedPolicy(() => answer("BET"), tok),
        options({ promptStyle: style }),
      );
      assert.deepEqual(est.profile, NAMED_KUHN_POLICIES["always-bet"]);
      const exact = exploitabilityOf("kuhn", "always-bet");
      assert.deepEqual({ ...kuhnProfileFigures(est.profile), game: "kuhn", policy: "always-bet" }, exact);
      for (const e of est.infosets) {
        assert.deepEqual(
          [e.samples, e.bet, e.pass, e.forfeit, e.answers, e.invalidAnswers],
          [8, 8, 0, 0, 8, 0],
        );
      }
      // Never checked as player 0: the hands after its own check start from the canonical answer.
      assert.deepEqual(
        est.infosets.filter((e) => e.prefix === "canonical").map((e) => e.infoset),
        ["0pb", "1pb", "2pb"],
      );
    });
  }

  for (const name of ["conservative", "intermediate", "trapper", "caller", "always-pass"]) {
    it(`a model playing the rule bot ${name} from its prompts has that bot's profile and figures`, async () => {
      const est = await estimateKuhnModelPolicy(new ScriptedPolicy(ruleScript(name), tok), options());
      assert.deepEqual(est.profile, NAMED_KUHN_POLICIES[name]);
      const figures = kuhnProfileFigures(est.profile);
      const exact = exploitabilityOf("kuhn", name);
      assert.equal(figures.exploitability, exact.exploitability);
      assert.equal(figures.nashConv, exact.nashConv);
      assert.deepEqual(figures.vsOpponent, exact.vsOpponent);
    });
  }

  it("builds 'cpb' hands from the model's own checks, and from the canonical answer where it never checked", async () => {
    // conservative checks J and Q, bets K.
    const policy = new ScriptedPolicy(ruleScript("conservative"), tok);
    const est = await estimateKuhnModelPolicy(policy, options());
    const prefix = Object.fromEntries(est.infosets.map((e) => [e.infoset, e.prefix]));
    assert.deepEqual([prefix["0pb"], prefix["1pb"], prefix["2pb"]], ["sampled", "sampled", "canonical"]);
    assert.equal(prefix["0"], "none");
    // The prompts at 0pb and 1pb hold the model's own check with its sampled token ids; at 2pb
    // the canonical answer, which the template tokenizes.
    const afterCheck = policy.requests.filter((r) => r.messages.some((m) => m.role === "assistant"));
    assert.equal(afterCheck.length, 3 * 8);
    const own = afterCheck.filter((r) => r.messages[2].tokenIds !== undefined);
    assert.equal(own.length, 2 * 8);
    for (const r of own) assert.deepEqual(r.messages[2].tokenIds, [...tok.encode(answer("PASS")), tok.endId]);
    for (const r of afterCheck) assert.equal(r.messages[2].content, answer("PASS"));
  });

  it("counts invalid answers as the game does: asked again, and a hand out of turns forfeits (as PASS)", async () => {
    const never = await estimateKuhnModelPolicy(new ScriptedPolicy(() => "I fold", tok), options());
    for (const e of never.infosets) {
      const pb = e.infoset.endsWith("pb");
      // The canonical check before a 'cpb' decision used one of the six turns.
      const answers = (pb ? MAX_TURNS - 1 : MAX_TURNS) * 8;
      assert.deepEqual([e.forfeit, e.bet, e.pass, e.answers, e.invalidAnswers], [8, 0, 0, answers, answers]);
      assert.equal(e.pBet, 0);
      assert.equal(e.invalidRate, 1);
    }
    // The runner: six invalid turns, then the attempt is forfeited (the agent loses its ante).
    const trial = await oneRunnerTrial(() => "I fold");
    assert.deepEqual(
      [
        trial.attempts[0].turns,
        trial.attempts[0].invalidActions,
        trial.attempts[0].forfeited,
        trial.attempts[0].score,
      ],
      [MAX_TURNS, MAX_TURNS, true, -1],
    );
  });

  it("asks again after an invalid answer with the task's feedback in the prompt, and counts both answers", async () => {
    // Invalid the first time at each decision, then the bet; a retry sees "Invalid: …" last.
    const script: Script = (messages) =>
      messages[messages.length - 1].content.startsWith("Invalid:") ? answer("BET") : "<action>RAISE</action>";
    const est = await estimateKuhnModelPolicy(new ScriptedPolicy(script, tok), options());
    assert.deepEqual(est.profile, NAMED_KUHN_POLICIES["always-bet"]);
    for (const e of est.infosets) {
      assert.deepEqual([e.answers, e.invalidAnswers, e.invalidRate, e.forfeit], [16, 8, 0.5, 0]);
    }
  });

  it("forfeits without asking a hand whose check used up the turns, as the runner ends that attempt", async () => {
    // Five invalid answers, then PASS on the sixth turn; facing the bet no turn is left.
    const script: Script = (messages) =>
      messages.filter((m) => m.role === "user" && m.content.startsWith("Invalid:")).length < 5
        ? "<action>?</action>"
        : answer("PASS");
    const est = await estimateKuhnModelPolicy(new ScriptedPolicy(script, tok), options());
    const byInfoset = Object.fromEntries(est.infosets.map((e) => [e.infoset, e]));
    assert.deepEqual(
      [byInfoset["2"].pass, byInfoset["2"].answers, byInfoset["2"].invalidAnswers],
      [8, 48, 40],
    );
    assert.deepEqual(
      [byInfoset["2pb"].prefix, byInfoset["2pb"].forfeit, byInfoset["2pb"].answers],
      ["sampled", 8, 0],
    );
    const trial = await oneRunnerTrial(script);
    const a = trial.attempts[0];
    assert.deepEqual([a.turns, a.finished, a.forfeited, a.score], [MAX_TURNS, false, true, -1]);
  });

  it("is a function of the seed: the same seed and any batch size give the same estimate, another seed another", async () => {
    const script: Script = (_m, { rng }) =>
      rng.float() < 0.1 ? "<action>CHECK</action>" : answer(rng.float() < 0.4 ? "BET" : "PASS");
    const run = (seed: number, maxBatch?: number) =>
      estimateKuhnModelPolicy(
        new ScriptedPolicy(script, tok),
        options({
          samples: 16,
          rng: Rng.seeded(seed).derive("kuhn-model-policy"),
          ...(maxBatch ? { maxBatch } : {}),
        }),
      );
    const a = await run(3);
    assert.deepEqual(await run(3, 7), a);
    const b = await run(4);
    assert.notDeepEqual(b.infosets, a.infosets);
    const pBets = a.infosets.map((e) => e.pBet);
    assert.ok(
      pBets.some((p) => p > 0 && p < 1),
      "a mixed model gives mixed estimates",
    );
    assert.ok(a.infosets.some((e) => e.invalidAnswers > 0));
    for (const e of a.infosets) assert.equal(e.bet + e.pass + e.forfeit, 16);
  });

  it("batches: one generate call per wave of answers, at most maxBatch requests each", async () => {
    const policy = new ScriptedPolicy(() => answer("PASS"), tok);
    let calls = 0;
    const counting = {
      name: policy.name,
      generate: (r: Parameters<typeof policy.generate>[0]) => {
        calls += 1;
        assert.ok(r.length <= 64);
        return policy.generate(r);
      },
    };
    await estimateKuhnModelPolicy(counting, options({ samples: 32 }));
    // 9 opening information sets × 32 = 288 requests (5 calls), then 3 × 32 = 96 (2 calls).
    assert.equal(calls, 7);
  });

  it("rejects a sample count that is not a positive integer", async () => {
    const policy = new ScriptedPolicy(() => answer("PASS"), tok);
    await assert.rejects(
      estimateKuhnModelPolicy(policy, options({ samples: 0 })),
      /samples must be a positive/,
    );
  });
});
