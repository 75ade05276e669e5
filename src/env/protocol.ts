/**
 * The environment server protocol `mage-env/1` (docs/env-protocol.md): the wire types both ends
 * share, and the checks the client applies to every reply (a reply that is not what the protocol
 * says is a `ProtocolError` naming the endpoint and the field, never silently defaulted).
 */
import type { HistoryWindowText, TaskPromptText } from "../tasks/types.js";

export const PROTOCOL_VERSION = "mage-env/1";

export type ErrorKind =
  | "unknown_env"
  | "bad_config"
  | "bad_seed"
  | "bad_opponent"
  | "bad_seat"
  | "bad_request"
  | "no_expert"
  | "unknown_session"
  | "out_of_order"
  | "game_over"
  | "not_found"
  | "unauthorized"
  | "too_many_sessions"
  | "opponent_timeout"
  | "engine_timeout"
  | "shutting_down"
  | "server_setup"
  | "internal";

/** Error kinds caused by what the user asked for: mage reports them as a UsageError (exit 2). */
export const USAGE_ERROR_KINDS: readonly ErrorKind[] = [
  "unknown_env",
  "bad_config",
  "bad_seed",
  "bad_opponent",
  "bad_seat",
  "unauthorized",
  "no_expert",
  // 422: the server cannot build what was asked as it is set up (its message says what to fix there).
  "server_setup",
];

export interface ErrorBody {
  error: { kind: ErrorKind; message: string; choices?: string[]; field?: string };
}

export type ConfigFieldType = "integer" | "number" | "boolean" | "string";

export interface ConfigField {
  type: ConfigFieldType;
  min?: number;
  max?: number;
  choices?: (string | number | boolean)[];
  default?: unknown;
  description?: string;
}

export interface OpponentDescription {
  /** An exact spec ("random") or a pattern with one argument ("mcts:<simulations>"). */
  spec: string;
  description?: string;
  /** A pattern's allowed arguments on this server (inclusive), when the server bounds them. */
  argumentRange?: { min: number; max: number };
}

export interface EnvDescription {
  name: string;
  description: string;
  twoPlayer: boolean;
  seats: ("first" | "second")[];
  opponents: OpponentDescription[];
  defaultOpponent: string | null;
  maxTurns: number;
  seeds: { min: number; max: number };
  config: Record<string, ConfigField>;
  legalActions: boolean;
  /** Whether the environment answers `POST /expert` (absent: false). */
  expert?: boolean;
  /** How mage judges this environment's reflections (absent: the default rule, see `RemarkRules`). */
  remarks?: RemarkRules;
}

/**
 * An environment's declared rule for informative reflections (optional in `/info`): `informative`
 * names the rule, `"observed-terms"` (mage's default: the remark names a term the attempt observed
 * that the rules do not state) or `"none"` (not judged, not reported); a rule mage does not know is
 * treated as `"none"`. `ignoreWords`: words the observed-terms rule never counts (words every
 * observation of the environment repeats).
 */
export interface RemarkRules {
  informative: string;
  ignoreWords?: string[];
}

export interface InfoReply {
  protocol: string;
  server: string;
  sessionTtlSeconds?: number;
  environments: EnvDescription[];
}

export interface CreateRequest {
  env: string;
  config?: Record<string, unknown>;
  seed: number;
  opponentSeed?: number;
  opponent?: string;
  seat?: "first" | "second";
}

export interface Forfeit {
  reward: number;
  score: number;
}

/** The state part shared by /create and /restart replies. */
export interface StateReply {
  fingerprint: string;
  observation: string;
  compactObservation?: string;
  legalActions?: string[];
  toMove: "agent" | null;
  done: boolean;
  forfeit?: Forfeit | null;
  /** The instance's category for per-category measures (ALFWorld: "<split>/<task type>"). */
  category?: string;
}

export interface CreateReply extends StateReply {
  session: string;
  prompt: TaskPromptText;
  /**
   * How many distinct instances the create's config offers, when finitely many: seeds `min` ..
   * `min + instances - 1` of the environment's range play each once (ALFWorld: the games kept).
   */
  instances?: number;
}

