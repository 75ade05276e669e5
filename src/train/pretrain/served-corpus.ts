/**
 * The pretraining corpus of a served environment that declares an expert (`POST /expert`,
 * docs/env-protocol.md): whole compact-style trials through the same trial runner as the built-in
 * corpora, played by an ε-imperfect expert so that attempts fail and reflections have work to do.
 *
 * - play: with probability ε (`firstEpsilon` at attempt 1, if set) a uniformly random legal action
 *   (the state's `legalActions`), else
 *   the environment expert's action, given as memory the facts the trial's earlier reflections
 *   stated (so later attempts use them: ALFWorld's expert goes straight to where the object was
 *   seen); a share `malformedRate` of play answers is deliberately malformed (no tags, an unclosed
 *   tag, an empty tag, a command that is not admissible), as the other corpora do;
 * - reflect: `<remark>…</remark>` stating at most `reflectionFacts` of the failed attempt's own facts
 *   (the expert's `facts`: what that attempt observed, never what the expert knew), in the order
 *   the environment gives them (ALFWorld: where the target was seen first).
 *
 * Every draw is keyed by the request's seed (the runner keys it by trial, attempt, phase and turn),
 * and the expert is deterministic for a state, so the same seed gives the same corpus.
 */
import { UsageError } from "../../core/errors.js";
import { Rng } from "../../core/rng.js";
import type { GenerateRequest, Generation, Policy, SamplingParams } from "../../policy/types.js";
import { runTrials } from "../../rollout/runner.js";
import type { TrialRecord, TrialSpec } from "../../rollout/types.js";
import { assignGroups } from "../../tasks/population.js";
import type { RemoteTask, RemoteTaskDefinition } from "../../tasks/remote.js";
import { type CorpusStats, type CorpusTrial, tallyCorpus } from "./corpus.js";

/** The served corpus player's defaults (docs/design.md, "A warm start on a served environment"). */
export const SERVED_CORPUS_DEFAULTS = {
  attempts: 3,
  epsilon: 0.25,
  malformedRate: 0.02,
  reflectionFacts: 3,
  maxBatch: 64,
} as const;

export interface ServedCorpusOptions {
  /** A served environment whose /info declares `expert: true` and lists legal actions. */
  def: RemoteTaskDefinition;
  trials: number;
  rng: Rng;
  attempts?: number;
  /** Agent turns per attempt (default: the environment's `maxTurns`). */
  maxTurns?: number;
  /** Share of play answers that are random legal actions instead of the expert's. */
  epsilon?: number;
  /**
   * The share at attempt 1 (default: `epsilon`). A higher one makes first attempts fail, so that
   * more trials show a reflection and a later attempt that walks what it stated.
   */
  firstEpsilon?: number;
  malformedRate?: number;
  /** Most facts a reflection states (ALFWorld's are ordered: where the target was seen first). */
  reflectionFacts?: number;
  /** Most trials in one round of calls. */
  maxBatch?: number;
  /** Called with the memory of every expert call (tests). */
  onExpert?: (call: ExpertCall) => void;
}

export interface ExpertCall {
  trialId: number;
  attempt: number;
  turn: number;
  memory: readonly string[];
}

export interface ServedCorpus {
  game: "remote";
  /** The served environment's name. */
  env: string;
  trials: CorpusTrial[];
  stats: CorpusStats;
}

/** Sampling fields the runner passes on; the player ignores them. */
const PLAYER_SAMPLING: SamplingParams = { temperature: 1, topP: 1, topK: 0, maxTokens: 64, stop: [] };

/** Commands no served environment admits, for the malformed answers. */
const NOT_ADMISSIBLE = ["teleport to the garden", "take everything", "open the window", "pick up the room"];

const MALFORMED: Record<string, (legal: readonly string[], rng: Rng) => string> = {
  "no-tags": (legal, rng) => rng.pick(legal),
  unclosed: (legal, rng) => `<action>${rng.pick(legal)}`,
  empty: () => "<action></action>",
  "not-admissible": (_l, rng) => `<action>${rng.pick(NOT_ADMISSIBLE)}</action>`,
};

const tag = (action: string) => `<action>${action}</action>`;

/** A remark stating the facts, from one of a few templates. */
export function factsRemark(facts: readonly string[], rng: Rng): string {
  const seen = facts.join(" ");
  const templates =
    facts.length === 0
      ? ["Not done, and nothing seen worth keeping.", "Failed. I found nothing useful."]
      : [`Not done. ${seen}`, `Failed. I saw: ${seen}`, `${seen} The task was not done.`];
  return `<remark>${rng.pick(templates).replace(/\s+/g, " ").trim()}</remark>`;
}

/** The checked player settings. */
function playerSettings(opts: ServedCorpusOptions) {
  const epsilon = opts.epsilon ?? SERVED_CORPUS_DEFAULTS.epsilon;
  const s = {
    epsilon,
    firstEpsilon: opts.firstEpsilon ?? epsilon,
    malformedRate: opts.malformedRate ?? SERVED_CORPUS_DEFAULTS.malformedRate,
    reflectionFacts: opts.reflectionFacts ?? SERVED_CORPUS_DEFAULTS.reflectionFacts,
  };
  for (const [k, v] of [
    ["epsilon", s.epsilon],
    ["firstEpsilon", s.firstEpsilon],
    ["malformedRate", s.malformedRate],
  ] as const)
    if (!(v >= 0 && v <= 1)) throw new UsageError(`${k} must be in [0, 1], got ${v}`);
  if (!(Number.isInteger(s.reflectionFacts) && s.reflectionFacts >= 1))
    throw new UsageError(`reflectionFacts must be an integer >= 1, got ${s.reflectionFacts}`);
  return s;
}

