import type { Command } from "../command.js";

/**
 * Every `mage` subcommand, loaded lazily so `mage --help` stays fast.
 * To add a command: write `src/cli/commands/NAME.ts` exporting `command: Command`, add one line here.
 */
export const COMMANDS: Record<string, () => Promise<Command>> = {
  tournament: async () => (await import("./tournament.js")).command,
  exploitability: async () => (await import("./exploitability.js")).command,
  play: async () => (await import("./play.js")).command,
  "kuhn-table": async () => (await import("./kuhn-table.js")).command,
  config: async () => (await import("./config.js")).command,
  train: async () => (await import("./train.js")).command,
  eval: async () => (await import("./eval.js")).command,
  pretrain: async () => (await import("./pretrain.js")).command,
  report: async () => (await import("./report.js")).command,
  serve: async () => (await import("./serve.js")).command,
  "env-serve": async () => (await import("./env-serve.js")).command,
  experiment: async () => (await import("./experiment.js")).command,
  diversity: async () => (await import("./diversity.js")).command,
  replay: async () => (await import("./replay.js")).command,
  dashboard: async () => (await import("./dashboard.js")).command,
  "export-hf": async () => (await import("./export-hf.js")).command,
  "import-gguf": async () => (await import("./import-gguf.js")).command,
  "fetch-model": async () => (await import("./fetch-model.js")).command,
};
