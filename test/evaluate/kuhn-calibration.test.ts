import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { kuhnTableText } from "../../src/cli/commands/kuhn-table.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  adaptivePlays,
  agentValue,
  independentAttemptStats,
  KUHN_TRAINING_POOL,
  KUHN_WIDE_POOL,
  type KuhnCalibration,
  kuhnCalibration,
  poolMixture,
  seatBestResponse,
  sequenceStats,
  winnableDeals,
} from "../../src/evaluate/kuhn-calibration.js";
import { fraction, keyFacts } from "../../src/evaluate/kuhn-calibration-text.js";
import { type AttemptOutcome, scoreAt, successAt, type TrialOutcome } from "../../src/evaluate/metrics.js";
import {
  BET,
  dealState,
  infoStateString,
  KUHN_DEALS,
  KUHN_INFOSETS,
  type KuhnInfoSet,
  type KuhnMove,
  type KuhnState,
  kuhn,
  PASS,
} from "../../src/games/kuhn.js";
import { cfrArgmaxPolicy } from "../../src/opponents/kuhn/cfr.js";
import { kuhnPolicyFromSpec } from "../../src/opponents/kuhn/index.js";
import {
  callerPolicy,
  intermediatePolicy,
  type KuhnPolicy,
  tabularPolicy,
  uniformPolicy,
} from "../../src/opponents/kuhn/policies.js";
import { createOpponent } from "../../src/opponents/registry.js";
import type { Seat } from "../../src/tasks/types.js";

const close = (a: number, b: number, what: string) =>
  assert.ok(Math.abs(a - b) < 1e-9, `${what}: ${a} vs ${b}`);

/**
 * Independent reference: plays the game through the `kuhn` state machine (not the solver's tree
 * tables) and returns the agent's chip distribution in one deal.
 */
function chipDistribution(
  agent: KuhnPolicy,
  opp: KuhnPolicy,
  seat: Seat,
  cards: readonly [number, number],
): Map<number, number> {
  const me = seat === "first" ? 0 : 1;
  const out = new Map<number, number>();
  const walk = (s: KuhnState, p: number) => {
    if (p === 0) return;
    if (kuhn.isTerminal(s)) {
      const c = kuhn.returns(s)[me];
      out.set(c, (out.get(c) ?? 0) + p);
      return;
    }
    const pl = kuhn.currentPlayer(s);
    const bet = (pl === me ? agent : opp)[infoStateString(s, pl) as KuhnInfoSet];
    walk(kuhn.apply(s, PASS), p * (1 - bet));
    walk(kuhn.apply(s, BET), p * bet);
  };
  walk(dealState(cards), 1);
  return out;
}

function referenceValue(agent: KuhnPolicy, opp: KuhnPolicy, seat: Seat): number {
  let v = 0;
  for (const cards of KUHN_DEALS)
    for (const [c, p] of chipDistribution(agent, opp, seat, cards)) v += (c * p) / KUHN_DEALS.length;
  return v;
}

/**
 * Exact multi-attempt metrics by enumerating every sequence of attempt outcomes (independent
 * attempts, stop at a win), scored with the project's own trial metrics (`evaluate/metrics.ts`).
 */
function referenceTrials(agent: KuhnPolicy, opp: KuhnPolicy, seat: Seat, attempts: number) {
  const chipsAt = new Array<number>(attempts).fill(0);
  const succ = new Array<number>(attempts).fill(0);
  for (const cards of KUHN_DEALS) {
    const dist = [...chipDistribution(agent, opp, seat, cards)];
    const rec = (played: AttemptOutcome[], p: number) => {
      const last = played[played.length - 1];
      if (played.length === attempts || last?.won) {
        const trial: TrialOutcome = { opponent: "x", seat, taskId: "t", attempts: played };
        for (let k = 1; k <= attempts; k++) {
          chipsAt[k - 1] += (p * scoreAt(trial, k)) / 6;
          succ[k - 1] += (p * (successAt(trial, k) ? 1 : 0)) / 6;
        }
        return;
      }
      for (const [c, q] of dist) {
        const a: AttemptOutcome = {
          won: c > 0,
          draw: false,
          score: c,
          reward: c,
          turns: 1,
          invalidActions: 0,
        };
        rec([...played, a], p * q);
      }
    };
    rec([], 1);
  }
  return { chipsAt, successAt: succ };
}

