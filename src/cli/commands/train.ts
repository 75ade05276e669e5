import { UsageError } from "../../core/errors.js";
import { parsePolicySpec } from "../../policy/spec.js";
import { loadConfig, type MageConfig } from "../../train/config.js";
import { train } from "../../train/trainer.js";
import { parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE =
  "mage train --config FILE [--out DIR] [--resume] [--set key=value]... [--policy SPEC] [--tensorboard DIR] [--wandb PROJECT]\n" +
  "  --tensorboard DIR  also write the curves as TensorBoard events under DIR (logging.tensorboard)\n" +
  "  --wandb PROJECT    also log to Weights & Biases (logging.wandb.project; --set logging.wandb.mode=offline without network)";

/** Pretrains the base model into `dir` (the supervised warm start of `mage pretrain`). */
async function pretrainFor(config: MageConfig, dir: string, log: (m: string) => void): Promise<string> {
  if (config.game === "remote") {
    throw new UsageError(
      "model.checkpoint: game: remote needs a pretrained checkpoint (mage pretrains only on its own games, " +
        "from their scripted players); pretrain one with mage pretrain --game kuhn|tictactoe and set model.checkpoint",
    );
  }
  const { runPretrain } = await import("../../train/pretrain/run.js");
  log(`no model.checkpoint given: pretraining a ${config.model.preset} model for ${config.game} into ${dir}`);
  const overrides = Object.fromEntries(Object.entries(config.pretrain).filter(([, v]) => v !== undefined));
  await runPretrain({
    game: config.game,
    preset: config.model.preset,
    out: dir,
    seed: config.seed,
    kernels: config.model.kernels,
    ...overrides,
    taskKnobs: config.task,
  });
  return dir;
}

/** `--tensorboard DIR` and `--wandb PROJECT` as config overrides (quoted, so "2024" stays a name). */
export function loggingOverrides(flags: { tensorboard?: string; wandb?: string }): string[] {
  const out: string[] = [];
  if (flags.tensorboard !== undefined) out.push(`logging.tensorboard=${JSON.stringify(flags.tensorboard)}`);
  if (flags.wandb !== undefined) out.push(`logging.wandb.project=${JSON.stringify(flags.wandb)}`);
  return out;
}

export const command: Command = {
  name: "train",
  usage: USAGE,
  async run(argv) {
    const { values } = parseFlags(
      argv,
      {
        config: { type: "string" },
        out: { type: "string" },
        resume: { type: "boolean" },
        set: { type: "string", multiple: true },
        policy: { type: "string" },
        "no-progress": { type: "boolean" },
        tensorboard: { type: "string" },
        wandb: { type: "string" },
      },
      USAGE,
    );
    if (values.policy !== undefined) {
      const spec = parsePolicySpec(values.policy);
      if (spec.kind !== "checkpoint") {
        throw new UsageError(
          `mage train cannot train "${values.policy}": remote (openai:) and GGUF models serve rollouts and evaluation only (use mage eval); training needs the embedded model (checkpoint:DIR)`,
        );
      }
    }
    if (!values.config) throw new UsageError(`--config is required\nusage: ${USAGE}`);
    const overrides = [...(values.set ?? [])];
    if (values.policy !== undefined) {
      const spec = parsePolicySpec(values.policy);
      if (spec.kind === "checkpoint") overrides.push(`model.checkpoint=${spec.dir}`);
    }
    overrides.push(...loggingOverrides(values));
    const config = loadConfig(values.config, overrides);
    const outDir = values.out ?? `runs/${config.name}-s${config.seed}`;
    let stopRequested = false;
    const onSignal = () => {
      if (stopRequested) process.exit(130);
      stopRequested = true;
      console.error(
        "\nstopping after the current iteration or evaluation batch (Ctrl-C again to quit at once)…",
      );
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      const result = await train({
        config,
        outDir,
        resume: values.resume ?? false,
        pretrain: pretrainFor,
        shouldStop: () => stopRequested,
        progress: !values["no-progress"],
      });
      console.error(`run directory: ${result.outDir} (summary.json, metrics.jsonl, checkpoints/)`);
      return result.stopped ? 130 : 0;
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    }
  },
};
