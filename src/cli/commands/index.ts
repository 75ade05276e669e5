import type { Command } from "../command.js";

/** The groups `mage --help` lists the commands in, in this order. */
export const GROUPS = ["train", "evaluate", "inspect", "serve", "models"] as const;
export type CommandGroup = (typeof GROUPS)[number];

export interface CommandEntry {
  readonly group: CommandGroup;
  /** One line for `mage --help` and the first line of `mage NAME --help`. */
  readonly summary: string;
  /** Loaded lazily so `mage --help` stays fast. */
  load(): Promise<Command>;
}

/**
 * Every `mage` subcommand. To add one: write `src/cli/commands/NAME.ts` exporting `command: Command`
 * and add its entry here, in its group; docs/cli.md lists the same groups.
 */
export const COMMANDS: Record<string, CommandEntry> = {
  train: {
    group: "train",
    summary: "train a model with MAGE, LaMer-style or an RL baseline from a YAML config",
    load: async () => (await import("./train.js")).command,
  },
  pretrain: {
    group: "train",
    summary: "supervised warm start on scripted play (embedded or Hugging Face model)",
    load: async () => (await import("./pretrain.js")).command,
  },
  experiment: {
    group: "train",
    summary: "run a grid of methods × seeds on shared base models, resumable",
    load: async () => (await import("./experiment.js")).command,
  },
  config: {
    group: "train",
    summary: "print a config with every default filled in, or validate it",
    load: async () => (await import("./config.js")).command,
  },
  eval: {
    group: "evaluate",
    summary: "evaluate a policy against opponents over multi-attempt trials, with 95% intervals",
    load: async () => (await import("./eval.js")).command,
  },
  diversity: {
    group: "evaluate",
    summary: "entropy of a policy's attempt-1 play",
    load: async () => (await import("./diversity.js")).command,
  },
  exploitability: {
    group: "evaluate",
    summary: "value, NashConv and exploitability of a Kuhn strategy or a model's attempt-1 play",
    load: async () => (await import("./exploitability.js")).command,
  },
  tournament: {
    group: "evaluate",
    summary: "round-robin between opponents: wins, draws and losses per pair and seat",
    load: async () => (await import("./tournament.js")).command,
  },
  league: {
    group: "evaluate",
    summary: "rated round robin of opponents, checkpoints and a run's snapshots, paired deals",
    load: async () => (await import("./league.js")).command,
  },
  "kuhn-table": {
    group: "evaluate",
    summary: "exact calibration of fixed Kuhn strategies against every evaluation opponent",
    load: async () => (await import("./kuhn-table.js")).command,
  },
  report: {
    group: "inspect",
    summary: "markdown and SVG report from run summaries, or a grid folder's results document",
    load: async () => (await import("./report.js")).command,
  },
  replay: {
    group: "inspect",
    summary: "replay logged trials attempt by attempt",
    load: async () => (await import("./replay.js")).command,
  },
  dashboard: {
    group: "inspect",
    summary: "web pages over run folders: progress, live reports, comparisons, trial replay",
    load: async () => (await import("./dashboard.js")).command,
  },
  play: {
    group: "inspect",
    summary: "play a task yourself in the terminal, seeing what the agent sees",
    load: async () => (await import("./play.js")).command,
  },
  serve: {
    group: "serve",
    summary: "serve a checkpoint or a Hugging Face model over an OpenAI-compatible HTTP API",
    load: async () => (await import("./serve.js")).command,
  },
  "env-serve": {
    group: "serve",
    summary: "serve mage's tasks and their opponents over the environment protocol",
    load: async () => (await import("./env-serve.js")).command,
  },
  "fetch-model": {
    group: "models",
    summary: "download and import the pinned real model (SmolLM2-135M-Instruct)",
    load: async () => (await import("./fetch-model.js")).command,
  },
  "import-gguf": {
    group: "models",
    summary: "import a llama-family GGUF as a Hugging Face directory (for model.backend: torch)",
    load: async () => (await import("./import-gguf.js")).command,
  },
  "export-hf": {
    group: "models",
    summary: "export an embedded checkpoint as a Hugging Face LlamaForCausalLM directory",
    load: async () => (await import("./export-hf.js")).command,
  },
};
