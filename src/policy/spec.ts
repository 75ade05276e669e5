/**
 * Policy specs: the strings users pass to pick a language model (`--policy`, configs).
 *
 *   openai:http://127.0.0.1:8000/v1#Qwen3-4B                  OpenAI-compatible server, model after '#'
 *   openai:http://127.0.0.1:8000/v1#Qwen3-4B?concurrency=4&timeout=60&apiKeyEnv=OPENAI_API_KEY
 *   gguf:/path/model.gguf                                     a GGUF file (or a bare path ending in .gguf)
 *   checkpoint:runs/x/ckpt  or a bare directory path          the embedded model's checkpoint
 *
 * Options of `openai:` may come after the model (`#MODEL?opts`) or before it (`URL?opts#MODEL`):
 *   apiKeyEnv=NAME   environment variable holding the API key (the key itself never goes in a spec)
 *   concurrency=N    max requests in flight (default 8)
 *   timeout=S        per-attempt timeout in seconds (default 120)
 *   retries=N        retries after the first attempt (default 5)
 *   baseDelay=S      first backoff ceiling in seconds (default 0.5)
 *   maxDelay=S       longest wait between attempts in seconds (default 30)
 *   logprobs=BOOL    request logprobs (default true)
 *   thinking=BOOL    sends chat_template_kwargs.enable_thinking (Qwen3-style templates)
 *   sendTokenIds=BOOL  send assistant messages' token ids as `token_ids` (for `mage serve`; default false)
 *
 * This module only parses; it builds nothing. `OpenAIPolicySpec.options` can be passed straight
 * to `new OpenAIChatPolicy(...)`.
 */
import { UsageError } from "../core/errors.js";
import { normaliseBaseUrl, type OpenAIChatPolicyOptions } from "./openai.js";

export type OpenAISpecOptions = Pick<
  OpenAIChatPolicyOptions,
  | "baseUrl"
  | "model"
  | "apiKeyEnv"
  | "concurrency"
  | "timeoutMs"
  | "retries"
  | "baseDelayMs"
  | "maxDelayMs"
  | "logprobs"
  | "extraBody"
  | "sendTokenIds"
>;

export interface OpenAIPolicySpec {
  kind: "openai";
  /** The spec as written. */
  spec: string;
  options: OpenAISpecOptions;
}

export interface GgufPolicySpec {
  kind: "gguf";
  spec: string;
  path: string;
}

export interface CheckpointPolicySpec {
  kind: "checkpoint";
  spec: string;
  dir: string;
}

export type PolicySpec = OpenAIPolicySpec | GgufPolicySpec | CheckpointPolicySpec;

export const POLICY_SPEC_FORMS = [
  "openai:URL#MODEL[?apiKeyEnv=VAR&concurrency=N&timeout=SECONDS&retries=N&baseDelay=SECONDS&maxDelay=SECONDS&logprobs=BOOL&thinking=BOOL&sendTokenIds=BOOL]",
  "gguf:PATH.gguf",
  "checkpoint:DIR",
  "DIR (a bare checkpoint directory)",
] as const;

export const OPENAI_SPEC_OPTIONS = [
  "apiKeyEnv",
  "concurrency",
  "timeout",
  "retries",
  "baseDelay",
  "maxDelay",
  "logprobs",
  "thinking",
  "sendTokenIds",
] as const;

function bad(spec: string, why: string): UsageError {
  return new UsageError(
    `invalid policy spec "${spec}": ${why}; accepted forms: ${POLICY_SPEC_FORMS.join(" | ")}`,
  );
}

function parseBool(spec: string, key: string, value: string): boolean {
  if (value === "true" || value === "1") return true;
  if (value === "false" || value === "0") return false;
  throw bad(spec, `option ${key}="${value}" must be true or false`);
}

function parseNumber(spec: string, key: string, value: string, integer: boolean, min: number): number {
  const n = value.trim() === "" ? Number.NaN : Number(value);
  if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) {
    throw bad(spec, `option ${key}="${value}" must be ${integer ? "an integer" : "a number"} >= ${min}`);
  }
  return n;
}

function parseOpenAI(spec: string, rest: string): OpenAIPolicySpec {
  const { urlPart, model, query } = splitOpenAISpec(spec, rest);
  let baseUrl: string;
  try {
    baseUrl = normaliseBaseUrl(urlPart).toString().replace(/\/+$/, "");
  } catch (err) {
    throw bad(spec, err instanceof Error ? err.message : String(err));
  }
  const options: OpenAISpecOptions = { baseUrl, model };
  if (query !== undefined) parseOpenAIQuery(spec, query, options);
  return { kind: "openai", spec, options };
}

