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
import { SERVE_DEFAULTS, type ServeHandle, startServer } from "../../serve/server.js";
import { apiKeyFromEnvFlag, intFlag, untilSignal } from "../args.js";
import type { Command } from "../command.js";
import { openServeModel } from "../serve-model.js";

const USAGE =
  "mage serve --checkpoint DIR | --model DIR [--host 127.0.0.1] [--port 8000] [--api-key-env NAME] " +
  "[--max-concurrent N] [--max-tokens N] [--model-name NAME] [--kernels auto|js|wasm|native] " +
  "[--threads N] [--device cpu|cuda|cuda:N] [--dtype float32|bfloat16|float16] " +
  "[--max-batch N] [--batch-window-ms MS] [--batch-max-wait-ms MS] [--max-body-bytes N] [--seed S] [--quiet]";

export interface ServeCliResult {
  handle: ServeHandle;
  modelName: string;
}

/** Parses the flags, opens the model and starts the server (no signal handling). */
export async function startServeFromArgs(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  log: (line: string) => void = (l) => console.error(l),
): Promise<ServeCliResult> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
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
    }));
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
  }
  const str = (k: string) => values[k] as string | undefined;
  if (str("checkpoint") === undefined && str("model") === undefined)
    throw new UsageError(`--checkpoint DIR or --model DIR is required\nusage: ${USAGE}`);
  const host = (values.host as string | undefined) ?? SERVE_DEFAULTS.host;
  const port = intFlag("port", values.port as string | undefined, { max: 65535 }) ?? SERVE_DEFAULTS.port;
  const maxConcurrent =
    intFlag("max-concurrent", values["max-concurrent"] as string | undefined, { min: 1 }) ??
    SERVE_DEFAULTS.maxConcurrent;
  const maxTokens =
    intFlag("max-tokens", values["max-tokens"] as string | undefined, { min: 1 }) ?? SERVE_DEFAULTS.maxTokens;
  const maxBatch =
    intFlag("max-batch", values["max-batch"] as string | undefined, { min: 1 }) ?? SERVE_DEFAULTS.maxBatch;
  const windowMs =
    intFlag("batch-window-ms", values["batch-window-ms"] as string | undefined) ??
    SERVE_DEFAULTS.batchWindowMs;
  const maxWaitMs =
    intFlag("batch-max-wait-ms", values["batch-max-wait-ms"] as string | undefined) ??
    SERVE_DEFAULTS.batchMaxWaitMs;
  const maxBody =
    intFlag("max-body-bytes", values["max-body-bytes"] as string | undefined, { min: 1024 }) ??
    SERVE_DEFAULTS.maxBodyBytes;
  const seed = intFlag("seed", values.seed as string | undefined);
  const apiKey = apiKeyFromEnvFlag(values["api-key-env"] as string | undefined, env);
  const threads = intFlag("threads", str("threads"));
  const served = await openServeModel(
    {
      checkpoint: str("checkpoint"),
      model: str("model"),
      kernels: str("kernels"),
      threads,
      device: str("device"),
      dtype: str("dtype"),
    },
    env,
  );
  const modelName = str("model-name") ?? served.name;
  const quiet = values.quiet === true;
  const handle = await startServer({
    engine: served.backend,
    modelName,
    host,
    port,
    apiKey,
    maxConcurrent,
    maxTokens,
    maxBatch,
    batchWindowMs: windowMs,
    batchMaxWaitMs: maxWaitMs,
    maxBodyBytes: maxBody,
    seed,
    log: quiet ? undefined : log,
  }).catch(async (err: NodeJS.ErrnoException) => {
    await served.backend.close();
    if (err?.code === "EADDRINUSE")
      throw new UsageError(`--port ${port}: the address ${host}:${port} is in use`);
    if (err?.code === "EADDRNOTAVAIL" || err?.code === "ENOTFOUND")
      throw new UsageError(`--host ${host}: cannot listen on this address (${err.code})`);
    throw err;
  });
  log(
    `mage serve: "${modelName}" (${served.description}) at ${handle.baseUrl}${apiKey ? " (API key required)" : ""}`,
  );
  if (!isLoopbackHost(host) && !apiKey)
    log(`mage serve: WARNING listening on ${host} without --api-key-env: anyone who can reach it can use it`);
  return { handle, modelName };
}

export const command: Command = {
  name: "serve",
  summary: "Serve a checkpoint or a Hugging Face model over an OpenAI-compatible HTTP API",
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
