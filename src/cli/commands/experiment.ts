import { UsageError } from "../../core/errors.js";
import { rebuiltBaseLines } from "../../experiment/base-check.js";
import { describePlan } from "../../experiment/plan-state.js";
import { runExperiment } from "../../experiment/runner.js";
import { planExperiment, readExperiment } from "../../experiment/spec.js";
import { checkNoStaleRuns } from "../../experiment/stale.js";
import { parseFlags } from "../args.js";
import type { Command } from "../command.js";
import { loggingOverrides } from "./train.js";

const USAGE =
  "mage experiment FILE.yaml [--jobs N] [--only METHOD[,METHOD...]] [--seeds S[,S...]] [--no-train] [--dry-run]\n" +
  "                 [--tensorboard DIR] [--wandb PROJECT] [--accept-rebuilt-bases]\n" +
  "  Runs a grid of methods × seeds (configs/experiments/*.yaml). Each finished run's summary is\n" +
  "  copied to <resultsDir>/<name>/<method>-s<seed>.json; rerun the same command to continue an\n" +
  "  interrupted grid (finished runs are skipped, unfinished ones resume from their checkpoints).\n" +
  "  --no-train  only the measurements (diversity, exploitability) of runs that already finished\n" +
  "  --tensorboard DIR, --wandb PROJECT  every run also logs its curves there, grouped by the grid's\n" +
  "              name (TensorBoard: DIR/<grid>/<method>-s<seed>; W&B: group <grid>)\n" +
  "  --accept-rebuilt-bases  go on from a base model pretrained again (e.g. on a fresh machine whose\n" +
  "              CPU rounds differently) whose weights differ from those a seed's finished runs\n" +
  "              started from; without it the grid refuses. The report lists such a seed's runs by base.";

function list(flag: string, v: string | undefined): string[] | undefined {
  if (v === undefined) return undefined;
  const items = v
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (items.length === 0) throw new UsageError(`--${flag} needs at least one value`);
  return items;
}

export const command: Command = {
  name: "experiment",
  usage: USAGE,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        jobs: { type: "string" },
        only: { type: "string" },
        seeds: { type: "string" },
        "dry-run": { type: "boolean" },
        "no-train": { type: "boolean" },
        tensorboard: { type: "string" },
        wandb: { type: "string" },
        "accept-rebuilt-bases": { type: "boolean" },
      },
      USAGE,
      true,
    );
    if (positionals.length !== 1) throw new UsageError(`give one experiment file\nusage: ${USAGE}`);
    const file = positionals[0];
    let jobs: number | undefined;
    if (values.jobs !== undefined) {
      if (!/^\d+$/.test(values.jobs) || Number(values.jobs) < 1)
        throw new UsageError(`--jobs must be an integer ≥ 1, got "${values.jobs}"`);
      jobs = Number(values.jobs);
    }
    const seeds = list("seeds", values.seeds)?.map((s) => {
      if (!/^\d+$/.test(s)) throw new UsageError(`--seeds expects integers, got "${s}"`);
      return Number(s);
    });
    const read = readExperiment(file);
    if (read.archived !== null)
      throw new UsageError(
        `experiment ${read.name} is archived (${read.archived}); its summaries in ${read.resultsDir}/${read.name}/ stay the record. Copy the grid under a new name to run it with today's recipe.`,
      );
    // Logging changes no result, so it may be switched on for a grid already under way.
    const spec = { ...read, set: [...read.set, ...loggingOverrides(values)] };
    const plan = planExperiment(spec, file, {
      ...(values.only !== undefined ? { methods: list("only", values.only) } : {}),
      ...(seeds ? { seeds } : {}),
    });
    if (values["dry-run"]) {
      for (const line of describePlan(plan, { noTrain: values["no-train"] ?? false })) console.log(line);
      for (const line of rebuiltBaseLines(plan, values["accept-rebuilt-bases"] ?? false)) console.log(line);
      checkNoStaleRuns(plan);
      return 0;
    }
    let stopRequested = false;
    const onSignal = () => {
      if (stopRequested) process.exit(130);
      stopRequested = true;
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      const res = await runExperiment(plan, {
        ...(jobs !== undefined ? { jobs } : {}),
        command: `mage experiment ${argv.join(" ")}`,
        shouldStop: () => stopRequested,
        noTrain: values["no-train"] ?? false,
        acceptRebuiltBases: values["accept-rebuilt-bases"] ?? false,
      });
      if (res.stopped) return 130;
      return res.failed > 0 ? 1 : 0;
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    }
  },
};