export interface StepReply {
  observation: string;
  compactObservation?: string;
  reward: number;
  done: boolean;
  won: boolean;
  draw?: boolean;
  score?: number;
  valid: boolean;
  invalidReason?: string;
  action?: string;
  feedback?: string;
  compactFeedback?: string;
  outcome?: string;
  compactOutcome?: string;
  hindsightObservation?: string;
  compactHindsight?: string;
  legalActions?: string[];
  toMove?: "agent" | null;
  forfeit?: Forfeit | null;
  info?: Record<string, unknown>;
}

/** `POST /expert`: the environment expert's next action at the session's state and the attempt's facts. */
export interface ExpertReply {
  /** The action as the agent would write it inside `<action>…</action>`; null when there is none. */
  action: string | null;
  /** Short sentences on what this attempt has observed so far, worth remembering in a later attempt. */
  facts: string[];
  /** Legal actions the expert judges a waste here (optional; a warm start's unlikelihood term pushes them down). */
  avoid?: string[];
}

/** A reply that does not follow the protocol (not JSON, a field missing or of the wrong type). */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Reads reply fields, naming the endpoint and field in every complaint. */
class Reader {
  constructor(
    readonly where: string,
    readonly o: Obj,
  ) {}

  private fail(field: string, want: string): never {
    const got = this.o[field];
    const shown = got === undefined ? "missing" : `got ${JSON.stringify(got)?.slice(0, 80)}`;
    throw new ProtocolError(`${this.where}: field "${field}" must be ${want} (${shown})`);
  }
  str(f: string): string {
    const v = this.o[f];
    return typeof v === "string" ? v : this.fail(f, "a string");
  }
  optStr(f: string): string | undefined {
    return this.o[f] === undefined || this.o[f] === null ? undefined : this.str(f);
  }
  num(f: string): number {
    const v = this.o[f];
    return typeof v === "number" && Number.isFinite(v) ? v : this.fail(f, "a finite number");
  }
  optNum(f: string): number | undefined {
    return this.o[f] === undefined || this.o[f] === null ? undefined : this.num(f);
  }
  bool(f: string): boolean {
    const v = this.o[f];
    return typeof v === "boolean" ? v : this.fail(f, "true or false");
  }
  optBool(f: string): boolean | undefined {
    return this.o[f] === undefined || this.o[f] === null ? undefined : this.bool(f);
  }
  optStrings(f: string): string[] | undefined {
    const v = this.o[f];
    if (v === undefined || v === null) return undefined;
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v as string[];
    return this.fail(f, "a list of strings");
  }
  obj(f: string): Obj {
    const v = this.o[f];
    return isObj(v) ? v : this.fail(f, "an object");
  }
  toMove(f: string, required: boolean): "agent" | null | undefined {
    const v = this.o[f];
    if (v === undefined && !required) return undefined;
    if (v === "agent" || v === null) return v;
    return this.fail(f, '"agent" or null (protocol v1 serves opponents itself)');
  }
  forfeit(f: string): Forfeit | null | undefined {
    const v = this.o[f];
    if (v === undefined) return undefined;
    if (v === null) return null;
    if (isObj(v)) {
      const r = new Reader(`${this.where} ${f}`, v);
      return { reward: r.num("reward"), score: r.num("score") };
    }
    return this.fail(f, "{reward, score} or null");
  }
}

function reader(where: string, body: unknown): Reader {
  if (!isObj(body)) throw new ProtocolError(`${where}: the reply is not a JSON object`);
  return new Reader(where, body);
}

/** Drops undefined values so optional fields stay absent (replies compare equal as data). */
function clean<T extends object>(o: T): T {
  for (const k of Object.keys(o) as (keyof T)[]) if (o[k] === undefined) delete o[k];
  return o;
}

function readState(r: Reader): StateReply {
  return clean({
    fingerprint: r.str("fingerprint"),
    observation: r.str("observation"),
    compactObservation: r.optStr("compactObservation"),
    legalActions: r.optStrings("legalActions"),
    toMove: r.toMove("toMove", true) ?? null,
    done: r.bool("done"),
    forfeit: r.forfeit("forfeit"),
    category: r.optStr("category"),
  });
}

/** The optional history window of a prompt: three non-negative integers. */
function readHistory(p: Reader): HistoryWindowText | undefined {
  if (p.o.history === undefined || p.o.history === null) return undefined;
  const h = reader(`${p.where} history`, p.obj("history"));
  const n = (f: string) => {
    const v = h.num(f);
    if (!Number.isInteger(v) || v < 0)
      throw new ProtocolError(`${h.where}: field "${f}" must be a non-negative integer`);
    return v;
  };
  return {
    turns: n("turns"),
    playObservations: n("playObservations"),
    reflectObservations: n("reflectObservations"),
  };
}

