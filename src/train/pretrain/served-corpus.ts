/**
 * The pretraining corpus of a served environment that declares an expert (`POST /expert`,
 * docs/env-protocol.md): whole compact-style trials through the same trial runner as the built-in
 * corpora, played by an ε-imperfect expert so that attempts fail and reflections have work to do.
 *
 * - play: with probability ε (`firstEpsilon` at attempt 1, if set) a uniformly random legal action
 *   (the state's `legalActions`; with `scoreRandomMoves: false` a `detour` the SFT does not learn,
 *   only the answers after it, which show the recovery), else
 *   the environment expert's action, given as memory the facts the trial's earlier reflections
 *   stated (so later attempts use them: ALFWorld's expert goes straight to where the object was
 *   seen); a share `malformedRate` of play answers is deliberately malformed (no tags, an unclosed
 *   tag, an empty tag, a command that is not admissible), as the other corpora do;
 * - explorer trials (`failedShare` of the trials, drawn by the seed): attempt 1 is an *exploring
 *   attempt that is lost*. A probe first plays the expert alone on the trial's task for one attempt
 *   and counts the answers n it needs to win; the exploring attempt then follows the expert for a
 *   budget of b answers drawn in [1, n − 1] (0 when n = 1; the whole attempt when the expert does
 *   not win it either), so it walks part of the way and never the winning step, and is then stuck:
 *   every later answer of the attempt is a command the game does not accept there (one listed
 *   earlier in the attempt, or a listed command with another's last word), as a model that lost
 *   its way writes, unscored in the SFT like every invalid answer, until the turns run out. The
 *   expert being deterministic for a state, the attempt is lost whenever the probe won (checked:
 *   `stats.served.explorerLost`), and its reflection then leads the later attempts;
 * - reflect: `<remark>…</remark>` stating the failed attempt's own facts (the expert's `facts`:
 *   what that attempt observed, never what the expert knew) and nothing else, in the order the
 *   environment gives them (what the next attempt needs first: the coin collector's where the coin
 *   was not and which exits were not tried, ALFWorld's where the target was seen), at most
 *   `reflectionFacts` of them and as many as fit `remarkMaxTokens` (the reflect call's token cap)
 *   by a conservative token estimate (`estimateTokens`); a fact that would pass the cap is skipped
 *   for a shorter later one.
 *
 * Every draw is keyed by the request's seed (the runner keys it by trial, attempt, phase and turn)
 * or by the corpus's Rng and the trial, and the expert is deterministic for a state, so the same
 * seed gives the same corpus.
 */
import { UsageError } from "../../core/errors.js";
import { Rng } from "../../core/rng.js";
import type { ExpertReply } from "../../env/protocol.js";
import { pretokenize } from "../../model/tokenizer.js";
import type { GenerateRequest, Generation, Policy, SamplingParams } from "../../policy/types.js";
import { runTrials } from "../../rollout/runner.js";
import type { Row, TrialRecord, TrialSpec } from "../../rollout/types.js";
import { assignGroups } from "../../tasks/population.js";
import type { RemoteTask, RemoteTaskDefinition } from "../../tasks/remote.js";
import { type AnswerChoices, type CorpusStats, type CorpusTrial, tallyCorpus } from "./corpus.js";
import type { ServedCorpusStats } from "./served-corpus-stats.js";

export type { ServedCorpusStats } from "./served-corpus-stats.js";

