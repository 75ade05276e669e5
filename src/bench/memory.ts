/**
 * Tokens per trial for each memory mode (`task.reflection`) on served environments, compact
 * prompts, counted by the real model's chat template (the PyTorch worker's `render`):
 *
 * - `prompt tokens`: the prompt tokens of every call of a trial, summed: what a server without a
 *   prefix cache reads;
 * - `scored`: the tokens of the trial's learner sequences (one per prefix chain): what the
 *   learner scores, and what a server with a perfect prefix cache reads;
 * - `longest`: the longest prompt (the context a trial needs).
 *
 * The player is the same in every mode (a uniformly random legal action keyed by the request's
 * seed, and one fixed remark), so only the prompts differ. With `MAGE_BENCH_MEMORY_PLAYER=expert`
 * it is the environment's expert instead (`POST /expert`, given the facts the trial's earlier
 * remarks stated), whose remark states the attempt's own facts as a warm-start corpus does
 * (`composeRemark`, at most 3 facts within `MAGE_BENCH_MEMORY_REMARK_TOKENS`, default 40): where a
 * random legal command ends an attempt at once (ScienceWorld's `focus on`), this plays trials as
 * long as a trained model's, and a later attempt walks what the remark stated, as in every mode
 * with the same actions. Environments are found from
 * `MAGE_BENCH_MEMORY_ENVS` (`name@url` list; default the coin collector at 127.0.0.1:8769 and
 * ALFWorld at 127.0.0.1:8770); an unreachable server is skipped with a line saying so. The model
 * directory is `MAGE_BENCH_MODEL` (default models/smollm2-135m-instruct).
 */
import { existsSync } from "node:fs";
import { Rng } from "../core/rng.js";
import type { TorchLearner } from "../learner/torch/learner.js";
import type { ChatMessage, GenerateRequest, Generation, Policy, SamplingParams } from "../policy/types.js";
import { runTrials } from "../rollout/runner.js";
import type { Row, TrialRecord, TrialSpec } from "../rollout/types.js";
import { openRemoteTask, type RemoteTask, type RemoteTaskDefinition } from "../tasks/remote.js";
import { REFLECTION_TYPES } from "../tasks/types.js";
import { prefixChains } from "../train/batch.js";
import { composeRemark } from "../train/pretrain/served-corpus.js";
import { median } from "./median.js";

const TRIALS = Number(process.env.MAGE_BENCH_MEMORY_TRIALS ?? 8);
const ATTEMPTS = 3;

interface BenchEnv {
  name: string;
  url: string;
  config: Record<string, unknown>;
  seeds?: { min: number; max: number };
  maxTurns: number;
}

const DEFAULT_ENVS: BenchEnv[] = [
  {
    name: "twx-coin",
    url: "http://127.0.0.1:8769",
    config: { split: "train", numLocations: 4, includeDoors: true, maxSteps: 12 },
    seeds: { min: 0, max: 999 },
    maxTurns: 12,
  },
  {
    // configs/pretrain/scienceworld-find-animal-smollm2-v2.yaml's setting (issue 56, part 7).
    name: "sw-find-animal",
    url: "http://127.0.0.1:8770",
    config: { split: "train", openDoors: true, maxSteps: 12, expert: "explore" },
    seeds: { min: 0, max: 149 },
    maxTurns: 12,
  },
  {
    name: "alfworld",
    url: "http://127.0.0.1:8770",
    config: { split: "valid_train", taskTypes: "1-4", maxSteps: 30 },
    maxTurns: 10,
  },
];

function benchEnvs(): BenchEnv[] {
  const given = process.env.MAGE_BENCH_MEMORY_ENVS;
  if (!given) return DEFAULT_ENVS;
  return given.split(",").map((item) => {
    const [name, url] = item.split("@");
    const known = DEFAULT_ENVS.find((e) => e.name === name);
    return { ...(known ?? { config: {}, maxTurns: 20 }), name, url };
  });
}

const REMARK =
  "<remark>The coin was not in the kitchen or the pantry. Not tried: the corridor's north door.</remark>";
const SAMPLING: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] };

/** A random legal action per play call (keyed by the request's seed), one fixed remark per reflect call. */
class RandomLegalPlayer implements Policy {
  readonly name: string = "random-legal";
  private readonly tasks = new Map<number, RemoteTask>();

  register(trialId: number, task: RemoteTask): RemoteTask {
    this.tasks.set(trialId, task);
    return task;
  }

  protected task(trialId: number): RemoteTask {
    return this.tasks.get(trialId)!;
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return requests.map((r) => {
      const key = r.trial!;
      const text =
        key.phase === "reflect"
          ? REMARK
          : `<action>${Rng.seeded(r.seed >>> 0).pick(this.tasks.get(key.trialId)!.legalActions())}</action>`;
      return { text, tokenIds: [], logprobs: [], finishReason: "stop", promptTokens: 0 };
    });
  }
}

const REMARK_TOKENS = Number(process.env.MAGE_BENCH_MEMORY_REMARK_TOKENS ?? 40);

