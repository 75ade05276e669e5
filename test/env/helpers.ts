/** Shared pieces of the environment-protocol tests: a scripted policy for every game and runner options. */
import { Rng } from "../../src/core/rng.js";
import type { GenerateRequest, Generation, Policy } from "../../src/policy/types.js";
import type { RunnerOptions } from "../../src/rollout/runner.js";

import { wireRngs } from "../../src/tasks/remote.js";
import type { TextTask } from "../../src/tasks/types.js";

/**
 * Answers from a generator keyed by the request seed: mostly well-formed actions of `game`, one
 * in eight malformed (so invalid steps cross the protocol too), and a remark when asked to reflect.
 */
export function scriptedPolicy(game: string): Policy & { calls: number } {
  const p = {
    name: "scripted",
    calls: 0,
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        p.calls += 1;
        const rng = Rng.seeded(r.seed);
        const last = r.messages[r.messages.length - 1].content.toLowerCase();
        let text: string;
        if (last.includes("reflect") || last.includes("remark")) text = "<remark>try something else</remark>";
        else if (rng.int(8) === 0) text = "I am not sure. <action>sideways</action>";
        else if (game === "kuhn") text = `<action>${rng.pick(["PASS", "BET"])}</action>`;
        else if (game === "sokoban")
          text = `<action>${[0, 1].map(() => rng.pick(["up", "down", "left", "right"])).join(", ")}</action>`;
        else if (game === "minesweeper") text = `<action>(${1 + rng.int(6)}, ${1 + rng.int(6)})</action>`;
        else text = `<think>hmm</think><action>(${1 + rng.int(3)}, ${1 + rng.int(3)})</action>`;
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
      });
    },
  };
  return p;
}

export const RUNNER: RunnerOptions = {
  attempts: 3,
  maxTurns: 6,
  reflection: "reflection_only",
  promptStyle: "compact",
  hindsight: true,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 32, stop: [] },
  maxBatch: 64,
  concurrency: 1,
};

/** An in-process task seeded the way `mage env-serve` seeds a served one (`wireRngs`). */
export function wireSeeded(task: TextTask): TextTask {
  return new Proxy(task, {
    get(target, prop, receiver) {
      if (prop === "reset") {
        return (rng: Rng, opponentRng?: Rng) => {
          const w = wireRngs(rng, opponentRng ?? rng.derive("opponent"));
          return target.reset(w.rng, w.opponentRng);
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}