/** All 64 deterministic tables of one seat (the other seat's entries are 0). */
function purePolicies(seat: Seat): KuhnPolicy[] {
  const own = KUHN_INFOSETS.filter((s) => (s.length - 1) % 2 === (seat === "first" ? 0 : 1));
  const out: KuhnPolicy[] = [];
  for (let m = 0; m < 64; m++) {
    const t = Object.fromEntries(KUHN_INFOSETS.map((s) => [s, 0])) as Record<KuhnInfoSet, number>;
    own.forEach((s, i) => {
      t[s] = (m >> i) & 1;
    });
    out.push(t);
  }
  return out;
}

let cached: KuhnCalibration | undefined;
const cal = () => (cached ??= kuhnCalibration());
const cfr = () => cfrArgmaxPolicy(1000);
const SEATS: Seat[] = ["first", "second"];

describe("kuhn calibration: the reference facts (cfr:1000, agent second)", () => {
  it("reproduces −1/6 (pool BR), 0 (perfect adaptation, final), +1/6 (knowing the opponent)", () => {
    const kf = keyFacts(cal());
    close(kf.poolBr, -1 / 6, "pool BR");
    close(kf.oracleFinal, 0, "perfect adaptation final");
    close(kf.explorerFinal, 0, "realisable explorer final");
    close(kf.knows, 1 / 6, "knowing the opponent");
    close(kf.clairvoyant, 1 / 6, "clairvoyant");
    close(kf.nash, 1 / 18, "equilibrium");
    close(kf.uniform, -1 / 6, "uniform attempt 1");
    assert.equal(kf.winnable, 3);
    assert.equal(kf.forced, 3);
  });

  it("every deterministic and random policy has success@k = 50% for k = 1..3", () => {
    const rng = Rng.seeded(7).derive("policies");
    const mixed = Array.from({ length: 5 }, () => tabularPolicy(() => rng.float()));
    for (const p of [...purePolicies("second"), ...mixed, uniformPolicy]) {
      const s = independentAttemptStats(p, cfr(), "second", 3);
      for (const x of s.successAt) close(x, 0.5, "success@k");
    }
  });

  it("agrees with an independent enumeration scored by evaluate/metrics.ts", () => {
    const poolBr = seatBestResponse(poolMixture(KUHN_TRAINING_POOL), "second").policy;
    const opps = [cfr(), kuhnPolicyFromSpec("cfr-mixed:1000"), kuhnPolicyFromSpec("aggressive")];
    for (const seat of SEATS) {
      for (const agent of [poolBr, uniformPolicy, tabularPolicy((_p, c) => [0.2, 0.5, 0.9][c])]) {
        for (const opp of opps) {
          const got = independentAttemptStats(agent, opp, seat, 3);
          const ref = referenceTrials(agent, opp, seat, 3);
          for (let k = 0; k < 3; k++) {
            close(got.chipsAt[k], ref.chipsAt[k], `chips@${k + 1}`);
            close(got.successAt[k], ref.successAt[k], `success@${k + 1}`);
          }
          close(got.chipsAt[0], referenceValue(agent, opp, seat), "attempt 1 = expected value");
          close(agentValue(agent, opp, seat), referenceValue(agent, opp, seat), "agentValue");
        }
      }
    }
  });
});