/** The environment's expert per play call, given the facts the trial's remarks stated; remarks state the attempt's facts. */
class ExpertPlayer extends RandomLegalPlayer {
  override readonly name = "expert";
  private readonly stated = new Map<number, string[]>();

  override async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return Promise.all(
      requests.map(async (r) => {
        const key = r.trial!;
        const task = this.task(key.trialId);
        const memory = this.stated.get(key.trialId) ?? [];
        const rng = Rng.seeded(r.seed >>> 0);
        let text: string;
        if (key.phase === "reflect") {
          const remark = composeRemark(
            (await task.expert([])).facts,
            { maxFacts: 3, maxTokens: REMARK_TOKENS },
            rng,
          );
          this.stated.set(key.trialId, [...memory, ...remark.stated.filter((f) => !memory.includes(f))]);
          text = remark.text;
        } else {
          text = `<action>${(await task.expert(memory)).action ?? rng.pick(task.legalActions())}</action>`;
        }
        return { text, tokenIds: [], logprobs: [], finishReason: "stop" as const, promptTokens: 0 };
      }),
    );
  }
}

async function playMode(def: RemoteTaskDefinition, env: BenchEnv, mode: string): Promise<TrialRecord[]> {
  const player =
    process.env.MAGE_BENCH_MEMORY_PLAYER === "expert" ? new ExpertPlayer() : new RandomLegalPlayer();
  const specs: TrialSpec[] = Array.from({ length: TRIALS }, (_, i) => ({
    trialId: i,
    groupId: i,
    taskSeed: 1000 + i,
    opponent: null,
    seat: null,
  }));
  return runTrials(
    specs,
    (s) => player.register(s.trialId, def.create({}) as RemoteTask),
    player,
    Rng.seeded("bench-memory"),
    {
      attempts: ATTEMPTS,
      maxTurns: env.maxTurns,
      reflection: mode as (typeof REFLECTION_TYPES)[number],
      promptStyle: "compact",
      hindsight: false,
      sampling: SAMPLING,
      maxBatch: 64,
      concurrency: 4,
    },
  );
}

const transcript = (row: Row): ChatMessage[] => [...row.prompt, { role: "assistant", content: row.response }];

interface TrialTokens {
  prompt: number;
  scored: number;
  longest: number;
  calls: number;
}

async function countTrial(learner: TorchLearner, trial: TrialRecord): Promise<TrialTokens> {
  const prompts = await learner.render(trial.rows.map((r) => r.prompt));
  const chains = prefixChains(trial.rows);
  const sequences = await learner.render(chains.map((c) => transcript(c[c.length - 1])));
  const lengths = prompts.map((p) => p.ids.length);
  return {
    prompt: lengths.reduce((a, b) => a + b, 0),
    scored: sequences.reduce((a, s) => a + s.ids.length, 0),
    longest: Math.max(...lengths),
    calls: trial.rows.length,
  };
}

async function benchEnv(learner: TorchLearner, env: BenchEnv): Promise<void> {
  let def: RemoteTaskDefinition;
  try {
    def = await openRemoteTask({
      url: env.url,
      name: env.name,
      config: env.config,
      ...(env.seeds ? { seeds: env.seeds } : {}),
      retries: 0,
      timeoutMs: 60000,
    });
  } catch (err) {
    console.log(`${env.name} at ${env.url}: skipped (${(err as Error).message.split("\n")[0]})`);
    return;
  }
  console.log(
    `${env.name} (${JSON.stringify(env.config)}), ${TRIALS} trials × ${ATTEMPTS} attempts, ${env.maxTurns} answers an attempt, ${process.env.MAGE_BENCH_MEMORY_PLAYER === "expert" ? "the expert's play and remarks" : "random legal play"}:`,
  );
  console.log("mode                     calls  prompt tokens (median/trial)  scored  longest prompt");
  for (const mode of REFLECTION_TYPES) {
    const trials = await playMode(def, env, mode);
    const counts = await Promise.all(trials.map((t) => countTrial(learner, t)));
    const med = (f: (c: TrialTokens) => number) => median(counts.map(f)).toFixed(0);
    console.log(
      `${mode.padEnd(25)}${med((c) => c.calls).padStart(5)}  ${med((c) => c.prompt).padStart(28)}  ${med((c) => c.scored).padStart(6)}  ${med((c) => c.longest).padStart(14)}`,
    );
  }
}

export async function run(): Promise<void> {
  const dir = process.env.MAGE_BENCH_MODEL ?? "models/smollm2-135m-instruct";
  if (!existsSync(dir)) {
    console.log(`memory: skipped (no model at ${dir}; run mage fetch-model or set MAGE_BENCH_MODEL)`);
    return;
  }
  const { openTorchModelDir } = await import("../cli/open-torch-model.js");
  const model = await openTorchModelDir(dir, { threads: 1 });
  try {
    for (const env of benchEnvs()) await benchEnv(model.learner, env);
  } finally {
    await model.close();
  }
}
