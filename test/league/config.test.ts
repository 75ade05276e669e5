import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { validateConfig } from "../../src/train/config.js";

function kuhn(population: Record<string, unknown>, more: Record<string, unknown> = {}) {
  return { game: "kuhn", population: { opponents: [{ spec: "cfr" }], ...population }, ...more };
}

function errorOf(raw: unknown): string {
  try {
    validateConfig(raw);
  } catch (err) {
    assert.ok(err instanceof UsageError, String(err));
    return (err as Error).message;
  }
  assert.fail("the config was accepted");
}

describe("league config", () => {
  it("fills in the defaults", () => {
    const c = validateConfig(kuhn({ league: { every: 4 } }));
    assert.deepEqual(c.population.league, {
      every: 4,
      atStart: true,
      share: 0.5,
      sampling: "uniform",
      lag: { min: 1, max: 20 },
      priority: 1,
      maxSnapshots: 8,
    });
    assert.equal(c.population.rate, false);
    assert.equal(validateConfig(kuhn({})).population.league, null);
  });

  it("names the bad field", () => {
    assert.match(errorOf(kuhn({ league: { every: 0 } })), /population\.league\.every/);
    assert.match(errorOf(kuhn({ league: { every: 2, sampling: "newest" } })), /population\.league\.sampling/);
    assert.match(errorOf(kuhn({ league: { every: 2, share: 1.5 } })), /population\.league\.share/);
    assert.match(
      errorOf(kuhn({ league: { every: 2, sampling: "lagged", lag: { min: 5, max: 2 } } })),
      /population\.league\.lag\.min: must be at most lag\.max \(2\)/,
    );
    assert.match(errorOf(kuhn({ league: { every: 2, maxSnaps: 3 } })), /population\.league/);
    assert.match(
      errorOf({ game: "sokoban", population: { rate: true } }),
      /population\.rate: is for the two-player games/,
    );
  });

  it("a torch league takes LoRA in one worker process; full fine-tuning and torchrun are refused by field", () => {
    const torch = (t: Record<string, unknown>) =>
      kuhn({ league: { every: 2 } }, { model: { backend: "torch", torch: { path: "/m", ...t } } });
    const c = validateConfig(torch({ lora: { rank: 8 } }));
    assert.equal(c.population.league?.every, 2);
    assert.match(
      errorOf(torch({})),
      /model\.torch\.lora: a torch league's snapshots are LoRA adapters on the one base model: set model\.torch\.lora/,
    );
    assert.match(
      errorOf(torch({ lora: { rank: 8 }, processes: 2 })),
      /model\.torch\.processes: a torch league samples its snapshots in one worker process/,
    );
  });

  it("pure self-play needs no scripted opponents, but then snapshots from the start", () => {
    const cells = { cells: [{ opponent: "cfr", seat: "first" }] };
    const selfPlay = { game: "kuhn", population: { league: { every: 2, share: 1 } }, eval: cells };
    assert.equal(validateConfig(selfPlay).population.opponents.length, 0);
    assert.match(
      errorOf({ ...selfPlay, eval: {} }),
      /eval\.cells: pure self-play .* has no training opponent to evaluate against/,
    );
    assert.match(
      errorOf({ game: "kuhn", population: { league: { every: 2, share: 1, atStart: false } }, eval: cells }),
      /population\.opponents: kuhn is a two-player game/,
    );
    assert.match(
      errorOf({ game: "kuhn", population: { league: { every: 2, share: 0.5 } } }),
      /population\.opponents/,
    );
  });
});