/**
 * The expert player: one `RemoteTask` per trial (registered as the runner makes them), the facts
 * its reflections stated so far, and the answers described in the module's doc.
 */
class ExpertPlayer implements Policy {
  readonly name = "served-expert";
  private readonly tasks = new Map<number, RemoteTask>();
  private readonly stated = new Map<number, string[]>();

  constructor(
    private readonly s: ReturnType<typeof playerSettings>,
    private readonly onExpert?: (call: ExpertCall) => void,
  ) {}

  register(trialId: number, task: RemoteTask): RemoteTask {
    this.tasks.set(trialId, task);
    this.stated.set(trialId, []);
    return task;
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    return Promise.all(requests.map((r) => this.answer(r)));
  }

  private async answer(req: GenerateRequest): Promise<Generation> {
    const key = req.trial;
    if (!key) throw new Error("the served corpus player needs the trial runner's request keys");
    const task = this.tasks.get(key.trialId);
    if (!task) throw new Error(`the served corpus player has no task for trial ${key.trialId}`);
    const rng = Rng.seeded(req.seed >>> 0).derive("served-expert");
    const text =
      key.phase === "reflect" ? await this.reflect(task, key.trialId, rng) : await this.play(task, key, rng);
    return { text, tokenIds: [], logprobs: [], finishReason: "stop", promptTokens: 0 };
  }

  private async play(
    task: RemoteTask,
    key: NonNullable<GenerateRequest["trial"]>,
    rng: Rng,
  ): Promise<string> {
    const legal = task.legalActions();
    if (legal.length === 0) throw new Error(`${task.name}: no legal actions listed at a play prompt`);
    if (rng.derive("malformed?").float() < this.s.malformedRate) {
      const kind = rng.derive("kind").pick(Object.keys(MALFORMED));
      return MALFORMED[kind](legal, rng.derive("malformed", kind));
    }
    const random = rng.derive("random").pick(legal);
    const epsilon = key.attempt === 0 ? this.s.firstEpsilon : this.s.epsilon;
    if (rng.derive("epsilon?").float() < epsilon) return tag(random);
    const memory = this.stated.get(key.trialId) ?? [];
    this.onExpert?.({ trialId: key.trialId, attempt: key.attempt, turn: key.turn, memory: [...memory] });
    const advice = await task.expert(memory);
    return tag(advice.action ?? random);
  }

  /** The failed attempt's own facts, at most `reflectionFacts` of them; they become the trial's memory. */
  private async reflect(task: RemoteTask, trialId: number, rng: Rng): Promise<string> {
    const { facts } = await task.expert([]);
    const chosen = facts.slice(0, this.s.reflectionFacts);
    const stated = this.stated.get(trialId) ?? [];
    for (const f of chosen) if (!stated.includes(f)) stated.push(f);
    this.stated.set(trialId, stated);
    return factsRemark(chosen, rng.derive("remark"));
  }
}

/** Checks that a served environment can drive the corpus player; a UsageError says why not. */
export function checkExpertEnvironment(def: RemoteTaskDefinition): void {
  if (def.env.expert !== true)
    throw new UsageError(
      `environment "${def.env.name}" on ${def.client.url} declares no expert (its /info entry lacks "expert": true), so it has no corpus to pretrain on`,
    );
  if (!def.env.legalActions)
    throw new UsageError(
      `environment "${def.env.name}" on ${def.client.url} lists no legal actions, which the corpus player's random moves need`,
    );
}

/** Plays `trials` trials of a served environment with the ε-imperfect expert; their transcripts. */
export async function buildServedCorpus(opts: ServedCorpusOptions): Promise<ServedCorpus> {
  checkExpertEnvironment(opts.def);
  if (!(Number.isInteger(opts.trials) && opts.trials > 0))
    throw new UsageError(`trials must be a positive integer, got ${opts.trials}`);
  const player = new ExpertPlayer(playerSettings(opts), opts.onExpert);
  const specs: TrialSpec[] = assignGroups({
    numGroups: opts.trials,
    pool: null,
    rng: opts.rng.derive("groups"),
  }).map((g) => ({ trialId: g.group, groupId: g.group, taskSeed: g.taskSeed, opponent: null, seat: null }));
  const records: TrialRecord[] = await runTrials(
    specs,
    (s) => player.register(s.trialId, opts.def.create({}) as RemoteTask),
    player,
    opts.rng.derive("run"),
    {
      attempts: opts.attempts ?? SERVED_CORPUS_DEFAULTS.attempts,
      maxTurns: opts.maxTurns ?? opts.def.maxTurns,
      reflection: "reflection_only",
      promptStyle: "compact",
      hindsight: false,
      sampling: PLAYER_SAMPLING,
      maxBatch: opts.maxBatch ?? SERVED_CORPUS_DEFAULTS.maxBatch,
      concurrency: 1,
    },
  );
  const { trials, stats } = tallyCorpus(
    records,
    specs.map(() => ({ opponent: null, seat: null, hindsight: false })),
  );
  return { game: "remote", env: opts.def.env.name, trials, stats };
}
