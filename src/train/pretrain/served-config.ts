/**
 * `mage pretrain --config FILE`: a warm start on a served environment that declares an expert
 * (`configs/pretrain/alfworld-smollm2.yaml`). The file names the base model, the server and the
 * environment config the corpus is played on, the config of the checks' fresh trials (ALFWorld: a
 * split the corpus never saw), and any warm-start setting; flags given beside `--config` win.
 * Every field is checked; a bad one is a UsageError naming it.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { UsageError } from "../../core/errors.js";
import { openRemoteTask, type RemoteEnvSettings, type RemoteTaskDefinition } from "../../tasks/remote.js";
import { checkExpertEnvironment } from "./served-corpus.js";
import { SERVED_TARGETS, type ServedTargets } from "./served-targets.js";

const EnvSchema = z
  .object({
    url: z.string().min(1),
    name: z.string().min(1),
    /** The environment config of the corpus's trials. */
    config: z.record(z.string(), z.unknown()).default({}),
    /** The corpus's seed range (default: all the server's; TextWorldExpress needs its split's). */
    seeds: z.object({ min: z.number().int(), max: z.number().int() }).strict().nullable().default(null),
    timeoutMs: z.number().int().positive().default(120_000),
    retries: z.number().int().min(0).max(20).default(3),
    concurrency: z.number().int().positive().default(16),
    apiKeyEnv: z.string().min(1).nullable().default(null),
  })
  .strict();

/** The warm-start settings a file may set (the flags' names in camelCase). */
const SettingsSchema = z
  .object({
    steps: z.number().int().positive(),
    corpusTrials: z.number().int().positive(),
    evalTrials: z.number().int().positive(),
    batchTokens: z.number().int().positive(),
    microBatchTokens: z.number().int().positive(),
    lr: z.number().positive(),
    warmupSteps: z.number().int().min(0),
    loraRank: z.number().int().min(0),
    actionWeight: z.number().int().min(1).max(255),
    epsilon: z.number().min(0).max(1),
    firstEpsilon: z.number().min(0).max(1),
    malformedRate: z.number().min(0).max(1),
    reflectionFacts: z.number().int().min(1),
    failedShare: z.number().min(0).max(1),
    remarkMaxTokens: z.number().int().min(24),
    scoreRandomMoves: z.boolean(),
    remarkWeight: z.number().int().min(1).max(255),
    /** α of the unlikelihood term on the answers the expert judged a waste (its `avoid`); 0: none. */
    unlikelihood: z.number().min(0),
    evalBatch: z.number().int().positive(),
    prefixCacheMB: z.number().min(0),
    threads: z.number().int().min(0),
    dtype: z.enum(["float32", "bfloat16", "float16"]),
    device: z.string().min(1),
  })
  .partial()
  .strict();

export const ServedPretrainSchema = z
  .object({
    game: z.literal("remote"),
    backend: z.literal("torch").default("torch"),
    /** The base: a local Hugging Face model directory. */
    model: z.string().min(1),
    out: z.string().min(1).nullable().default(null),
    seed: z.number().int().min(0).default(0),
    env: EnvSchema,
    /** The checks' fresh trials: the same server and environment with this config. */
    checks: z
      .object({
        config: z.record(z.string(), z.unknown()).default({}),
        seeds: z.object({ min: z.number().int(), max: z.number().int() }).strict().nullable().default(null),
        /** Each written met or missed in the report (`served-targets.ts`; these defaults). */
        targets: z
          .object({
            playValid: z.number().min(0).max(1).default(SERVED_TARGETS.playValid),
            remarkInformative: z.number().min(0).max(1).default(SERVED_TARGETS.remarkInformative),
            recoveryMargin: z.number().min(-1).max(1).default(SERVED_TARGETS.recoveryMargin),
          })
          .strict()
          .default(SERVED_TARGETS),
      })
      .strict(),
    /**
     * Agent turns per attempt in the corpus and the checks, as the training config's
     * `task.maxTurns` (null: the server's `maxTurns` for the environment).
     */
    maxTurns: z.number().int().positive().nullable().default(null),
    settings: SettingsSchema.default({}),
  })
  .strict();

export type ServedPretrainConfig = z.infer<typeof ServedPretrainSchema>;

/** Reads and checks a served warm start's config file. */
export function loadServedPretrainConfig(path: string): ServedPretrainConfig {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(path, "utf8"));
  } catch (err) {
    throw new UsageError(`--config ${path}: ${(err as Error).message}`);
  }
  const result = ServedPretrainSchema.safeParse(raw);
  if (!result.success) {
    const lines = result.error.issues.map(
      (i) => `  ${i.path.length > 0 ? i.path.join(".") : "(top level)"}: ${i.message}`,
    );
    throw new UsageError(`invalid pretrain config ${path}:\n${lines.join("\n")}`);
  }
  return result.data;
}

/** The served environments of a warm start: the corpus's and the checks'. */
export interface ServedPretrain {
  corpus: RemoteTaskDefinition;
  checks: RemoteTaskDefinition;
  /** Agent turns per attempt (the file's `maxTurns`, else the server's). */
  maxTurns: number;
  /** The checks' targets (the file's `checks.targets`). */
  targets: ServedTargets;
  /** What the report records (`maxTurns` only when the file sets it). */
  record: {
    url: string;
    name: string;
    config: Record<string, unknown>;
    checksConfig: Record<string, unknown>;
    maxTurns?: number;
  };
}

/** Connects to the server, checks both configs against its /info and that the environment has an expert. */
export async function openServedPretrain(c: ServedPretrainConfig): Promise<ServedPretrain> {
  const settings: RemoteEnvSettings = {
    url: c.env.url,
    name: c.env.name,
    config: c.env.config,
    timeoutMs: c.env.timeoutMs,
    retries: c.env.retries,
    concurrency: c.env.concurrency,
    apiKeyEnv: c.env.apiKeyEnv,
    seeds: c.env.seeds,
  };
  const corpus = await openRemoteTask(settings);
  checkExpertEnvironment(corpus);
  const checks = await openRemoteTask({ ...settings, config: c.checks.config, seeds: c.checks.seeds });
  return {
    corpus,
    checks,
    maxTurns: c.maxTurns ?? corpus.maxTurns,
    targets: c.checks.targets,
    record: {
      url: c.env.url,
      name: c.env.name,
      config: c.env.config,
      checksConfig: c.checks.config,
      ...(c.maxTurns !== null ? { maxTurns: c.maxTurns } : {}),
    },
  };
}
