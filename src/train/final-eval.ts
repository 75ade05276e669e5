import { join } from "node:path";
import { formatBeforeAfter, formatCells } from "../evaluate/evaluate.js";
import { isRolloutStop } from "../rollout/runner.js";
import { type MageConfig, taskKnobOptions } from "./config.js";
import { type FinalEvalPhase, FinalEvalPhases } from "./final-eval-phases.js";
import type { RunLogger } from "./logging/run-logger.js";
import type { RunEval } from "./run-eval.js";
import { finalTrialLogs } from "./run-files.js";
import type { RunIdentity, RunProgress } from "./run-state.js";
import { type EvalSnapshot, type RunSummary, writeSummary } from "./summary.js";

export interface FinalEvalContext {
  config: MageConfig;
  outDir: string;
  /** Iterations trained: the evaluations are numbered by it. */
  total: number;
  runEval: RunEval;
  progress: RunProgress;
  identity: RunIdentity;
  logger: RunLogger;
  log: (m: string) => void;
  shouldStop?: () => boolean;
}

/**
 * The run's final evaluation, in phases: the held-out cells, test-time scaling and the harder
 * set. A phase finished before an interruption is kept (final-eval-phases.ts), the others played.
 * A stop requested during it (it can take many minutes) ends the run without it: the last
 * iteration's checkpoint is saved, so --resume plays the phases not yet finished.
 */
export async function finalEvaluation(
  ctx: FinalEvalContext,
): Promise<{ summary: RunSummary; stopped: boolean }> {
  const { config, outDir, total, progress, identity, log } = ctx;
  const phases = FinalEvalPhases.open(outDir, total, config.eval);
  let evals: FinalEvals;
  try {
    evals = await playPhases(ctx, phases);
  } catch (err) {
    if (!isRolloutStop(err)) throw err;
    const summary = progress.summary(identity, null, total);
    await writeSummary(join(outDir, "summary.json"), summary);
    log(
      "stopped during the final evaluation; continue with --resume to finish it (finished phases are kept)",
    );
    return { summary, stopped: true };
  }
  const summary = { ...progress.summary(identity, evals.finalEval, total), ...evals };
  await writeSummary(join(outDir, "summary.json"), summary);
  await phases.remove();
  ctx.logger.finished(summary);
  return { summary, stopped: false };
}

interface FinalEvals {
  finalEval: EvalSnapshot;
  independentEval: EvalSnapshot | null;
  scalingEval: EvalSnapshot | null;
  harderEval: EvalSnapshot | null;
}

async function playPhases(ctx: FinalEvalContext, phases: FinalEvalPhases): Promise<FinalEvals> {
  const { config, outDir, total, runEval, progress, log, shouldStop } = ctx;
  const phase = (name: FinalEvalPhase, play: () => Promise<EvalSnapshot>) =>
    keptOrPlayed(phases, name, play, (seconds) => {
      progress.addKeptSeconds(seconds);
      log(
        `${name === "final" ? "final evaluation" : name}: kept from the interrupted run (${seconds.toFixed(0)} s)`,
      );
    });
  const evalAttempts = config.eval.attempts ?? config.task.attempts;
  const instances = config.eval.env?.instances ?? "drawn";
  const every = instances === "every";
  const finalEval = await phase("final", async () => {
    log(
      every
        ? `final evaluation: every served instance once per cell (eval.env.instances: every), ${evalAttempts} attempts`
        : `final evaluation: ${config.eval.finalTrials} trials per cell, ${evalAttempts} attempts`,
    );
    const onTrial = await finalTrialLogs(outDir, config.eval.transcriptsPerCell, total);
    return runEval(total, config.eval.finalTrials, {
      onTrial,
      instances,
      ...(shouldStop ? { shouldStop } : {}),
    });
  });
  log(formatCells(finalEval.cells));
  const start = progress.periodicEval.find((e) => e.iteration === 0);
  if (start)
    log(
      `\nbefore training vs after ${total} iterations (95% bootstrap intervals):\n${formatBeforeAfter(start.cells, finalEval.cells)}`,
    );
  const independentEval = await independentPhase(ctx, phase);
  let scalingEval: EvalSnapshot | null = null;
  const scaling = config.eval.scaling;
  if (scaling) {
    scalingEval = await phase("scaling", () => {
      log(
        `test-time scaling: ${every ? "every served instance once" : `${scaling.trials} trials`} per cell with ${scaling.attempts} attempts`,
      );
      return runEval(total, scaling.trials, { scaling, instances, ...(shouldStop ? { shouldStop } : {}) });
    });
    log(formatCells(scalingEval.cells));
  }
  let harderEval: EvalSnapshot | null = null;
  const harder = config.eval.harder;
  if (harder) {
    harderEval = await phase("harder", () => {
      const over = harder.env?.config ?? taskKnobOptions(config.game, config.task, harder);
      const harderInstances = harder.env?.instances ?? instances;
      log(
        `harder held-out set: ${harderInstances === "every" ? "every served instance once" : `${harder.trials} trials`} (${JSON.stringify(over)})`,
      );
      return runEval(total, harder.trials, {
        harder,
        instances: harderInstances,
        ...(shouldStop ? { shouldStop } : {}),
      });
    });
    log(formatCells(harderEval.cells));
  }
  return { finalEval, independentEval, scalingEval, harderEval };
}

/** `eval.independent`: the final evaluation's cells and seeds with no memory between attempts. */
async function independentPhase(
  ctx: FinalEvalContext,
  phase: (name: FinalEvalPhase, play: () => Promise<EvalSnapshot>) => Promise<EvalSnapshot>,
): Promise<EvalSnapshot | null> {
  const { config, total, runEval, log, shouldStop } = ctx;
  const independent = config.eval.independent;
  if (!independent) return null;
  const memory = config.eval.reflection ?? config.task.reflection;
  if (memory === "none") {
    log("independent retries: skipped (the final evaluation already has no memory between attempts)");
    return null;
  }
  const trials = independent.trials ?? config.eval.finalTrials;
  const instances = config.eval.env?.instances ?? "drawn";
  const snapshot = await phase("independent", () => {
    log(
      `independent retries: ${instances === "every" ? "every served instance once" : `${trials} trials`} per cell, the same model with no memory between attempts`,
    );
    return runEval(total, trials, { independent: true, instances, ...(shouldStop ? { shouldStop } : {}) });
  });
  log(formatCells(snapshot.cells));
  return snapshot;
}

/** A phase of the final evaluation: kept from an interrupted run, or played and then kept. */
async function keptOrPlayed(
  phases: FinalEvalPhases,
  name: FinalEvalPhase,
  play: () => Promise<EvalSnapshot>,
  onKept: (seconds: number) => void,
): Promise<EvalSnapshot> {
  const kept = phases.kept(name);
  if (kept) {
    onKept(kept.seconds);
    return kept.snapshot;
  }
  const t = performance.now();
  const snapshot = await play();
  await phases.keep(name, snapshot, (performance.now() - t) / 1000);
  return snapshot;
}