/** The optional `remarks` of an environment's entry: `{informative, ignoreWords?}`. */
function readRemarkRules(er: Reader): { remarks?: RemarkRules } {
  if (er.o.remarks === undefined || er.o.remarks === null) return {};
  const r = reader(`${er.where}.remarks`, er.obj("remarks"));
  return { remarks: clean({ informative: r.str("informative"), ignoreWords: r.optStrings("ignoreWords") }) };
}

export function parseInfoReply(body: unknown): InfoReply {
  const r = reader("GET /info", body);
  const protocol = r.str("protocol");
  const envs = r.o.environments;
  if (!Array.isArray(envs)) throw new ProtocolError('GET /info: field "environments" must be a list');
  const environments = envs.map((e, i): EnvDescription => {
    const er = reader(`GET /info environments[${i}]`, e);
    const seeds = reader(`GET /info environments[${i}].seeds`, er.obj("seeds"));
    const config = isObj(er.o.config) ? er.o.config : {};
    const fields: Record<string, ConfigField> = {};
    for (const [k, v] of Object.entries(config)) {
      const fr = reader(`GET /info environments[${i}].config.${k}`, v);
      const type = fr.str("type");
      if (!["integer", "number", "boolean", "string"].includes(type)) {
        throw new ProtocolError(
          `GET /info environments[${i}].config.${k}: type must be integer, number, boolean or string`,
        );
      }
      fields[k] = clean({
        type: type as ConfigFieldType,
        min: fr.optNum("min"),
        max: fr.optNum("max"),
        choices: Array.isArray(fr.o.choices) ? (fr.o.choices as (string | number | boolean)[]) : undefined,
        default: fr.o.default,
        description: fr.optStr("description"),
      });
    }
    const opponents = Array.isArray(er.o.opponents) ? er.o.opponents : [];
    const seats = er.optStrings("seats") ?? [];
    return {
      name: er.str("name"),
      description: er.optStr("description") ?? "",
      twoPlayer: er.bool("twoPlayer"),
      seats: seats.filter((s): s is "first" | "second" => s === "first" || s === "second"),
      opponents: opponents.map((o, j) => {
        const or = reader(`GET /info environments[${i}].opponents[${j}]`, o);
        const range = or.o.argumentRange;
        const rr = range === undefined || range === null ? null : reader(`${or.where} argumentRange`, range);
        return clean({
          spec: or.str("spec"),
          description: or.optStr("description"),
          argumentRange: rr ? { min: rr.num("min"), max: rr.num("max") } : undefined,
        });
      }),
      defaultOpponent: er.optStr("defaultOpponent") ?? null,
      maxTurns: er.num("maxTurns"),
      seeds: { min: seeds.num("min"), max: seeds.num("max") },
      config: fields,
      legalActions: er.optBool("legalActions") ?? false,
      ...(er.optBool("expert") ? { expert: true } : {}),
      ...readRemarkRules(er),
    };
  });
  return clean({
    protocol,
    server: r.optStr("server") ?? "(unnamed server)",
    sessionTtlSeconds: r.optNum("sessionTtlSeconds"),
    environments,
  });
}

export function parseCreateReply(body: unknown): CreateReply {
  const r = reader("POST /create", body);
  const p = reader("POST /create prompt", r.obj("prompt"));
  const rules = p.str("rules");
  const playInstruction = p.str("playInstruction");
  const instances = r.optNum("instances");
  if (instances !== undefined && !(Number.isInteger(instances) && instances >= 1))
    throw new ProtocolError(`POST /create: field "instances" must be a positive integer (got ${instances})`);
  return {
    session: r.str("session"),
    ...readState(r),
    ...(instances !== undefined ? { instances } : {}),
    prompt: {
      rules,
      playInstruction,
      compactRules: p.optStr("compactRules") ?? `${rules}\n${playInstruction}`,
      compactAsk: p.optStr("compactAsk") ?? "Your move?",
      actionWord: p.optStr("actionWord") ?? "Action",
      ...clean({ legalActionsHeading: p.optStr("legalActionsHeading"), history: readHistory(p) }),
    },
  };
}

export function parseRestartReply(body: unknown): StateReply {
  return readState(reader("POST /restart", body));
}

