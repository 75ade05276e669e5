/**
 * `mage env-serve`'s sessions and the four endpoints that act on them: /create builds a task,
 * /step and /restart apply once per `seq` (a repeated seq answers the stored reply), /close drops
 * it. Each returns the reply's JSON text; errors are `HttpError`s (env-wire.ts).
 */
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import { checkEnvConfig, type EnvDescription } from "../env/protocol.js";
import { loadTask } from "../tasks/registry.js";
import type { TextTask } from "../tasks/types.js";
import { taskOptions } from "./env-catalog.js";
import {
  type CreateFields,
  createFields,
  fail,
  HttpError,
  isObj,
  moveFailure,
  type Session,
  seqOf,
  stateReply,
  stepReply,
} from "./env-wire.js";
import { OpponentPool } from "./opponent-pool.js";
import { type OpponentLimits, servedOpponentFactory } from "./served-opponents.js";
import { SessionTable } from "./session-table.js";

type Body = Record<string, unknown>;

export class EnvSessions {
  private readonly table: SessionTable<Session>;
  private readonly byName: Map<string, EnvDescription>;
  /** The worker threads that play the heavy opponents' moves. */
  readonly pool: OpponentPool;
  private nextId = 1;

  constructor(
    private readonly environments: EnvDescription[],
    private readonly limits: OpponentLimits,
    opponentThreads: number,
    maxSessions: number,
    private readonly ttlMs: number,
    private readonly budgetMs: number,
  ) {
    // The table checks maxSessions before the pool starts its threads.
    this.table = new SessionTable<Session>(maxSessions, ttlMs);
    this.byName = new Map(environments.map((e) => [e.name, e]));
    this.pool = new OpponentPool(opponentThreads);
  }

  get size(): number {
    return this.table.size;
  }

  /** Drops the sessions idle past their time to live. */
  sweep(): void {
    this.table.sweep();
  }

  clear(): void {
    this.table.clear();
  }

  async create(body: Body): Promise<string> {
    const env = this.environment(body.env);
    const config = body.config ?? {};
    if (!isObj(config)) throw fail(400, "bad_config", "config must be an object", { field: "config" });
    const bad = checkEnvConfig(env, config);
    if (bad) throw new HttpError(400, bad);
    const fields = createFields(env, body, this.limits);
    this.reserve();
    let built: { task: TextTask; budget: Session["budget"] };
    try {
      built = await this.build(env, config, fields);
    } catch (err) {
      this.table.release();
      throw err;
    }
    const { task, budget } = built;
    const id = `s-${this.nextId++}`;
    const s: Session = {
      id,
      env: env.name,
      task,
      salt: JSON.stringify([env.name, config, task.opponent, task.seat]),
      lastSeq: 0,
      lastReply: "",
      touched: Date.now(),
      budget,
    };
    this.table.add(id, s);
    return JSON.stringify({ session: id, prompt: task.promptText(), ...stateReply(s) });
  }

  async step(body: Body): Promise<string> {
    const s = this.session(body);
    return this.sequenced(s, seqOf(body), async () => {
      if (typeof body.action !== "string")
        throw fail(400, "bad_request", "action must be a string (the agent's raw response)", {
          field: "action",
        });
      if (s.task.done) throw fail(409, "game_over", `session ${s.id}: the attempt is over; /restart first`);
      return stepReply(s, await s.task.step(body.action));
    });
  }

  async restart(body: Body): Promise<string> {
    const s = this.session(body);
    return this.sequenced(s, seqOf(body), async () => {
      await s.task.restart();
      return stateReply(s);
    });
  }

  close(body: Body): string {
    const s = this.session(body);
    this.table.delete(s.id);
    return JSON.stringify({ closed: true });
  }

  private environment(name: unknown): EnvDescription {
    if (typeof name !== "string") throw fail(400, "bad_request", "env must be a string", { field: "env" });
    const env = this.byName.get(name);
    if (env) return env;
    const choices = this.environments.map((e) => e.name);
    throw fail(400, "unknown_env", `unknown environment "${name}"; valid choices: ${choices.join(", ")}`, {
      field: "env",
      choices,
    });
  }

  /** Holds a place for a new session, or answers 503 when the table is full. */
  private reserve(): void {
    if (this.table.reserve()) return;
    const wait = this.table.retryAfterSeconds();
    throw fail(
      503,
      "too_many_sessions",
      `the server holds its maximum of ${this.table.maxSessions} live sessions; close finished ones (idle ones expire after ${this.ttlMs / 1000} s), retry in ${wait} s`,
      {},
      { "retry-after": String(wait) },
    );
  }

  private newBudget(): Session["budget"] {
    return { deadline: performance.now() + this.budgetMs, budgetMs: this.budgetMs };
  }

  private session(body: Body): Session {
    const id = body.session;
    if (typeof id !== "string")
      throw fail(400, "bad_request", "session must be a string", { field: "session" });
    const s = this.table.use(id);
    if (!s) throw fail(404, "unknown_session", `no session "${id}" (closed, expired or never created)`);
    return s;
  }

  /** Applies a /step or /restart once per seq; a repeated seq answers the stored reply. */
  private async sequenced(s: Session, seq: number, act: () => Promise<unknown>): Promise<string> {
    // A retry that arrives while the first request is still being served waits for its reply.
    if (s.pending && s.pending.seq === seq) return s.pending.reply;
    if (seq === s.lastSeq) return s.lastReply;
    if (seq !== s.lastSeq + 1 || s.pending) {
      throw fail(
        409,
        "out_of_order",
        `session ${s.id}: seq ${seq} after ${s.lastSeq} (expected ${s.lastSeq + 1})`,
      );
    }
    Object.assign(s.budget, this.newBudget());
    const reply = act().then(
      (r) => JSON.stringify(r),
      (err: unknown) => {
        throw moveFailure(err);
      },
    );
    s.pending = { seq, reply };
    try {
      const text = await reply;
      s.lastSeq = seq;
      s.lastReply = text;
      return text;
    } finally {
      s.pending = undefined;
    }
  }

  /** The task of a new session, reset to its seeds. */
  private async build(
    env: EnvDescription,
    config: Body,
    fields: CreateFields,
  ): Promise<{ task: TextTask; budget: Session["budget"] }> {
    const def = await loadTask(env.name);
    const budget = this.newBudget();
    const task = def.create({
      ...taskOptions(env.name, config),
      ...(fields.opponent !== undefined ? { opponent: fields.opponent } : {}),
      ...(fields.seat !== undefined ? { seat: fields.seat } : {}),
      ...(env.twoPlayer ? { makeOpponent: servedOpponentFactory(env.name, this.pool, () => budget) } : {}),
    });
    const rng = Rng.seeded(fields.seed);
    const opponentRng =
      fields.opponentSeed === undefined ? rng.derive("opponent") : Rng.seeded(fields.opponentSeed);
    try {
      await task.reset(rng, opponentRng);
    } catch (err) {
      // Knob combinations the declared ranges allow but the engine cannot build (too many mines).
      if (err instanceof UsageError || err instanceof RangeError)
        throw fail(400, "bad_config", (err as Error).message, { field: "config" });
      throw moveFailure(err);
    }
    return { task, budget };
  }
}
