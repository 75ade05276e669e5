/**
 * `mage env-serve`: mage's engines (TicTacToe, Kuhn, Sokoban, MineSweeper) and their opponents
 * over the environment protocol `mage-env/1` (docs/env-protocol.md, src/serve/env-server.ts). Loopback
 * by default; SIGINT/SIGTERM stop it.
 */
import { UsageError } from "../../core/errors.js";
import { type EnvServerHandle, startEnvServer } from "../../serve/env-server.js";
import { intFlag, parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE = "mage env-serve [--host 127.0.0.1] [--port 8765] [--session-ttl SECONDS] [--quiet]";

export const ENV_SERVE_DEFAULT_PORT = 8765;

/** Parses the flags and starts the server (no signal handling). */
export async function startEnvServeFromArgs(
  argv: string[],
  log: (line: string) => void = (l) => console.error(l),
): Promise<EnvServerHandle> {
  const { values } = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      "session-ttl": { type: "string" },
      quiet: { type: "boolean" },
    },
    USAGE,
  );
  const host = values.host ?? "127.0.0.1";
  const port = intFlag("port", values.port, { max: 65535 }) ?? ENV_SERVE_DEFAULT_PORT;
  const ttl = intFlag("session-ttl", values["session-ttl"], { min: 1 });
  const handle = await startEnvServer({
    host,
    port,
    ...(ttl !== undefined ? { sessionTtlSeconds: ttl } : {}),
    ...(values.quiet ? {} : { log }),
  }).catch((err: NodeJS.ErrnoException) => {
    if (err?.code === "EADDRINUSE")
      throw new UsageError(`--port ${port}: the address ${host}:${port} is in use`);
    if (err?.code === "EADDRNOTAVAIL" || err?.code === "ENOTFOUND")
      throw new UsageError(`--host ${host}: cannot listen on this address (${err.code})`);
    throw err;
  });
  log(`mage env-serve: tictactoe, kuhn, sokoban, minesweeper over mage-env/1 at ${handle.url}`);
  return handle;
}

export const command: Command = {
  name: "env-serve",
  summary: "Serve mage's games and puzzles (with their opponents) over the environment protocol",
  usage: USAGE,
  async run(argv) {
    const handle = await startEnvServeFromArgs(argv);
    await new Promise<void>((resolve) => {
      const onSignal = (sig: NodeJS.Signals) => {
        console.error(`mage env-serve: ${sig}, shutting down`);
        handle.close().then(resolve, resolve);
      };
      process.once("SIGINT", onSignal);
      process.once("SIGTERM", onSignal);
    });
    return 0;
  },
};