describe("kuhn calibration: best responses and fixed values", () => {
  it("the pool best response is the best of all 64 pure policies of its seat", () => {
    for (const pool of [KUHN_TRAINING_POOL, KUHN_WIDE_POOL]) {
      const mix = poolMixture(pool);
      for (const seat of SEATS) {
        let best = Number.NEGATIVE_INFINITY;
        for (const p of purePolicies(seat)) {
          let v = 0;
          for (const m of mix) v += m.weight * referenceValue(p, m.policy, seat);
          best = Math.max(best, v);
        }
        const br = seatBestResponse(mix, seat);
        close(br.value, best, `BR value ${seat}`);
        let v = 0;
        for (const m of mix) v += m.weight * referenceValue(br.policy, m.policy, seat);
        close(v, best, `BR policy achieves it ${seat}`);
      }
    }
  });

  it("each opponent's best possible score is the best pure reply; equilibrium values ±1/18", () => {
    const c = cal();
    close(c.equilibriumValue.first, -1 / 18, "first");
    close(c.equilibriumValue.second, 1 / 18, "second");
    for (const row of c.fixed) {
      const opp = kuhnPolicyFromSpec(row.opponent);
      const best = Math.max(...purePolicies(row.seat).map((p) => referenceValue(p, opp, row.seat)));
      close(row.best, best, `${row.opponent} ${row.seat}`);
      assert.ok(row.poolBr <= best + 1e-12 && row.uniform <= best + 1e-12 && row.widePoolBr <= best + 1e-12);
      close(row.uniform, referenceValue(uniformPolicy, opp, row.seat), "uniform");
    }
    // Nash play of player 1 guarantees at least the game value against anything.
    for (const row of c.fixed.filter((r) => r.seat === "second")) assert.ok(row.nash >= 1 / 18 - 1e-9);
  });

  it("the training pool BR ties at 1p and 2p; resolved to BET it would score 0 against cfr (agent second)", () => {
    const c = cal();
    assert.deepEqual([...c.poolBr.second.ties].sort(), ["1p", "2p"]);
    close(c.poolBrTiesBet.second, 0, "ties → BET");
  });
});

describe("kuhn calibration: adaptation", () => {
  it("the oracle's final is the best final over every choice of later attempts (attempt 1 = pool BR)", () => {
    for (const spec of [
      "cfr:1000",
      "conservative",
      "aggressive",
      "intermediate",
      "caller",
      "trapper",
      "solid",
    ]) {
      const opp = kuhnPolicyFromSpec(spec);
      for (const seat of SEATS) {
        const first = seatBestResponse(poolMixture(KUHN_TRAINING_POOL), seat).policy;
        const ad = adaptivePlays(first, opp, seat, 3);
        // Brute force per deal: attempt 1 fixed; attempts 2 and 3 any pure policies (stop at a win).
        let bestFinal = 0;
        KUHN_DEALS.forEach((cards) => {
          const chipsOf = (p: KuhnPolicy) => [...chipDistribution(p, opp, seat, cards).keys()][0];
          const c1 = chipsOf(first);
          if (c1 > 0) {
            bestFinal += c1 / 6;
            return;
          }
          let b = Number.NEGATIVE_INFINITY;
          for (const p2 of purePolicies(seat)) {
            const c2 = chipsOf(p2);
            if (c2 > 0) b = Math.max(b, c2);
            else for (const p3 of purePolicies(seat)) b = Math.max(b, chipsOf(p3));
          }
          bestFinal += b / 6;
        });
        const oracle = sequenceStats(ad.oracle, 3);
        const explorer = sequenceStats(ad.explorer, 3);
        close(oracle.final, bestFinal, `${spec} ${seat} oracle`);
        assert.ok(explorer.final <= oracle.final + 1e-12, `${spec} ${seat}: explorer above the bound`);
        for (const seq of [...ad.oracle, ...ad.explorer]) {
          assert.ok(seq.length >= 1 && seq.length <= 3);
          for (const c of seq.slice(0, -1)) assert.ok(c <= 0, "a trial stops at its first win");
          if (seq.length < 3) assert.ok(seq[seq.length - 1] > 0);
        }
      }
    }
  });

  it("the explorer reaches the oracle's bound against cfr in both seats (agent second: −2 → −1 in the J-vs-Q deal)", () => {
    const c = cal();
    for (const seat of SEATS) {
      const get = (a: string) =>
        c.multi.find((m) => m.opponent === "cfr:1000" && m.seat === seat && m.agent === a)!;
      close(get("adapt-explorer").stats.final, get("adapt-oracle").stats.final, seat);
    }
    const jq = c.cfrDeals.second.find((d) => d.deal === "J vs Q")!;
    assert.deepEqual(jq.attempts["pool-br"], [-2, -2, -2]);
    assert.deepEqual(jq.attempts["adapt-oracle"], [-2, -1, -1]);
  });

  it("sequenceStats carries a won attempt forward and rejects impossible trials", () => {
    const s = sequenceStats([[2], [-1, 1], [-2, -1, -1]], 3);
    close(s.chipsAt[0], (2 - 1 - 2) / 3, "chips@1");
    close(s.chipsAt[1], (2 + 1 - 1) / 3, "chips@2");
    close(s.final, (2 + 1 - 1) / 3, "final");
    assert.deepEqual(
      s.successAt.map((x) => Math.round(3 * x)),
      [1, 2, 2],
    );
    assert.throws(() => sequenceStats([[-1, -1, -1, -1]], 3), RangeError);
    assert.throws(() => adaptivePlays(uniformPolicy, cfr(), "second"), RangeError);
    assert.throws(() => winnableDeals(kuhnPolicyFromSpec("cfr-mixed:1000"), "first"), RangeError);
  });
});

