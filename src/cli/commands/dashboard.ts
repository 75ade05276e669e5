import { existsSync } from "node:fs";
import { UsageError } from "../../core/errors.js";
import { isLoopbackHost } from "../../serve/auth.js";
import { startDashboard } from "../../web/server.js";
import { apiKeyFromEnvFlag, intFlag, parseFlags, untilSignal } from "../args.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage dashboard [DIR...] [--port 8080] [--host 127.0.0.1] [--api-key-env NAME] [--smooth N]",
  "  A web page of the training runs under each DIR (default: runs): every run's state (running,",
  "  stopped, finished) and progress, its report (`mage report`'s tables and plots, rebuilt as it",
  "  trains; the page reloads itself when the run writes), runs compared side by side, and their",
  "  logged trials replayed attempt by attempt with filters. Read-only; Ctrl-C stops it.",
  "  DIR may also be a folder of committed summaries (docs/results/experiments).",
  "  --host    listen address (default 127.0.0.1, this machine only: the pages show run contents)",
  "  --port    port (default 8080; 0 picks a free one)",
  "  --api-key-env  every page but /health needs the key in $NAME: a browser opens any page once",
  "            with ?key=KEY (then a cookie), scripts send 'Authorization: Bearer KEY'",
  "  --smooth  moving-average window for training curves, in iterations (default: automatic)",
].join("\n");

export const command: Command = {
  name: "dashboard",
  usage: USAGE,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        port: { type: "string" },
        host: { type: "string" },
        smooth: { type: "string" },
        "api-key-env": { type: "string" },
      },
      USAGE,
      true,
    );
    const roots = positionals.length > 0 ? positionals : ["runs"];
    for (const r of roots) {
      if (!existsSync(r))
        throw new UsageError(
          r === "runs" && positionals.length === 0
            ? "no runs/ folder here yet: start a run (mage train --config configs/quickstart.yaml) or name a folder"
            : `no such folder: ${r}`,
        );
    }
    const port = intFlag("port", values.port, { max: 65535 }) ?? 8080;
    const smooth = intFlag("smooth", values.smooth, { max: 1000 });
    if (smooth === 0) throw new UsageError("--smooth must be at least 1");
    const host = values.host ?? "127.0.0.1";
    const apiKey = apiKeyFromEnvFlag(values["api-key-env"]);
    let handle: Awaited<ReturnType<typeof startDashboard>>;
    try {
      handle = await startDashboard({
        roots,
        host,
        port,
        apiKey,
        ...(smooth !== undefined ? { smooth } : {}),
      });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EADDRINUSE")
        throw new UsageError(`--port ${port}: ${host}:${port} is in use; pass another --port`);
      if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND")
        throw new UsageError(`--host ${host}: cannot listen on this address (${code})`);
      throw err;
    }
    const runs = handle.index.scan().length;
    console.error(
      `mage dashboard: ${handle.url} (${runs} run${runs === 1 ? "" : "s"} under ${roots.join(", ")}${apiKey ? "; key required: open it once with ?key=KEY" : ""}); Ctrl-C stops`,
    );
    if (!isLoopbackHost(host) && !apiKey)
      console.error(
        `mage dashboard: WARNING listening on ${host} without --api-key-env: anyone who can reach it can read these runs and their transcripts`,
      );
    await untilSignal("dashboard", async () => {
      await handle.close();
    });
    return 0;
  },
};