export function parseStepReply(body: unknown): StepReply {
  const r = reader("POST /step", body);
  return clean({
    observation: r.str("observation"),
    compactObservation: r.optStr("compactObservation"),
    reward: r.num("reward"),
    done: r.bool("done"),
    won: r.bool("won"),
    draw: r.optBool("draw"),
    score: r.optNum("score"),
    valid: r.bool("valid"),
    invalidReason: r.optStr("invalidReason"),
    action: r.optStr("action"),
    feedback: r.optStr("feedback"),
    compactFeedback: r.optStr("compactFeedback"),
    outcome: r.optStr("outcome"),
    compactOutcome: r.optStr("compactOutcome"),
    hindsightObservation: r.optStr("hindsightObservation"),
    compactHindsight: r.optStr("compactHindsight"),
    legalActions: r.optStrings("legalActions"),
    toMove: r.toMove("toMove", false),
    forfeit: r.forfeit("forfeit"),
    info: isObj(r.o.info) ? r.o.info : undefined,
  });
}

export function parseExpertReply(body: unknown): ExpertReply {
  const r = reader("POST /expert", body);
  if (!("action" in r.o))
    throw new ProtocolError('POST /expert: field "action" must be a string or null (missing)');
  const facts = r.optStrings("facts");
  if (facts === undefined)
    throw new ProtocolError('POST /expert: field "facts" must be a list of strings (missing)');
  const avoid = r.optStrings("avoid");
  return { action: r.optStr("action") ?? null, facts, ...(avoid !== undefined ? { avoid } : {}) };
}

/** Reads an error body (`{error: {kind, message, ...}}`); null when the body is not one. */
export function parseErrorBody(body: unknown): ErrorBody["error"] | null {
  if (!isObj(body) || !isObj(body.error)) return null;
  const e = body.error;
  if (typeof e.kind !== "string" || typeof e.message !== "string") return null;
  return clean({
    kind: e.kind as ErrorKind,
    message: e.message,
    choices: Array.isArray(e.choices) ? e.choices.map(String) : undefined,
    field: typeof e.field === "string" ? e.field : undefined,
  });
}

/**
 * Checks a config object against an environment's declared fields; returns the complaint
 * (naming the field and its range or choices) or null. Both ends use it.
 */
export function checkEnvConfig(
  env: EnvDescription,
  config: Record<string, unknown>,
): ErrorBody["error"] | null {
  const names = Object.keys(env.config);
  for (const [k, v] of Object.entries(config)) {
    const f = env.config[k];
    const field = `config.${k}`;
    if (!f) {
      return {
        kind: "bad_config",
        field,
        message: `environment "${env.name}" has no config field "${k}"; valid fields: ${names.join(", ") || "(none)"}`,
        choices: names,
      };
    }
    const bad = (want: string): ErrorBody["error"] => ({
      kind: "bad_config",
      field,
      message: `${k} must be ${want}, got ${JSON.stringify(v)}`,
      ...(f.choices ? { choices: f.choices.map(String) } : {}),
    });
    const range =
      f.min !== undefined || f.max !== undefined ? ` in [${f.min ?? "-inf"}, ${f.max ?? "inf"}]` : "";
    if (f.type === "boolean" && typeof v !== "boolean") return bad("true or false");
    if (f.type === "string" && typeof v !== "string") return bad("a string");
    if (f.type === "integer" && !(typeof v === "number" && Number.isInteger(v)))
      return bad(`an integer${range}`);
    if (f.type === "number" && !(typeof v === "number" && Number.isFinite(v))) return bad(`a number${range}`);
    if (typeof v === "number" && ((f.min !== undefined && v < f.min) || (f.max !== undefined && v > f.max))) {
      return bad(`${f.type === "integer" ? "an integer" : "a number"}${range}`);
    }
    if (f.choices && !f.choices.includes(v as string | number | boolean)) {
      return bad(`one of ${f.choices.map((c) => JSON.stringify(c)).join(", ")}`);
    }
  }
  return null;
}

/** Whether an opponent spec matches one of the declared specs or patterns ("mcts:<n>"). */
export function opponentDeclared(env: EnvDescription, spec: string): boolean {
  return env.opponents.some((o) => {
    const lt = o.spec.indexOf(":<");
    if (lt < 0) return o.spec === spec;
    return spec.startsWith(o.spec.slice(0, lt + 1)) && spec.length > lt + 1;
  });
}
