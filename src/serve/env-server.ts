/**
 * `mage env-serve`: mage's own engines (TicTacToe, Kuhn, Sokoban, MineSweeper) and their
 * opponents served over the environment protocol `mage-env/1` (docs/env-protocol.md), so the
 * protocol is exercised from both ends and other programs can play mage's tasks.
 *
 * A session is one in-process `TextTask`; the wire seeds become `Rng.seeded(seed)` and
 * `Rng.seeded(opponentSeed)` (`wireRngs` in src/tasks/remote.ts maps the runner's streams the same
 * way, which is what makes in-process and served play identical). Written on `node:http` because
 * the protocol is four small JSON endpoints; a framework would add a dependency and nothing else.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { UsageError } from "../core/errors.js";
import { Rng } from "../core/rng.js";
import {
  type ConfigField,
  checkEnvConfig,
  type EnvDescription,
  type ErrorBody,
  type ErrorKind,
  type InfoReply,
  PROTOCOL_VERSION,
  type StateReply,
  type StepReply,
} from "../env/protocol.js";
import { loadTask, TASKS } from "../tasks/registry.js";
import type { StepResult, TaskOptions, TextTask } from "../tasks/types.js";
import { bearerCheck } from "./auth.js";
import { BodyTooLargeError, readLimitedBody, STALL_LIMITS } from "./http-body.js";
import { InFlight } from "./in-flight.js";
import { defaultPoolSize, OpponentPool, OpponentTimeoutError, PoolClosedError } from "./opponent-pool.js";
import {
  checkServedSpec,
  describeServedOpponents,
  type OpponentLimits,
  opponentLimits,
  servedOpponentFactory,
} from "./served-opponents.js";
import { SessionTable } from "./session-table.js";

export interface EnvServerOptions {
  host?: string;
  port?: number;
  /** Idle sessions older than this are dropped (default 600 s). */
  sessionTtlSeconds?: number;
  /** Live sessions at most; a /create past it gets 503 `too_many_sessions` (default 20 000). */
  maxSessions?: number;
  /** Largest request body (default 1 MiB). */
  maxBodyBytes?: number;
  /** Largest argument per opponent kind ("mcts", "cfr", …); kinds left out keep the registry's limit. */
  opponentLimits?: Readonly<Record<string, number>>;
  /** Worker threads that play the heavy opponents' moves (default: the cores, at most 4). */
  opponentThreads?: number;
  /** Time one /create, /step or /restart may spend on opponent moves, queued or thinking (default 5000 ms). */
  timeBudgetMs?: number;
  /** When set, every endpoint but GET /health needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string | null;
  /** On close, how long requests in flight may take to finish before their moves are cancelled (default 2000 ms). */
  shutdownGraceMs?: number;
  log?: (line: string) => void;
}

export const ENV_SERVER_DEFAULTS = {
  sessionTtlSeconds: 600,
  // A big run's concurrency: kuhn-mage's final evaluation (8 cells × 2,000 trials) holds 16,000
  // sessions at once; about 5 KB each, so the cap is about 100 MB.
  maxSessions: 20_000,
  maxBodyBytes: 1 << 20,
  timeBudgetMs: 5000,
  shutdownGraceMs: 2000,
} as const;

export interface EnvServerHandle {
  readonly url: string;
  readonly server: Server;
  /** Sessions open now. */
  readonly sessions: number;
  /** The opponent limits in force. */
  readonly limits: OpponentLimits;
  readonly pool: OpponentPool;
  /**
   * Stops accepting connections, lets requests in flight finish for up to `shutdownGraceMs`,
   * then cancels the opponent moves still running (their requests answer 503 `shutting_down`),
   * drops every session and closes every connection.
   */
  close(): Promise<void>;
}

const SEEDS = { min: 0, max: 0xffffffff };

/** Config fields each served task declares, and how they become task options. */
const TWO_PLAYER_CONFIG: Record<string, ConfigField> = {
  replayOpponent: {
    type: "boolean",
    default: false,
    description: "the opponent answers the same moves the same way in every attempt",
  },
};