describe("kuhn calibration: wider-pool bots", () => {
  it("caller as player 0 is exactly cfr:1000's argmax; as player 1 it differs only at 1b", () => {
    const diff = KUHN_INFOSETS.filter((s) => callerPolicy[s] !== cfr()[s]);
    assert.deepEqual(diff, ["1b"]);
  });

  it("the suggested value-bettor (bets K and Q, calls only K) is the same table as intermediate", () => {
    const vb = tabularPolicy((_p, card, h) => (h.includes("b") ? (card === 2 ? 1 : 0) : card >= 1 ? 1 : 0));
    for (const s of KUHN_INFOSETS) assert.equal(vb[s], intermediatePolicy[s], s);
  });

  it("the new bots are opponents that play their tables", () => {
    for (const name of ["caller", "trapper", "solid"]) {
      const opp = createOpponent<KuhnState, KuhnMove>("kuhn", name, { rng: Rng.seeded(1), replay: false });
      const table = kuhnPolicyFromSpec(name);
      for (const [c0, c1] of KUHN_DEALS) {
        for (const h of ["", "p", "b", "pb"]) {
          let s = dealState([c0, c1]);
          for (const ch of h) s = kuhn.apply(s, ch === "b" ? BET : PASS);
          const pl = kuhn.currentPlayer(s);
          assert.equal(opp.act(s), table[infoStateString(s, pl) as KuhnInfoSet], `${name} at ${h}`);
        }
      }
    }
  });

  it("pools sum to 1; the wider pool's BR scores +1/6 against cfr agent second, 0 agent first", () => {
    for (const p of [KUHN_TRAINING_POOL, KUHN_WIDE_POOL])
      close(
        p.reduce((s, m) => s + m.weight, 0),
        1,
        "weights",
      );
    const c = cal();
    const row = (seat: Seat) => c.fixed.find((r) => r.opponent === "cfr:1000" && r.seat === seat)!;
    close(row("second").widePoolBr, 1 / 6, "second");
    close(row("first").widePoolBr, 0, "first");
    close(row("first").poolBr, 1 / 6, "training pool, first");
    const solidOnly = c.wideSweep.find((r) => r.bots.join() === "solid" && r.newWeight === 0.4)!;
    close(solidOnly.vsCfrSecond, -1 / 6, "solid alone");
  });
});

describe("mage kuhn-table", () => {
  it("the committed docs/results/kuhn-calibration.md is what the command prints now", () => {
    const doc = readFileSync(new URL("../../docs/results/kuhn-calibration.md", import.meta.url), "utf8");
    assert.equal(doc, kuhnTableText());
  });

  it("--json gives the same key numbers", () => {
    const j = JSON.parse(kuhnTableText({ json: true })) as KuhnCalibration;
    const kf = keyFacts(j);
    close(kf.poolBr, -1 / 6, "json pool BR");
    close(kf.oracleFinal, 0, "json oracle");
    assert.equal(j.attempts, 3);
  });

  it("formats fractions and rejects bad flags", async () => {
    assert.equal(fraction(-1 / 6), "-1/6");
    assert.equal(fraction(1 / 18), "+1/18");
    assert.equal(fraction(Math.SQRT2), "");
    const { command } = await import("../../src/cli/commands/kuhn-table.js");
    await assert.rejects(command.run(["--attempts", "0"]), UsageError);
    await assert.rejects(command.run(["--nope"]), UsageError);
  });
});