/** `URL#MODEL`, with options after `?` on either side of the `#` (not both). */
function splitOpenAISpec(spec: string, rest: string): { urlPart: string; model: string; query?: string } {
  const hash = rest.indexOf("#");
  if (hash < 0) throw bad(spec, "missing the model name after '#'");
  let urlPart = rest.slice(0, hash);
  let modelPart = rest.slice(hash + 1);
  let query: string | undefined;
  const qModel = modelPart.indexOf("?");
  const qUrl = urlPart.indexOf("?");
  if (qModel >= 0 && qUrl >= 0) throw bad(spec, "options given twice (both before and after '#')");
  if (qModel >= 0) {
    query = modelPart.slice(qModel + 1);
    modelPart = modelPart.slice(0, qModel);
  } else if (qUrl >= 0) {
    query = urlPart.slice(qUrl + 1);
    urlPart = urlPart.slice(0, qUrl);
  }
  const model = modelPart.trim();
  if (model === "") throw bad(spec, "empty model name after '#'");
  if (urlPart.trim() === "") throw bad(spec, "missing the server URL");
  return { urlPart: urlPart.trim(), model, query };
}

/** The `KEY=VALUE&…` options, each known, given once and %-decoded, into `options`. */
function parseOpenAIQuery(spec: string, query: string, options: OpenAISpecOptions): void {
  const seen = new Set<string>();
  for (const pair of query.split("&")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq < 0) throw bad(spec, `option "${pair}" needs a value (KEY=VALUE)`);
    const key = pair.slice(0, eq);
    let value: string;
    try {
      value = decodeURIComponent(pair.slice(eq + 1));
    } catch {
      throw bad(spec, `option "${pair}" has a malformed %-escape`);
    }
    if (!(OPENAI_SPEC_OPTIONS as readonly string[]).includes(key)) {
      throw bad(spec, `unknown option "${key}"; valid options: ${OPENAI_SPEC_OPTIONS.join(", ")}`);
    }
    if (seen.has(key)) throw bad(spec, `option ${key} given twice`);
    seen.add(key);
    setOpenAIOption(spec, pair, key, value, options);
  }
}

function setOpenAIOption(
  spec: string,
  pair: string,
  key: string,
  value: string,
  options: OpenAISpecOptions,
): void {
  switch (key) {
    case "apiKeyEnv":
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(value)) {
        // Never echo the value: it may be a key pasted by mistake.
        throw bad(
          spec.split(pair).join("apiKeyEnv=***"),
          "apiKeyEnv must name an environment variable (letters, digits, _), not hold the key itself",
        );
      }
      options.apiKeyEnv = value;
      break;
    case "concurrency":
      options.concurrency = parseNumber(spec, key, value, true, 1);
      break;
    case "timeout": {
      const s = parseNumber(spec, key, value, false, 0);
      if (s === 0) throw bad(spec, "option timeout must be > 0 seconds");
      options.timeoutMs = s * 1000;
      break;
    }
    case "retries":
      options.retries = parseNumber(spec, key, value, true, 0);
      break;
    case "baseDelay":
      options.baseDelayMs = parseNumber(spec, key, value, false, 0) * 1000;
      break;
    case "maxDelay":
      options.maxDelayMs = parseNumber(spec, key, value, false, 0) * 1000;
      break;
    case "logprobs":
      options.logprobs = parseBool(spec, key, value);
      break;
    case "thinking":
      options.extraBody = { chat_template_kwargs: { enable_thinking: parseBool(spec, key, value) } };
      break;
    case "sendTokenIds":
      options.sendTokenIds = parseBool(spec, key, value);
      break;
  }
}

/** Parses a policy spec (see the module comment). Throws UsageError listing the accepted forms. */
export function parsePolicySpec(spec: string): PolicySpec {
  if (typeof spec !== "string" || spec.trim() === "") throw bad(String(spec), "empty spec");
  const text = spec.trim();
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]+):/.exec(text);
  if (scheme) {
    const name = scheme[1].toLowerCase();
    const rest = text.slice(scheme[0].length);
    switch (name) {
      case "openai":
        return parseOpenAI(text, rest);
      case "gguf": {
        const path = rest.trim();
        if (path === "") throw bad(text, "missing the file path after gguf:");
        return { kind: "gguf", spec: text, path };
      }
      case "checkpoint": {
        const dir = rest.trim();
        if (dir === "") throw bad(text, "missing the directory after checkpoint:");
        return { kind: "checkpoint", spec: text, dir };
      }
      case "http":
      case "https":
        throw bad(text, `a server URL needs the openai: prefix and a model, e.g. openai:${text}#MODEL`);
      default:
        throw bad(text, `unknown scheme "${scheme[1]}:"`);
    }
  }
  if (/\.gguf$/i.test(text)) return { kind: "gguf", spec: text, path: text };
  return { kind: "checkpoint", spec: text, dir: text };
}
