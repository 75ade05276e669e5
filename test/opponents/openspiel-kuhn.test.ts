import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { exploitabilityOf } from "../../src/cli/commands/exploitability.js";
import { KUHN_INFOSETS } from "../../src/games/kuhn.js";
import { cfrAveragePolicy } from "../../src/opponents/kuhn/cfr.js";
import { kuhnPolicyFromSpec } from "../../src/opponents/kuhn/index.js";
import { runPythonJson } from "../openspiel/python.js";

/**
 * Cross-check against OpenSpiel (issue 19): mage's exact Kuhn evaluator (`mage exploitability`)
 * gives the same NashConv, exploitability and game value as OpenSpiel's
 * `exploitability.nash_conv` / `exploitability.exploitability` / `expected_game_score` on the
 * same tabular policies, and mage's CFR / CFR+ average policies equal OpenSpiel's CFRSolver /
 * CFRPlusSolver ones. Both libraries measure in chips per game and define
 * exploitability = NashConv / 2; mage's information-state names are OpenSpiel's strings.
 */

const SPECS = [
  "uniform",
  "always-pass",
  "always-bet",
  "cfr:1",
  "cfr:10",
  "cfr:100",
  "cfr:1000",
  "cfr-mixed:10",
  "cfr-mixed:1000",
  "cfr-plus:100",
  "conservative",
  "aggressive",
  "intermediate",
];
const CFR_ITERATIONS = [1, 2, 10, 100];

interface OpenSpielKuhn {
  policies: Record<
    string,
    { nash_conv: number; exploitability: number; value0: number; player_improvements: [number, number] }
  >;
  cfr: Record<string, Record<string, number>>;
  cfr_plus: Record<string, Record<string, number>>;
}

const TOL = 1e-9;

describe("Kuhn poker against OpenSpiel", () => {
  const policies = Object.fromEntries(SPECS.map((s) => [s, kuhnPolicyFromSpec(s)]));
  const theirs = runPythonJson<OpenSpielKuhn>(
    "mage_envs.crosscheck",
    ["kuhn"],
    JSON.stringify({ policies, cfr: CFR_ITERATIONS }),
  );

  for (const spec of SPECS) {
    it(`${spec}: NashConv, exploitability and value equal OpenSpiel's (≤ 1e-9)`, () => {
      const ours = exploitabilityOf("kuhn", spec);
      const os = theirs.policies[spec];
      assert.ok(os, `OpenSpiel answered for ${spec}`);
      const close = (a: number, b: number, what: string) =>
        assert.ok(Math.abs(a - b) <= TOL, `${spec} ${what}: mage ${a}, OpenSpiel ${b}`);
      close(ours.nashConv, os.nash_conv, "NashConv");
      close(ours.exploitability, os.exploitability, "exploitability");
      close(ours.value0, os.value0, "player 0 value");
      close(ours.bestResponseValues[0] - ours.value0, os.player_improvements[0], "player 0 improvement");
      close(ours.bestResponseValues[1] - ours.value1, os.player_improvements[1], "player 1 improvement");
    });
  }

  it("the profiles differ, so equal numbers are not a coincidence of one constant", () => {
    const ncs = new Set(SPECS.map((s) => theirs.policies[s].nash_conv.toFixed(9)));
    assert.ok(ncs.size >= 8, `${ncs.size} distinct NashConv values`);
  });

  for (const n of CFR_ITERATIONS) {
    it(`CFR and CFR+ average policies after ${n} iterations equal OpenSpiel's solvers' (≤ 1e-9)`, () => {
      for (const [variant, os] of [
        ["cfr", theirs.cfr[String(n)]],
        ["cfr+", theirs.cfr_plus[String(n)]],
      ] as const) {
        const ours = cfrAveragePolicy(variant, n);
        assert.deepEqual(Object.keys(os).sort(), [...KUHN_INFOSETS].sort());
        for (const s of KUHN_INFOSETS) {
          assert.ok(
            Math.abs(ours[s] - os[s]) <= TOL,
            `${variant}:${n} at "${s}": mage P(BET) ${ours[s]}, OpenSpiel ${os[s]}`,
          );
        }
      }
    });
  }

  it("a wrong table is caught: OpenSpiel's NashConv of a perturbed policy differs", () => {
    const perturbed = { ...kuhnPolicyFromSpec("cfr-mixed:1000"), "1pb": 0.9 };
    const os = runPythonJson<OpenSpielKuhn>(
      "mage_envs.crosscheck",
      ["kuhn"],
      JSON.stringify({ policies: { perturbed } }),
    );
    const ours = exploitabilityOf("kuhn", "cfr-mixed:1000");
    assert.ok(Math.abs(os.policies.perturbed.nash_conv - ours.nashConv) > 1e-3);
  });
});
