/**
 * `mage serve --checkpoint DIR | --model DIR`: an OpenAI-compatible HTTP server for an embedded
 * checkpoint, or for a Hugging Face model or torch run sampled by the PyTorch worker (see
 * src/serve/server.ts and src/cli/serve-model.ts). Loopback only unless --host says otherwise;
 * SIGINT/SIGTERM stop accepting requests, let the ones in flight finish for up to 10 s, cancel the
 * rest (503), stop the worker and exit 0 (a second signal exits at once).
 */
import { parseArgs } from "node:util";
import { UsageError } from "../../core/errors.js";
import { isLoopbackHost } from "../../serve/auth.js";
import { SERVE_DEFAULTS, type ServeHandle, type ServeOptions, startServer } from "../../serve/server.js";
import { apiKeyFromEnvFlag, intFlag, untilSignal } from "../args.js";
import type { Command } from "../command.js";
import { openServeModel } from "../serve-model.js";

const USAGE =
  "mage serve --checkpoint DIR | --model DIR [--host 127.0.0.1] [--port 8000] [--api-key-env NAME] " +
  "[--max-concurrent N] [--max-tokens N] [--model-name NAME] [--kernels auto|js|wasm|native] " +
  "[--threads N] [--device cpu|cuda|cuda:N] [--dtype float32|bfloat16|float16|auto] " +
  "[--max-batch N] [--batch-window-ms MS] [--batch-max-wait-ms MS] [--max-body-bytes N] [--seed S] [--quiet]";

export interface ServeCliResult {
  handle: ServeHandle;
  modelName: string;
}

type Values = Record<string, string | boolean | undefined>;

function parseServeFlags(argv: string[]): Values {
  try {
    return parseArgs({
      args: argv,
      options: {
        checkpoint: { type: "string" },
        model: { type: "string" },
        threads: { type: "string" },
        device: { type: "string" },
        dtype: { type: "string" },
        host: { type: "string" },
        port: { type: "string" },
        "api-key-env": { type: "string" },
        "max-concurrent": { type: "string" },
        "max-tokens": { type: "string" },
        "model-name": { type: "string" },
        kernels: { type: "string" },
        "max-batch": { type: "string" },
        "batch-window-ms": { type: "string" },
        "batch-max-wait-ms": { type: "string" },
        "max-body-bytes": { type: "string" },
        seed: { type: "string" },
        quiet: { type: "boolean", default: false },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
  }
}

/** The server's options from the flags, all but the model and the log. */
function serverFlags(
  values: Values,
  env: NodeJS.ProcessEnv,
): Omit<ServeOptions, "engine" | "modelName" | "log"> {
  const str = (k: string) => values[k] as string | undefined;
  return {
    host: str("host") ?? SERVE_DEFAULTS.host,
    port: intFlag("port", str("port"), { max: 65535 }) ?? SERVE_DEFAULTS.port,
    maxConcurrent:
      intFlag("max-concurrent", str("max-concurrent"), { min: 1 }) ?? SERVE_DEFAULTS.maxConcurrent,
    maxTokens: intFlag("max-tokens", str("max-tokens"), { min: 1 }) ?? SERVE_DEFAULTS.maxTokens,
    maxBatch: intFlag("max-batch", str("max-batch"), { min: 1 }) ?? SERVE_DEFAULTS.maxBatch,
    batchWindowMs: intFlag("batch-window-ms", str("batch-window-ms")) ?? SERVE_DEFAULTS.batchWindowMs,
    batchMaxWaitMs: intFlag("batch-max-wait-ms", str("batch-max-wait-ms")) ?? SERVE_DEFAULTS.batchMaxWaitMs,
    maxBodyBytes:
      intFlag("max-body-bytes", str("max-body-bytes"), { min: 1024 }) ?? SERVE_DEFAULTS.maxBodyBytes,
    seed: intFlag("seed", str("seed")),
    apiKey: apiKeyFromEnvFlag(str("api-key-env"), env),
  };
}

/** Parses the flags, opens the model and starts the server (no signal handling). */
export async function startServeFromArgs(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  log: (line: string) => void = (l) => console.error(l),
): Promise<ServeCliResult> {
  const values = parseServeFlags(argv);
  const str = (k: string) => values[k] as string | undefined;
  if (str("checkpoint") === undefined && str("model") === undefined)
    throw new UsageError(`--checkpoint DIR or --model DIR is required\nusage: ${USAGE}`);
  const flags = serverFlags(values, env);
  const host = flags.host ?? SERVE_DEFAULTS.host;
  const port = flags.port ?? SERVE_DEFAULTS.port;
  const served = await openServeModel(
    {
      checkpoint: str("checkpoint"),
      model: str("model"),
      kernels: str("kernels"),
      threads: intFlag("threads", str("threads")),
      device: str("device"),
      dtype: str("dtype"),
    },
    env,
  );
  const modelName = str("model-name") ?? served.name;
  const handle = await startServer({
    ...flags,
    engine: served.backend,
    modelName,
    log: values.quiet === true ? undefined : log,
  }).catch(async (err: NodeJS.ErrnoException) => {
    await served.backend.close();
    if (err?.code === "EADDRINUSE")
      throw new UsageError(`--port ${port}: the address ${host}:${port} is in use`);
    if (err?.code === "EADDRNOTAVAIL" || err?.code === "ENOTFOUND")
      throw new UsageError(`--host ${host}: cannot listen on this address (${err.code})`);
    throw err;
  });
  log(
    `mage serve: "${modelName}" (${served.description}) at ${handle.baseUrl}${flags.apiKey ? " (API key required)" : ""}`,
  );
  if (!isLoopbackHost(host) && !flags.apiKey)
    log(`mage serve: WARNING listening on ${host} without --api-key-env: anyone who can reach it can use it`);
  return { handle, modelName };
}

export const command: Command = {
  name: "serve",
  usage: USAGE,
  async run(argv) {
    const { handle } = await startServeFromArgs(argv);
    await untilSignal("serve", async (sig) => {
      console.error(
        `mage serve: ${sig}, finishing requests in flight (at most ${SERVE_DEFAULTS.shutdownGraceMs / 1000} s, then cancelled) and shutting down`,
      );
      await handle.close();
    });
    console.error("mage serve: stopped");
    return 0;
  },
};
