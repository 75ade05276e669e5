import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KUHN_INFOSETS, type KuhnInfoSet } from "../../src/games/kuhn.js";
import {
  bestResponse,
  bestResponsePolicy,
  bestResponseToMixture,
  evaluateProfile,
  expectedValue,
  exploitability,
  nashConv,
} from "../../src/opponents/kuhn/best-response.js";
import {
  aggressivePolicy,
  alwaysBetPolicy,
  alwaysPassPolicy,
  argmaxPolicy,
  conservativePolicy,
  intermediatePolicy,
  type KuhnPolicy,
  nashPolicy,
  tabularPolicy,
  uniformPolicy,
} from "../../src/opponents/kuhn/policies.js";

const close = (a: number, b: number, tol: number, what: string) =>
  assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b} (tol ${tol})`);

/** The rule-bot table of mage-reference §6.2, written out per information set (1 = BET/call). */
const RULE_TABLE: Record<string, Record<KuhnInfoSet, number>> = {
  conservative: {
    "0": 0,
    "1": 0,
    "2": 1,
    "0pb": 0,
    "1pb": 0,
    "2pb": 1,
    "0p": 0,
    "0b": 0,
    "1p": 0,
    "1b": 0,
    "2p": 1,
    "2b": 1,
  },
  aggressive: {
    "0": 1,
    "1": 1,
    "2": 1,
    "0pb": 0,
    "1pb": 1,
    "2pb": 1,
    "0p": 1,
    "0b": 0,
    "1p": 1,
    "1b": 1,
    "2p": 1,
    "2b": 1,
  },
  intermediate: {
    "0": 0,
    "1": 1,
    "2": 1,
    "0pb": 0,
    "1pb": 0,
    "2pb": 1,
    "0p": 0,
    "0b": 0,
    "1p": 1,
    "1b": 0,
    "2p": 1,
    "2b": 1,
  },
};

/** All 64 deterministic policies of one seat (six information sets), the other seat's entries 0. */
function pureSeatPolicies(player: 0 | 1): KuhnPolicy[] {
  const own = KUHN_INFOSETS.filter((s) => (s.length - 1) % 2 === player);
  const out: KuhnPolicy[] = [];
  for (let mask = 0; mask < 64; mask++) {
    const table = Object.fromEntries(KUHN_INFOSETS.map((s) => [s, 0])) as Record<KuhnInfoSet, number>;
    own.forEach((s, i) => {
      table[s] = (mask >> i) & 1;
    });
    out.push(table);
  }
  return out;
}

describe("kuhn tabular policies", () => {
  it("rule bots match the reference table on all 12 information sets", () => {
    const bots: Record<string, KuhnPolicy> = {
      conservative: conservativePolicy,
      aggressive: aggressivePolicy,
      intermediate: intermediatePolicy,
    };
    for (const [name, policy] of Object.entries(bots)) {
      for (const s of KUHN_INFOSETS) {
        assert.equal(policy[s], RULE_TABLE[name][s], `${name} at "${s}"`);
      }
    }
  });

  it("uniform NashConv is 11/12 and always-pass NashConv is 2 (OpenSpiel exploitability_test)", () => {
    const u = evaluateProfile(uniformPolicy);
    close(u.nashConv, 11 / 12, 1e-9, "uniform NashConv");
    close(u.exploitability, 11 / 24, 1e-9, "uniform exploitability");
    close(u.value0, 1 / 8, 1e-9, "uniform V0");
    close(u.bestResponseValues[0], 1 / 2, 1e-9, "uniform BR0");
    close(u.bestResponseValues[1], 5 / 12, 1e-9, "uniform BR1");
    close(nashConv(alwaysPassPolicy), 2, 1e-9, "always-pass NashConv");
    close(exploitability(alwaysPassPolicy), 1, 1e-9, "always-pass exploitability");
  });

  it("the Nash family has NashConv 0 and value −1/18 for α ∈ {0, 1/6, 1/5, 1/3}", () => {
    for (const alpha of [0, 1 / 6, 1 / 5, 1 / 3]) {
      const r = evaluateProfile(nashPolicy(alpha));
      close(r.nashConv, 0, 1e-9, `NashConv α=${alpha}`);
      close(r.value0, -1 / 18, 1e-9, `V0 α=${alpha}`);
    }
    assert.throws(() => nashPolicy(0.4), /alpha/);
  });

  it("a perturbed equilibrium is exploitable", () => {
    const p = nashPolicy(0.1);
    const bent = { ...p, "1b": 0.9 } as KuhnPolicy; // player 1 over-calls with the Queen
    assert.ok(nashConv(bent) > 0.01);
  });

  it("the best response is at least as good as every pure policy of the seat, and reached by one", () => {
    for (const opponent of [
      uniformPolicy,
      conservativePolicy,
      aggressivePolicy,
      intermediatePolicy,
      nashPolicy(0.2),
    ]) {
      for (const player of [0, 1] as const) {
        const br = bestResponse(player, opponent);
        let best = Number.NEGATIVE_INFINITY;
        for (const pure of pureSeatPolicies(player)) {
          const v = player === 0 ? expectedValue(pure, opponent) : -expectedValue(opponent, pure);
          best = Math.max(best, v);
        }
        close(br.value, best, 1e-12, `BR value of player ${player}`);
        const brPolicy = bestResponsePolicy(br, opponent);
        const realised =
          player === 0 ? expectedValue(brPolicy, opponent) : -expectedValue(opponent, brPolicy);
        close(realised, br.value, 1e-12, "BR policy realises its value");
        assert.equal(Object.keys(br.actions).length, 6);
      }
    }
  });

  it("best response to a weighted mixture maximises the weighted value (not a behavioural average)", () => {
    const pool = [
      { policy: conservativePolicy, weight: 0.3 },
      { policy: aggressivePolicy, weight: 0.3 },
      { policy: intermediatePolicy, weight: 0.4 },
    ];
    for (const player of [0, 1] as const) {
      const br = bestResponseToMixture(player, pool);
      const mixValue = (pure: KuhnPolicy) =>
        pool.reduce(
          (acc, m) =>
            acc + m.weight * (player === 0 ? expectedValue(pure, m.policy) : -expectedValue(m.policy, pure)),
          0,
        );
      let best = Number.NEGATIVE_INFINITY;
      for (const pure of pureSeatPolicies(player)) best = Math.max(best, mixValue(pure));
      close(br.value, best, 1e-12, `mixture BR value of player ${player}`);
      close(
        mixValue(bestResponsePolicy(br, uniformPolicy)),
        br.value,
        1e-12,
        "mixture BR realises its value",
      );
    }
    // Weights are normalised; a one-policy mixture is the plain best response.
    const single = bestResponseToMixture(1, [{ policy: aggressivePolicy, weight: 5 }]);
    close(single.value, bestResponse(1, aggressivePolicy).value, 1e-12, "single-entry mixture");
    assert.throws(() => bestResponseToMixture(0, []), /empty/);
    assert.throws(() => bestResponseToMixture(0, [{ policy: uniformPolicy, weight: 0 }]), /positive/);
  });

  it("always-bet and argmax helpers behave", () => {
    assert.ok(KUHN_INFOSETS.every((s) => alwaysBetPolicy[s] === 1));
    const a = argmaxPolicy(tabularPolicy((_p, card) => [0.5, 0.51, 0.49][card]));
    assert.equal(a["0"], 0, "tie → PASS");
    assert.equal(a["1"], 1);
    assert.equal(a["2"], 0);
    // both seats always betting: every game is a bet-call showdown for ±2 → value 0
    close(expectedValue(alwaysBetPolicy), 0, 1e-12, "always-bet self-play value");
  });
});