/** The served corpus player's defaults (docs/design.md, "A warm start on a served environment"). */
export const SERVED_CORPUS_DEFAULTS = {
  attempts: 3,
  epsilon: 0.25,
  malformedRate: 0.02,
  reflectionFacts: 3,
  /** No explorer trials unless asked (the corpora built before them stay as they were). */
  failedShare: 0,
  scoreRandomMoves: true,
  /** The checks' reflect calls (`CHECK_SAMPLING.maxTokens`) and the coin training config's `rollout.maxResponseTokens`. */
  remarkMaxTokens: 48,
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
  /**
   * Share of the trials whose attempt 1 is an exploring attempt that is lost (the module's doc):
   * rounded to a number of trials, chosen by the seed. Other trials' attempts fail at ε too, so
   * the share of trials with a failed attempt (`stats.served.failedTrialShare`) is at least this.
   */
  failedShare?: number;
  /** Most tokens of a reflection answer, tags included, by `estimateTokens` (the reflect call's cap). */
  remarkMaxTokens?: number;
  /**
   * Whether the ε-random moves are SFT targets (default true, as corpora always were). False keeps
   * them in the transcripts as unscored detours: the states stay varied, and the model never learns
   * to walk at random (re-opening an open door, stepping back and forth), which it otherwise does.
   */
  scoreRandomMoves?: boolean;
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
  stats: CorpusStats & { served: ServedCorpusStats };
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

/** A play call's identity within the corpus: its trial, attempt and turn. */
const moveKey = (trialId: number, attempt: number, turn: number) => `${trialId}/${attempt}/${turn}`;

/**
 * A conservative count of the tokens a byte-level BPE tokenizer of an English-trained LLM
 * (SmolLM2's 49k vocabulary) writes for `text`: per GPT-2 pre-token, a word one token per 4 letters
 * (rounded up), a number one per digit and one for its space, anything else one per character.
 * On the corpus's remarks it overestimates SmolLM2's count (docs/environments.md, TextWorldExpress,
 * "Warm start"), so a remark it keeps under a cap is under it.
 */
export function estimateTokens(text: string): number {
  let n = 0;
  for (const piece of pretokenize(text)) {
    const body = piece.trimStart();
    const space = piece.length - body.length;
    if (body.length === 0) n += 1;
    else if (/^\p{L}+$/u.test(body)) n += Math.ceil(body.length / 4) + (space > 1 ? space - 1 : 0);
    else if (/^\p{N}+$/u.test(body)) n += body.length + (space > 0 ? 1 : 0);
    else n += body.length + (space > 0 ? 1 : 0);
  }
  return n;
}

const EMPTY_REMARKS = ["Not done, and nothing seen worth keeping.", "Failed. I found nothing useful."];

const remarkOf = (body: string) => `<remark>${body.replace(/\s+/g, " ").trim()}</remark>`;

/**
 * The reflection answer: `<remark>` with the facts in the environment's order, at most `maxFacts`
 * of them and only while the answer stays within `maxTokens` by `estimateTokens` (a fact that
 * would pass it is skipped for a later, shorter one); a fact holding a tag's angle brackets is
 * never stated. No facts: one of two sentences saying so.
 */
export function composeRemark(
  facts: readonly string[],
  opts: { maxFacts: number; maxTokens: number },
  rng: Rng,
): { text: string; stated: string[] } {
  const stated: string[] = [];
  for (const f of facts) {
    if (stated.length >= opts.maxFacts) break;
    const fact = f.replace(/\s+/g, " ").trim();
    if (fact === "" || /[<>]/.test(fact) || stated.includes(fact)) continue;
    if (estimateTokens(remarkOf([...stated, fact].join(" "))) <= opts.maxTokens) stated.push(fact);
  }
  if (stated.length > 0) return { text: remarkOf(stated.join(" ")), stated };
  return { text: remarkOf(rng.pick(EMPTY_REMARKS)), stated };
}

/** A remark stating the facts (all of them, no cap; kept for callers that want one sentence list). */
export function factsRemark(facts: readonly string[], rng: Rng): string {
  return composeRemark(facts, { maxFacts: facts.length, maxTokens: Number.POSITIVE_INFINITY }, rng).text;
}

/** The checked player settings. */
function playerSettings(opts: ServedCorpusOptions) {
  const epsilon = opts.epsilon ?? SERVED_CORPUS_DEFAULTS.epsilon;
  const s = {
    epsilon,
    firstEpsilon: opts.firstEpsilon ?? epsilon,
    malformedRate: opts.malformedRate ?? SERVED_CORPUS_DEFAULTS.malformedRate,
    reflectionFacts: opts.reflectionFacts ?? SERVED_CORPUS_DEFAULTS.reflectionFacts,
    failedShare: opts.failedShare ?? SERVED_CORPUS_DEFAULTS.failedShare,
    remarkMaxTokens: opts.remarkMaxTokens ?? SERVED_CORPUS_DEFAULTS.remarkMaxTokens,
    scoreRandomMoves: opts.scoreRandomMoves ?? SERVED_CORPUS_DEFAULTS.scoreRandomMoves,
  };
  for (const [k, v] of [
    ["epsilon", s.epsilon],
    ["firstEpsilon", s.firstEpsilon],
    ["malformedRate", s.malformedRate],
    ["failedShare", s.failedShare],
  ] as const)
    if (!(v >= 0 && v <= 1)) throw new UsageError(`${k} must be in [0, 1], got ${v}`);
  if (!(Number.isInteger(s.reflectionFacts) && s.reflectionFacts >= 1))
    throw new UsageError(`reflectionFacts must be an integer >= 1, got ${s.reflectionFacts}`);
  // The shortest remark, "<remark>Not done, and nothing seen worth keeping.</remark>", is 18.
  if (!(Number.isInteger(s.remarkMaxTokens) && s.remarkMaxTokens >= 24))
    throw new UsageError(`remarkMaxTokens must be an integer >= 24, got ${s.remarkMaxTokens}`);
  return s;
}

/**
 * How a trial's attempt 1 is played: by the ε-expert, or by the explorer that follows the expert
 * for `budget` answers and is then stuck (Infinity: the whole attempt).
 */
interface TrialPlan {
  explorer: boolean;
  budget: number;
}

/**
 * A command the game does not accept now, as a lost model writes one: one listed earlier in the
 * attempt and not now (a move from another room); before any, a listed command with another's
 * last word; else one no game admits.
 */
export function stuckCommand(legal: readonly string[], seen: ReadonlySet<string>, rng: Rng): string {
  const now = new Set(legal);
  const stale = [...seen].filter((c) => !now.has(c)).sort();
  if (stale.length > 0) return rng.pick(stale);
  const out = new Set<string>();
  const lastWords = [...new Set(legal.map((c) => c.split(" ").at(-1) ?? ""))].filter((w) => w !== "");
  for (const c of legal) {
    const words = c.split(" ");
    if (words.length < 2) continue;
    for (const w of lastWords) {
      const m = [...words.slice(0, -1), w].join(" ");
      if (!now.has(m)) out.add(m);
    }
  }
  const choices = [...out].sort();
  return choices.length > 0 ? rng.pick(choices) : rng.pick(NOT_ADMISSIBLE);
}

/**
 * The expert player: one `RemoteTask` per trial (registered as the runner makes them), the facts
 * its reflections stated so far, and the answers described in the module's doc.
 */
class ExpertPlayer implements Policy {
  readonly name = "served-expert";
  private readonly tasks = new Map<number, RemoteTask>();
  private readonly stated = new Map<number, string[]>();
  /** Commands listed so far in each trial's current attempt (the stuck answers' stale commands). */
  private readonly listed = new Map<number, { attempt: number; commands: Set<string> }>();
  readonly remarkTokens: number[] = [];
  /** The ε-random moves played, by `moveKey` (trial, attempt, turn). */
  private readonly randomMoves = new Set<string>();
  /** The expert's answers whose state had answers it judged a waste (`avoid`), by `moveKey`. */
  private readonly wasted = new Map<string, AnswerChoices>();
  stuckAnswers = 0;

  constructor(
    private readonly s: ReturnType<typeof playerSettings>,
    private readonly plans: ReadonlyMap<number, TrialPlan>,
    private readonly onExpert?: (call: ExpertCall) => void,
  ) {}

  /** Whether the player answered this call with an ε-random move. */
  readonly playedAtRandom = (row: Row): boolean =>
    this.randomMoves.has(moveKey(row.trialId, row.attempt, row.turn));

  /** The answer choices of a call the expert answered where it named wasted answers; else null. */
  readonly choicesOf = (row: Row): AnswerChoices | null =>
    this.wasted.get(moveKey(row.trialId, row.attempt, row.turn)) ?? null;

  /** Expert answers with wasted answers named beside them, and how many were named. */
  wastedCounts(): { answers: number; named: number } {
    const named = [...this.wasted.values()].reduce((a, c) => a + c.illegal.length, 0);
    return { answers: this.wasted.size, named };
  }

  /** Plays the expert's advice, noting the answers it judged a waste at this state. */
  private advised(
    key: NonNullable<GenerateRequest["trial"]>,
    legal: readonly string[],
    advice: ExpertReply,
  ): string | null {
    if (advice.action === null) return null;
    const avoid = new Set((advice.avoid ?? []).filter((a) => a !== advice.action && legal.includes(a)));
    if (avoid.size > 0)
      this.wasted.set(moveKey(key.trialId, key.attempt, key.turn), {
        legal: legal.filter((a) => !avoid.has(a)).map(tag),
        illegal: [...avoid].map(tag),
      });
    return tag(advice.action);
  }

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

  /** The commands listed so far in the trial's current attempt, this turn's included. */
  private seen(trialId: number, attempt: number, legal: readonly string[]): Set<string> {
    let entry = this.listed.get(trialId);
    if (!entry || entry.attempt !== attempt) {
      entry = { attempt, commands: new Set() };
      this.listed.set(trialId, entry);
    }
    for (const c of legal) entry.commands.add(c);
    return entry.commands;
  }

  private async play(
    task: RemoteTask,
    key: NonNullable<GenerateRequest["trial"]>,
    rng: Rng,
  ): Promise<string> {
    const legal = task.legalActions();
    if (legal.length === 0) throw new Error(`${task.name}: no legal actions listed at a play prompt`);
    const seen = this.seen(key.trialId, key.attempt, legal);
    const plan = this.plans.get(key.trialId);
    if (plan?.explorer && key.attempt === 0) return this.explore(task, key, plan, legal, seen, rng);
    if (rng.derive("malformed?").float() < this.s.malformedRate) {
      const kind = rng.derive("kind").pick(Object.keys(MALFORMED));
      return MALFORMED[kind](legal, rng.derive("malformed", kind));
    }
    const random = rng.derive("random").pick(legal);
    const epsilon = key.attempt === 0 ? this.s.firstEpsilon : this.s.epsilon;
    if (rng.derive("epsilon?").float() < epsilon) {
      this.randomMoves.add(moveKey(key.trialId, key.attempt, key.turn));
      return tag(random);
    }
    const memory = this.stated.get(key.trialId) ?? [];
    this.onExpert?.({ trialId: key.trialId, attempt: key.attempt, turn: key.turn, memory: [...memory] });
    return this.advised(key, legal, await task.expert(memory)) ?? tag(random);
  }

  /** The explorer's attempt 1: the expert's actions within the budget, then stuck answers. */
  private async explore(
    task: RemoteTask,
    key: NonNullable<GenerateRequest["trial"]>,
    plan: TrialPlan,
    legal: readonly string[],
    seen: ReadonlySet<string>,
    rng: Rng,
  ): Promise<string> {
    if (key.turn < plan.budget) {
      this.onExpert?.({ trialId: key.trialId, attempt: key.attempt, turn: key.turn, memory: [] });
      const advised = this.advised(key, legal, await task.expert([]));
      if (advised !== null) return advised;
    }
    this.stuckAnswers++;
    return tag(stuckCommand(legal, seen, rng.derive("stuck")));
  }

  /** The failed attempt's own facts, as many as the remark holds; they become the trial's memory. */
  private async reflect(task: RemoteTask, trialId: number, rng: Rng): Promise<string> {
    const { facts } = await task.expert([]);
    const remark = composeRemark(
      facts,
      { maxFacts: this.s.reflectionFacts, maxTokens: this.s.remarkMaxTokens },
      rng.derive("remark"),
    );
    const stated = this.stated.get(trialId) ?? [];
    for (const f of remark.stated) if (!stated.includes(f)) stated.push(f);
    this.stated.set(trialId, stated);
    this.remarkTokens.push(estimateTokens(remark.text));
    return remark.text;
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

/** The explorer trials: `round(share · trials)` of them, chosen by a keyed shuffle. */
function explorerTrials(specs: readonly TrialSpec[], share: number, rng: Rng): TrialSpec[] {
  const n = Math.round(share * specs.length);
  if (n === 0) return [];
  const order = specs.map((s) => s.trialId);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rng.float() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const chosen = new Set(order.slice(0, n));
  return specs.filter((s) => chosen.has(s.trialId));
}

/**
 * The explorer trials' budgets: a probe plays the expert alone for one attempt of each one's task
 * (the same seed, so the same task) and counts the answers n it needed to win; the budget is drawn
 * in [1, n − 1] (0 when n = 1), Infinity when the expert did not win.
 */
async function explorerPlans(
  opts: ServedCorpusOptions,
  specs: readonly TrialSpec[],
  settings: ReturnType<typeof playerSettings>,
  runOptions: Parameters<typeof runTrials>[4],
): Promise<Map<number, TrialPlan>> {
  const explorers = explorerTrials(specs, settings.failedShare, opts.rng.derive("explorers"));
  const plans = new Map<number, TrialPlan>();
  if (explorers.length === 0) return plans;
  const probes = new Map(explorers.map((s) => [s.trialId, { explorer: true, budget: Infinity }]));
  const prober = new ExpertPlayer(settings, probes);
  const records = await runTrials(
    explorers,
    (s) => prober.register(s.trialId, opts.def.create({}) as RemoteTask),
    prober,
    // The corpus run's root: the runner draws each task instance from it and the trial's seed.
    opts.rng.derive("run"),
    { ...runOptions, attempts: 1 },
  );
  for (const r of records) {
    const a = r.attempts[0];
    const n = a?.won ? a.turns : Infinity;
    const u = opts.rng.derive("budget", r.trialId).float();
    const budget = n === Infinity ? Infinity : n <= 1 ? 0 : 1 + Math.floor(u * (n - 1));
    plans.set(r.trialId, { explorer: true, budget });
  }
  return plans;
}

/** The corpus's teaching counts (`ServedCorpusStats`) from its records and the player's tallies. */
function servedStats(
  records: readonly TrialRecord[],
  plans: ReadonlyMap<number, TrialPlan>,
  player: ExpertPlayer,
  settings: ReturnType<typeof playerSettings>,
): ServedCorpusStats {
  const rows = records.flatMap((r) => r.rows);
  const randomMoves = rows.filter((w) => w.phase === "play" && w.valid && player.playedAtRandom(w)).length;
  const failed = records.filter((r) => r.rows.some((w) => w.phase === "reflect")).length;
  const lost = records.filter((r) => r.attempts.length > 1 && !r.attempts[0].won);
  const actions =
    rows.filter((w) => w.phase === "play" && w.valid).length - (settings.scoreRandomMoves ? 0 : randomMoves);
  const remarks = rows.filter((w) => w.phase === "reflect").length;
  const tokens = player.remarkTokens;
  const explorers = records.filter((r) => plans.get(r.trialId)?.explorer);
  return {
    failedShare: settings.failedShare,
    explorerTrials: explorers.length,
    explorerLost: explorers.filter((r) => !r.attempts[0]?.won).length,
    failedTrials: failed,
    failedTrialShare: records.length > 0 ? failed / records.length : 0,
    lostFirst: lost.length,
    wonSecondAfterLostFirst: lost.filter((r) => r.attempts[1]?.won).length,
    stuckAnswers: player.stuckAnswers,
    randomMoves,
    randomMovesScored: settings.scoreRandomMoves,
    wasted: player.wastedCounts(),
    actionAnswers: actions,
    remarkToAction: actions > 0 ? remarks / actions : 0,
    remarkTokens: {
      estimate: "conservative",
      cap: settings.remarkMaxTokens,
      mean: tokens.length > 0 ? tokens.reduce((a, b) => a + b, 0) / tokens.length : 0,
      max: Math.max(0, ...tokens),
      overCap: tokens.filter((t) => t > settings.remarkMaxTokens).length,
    },
  };
}

/** Plays `trials` trials of a served environment with the ε-imperfect expert; their transcripts. */
export async function buildServedCorpus(opts: ServedCorpusOptions): Promise<ServedCorpus> {
  checkExpertEnvironment(opts.def);
  if (!(Number.isInteger(opts.trials) && opts.trials > 0))
    throw new UsageError(`trials must be a positive integer, got ${opts.trials}`);
  const settings = playerSettings(opts);
  const specs: TrialSpec[] = assignGroups({
    numGroups: opts.trials,
    pool: null,
    rng: opts.rng.derive("groups"),
  }).map((g) => ({ trialId: g.group, groupId: g.group, taskSeed: g.taskSeed, opponent: null, seat: null }));
  const runOptions = {
    attempts: opts.attempts ?? SERVED_CORPUS_DEFAULTS.attempts,
    maxTurns: opts.maxTurns ?? opts.def.maxTurns,
    reflection: "reflection_only" as const,
    promptStyle: "compact" as const,
    hindsight: false,
    sampling: PLAYER_SAMPLING,
    maxBatch: opts.maxBatch ?? SERVED_CORPUS_DEFAULTS.maxBatch,
    concurrency: 1,
  };
  const plans = await explorerPlans(opts, specs, settings, runOptions);
  const player = new ExpertPlayer(settings, plans, opts.onExpert);
  const records: TrialRecord[] = await runTrials(
    specs,
    (s) => player.register(s.trialId, opts.def.create({}) as RemoteTask),
    player,
    opts.rng.derive("run"),
    runOptions,
  );
  const { trials, stats } = tallyCorpus(
    records,
    specs.map(() => ({ opponent: null, seat: null, hindsight: false })),
    {
      ...(settings.scoreRandomMoves ? {} : { isDetour: player.playedAtRandom }),
      choicesOf: player.choicesOf,
    },
  );
  return {
    game: "remote",
    env: opts.def.env.name,
    trials,
    stats: { ...stats, served: servedStats(records, plans, player, settings) },
  };
}

function randomMovesText(s: ServedCorpusStats): string {
  if (s.randomMoves === undefined) return "";
  return `, ${s.randomMoves} random moves${s.randomMovesScored === false ? " (unscored)" : ""}`;
}

/** One line of a served corpus's teaching counts, for the warm start's log and `--corpus-only`. */
export function servedCorpusText(s: ServedCorpusStats): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const t = s.remarkTokens;
  return (
    `${s.failedTrials} trials with a failed attempt and its reflection (${pct(s.failedTrialShare)}; ` +
    `failedShare ${s.failedShare}: ${s.explorerTrials} exploring first attempts, ${s.explorerLost} lost, ` +
    `${s.stuckAnswers} stuck answers${randomMovesText(s)}); attempt 2 won ${s.wonSecondAfterLostFirst} of ${s.lostFirst} trials lost at attempt 1; ` +
    `remarks ${t.mean.toFixed(1)} tokens on average, ${t.max} at most (estimated; cap ${t.cap}, ${t.overCap} over); ` +
    `${s.remarkToAction.toFixed(3)} remarks per accepted action (${s.actionAnswers} actions)${wastedText(s)}`
  );
}

function wastedText(s: ServedCorpusStats): string {
  if (!s.wasted || s.wasted.answers === 0) return "";
  return `; ${s.wasted.named} answers the expert judged a waste, beside ${s.wasted.answers} of its own`;
}
