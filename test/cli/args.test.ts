import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { intFlag } from "../../src/cli/args.js";
import { UsageError } from "../../src/core/errors.js";

describe("intFlag", () => {
  it("reads integers within the range and leaves an absent flag undefined", () => {
    assert.equal(intFlag("port", undefined, { max: 65535 }), undefined);
    assert.equal(intFlag("port", "0", { max: 65535 }), 0);
    assert.equal(intFlag("port", "65535", { max: 65535 }), 65535);
    assert.equal(intFlag("steps", " 12 ", { min: 1 }), 12);
  });

  it("names the flag and the range it wanted", () => {
    const rejects = (value: string, range: { min?: number; max?: number }, wanted: RegExp) =>
      assert.throws(
        () => intFlag("n", value, range),
        (e: unknown) => e instanceof UsageError && wanted.test(e.message) && e.message.includes(`"${value}"`),
      );
    rejects("65536", { max: 65535 }, /--n must be an integer from 0 to 65535/);
    rejects("0", { min: 1 }, /--n must be an integer >= 1/);
    rejects("-3", {}, /--n must be a non-negative integer/);
    rejects("1.5", {}, /non-negative integer/);
    rejects("x", { min: 1, max: 20 }, /from 1 to 20/);
    rejects("99999999999999999999", {}, /non-negative integer/);
  });
});
