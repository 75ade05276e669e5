// ALFWorld prompt sizes (docs/environments.md): the messages of every call of 8 valid_seen trials (3
// attempts × 10 turns, reflections) in both prompt styles, with a policy that answers a random
// admissible command; written to OUT for scripts/count-chat-tokens.py.
//
//   (cd python && $PY -m mage_envs.alfworld_server --port 8791) &
//   npx tsx scripts/alfworld-prompt-tokens.ts http://127.0.0.1:8791 /tmp/alf-calls.json
//   $PY scripts/count-chat-tokens.py /tmp/alf-calls.json models/smollm2-135m-instruct
import { writeFileSync } from "node:fs";
import { Rng } from "../src/core/rng.js";
import type { GenerateRequest, Generation, Policy } from "../src/policy/types.js";
import { runTrials } from "../src/rollout/runner.js";
import { openRemoteTask } from "../src/tasks/remote.js";

const HEADING = "Your admissible actions in the current situation are:";
function listed(prompt: string): string[] {
  const full = prompt.lastIndexOf(HEADING);
  if (full >= 0)
    return prompt
      .slice(full + HEADING.length)
      .split("]")[0]
      .replace(/^\s*\[/, "")
      .split(", ");
  const compact = /Actions: ([^\n]*)\.\n?[^\n]*$/.exec(prompt)?.[1];
  const acts = compact ? compact.split(", ").filter((a) => a !== "go to PLACE") : [];
  const places = [...prompt.matchAll(/you see a ([^.]*)\./g)].flatMap((m) =>
    m[1]
      .replace(/, and a /, ", a ")
      .split(", a ")
      .map((p) => `go to ${p.replace(/^a /, "")}`),
  );
  return [...acts, ...places.slice(0, 20)];
}
const calls: {
  style: string;
  trial: number;
  phase: string;
  messages: { role: string; content: string }[];
  response: string;
}[] = [];
function policy(style: string): Policy {
  return {
    name: "random-admissible",
    async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
      return requests.map((r) => {
        const rng = Rng.seeded(r.seed);
        const last = r.messages[r.messages.length - 1].content;
        const reflect = /<remark>/.test(last);
        const acts = listed(last).filter((a) => a.length > 0 && a !== "look" && a !== "inventory");
        const text = reflect
          ? "I did not find the object. <remark>Check the countertops and cabinets first, then take it to the target.</remark>"
          : `<action>${acts.length ? rng.pick(acts) : "look"}</action>`;
        calls.push({
          style,
          trial: r.seed,
          phase: reflect ? "reflect" : "play",
          messages: r.messages.map((m) => ({ role: m.role, content: m.content })),
          response: text,
        });
        const tokenIds = Array.from(text, (c) => c.charCodeAt(0) % 200);
        return { text, tokenIds, logprobs: tokenIds.map(() => -1), finishReason: "stop", promptTokens: 10 };
      });
    },
  };
}
const url = process.argv[2];
const def = await openRemoteTask({
  url,
  name: "alfworld",
  config: { split: "valid_seen", taskTypes: "all" },
  timeoutMs: 300_000,
});
const out: Record<string, unknown> = {};
for (const style of ["full", "compact"] as const) {
  const specs = Array.from({ length: 8 }, (_, i) => ({
    trialId: i,
    groupId: i,
    taskSeed: 100 + i,
    opponent: null,
    seat: null,
  }));
  const t0 = Date.now();
  const recs = await runTrials(specs, () => def.create({}), policy(style), Rng.seeded(7), {
    attempts: 3,
    maxTurns: 10,
    reflection: "reflection_only",
    promptStyle: style,
    hindsight: false,
    sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 64, stop: [] },
    maxBatch: 64,
    concurrency: 8,
  });
  out[style] = {
    seconds: (Date.now() - t0) / 1000,
    trials: recs.map((r) => ({
      category: r.category,
      attempts: r.attempts.length,
      won: r.attempts.some((a) => a.won),
      rows: r.rows.length,
    })),
  };
}
writeFileSync(process.argv[3] ?? "alf-calls.json", JSON.stringify({ out, calls }));
console.log(JSON.stringify(out));