const PUZZLE_CONFIG: Record<string, Record<string, ConfigField>> = {
  sokoban: {
    movesPerTurn: { type: "integer", min: 1, max: 10, default: 3, description: "moves per turn" },
    maxSteps: { type: "integer", min: 1, max: 200, default: 30, description: "primitive moves per attempt" },
    numBoxes: { type: "integer", min: 1, max: 4, default: 2, description: "boxes (and targets) per level" },
  },
  minesweeper: {
    rows: { type: "integer", min: 2, max: 16, default: 6, description: "board rows" },
    cols: { type: "integer", min: 2, max: 16, default: 6, description: "board columns" },
    mines: { type: "integer", min: 1, max: 40, default: 3, description: "mines (fewer than the cells)" },
  },
};

function taskOptions(name: string, config: Record<string, unknown>): TaskOptions {
  if (name === "sokoban") {
    return {
      ...(config.movesPerTurn !== undefined ? { movesPerTurn: config.movesPerTurn as number } : {}),
      ...(config.maxSteps !== undefined ? { maxSteps: config.maxSteps as number } : {}),
      ...(config.numBoxes !== undefined ? { knobs: { numBoxes: config.numBoxes } } : {}),
    };
  }
  if (name === "minesweeper") {
    const knobs: Record<string, unknown> = {};
    for (const k of ["rows", "cols", "mines"] as const) if (config[k] !== undefined) knobs[k] = config[k];
    return Object.keys(knobs).length > 0 ? { knobs } : {};
  }
  return config.replayOpponent !== undefined ? { replayOpponent: config.replayOpponent as boolean } : {};
}

/** /info's environment list: every task in mage's registry, opponents with this server's limits. */
export async function describeEnvironments(
  limits: OpponentLimits = opponentLimits(),
): Promise<EnvDescription[]> {
  const out: EnvDescription[] = [];
  for (const name of Object.keys(TASKS).sort()) {
    const def = await loadTask(name);
    out.push({
      name,
      description: def.description,
      twoPlayer: def.twoPlayer,
      seats: def.twoPlayer ? ["first", "second"] : [],
      opponents: def.twoPlayer ? describeServedOpponents(name, limits) : [],
      defaultOpponent: def.defaultOpponent ?? null,
      maxTurns: def.maxTurns,
      seeds: SEEDS,
      config: def.twoPlayer ? TWO_PLAYER_CONFIG : (PUZZLE_CONFIG[name] ?? {}),
      legalActions: def.twoPlayer,
    });
  }
  return out;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody["error"],
    readonly headers: Record<string, string> = {},
  ) {
    super(body.message);
  }
}

const fail = (
  status: number,
  kind: ErrorKind,
  message: string,
  extra: Partial<ErrorBody["error"]> = {},
  headers: Record<string, string> = {},
) => new HttpError(status, { kind, message, ...extra }, headers);

interface Session {
  id: string;
  env: string;
  task: TextTask;
  /** Fingerprint salt: what the instance was created from besides its state. */
  salt: string;
  lastSeq: number;
  lastReply: string;
  /** The /step or /restart being served now. */
  pending?: { seq: number; reply: Promise<string> };
  touched: number;
  /** The current request's deadline for opponent moves; pooled opponents read this object. */
  budget: { deadline: number; budgetMs: number };
}

function fingerprint(s: Pick<Session, "salt" | "task" | "env">): string {
  const key = s.task.stateKey?.() ?? s.task.observation();
  return `${s.env}:${createHash("sha256").update(s.salt).update("\0").update(key).digest("hex").slice(0, 24)}`;
}

function stateReply(s: Session): StateReply {
  const t = s.task;
  return {
    fingerprint: fingerprint(s),
    observation: t.observation(),
    compactObservation: t.compactObservation(),
    ...(t.legalActions ? { legalActions: t.legalActions() } : {}),
    toMove: t.done ? null : "agent",
    done: t.done,
    forfeit: t.forfeit?.() ?? null,
  };
}

