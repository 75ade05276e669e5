import { UsageError } from "../core/errors.js";
import { loadGame } from "../games/registry.js";
import type { SnapshotPlay } from "../league/eval-snapshots.js";
import { embeddedSnapshotStore, type SnapshotStore } from "../league/snapshots.js";
import { torchSnapshotStore } from "../league/torch-snapshots.js";
import { type LeagueState, TrainingLeague } from "../league/training.js";
import { EmbeddedLearner } from "../learner/embedded.js";
import { TorchLearner } from "../learner/torch/learner.js";
import { EmbeddedPolicy } from "../policy/embedded.js";
import type { TaskDefinition } from "../tasks/registry.js";
import type { TrainBackend } from "./backend.js";
import { type MageConfig, taskKnobOptions } from "./config.js";
import { gameName } from "./task-for-config.js";

/**
 * The run's league (`population.league`, or ratings alone with `population.rate`), or null when
 * the config asks for neither. `state` is the league of the checkpoint a run resumes from.
 */
export async function leagueForRun(
  config: MageConfig,
  task: TaskDefinition,
  backend: TrainBackend,
  runDir: string,
  state: LeagueState | null,
): Promise<TrainingLeague | null> {
  const { league, rate } = config.population;
  if (league === null && !rate) return null;
  return new TrainingLeague({
    league,
    ratings: config.population.ratings,
    scripted: config.population.opponents.map((o) => ({ spec: o.spec, weight: o.weight })),
    runDir,
    game: await loadGame(config.game),
    task,
    play: snapshotPlay(config),
    store: league ? snapshotStoreOf(backend) : null,
    snapshotMeta: {
      ...backend.describe,
      run: config.name,
      game: gameName(config),
      promptStyle: config.task.promptStyle,
      maxResponseTokens: config.rollout.maxResponseTokens,
      taskKnobs: { tictactoe: config.task.tictactoe },
      trainingOpponents: config.population.opponents.map((o) => o.spec),
    },
    state,
  });
}

/**
 * How a run's snapshots play, in training and in evaluations: the run's prompt style and task
 * knobs, its rollout sampling and reply length.
 */
export function snapshotPlay(config: MageConfig): SnapshotPlay {
  const knobs = taskKnobOptions(config.game, config.task).knobs;
  return {
    promptStyle: config.task.promptStyle,
    sampling: { ...config.rollout.sampling, maxTokens: config.rollout.maxResponseTokens, stop: [] },
    taskOptions: knobs ? { knobs } : {},
  };
}

/** Snapshots of the run's learner: embedded checkpoints, or a torch LoRA policy's adapters. */
function snapshotStoreOf(backend: TrainBackend): SnapshotStore {
  if (backend.learner instanceof TorchLearner) return torchSnapshotStore(backend.learner);
  if (!(backend.learner instanceof EmbeddedLearner) || !(backend.policy instanceof EmbeddedPolicy))
    throw new UsageError("population.league: this run's learner keeps no snapshots");
  return embeddedSnapshotStore(backend.learner, backend.policy.kernels);
}
