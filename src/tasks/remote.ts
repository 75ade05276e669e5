/**
 * `game: remote`: a text task served by an environment server over the `mage-env/1` protocol
 * (docs/env-protocol.md). The trial runner, training, evaluation, replay and the dashboard use it
 * like a built-in task: `reset` creates a session, `step` sends the raw response, `restart` asks
 * for the identical initial state and checks the server's fingerprint and observation against
 * the ones `/create` gave (a different state is an error, never silent play on another task).
 */
import { ExternalFailure, UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import { EnvClient, type EnvClientOptions } from "../env/client.js";
import {
  checkEnvConfig,
  type EnvDescription,
  type ExpertReply,
  type Forfeit,
  type StateReply,
} from "../env/protocol.js";
import { actionContent } from "./parse.js";
import type { TaskDefinition } from "./registry.js";
import {
  type InformativeRule,
  informativeRuleNamed,
  knownInformativeRule,
  OBSERVED_TERMS,
} from "./remark-quality.js";
import type {
  AttemptSeen,
  Seat,
  StepResult,
  TaskInfo,
  TaskOptions,
  TaskPromptText,
  TextTask,
} from "./types.js";

/** The `env` section of a `game: remote` config. */
export interface RemoteEnvSettings {
  url: string;
  name: string;
  config?: Record<string, unknown>;
  timeoutMs?: number;
  retries?: number;
  concurrency?: number;
  /** A sub-range of the server's seeds to draw instances from (default: all of them). */
  seeds?: { min: number; max: number } | null;
  /** The environment variable that holds the server's API key (sent as a bearer token). */
  apiKeyEnv?: string | null;
}

/** The key a remote config names by `env.apiKeyEnv`; a name that is unset or empty is a UsageError. */
export function remoteApiKey(
  name: string | null | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  if (name === undefined || name === null) return undefined;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
    throw new UsageError(
      `env.apiKeyEnv must name an environment variable (letters, digits, _), got "${name}"`,
    );
  const value = env[name]?.trim();
  if (!value) throw new UsageError(`env.apiKeyEnv: the environment variable ${name} is not set or empty`);
  return value;
}

/** The restart of a session came back to another state than its creation. */
export class RestartMismatchError extends ExternalFailure {
  constructor(message: string) {
    super(message);
    this.name = "RestartMismatchError";
  }
}

/** An integer seed in [min, max] from a keyed stream (the protocol carries integers, not streams). */
export function wireSeed(rng: Rng, range: { min: number; max: number }): number {
  return range.min + (rng.derive("wire-seed").nextU32() % (range.max - range.min + 1));
}

const U32 = { min: 0, max: 0xffffffff } as const;

/**
 * The generators a served engine builds from the wire seeds (`mage env-serve`): the task stream
 * and the opponent stream each become `Rng.seeded(seed)`. In-process play through the same
 * mapping reproduces served play exactly.
 */
export function wireRngs(rng: Rng, opponentRng: Rng): { rng: Rng; opponentRng: Rng } {
  return { rng: Rng.seeded(wireSeed(rng, U32)), opponentRng: Rng.seeded(wireSeed(opponentRng, U32)) };
}

interface Current {
  legalActions?: string[];
  observation: string;
  compactObservation: string;
  done: boolean;
  forfeit: Forfeit | null;
}

function stateOf(r: StateReply): Current {
  return {
    observation: r.observation,
    compactObservation: r.compactObservation ?? r.observation,
    done: r.done,
    forfeit: r.forfeit ?? null,
    ...(r.legalActions ? { legalActions: r.legalActions } : {}),
  };
}

export class RemoteTask implements TextTask {
  readonly name: string;
  readonly opponent: string | null;
  readonly seat: Seat | null;
  private session: string | undefined;
  private seq = 0;
  private initial: StateReply | undefined;
  private cur: Current | undefined;
  private prompt: TaskPromptText | undefined;
  private end = { won: false, draw: false, score: 0 };
  private category: string | undefined;
  /** The informative rule of the current prompt text (rebuilt when a reset brings another). */
  private remarkRule: { prompt: TaskPromptText; rule: InformativeRule } | undefined;
  /**
   * Whether a reflection is informative, by the environment's declared rule (`/info` `remarks`,
   * `INFORMATIVE_RULES`); absent when it declares `"none"` or a rule mage does not know.
   * Default: observed terms.
   */
  readonly remarkInformative?: (text: string, attempt: AttemptSeen) => boolean;
  /** The wire seed to play (`TaskOptions.instance`); undefined: drawn from the task stream. */
  private readonly instance: number | undefined;

  constructor(
    private readonly client: EnvClient,
    private readonly env: EnvDescription,
    private readonly config: Record<string, unknown>,
    private readonly seeds: { min: number; max: number },
    options: TaskOptions = {},
  ) {
    this.name = env.name;
    this.opponent = env.twoPlayer ? (options.opponent ?? env.defaultOpponent) : null;
    this.seat = env.twoPlayer ? (options.seat ?? "first") : null;
    this.instance = options.instance;
    if (
      this.instance !== undefined &&
      !(Number.isInteger(this.instance) && this.instance >= seeds.min && this.instance <= seeds.max)
    )
      throw new UsageError(
        `${env.name}: instance ${this.instance} is not a seed of [${seeds.min}, ${seeds.max}]`,
      );
    if (
      options.replayOpponent !== undefined &&
      "replayOpponent" in env.config &&
      !("replayOpponent" in config)
    ) {
      this.config = { ...config, replayOpponent: options.replayOpponent };
    }
    const ruleName = env.remarks?.informative ?? OBSERVED_TERMS;
    if (knownInformativeRule(ruleName)) {
      const ignore = env.remarks?.ignoreWords ?? [];
      this.remarkInformative = (text, attempt) => {
        const prompt = this.promptText();
        if (this.remarkRule?.prompt !== prompt)
          this.remarkRule = { prompt, rule: informativeRuleNamed(ruleName, prompt, ignore)! };
        return this.remarkRule.rule(text, attempt);
      };
    }
  }

  /** The server's session id (undefined before reset and after close). */
  get sessionId(): string | undefined {
    return this.session;
  }

  async reset(rng: Rng, opponentRng?: Rng): Promise<void> {
    await this.close();
    const reply = await this.client.create({
      env: this.env.name,
      config: this.config,
      seed: this.instance ?? wireSeed(rng, this.seeds),
      opponentSeed: wireSeed(opponentRng ?? rng.derive("opponent"), U32),
      ...(this.opponent !== null ? { opponent: this.opponent } : {}),
      ...(this.seat !== null ? { seat: this.seat } : {}),
    });
    this.session = reply.session;
    this.seq = 0;
    this.initial = reply;
    this.prompt = reply.prompt;
    this.category = reply.category;
    this.cur = stateOf(reply);
    this.end = { won: false, draw: false, score: 0 };
  }

  async restart(): Promise<void> {
    const session = this.live("restart");
    const reply = await this.client.restart(session, ++this.seq);
    const initial = this.initial!;
    const differs =
      reply.fingerprint !== initial.fingerprint
        ? `fingerprint "${reply.fingerprint}" instead of "${initial.fingerprint}"`
        : reply.observation !== initial.observation
          ? `observation ${JSON.stringify(reply.observation.slice(0, 120))} instead of ${JSON.stringify(initial.observation.slice(0, 120))}`
          : null;
    if (differs) {
      throw new RestartMismatchError(
        `environment server ${this.client.url}: restart of session ${session} (${this.env.name}) returned a different state: ${differs}`,
      );
    }
    this.cur = stateOf(reply);
    this.end = { won: false, draw: false, score: 0 };
  }

  async step(response: string): Promise<StepResult> {
    const session = this.live("step");
    if (this.cur!.done) throw new Error(`${this.name}: step() after the attempt is over`);
    const r = await this.client.step(session, ++this.seq, String(response));
    const compactObservation = r.compactObservation ?? r.observation;
    this.cur = {
      observation: r.observation,
      compactObservation,
      done: r.done,
      forfeit: r.forfeit === undefined ? this.cur!.forfeit : r.forfeit,
      ...(r.legalActions ? { legalActions: r.legalActions } : {}),
    };
    const score = r.score ?? 0;
    if (r.done) this.end = { won: r.won, draw: r.draw ?? false, score };
    let action = r.action;
    if (action === undefined) {
      const c = actionContent(String(response));
      action = c.ok ? c.move.trim() : "";
    }
    const out: StepResult = {
      reward: r.reward,
      done: r.done,
      won: r.won,
      draw: r.draw ?? false,
      score,
      valid: r.valid,
      action,
      feedback: r.feedback ?? "",
      observation: r.observation,
      compactFeedback: r.compactFeedback ?? "",
      compactObservation,
    };
    if (!r.valid) out.invalidReason = r.invalidReason ?? "invalid action";
    if (r.hindsightObservation !== undefined) out.hindsightObservation = r.hindsightObservation;
    if (r.compactHindsight !== undefined) out.compactHindsight = r.compactHindsight;
    if (r.outcome !== undefined) out.outcome = r.outcome;
    if (r.compactOutcome !== undefined) out.compactOutcome = r.compactOutcome;
    if (this.prompt?.legalActionsHeading !== undefined) out.legalActions = r.legalActions ?? [];
    return out;
  }

  /** Whether the server declares an expert for this environment (`POST /expert`). */
  get hasExpert(): boolean {
    return this.env.expert === true;
  }

  /** The server's expert at the current state, given facts of earlier attempts (read-only). */
  async expert(memory: readonly string[] = []): Promise<ExpertReply> {
    if (!this.hasExpert)
      throw new UsageError(`environment "${this.env.name}" on ${this.client.url} declares no expert`);
    return this.client.expert(this.live("expert"), memory);
  }

  /** Frees the server's session (idempotent). */
  async close(): Promise<void> {
    const s = this.session;
    if (s === undefined) return;
    this.session = undefined;
    await this.client.close(s);
  }

  private live(what: string): string {
    if (this.session === undefined) throw new Error(`${this.name}: ${what}() before reset()`);
    return this.session;
  }

  get done(): boolean {
    return this.cur?.done ?? false;
  }

  observation(): string {
    return this.cur?.observation ?? "";
  }

  compactObservation(): string {
    return this.cur?.compactObservation ?? "";
  }

  /** As the built-in tasks: the observation, plus the opponent in two-player games. */
  anchor(): string {
    return this.opponent === null
      ? this.observation()
      : `${this.observation()}\n[opponent: ${this.opponent}]`;
  }

  reflectionAnchor(): string {
    return this.opponent === null ? "reflection" : `reflection\n[opponent: ${this.opponent}]`;
  }

  /** The legal actions the server listed with the current state (empty when it lists none). */
  legalActions(): string[] {
    return this.cur?.legalActions ?? [];
  }

  info(): TaskInfo {
    const done = this.done;
    return {
      task: this.name,
      won: done && this.end.won,
      draw: done && this.end.draw,
      score: done ? this.end.score : 0,
      done,
      opponent: this.opponent,
      seat: this.seat,
      ...(this.category !== undefined ? { category: this.category } : {}),
    };
  }

  promptText(): TaskPromptText {
    if (!this.prompt) throw new Error(`${this.name}: promptText() before reset()`);
    return this.prompt;
  }

  forfeit(): { reward: number; score: number } | null {
    if (this.done) return null;
    return this.cur?.forfeit ?? null;
  }
}

/** A served environment as a task definition, plus what the client needs to check specs. */
export interface RemoteTaskDefinition extends TaskDefinition {
  readonly client: EnvClient;
  readonly env: EnvDescription;
  instanceSeeds(): Promise<number[]>;
}

/** The most instances an every-instance evaluation plays when the server declares no count. */
export const MAX_EVERY_INSTANCES = 100_000;

/**
 * The seeds of every instance, each once, in order: `min` .. `min + n - 1` of the seed range,
 * where n is the create reply's `instances` (the server's count for this config, e.g. ALFWorld's
 * games kept) capped by the range, or the whole range when the server declares none.
 */
export function everyInstanceSeeds(
  name: string,
  seeds: { min: number; max: number },
  declared: number | undefined,
): number[] {
  const span = seeds.max - seeds.min + 1;
  const n = declared === undefined ? span : Math.min(declared, span);
  if (n > MAX_EVERY_INSTANCES)
    throw new UsageError(
      `every instance of ${name}: the server declares no instance count (its create reply has no "instances") and the seeds [${seeds.min}, ${seeds.max}] are ${span} instances; set the instances to play with env.seeds or eval.env.seeds (--env-seeds MIN-MAX in mage eval), at most ${MAX_EVERY_INSTANCES}`,
    );
  return Array.from({ length: n }, (_, i) => seeds.min + i);
}

/**
 * Connects to a server, reads its /info and checks the settings against it: the environment
 * name, its config fields and the seed range are UsageErrors with the server's own choices.
 */
export async function openRemoteTask(
  settings: RemoteEnvSettings,
  clientOptions: EnvClientOptions = {},
): Promise<RemoteTaskDefinition> {
  const options: EnvClientOptions = { ...clientOptions };
  if (settings.timeoutMs !== undefined) options.timeoutMs = settings.timeoutMs;
  if (settings.retries !== undefined) options.retries = settings.retries;
  if (settings.concurrency !== undefined) options.concurrency = settings.concurrency;
  const apiKey = remoteApiKey(settings.apiKeyEnv);
  if (apiKey !== undefined) options.apiKey = apiKey;
  const client = new EnvClient(settings.url, options);
  const info = await client.info();
  const env = info.environments.find((e) => e.name === settings.name);
  if (!env) {
    throw new UsageError(
      `env.name: unknown environment "${settings.name}" on ${client.url}; valid choices (from its /info): ${info.environments.map((e) => e.name).join(", ")}`,
    );
  }
  const config = settings.config ?? {};
  const bad = checkEnvConfig(env, config);
  if (bad) {
    const f = env.config[bad.field?.replace(/^config\./, "") ?? ""];
    const allowed = f
      ? f.choices
        ? `; valid choices: ${f.choices.join(", ")}`
        : ""
      : `; valid fields: ${Object.keys(env.config).join(", ") || "(none)"}`;
    throw new UsageError(
      `env.${bad.field ?? "config"}: ${bad.message}${bad.message.includes("valid") ? "" : allowed}`,
    );
  }
  const seeds = settings.seeds ?? env.seeds;
  if (
    !Number.isInteger(seeds.min) ||
    !Number.isInteger(seeds.max) ||
    seeds.min > seeds.max ||
    seeds.min < env.seeds.min ||
    seeds.max > env.seeds.max
  ) {
    throw new UsageError(
      `env.seeds: [${seeds.min}, ${seeds.max}] is not a range of ${env.name}'s seeds; valid range (from ${client.url}/info): [${env.seeds.min}, ${env.seeds.max}]`,
    );
  }
  const checked = new Set<string>();
  return {
    name: env.name,
    description: env.description,
    maxTurns: env.maxTurns,
    twoPlayer: env.twoPlayer,
    ...(env.defaultOpponent !== null ? { defaultOpponent: env.defaultOpponent } : {}),
    create: (o: TaskOptions) => new RemoteTask(client, env, config, seeds, o),
    client,
    env,
    async instanceSeeds(): Promise<number[]> {
      // One session tells the count for this config (the server's default opponent and seat).
      const probe = await client.create({ env: env.name, config, seed: seeds.min });
      await client.close(probe.session);
      return everyInstanceSeeds(env.name, seeds, probe.instances);
    },
    async checkOpponent(spec: string, seat?: Seat): Promise<void> {
      const key = `${spec}\u0000${seat ?? ""}`;
      if (checked.has(key)) return;
      if (!env.twoPlayer)
        throw new UsageError(`environment "${env.name}" is single-player and takes no opponent`);
      // The server is the judge of a spec: create one session with it and close it.
      const reply = await client.create({
        env: env.name,
        config,
        seed: seeds.min,
        opponent: spec,
        ...(seat ? { seat } : {}),
      });
      await client.close(reply.session);
      checked.add(key);
    },
  };
}