function stepReply(s: Session, r: StepResult): StepReply {
  const t = s.task;
  const { reward, done, won, draw, score, valid, action, feedback, observation } = r;
  return {
    observation,
    compactObservation: r.compactObservation,
    reward,
    done,
    won,
    draw,
    score,
    valid,
    ...(r.invalidReason !== undefined ? { invalidReason: r.invalidReason } : {}),
    action,
    feedback,
    compactFeedback: r.compactFeedback,
    ...(r.outcome !== undefined ? { outcome: r.outcome } : {}),
    ...(r.compactOutcome !== undefined ? { compactOutcome: r.compactOutcome } : {}),
    ...(r.hindsightObservation !== undefined ? { hindsightObservation: r.hindsightObservation } : {}),
    ...(r.compactHindsight !== undefined ? { compactHindsight: r.compactHindsight } : {}),
    ...(t.legalActions ? { legalActions: t.legalActions() } : {}),
    toMove: done ? null : "agent",
    forfeit: t.forfeit?.() ?? null,
    info: {},
  };
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function seqOf(body: Record<string, unknown>): number {
  const seq = body.seq;
  if (typeof seq !== "number" || !Number.isInteger(seq) || seq < 1)
    throw fail(400, "bad_request", "seq must be a positive integer", { field: "seq" });
  return seq;
}

/** Reads and checks the seeds, seat and opponent of a /create body (no work done yet). */
function createFields(env: EnvDescription, body: Record<string, unknown>, limits: OpponentLimits) {
  const name = env.name;
  const seedErr = (field: string, v: unknown) =>
    fail(
      400,
      "bad_seed",
      `${field} must be an integer in [${SEEDS.min}, ${SEEDS.max}], got ${JSON.stringify(v)}`,
      {
        field,
      },
    );
  const isSeed = (v: unknown): v is number =>
    typeof v === "number" && Number.isInteger(v) && v >= SEEDS.min && v <= SEEDS.max;
  const seed = body.seed;
  if (!isSeed(seed)) throw seedErr("seed", seed);
  const oseed = body.opponentSeed;
  if (oseed !== undefined && !isSeed(oseed)) throw seedErr("opponentSeed", oseed);
  const seat = body.seat;
  const opponent = body.opponent;
  if (!env.twoPlayer && seat !== undefined)
    throw fail(400, "bad_seat", `environment "${name}" is single-player and takes no seat`, {
      field: "seat",
    });
  if (!env.twoPlayer && opponent !== undefined)
    throw fail(400, "bad_opponent", `environment "${name}" is single-player and takes no opponent`, {
      field: "opponent",
      choices: [],
    });
  if (seat !== undefined && seat !== "first" && seat !== "second")
    throw fail(400, "bad_seat", `unknown seat ${JSON.stringify(seat)}; valid choices: first, second`, {
      field: "seat",
      choices: ["first", "second"],
    });
  if (opponent !== undefined && typeof opponent !== "string")
    throw fail(400, "bad_opponent", "opponent must be a string", { field: "opponent" });
  const spec = opponent ?? env.defaultOpponent ?? undefined;
  if (env.twoPlayer && spec !== undefined) {
    try {
      checkServedSpec(name, spec, limits);
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      throw fail(400, "bad_opponent", err.message, {
        field: "opponent",
        choices: env.opponents.map((o) => o.spec),
      });
    }
  }
  return {
    seed,
    opponentSeed: oseed as number | undefined,
    ...(seat !== undefined ? { seat: seat as "first" | "second" } : {}),
    ...(opponent !== undefined ? { opponent: opponent as string } : {}),
  };
}

/** What a failed opponent move becomes on the wire. */
function moveFailure(err: unknown): unknown {
  if (err instanceof OpponentTimeoutError)
    return fail(
      503,
      "opponent_timeout",
      `${err.message}; the session is as it was before this request`,
      {},
      {
        "retry-after": "1",
      },
    );
  if (err instanceof PoolClosedError) return shuttingDown();
  return err;
}

function shuttingDown(): HttpError {
  return fail(503, "shutting_down", "the server is shutting down", {}, { connection: "close" });
}

export async function startEnvServer(options: EnvServerOptions = {}): Promise<EnvServerHandle> {
  const host = options.host ?? "127.0.0.1";
  const ttlMs = (options.sessionTtlSeconds ?? ENV_SERVER_DEFAULTS.sessionTtlSeconds) * 1000;
  const maxBody = options.maxBodyBytes ?? ENV_SERVER_DEFAULTS.maxBodyBytes;
  const budgetMs = options.timeBudgetMs ?? ENV_SERVER_DEFAULTS.timeBudgetMs;
  const graceMs = options.shutdownGraceMs ?? ENV_SERVER_DEFAULTS.shutdownGraceMs;
  const log = options.log ?? (() => {});
  const limits = opponentLimits(options.opponentLimits);
  const authorized = bearerCheck(options.apiKey);
  const environments = await describeEnvironments(limits);
  const byName = new Map(environments.map((e) => [e.name, e]));
  const info: InfoReply = {
    protocol: PROTOCOL_VERSION,
    server: "mage env-serve",
    sessionTtlSeconds: ttlMs / 1000,
    environments,
  };
  const infoText = JSON.stringify(info);
  const sessions = new SessionTable<Session>(options.maxSessions ?? ENV_SERVER_DEFAULTS.maxSessions, ttlMs);
  const pool = new OpponentPool(options.opponentThreads ?? defaultPoolSize());
  let nextId = 1;
  let closing = false;
  const inFlight = new InFlight();
  const newBudget = () => ({ deadline: performance.now() + budgetMs, budgetMs });

  const session = (body: Record<string, unknown>): Session => {
    const id = body.session;
    if (typeof id !== "string")
      throw fail(400, "bad_request", "session must be a string", { field: "session" });
    const s = sessions.use(id);
    if (!s) throw fail(404, "unknown_session", `no session "${id}" (closed, expired or never created)`);
    return s;
  };

  /** Applies a /step or /restart once per seq; a repeated seq answers the stored reply. */
  const sequenced = async (s: Session, seq: number, act: () => Promise<unknown>): Promise<string> => {
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
    Object.assign(s.budget, newBudget());
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
  };

  const build = async (
    env: EnvDescription,
    config: Record<string, unknown>,
    fields: ReturnType<typeof createFields>,
  ) => {
    const def = await loadTask(env.name);
    const budget = newBudget();
    const task = def.create({
      ...taskOptions(env.name, config),
      ...(fields.opponent !== undefined ? { opponent: fields.opponent } : {}),
      ...(fields.seat !== undefined ? { seat: fields.seat } : {}),
      ...(env.twoPlayer ? { makeOpponent: servedOpponentFactory(env.name, pool, () => budget) } : {}),
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
  };

  const create = async (body: Record<string, unknown>): Promise<string> => {
    const name = body.env;
    if (typeof name !== "string") throw fail(400, "bad_request", "env must be a string", { field: "env" });
    const env = byName.get(name);
    if (!env) {
      const choices = environments.map((e) => e.name);
      throw fail(400, "unknown_env", `unknown environment "${name}"; valid choices: ${choices.join(", ")}`, {
        field: "env",
        choices,
      });
    }
    const config = body.config ?? {};
    if (!isObj(config)) throw fail(400, "bad_config", "config must be an object", { field: "config" });
    const bad = checkEnvConfig(env, config);
    if (bad) throw new HttpError(400, bad);
    const fields = createFields(env, body, limits);
    if (!sessions.reserve()) {
      const wait = sessions.retryAfterSeconds();
      throw fail(
        503,
        "too_many_sessions",
        `the server holds its maximum of ${sessions.maxSessions} live sessions; close finished ones (idle ones expire after ${ttlMs / 1000} s), retry in ${wait} s`,
        {},
        { "retry-after": String(wait) },
      );
    }
    let built: Awaited<ReturnType<typeof build>>;
    try {
      built = await build(env, config, fields);
    } catch (err) {
      sessions.release();
      throw err;
    }
    const { task, budget } = built;
    const id = `s-${nextId++}`;
    const s: Session = {
      id,
      env: name,
      task,
      salt: JSON.stringify([name, config, task.opponent, task.seat]),
      lastSeq: 0,
      lastReply: "",
      touched: Date.now(),
      budget,
    };
    sessions.add(id, s);
    return JSON.stringify({ session: id, prompt: task.promptText(), ...stateReply(s) });
  };

  const step = async (body: Record<string, unknown>): Promise<string> => {
    const s = session(body);
    const seq = seqOf(body);
    return sequenced(s, seq, async () => {
      if (typeof body.action !== "string")
        throw fail(400, "bad_request", "action must be a string (the agent's raw response)", {
          field: "action",
        });
      if (s.task.done) throw fail(409, "game_over", `session ${s.id}: the attempt is over; /restart first`);
      return stepReply(s, await s.task.step(body.action));
    });
  };

  const restart = async (body: Record<string, unknown>): Promise<string> => {
    const s = session(body);
    return sequenced(s, seqOf(body), async () => {
      await s.task.restart();
      return stateReply(s);
    });
  };

  const close = (body: Record<string, unknown>): string => {
    const s = session(body);
    sessions.delete(s.id);
    return JSON.stringify({ closed: true });
  };

  const endpoints: Record<string, (b: Record<string, unknown>) => Promise<string> | string> = {
    "/create": create,
    "/step": step,
    "/restart": restart,
    "/close": close,
  };

  const route = async (req: IncomingMessage): Promise<string> => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method === "GET" && path === "/health") return JSON.stringify({ status: "ok" });
    if (!authorized(req))
      throw fail(
        401,
        "unauthorized",
        "missing or wrong API key: send 'Authorization: Bearer KEY' (a game: remote config names the variable that holds it in env.apiKeyEnv)",
        {},
        { "www-authenticate": "Bearer" },
      );
    if (closing) throw shuttingDown();
    if (req.method === "GET" && path === "/info") return infoText;
    const handler = endpoints[path];
    if (!handler || req.method !== "POST") {
      throw fail(
        404,
        "not_found",
        `no endpoint ${req.method} ${path}; endpoints: GET /info, GET /health, POST ${Object.keys(endpoints).join(", ")}`,
      );
    }
    let text: string;
    try {
      text = (await readLimitedBody(req, maxBody)).toString("utf8");
    } catch (err) {
      if (err instanceof BodyTooLargeError)
        throw fail(413, "bad_request", `request body over ${maxBody} bytes`);
      throw err;
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw fail(400, "bad_request", "the request body is not JSON");
    }
    if (!isObj(body)) throw fail(400, "bad_request", "the request body must be a JSON object");
    return handler(body);
  };

  const send = (res: ServerResponse, status: number, text: string, headers: Record<string, string> = {}) => {
    if (res.headersSent || res.destroyed) return;
    res.writeHead(status, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(text),
      ...headers,
    });
    res.end(text);
  };

  const server = createServer(STALL_LIMITS, (req, res) => {
    inFlight.enter();
    res.once("close", () => inFlight.leave());
    route(req).then(
      (text) => send(res, 200, text),
      (err: unknown) => {
        if (err instanceof HttpError) {
          send(res, err.status, JSON.stringify({ error: err.body }), err.headers);
          return;
        }
        log(`env-serve: internal error: ${(err as Error).stack ?? String(err)}`);
        send(res, 500, JSON.stringify({ error: { kind: "internal", message: (err as Error).message } }));
      },
    );
  });
  server.keepAliveTimeout = 30_000;
  const sockets = new Set<Socket>();
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  const sweep = setInterval(() => sessions.sweep(), Math.min(60_000, Math.max(1000, ttlMs / 2)));
  sweep.unref();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;

  let closed: Promise<void> | undefined;
  return {
    url: `http://${shownHost}:${addr.port}`,
    server,
    limits,
    pool,
    get sessions() {
      return sessions.size;
    },
    close() {
      closed ??= (async () => {
        closing = true;
        clearInterval(sweep);
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await inFlight.idle(graceMs);
        // Moves still thinking are cancelled; their requests answer 503 shutting_down.
        await pool.close();
        await inFlight.idle(500);
        sessions.clear();
        for (const s of sockets) s.destroy();
        await stopped;
      })();
      return closed;
    },
  };
}
