import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KUHN_INFOSETS, type KuhnInfoSet } from "../../src/games/kuhn.js";
import { evaluateProfile, nashConv } from "../../src/opponents/kuhn/best-response.js";
import { cfrArgmaxPolicy, cfrAveragePolicy, KuhnCfrSolver } from "../../src/opponents/kuhn/cfr.js";

const close = (a: number, b: number, tol: number, what: string) =>
  assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b} (tol ${tol})`);

/**
 * mage-reference §6.2: average P(BET) of OpenSpiel's CFRSolver after 1000 iterations (3 decimals)
 * and the argmax the `cfr` validation opponent plays (1 = BET/call, 0 = PASS/fold).
 */
const REFERENCE_AVG: Record<KuhnInfoSet, number> = {
  "0": 0.194,
  "1": 0.008,
  "2": 0.584,
  "0pb": 0.0,
  "1pb": 0.531,
  "2pb": 0.999,
  "0p": 0.333,
  "0b": 0.001,
  "1p": 0.004,
  "1b": 0.336,
  "2p": 0.999,
  "2b": 0.999,
};

/**
 * Pinned argmax table of cfr:1000 (identical to the reference table in mage-reference §6.2).
 * Entries whose two probabilities are within 0.1 of each other (fragile to solver details):
 *   "1pb" (player 0 holding the Queen after pass-bet): P(call) 0.5305 vs P(fold) 0.4695.
 * Next closest: "2" (player 0 opening with the King): P(bet) 0.5841 vs 0.4159 (margin 0.168).
 */
const PINNED_CFR_1000_ARGMAX: Record<KuhnInfoSet, 0 | 1> = {
  "0": 0,
  "1": 0,
  "2": 1,
  "0pb": 0,
  "1pb": 1,
  "2pb": 1,
  "0p": 0,
  "0b": 0,
  "1p": 0,
  "1b": 0,
  "2p": 1,
  "2b": 1,
};

describe("kuhn CFR", () => {
  it("vanilla CFR, 1000 iterations: value −1/18 ± 1e-3 and NashConv < 0.02", () => {
    const r = evaluateProfile(cfrAveragePolicy("cfr", 1000));
    close(r.value0, -1 / 18, 1e-3, "player 0 value");
    assert.ok(r.nashConv < 0.02, `NashConv ${r.nashConv}`);
    assert.ok(r.nashConv > 0, "a finite run is not an exact equilibrium");
  });

  it("CFR+ reaches a lower NashConv than CFR in the same iterations", () => {
    for (const n of [100, 1000]) {
      const plain = nashConv(cfrAveragePolicy("cfr", n));
      const plus = nashConv(cfrAveragePolicy("cfr+", n));
      assert.ok(plus < plain, `${n} iterations: CFR+ ${plus} vs CFR ${plain}`);
    }
    const r = evaluateProfile(cfrAveragePolicy("cfr+", 1000));
    close(r.value0, -1 / 18, 1e-3, "CFR+ player 0 value");
  });

  it("NashConv falls with more iterations", () => {
    const ncs = [10, 100, 1000, 10000].map((n) =>
      nashConv(new KuhnCfrSolver("cfr").iterate(n).averagePolicy()),
    );
    for (let i = 1; i < ncs.length; i++) assert.ok(ncs[i] < ncs[i - 1], `NashConv sequence ${ncs}`);
    assert.ok(ncs[3] < 1e-3, `NashConv after 10^4 iterations ${ncs[3]}`);
  });

  it("reproduces the reference average strategy after 1000 iterations (to its 3 decimals)", () => {
    const avg = cfrAveragePolicy("cfr", 1000);
    for (const s of KUHN_INFOSETS) close(avg[s], REFERENCE_AVG[s], 1e-3, `avg P(BET) at "${s}"`);
  });

  it("pins the argmax table of cfr:1000", () => {
    const table = cfrArgmaxPolicy(1000);
    for (const s of KUHN_INFOSETS) assert.equal(table[s], PINNED_CFR_1000_ARGMAX[s], `argmax at "${s}"`);
    const avg = cfrAveragePolicy("cfr", 1000);
    const closeCalls = KUHN_INFOSETS.filter((s) => Math.abs(avg[s] - (1 - avg[s])) < 0.1);
    assert.deepEqual(closeCalls, ["1pb"]);
  });

  it("caches solved strategies per (variant, iterations)", () => {
    assert.equal(cfrAveragePolicy("cfr", 1000), cfrAveragePolicy("cfr", 1000));
    assert.notEqual(cfrAveragePolicy("cfr", 1000), cfrAveragePolicy("cfr+", 1000));
    assert.throws(() => cfrAveragePolicy("cfr", 0), /iterations/);
    assert.throws(() => cfrAveragePolicy("cfr", 1.5), /iterations/);
  });

  it("iterating in chunks equals iterating at once", () => {
    const a = new KuhnCfrSolver("cfr+").iterate(50).iterate(50).averageArray();
    const b = new KuhnCfrSolver("cfr+").iterate(100).averageArray();
    assert.deepEqual(Array.from(a), Array.from(b));
    assert.equal(new KuhnCfrSolver().iterate(7).iterations, 7);
  });
});
