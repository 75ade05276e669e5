/**
 * `mage env-serve`'s wire side: its errors, a session's state and step replies, and the checks of
 * a request's fields (docs/env-protocol.md).
 */
import { createHash } from "node:crypto";
import { UsageError } from "../core/errors.js";
import type { EnvDescription, ErrorBody, ErrorKind, StateReply, StepReply } from "../env/protocol.js";
import type { StepResult, TextTask } from "../tasks/types.js";
import { SEEDS } from "./env-catalog.js";
import { OpponentTimeoutError, PoolClosedError } from "./opponent-pool.js";
import { checkServedSpec, type OpponentLimits } from "./served-opponents.js";

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody["error"],
    readonly headers: Record<string, string> = {},
  ) {
    super(body.message);
  }
}

export const fail = (
  status: number,
  kind: ErrorKind,
  message: string,
  extra: Partial<ErrorBody["error"]> = {},
  headers: Record<string, string> = {},
) => new HttpError(status, { kind, message, ...extra }, headers);

export interface Session {
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

export function stateReply(s: Session): StateReply {
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

export function stepReply(s: Session, r: StepResult): StepReply {
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

export function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function seqOf(body: Record<string, unknown>): number {
  const seq = body.seq;
  if (typeof seq !== "number" || !Number.isInteger(seq) || seq < 1)
    throw fail(400, "bad_request", "seq must be a positive integer", { field: "seq" });
  return seq;
}

/** Reads and checks the seeds, seat and opponent of a /create body (no work done yet). */
export function createFields(env: EnvDescription, body: Record<string, unknown>, limits: OpponentLimits) {
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
export function moveFailure(err: unknown): unknown {
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

export function shuttingDown(): HttpError {
  return fail(503, "shutting_down", "the server is shutting down", {}, { connection: "close" });
}

export type CreateFields = ReturnType<typeof createFields>;
