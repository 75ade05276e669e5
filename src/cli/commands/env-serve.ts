/**
 * `mage env-serve`: mage's engines (TicTacToe, Kuhn, Sokoban, MineSweeper) and their opponents
 * over the environment protocol `mage-env/1` (docs/env-protocol.md, src/serve/env-server.ts). Loopback
 * by default; SIGINT/SIGTERM stop it cleanly (exit 0), a second signal at once.
 */
import { UsageError } from "../../core/errors.js";
import { isLoopbackHost } from "../../serve/auth.js";
import { ENV_SERVER_DEFAULTS, type EnvServerHandle, startEnvServer } from "../../serve/env-server.js";
import { parseOpponentLimitFlags } from "../../serve/served-opponents.js";
import { apiKeyFromEnvFlag, intFlag, parseFlags, untilSignal } from "../args.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage env-serve [--host 127.0.0.1] [--port 8765] [--api-key-env NAME] [--session-ttl SECONDS]",
  "               [--max-sessions N] [--opponent-limit NAME=N[,NAME=N]] [--opponent-threads N]",
  "               [--time-budget-ms MS] [--quiet]",
  "  --api-key-env       every endpoint but GET /health needs 'Authorization: Bearer $NAME'",
  `  --session-ttl       idle sessions expire after this many seconds (default ${ENV_SERVER_DEFAULTS.sessionTtlSeconds})`,
  `  --max-sessions      live sessions at most; past it /create answers 503 with Retry-After (default ${ENV_SERVER_DEFAULTS.maxSessions})`,
  "  --opponent-limit    largest argument of an opponent whose work grows with it (mcts simulations,",
  "                      cfr/cfr-mixed/cfr-plus iterations; defaults in GET /info), repeatable",
  "  --opponent-threads  worker threads that play those opponents' moves (default: the cores, at most 4)",
  `  --time-budget-ms    opponent thinking one request may use, queued or running (default ${ENV_SERVER_DEFAULTS.timeBudgetMs})`,
].join("\n");

export const ENV_SERVE_DEFAULT_PORT = 8765;

/** Parses the flags and starts the server (no signal handling). */
export async function startEnvServeFromArgs(
  argv: string[],
  log: (line: string) => void = (l) => console.error(l),
  env: NodeJS.ProcessEnv = process.env,
): Promise<EnvServerHandle> {
  const { values } = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      "api-key-env": { type: "string" },
      "session-ttl": { type: "string" },
      "max-sessions": { type: "string" },
      "opponent-limit": { type: "string", multiple: true },
      "opponent-threads": { type: "string" },
      "time-budget-ms": { type: "string" },
      quiet: { type: "boolean" },
    },
    USAGE,
  );
  const host = values.host ?? "127.0.0.1";
  const port = intFlag("port", values.port, { max: 65535 }) ?? ENV_SERVE_DEFAULT_PORT;
  const ttl = intFlag("session-ttl", values["session-ttl"], { min: 1 });
  const maxSessions = intFlag("max-sessions", values["max-sessions"], { min: 1 });
  const threads = intFlag("opponent-threads", values["opponent-threads"], { min: 1, max: 64 });
  const budget = intFlag("time-budget-ms", values["time-budget-ms"], { min: 1 });
  const apiKey = apiKeyFromEnvFlag(values["api-key-env"], env);
  const handle = await startEnvServer({
    host,
    port,
    apiKey,
    opponentLimits: parseOpponentLimitFlags(values["opponent-limit"] ?? []),
    ...(ttl !== undefined ? { sessionTtlSeconds: ttl } : {}),
    ...(maxSessions !== undefined ? { maxSessions } : {}),
    ...(threads !== undefined ? { opponentThreads: threads } : {}),
    ...(budget !== undefined ? { timeBudgetMs: budget } : {}),
    ...(values.quiet ? {} : { log }),
  }).catch((err: NodeJS.ErrnoException) => {
    if (err?.code === "EADDRINUSE")
      throw new UsageError(`--port ${port}: the address ${host}:${port} is in use`);
    if (err?.code === "EADDRNOTAVAIL" || err?.code === "ENOTFOUND")
      throw new UsageError(`--host ${host}: cannot listen on this address (${err.code})`);
    throw err;
  });
  log(
    `mage env-serve: tictactoe, kuhn, sokoban, minesweeper over mage-env/1 at ${handle.url}${apiKey ? " (API key required)" : ""}`,
  );
  if (!isLoopbackHost(host) && !apiKey)
    log(
      `mage env-serve: WARNING listening on ${host} without --api-key-env: anyone who can reach it can create sessions and use its CPU`,
    );
  return handle;
}

export const command: Command = {
  name: "env-serve",
  usage: USAGE,
  async run(argv) {
    const handle = await startEnvServeFromArgs(argv);
    await untilSignal("env-serve", async (sig) => {
      console.error(
        `mage env-serve: ${sig}, shutting down (requests in flight get ${ENV_SERVER_DEFAULTS.shutdownGraceMs / 1000} s, then their opponent moves are cancelled)`,
      );
      await handle.close();
    });
    console.error("mage env-serve: stopped");
    return 0;
  },
};
