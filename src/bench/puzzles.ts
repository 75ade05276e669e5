/**
 * Puzzle engines: environment steps per second with uniformly random actions, and the
 * time to generate Sokoban levels (each re-verified by BFS against the knobs' window); then the
 * text tasks as the trial runner drives them (reset, parse, step, render), and the environment's
 * share of one training iteration (target ≤ 5%): one short iteration of `mage train` (8 groups of
 * 4 trials, 3 attempts) from the pretrained base named by MAGE_BENCH_PUZZLE_CHECKPOINT_<GAME>
 * (e.g. MAGE_BENCH_PUZZLE_CHECKPOINT_SOKOBAN=runs/pretrained/…), timed by the iteration's own
 * `env_ms` (time inside the tasks) against `rollout_ms + update_ms`.
 */
import { Rng } from "../core/rng.js";
import { newMinesweeper, revealCell } from "../games/minesweeper.js";
import {
  DEFAULT_SOKOBAN_KNOBS,
  generateSokobanLevel,
  restartSokoban,
  SOKOBAN_MOVES,
  type SokobanLevel,
  solve,
  stepMoves,
} from "../games/sokoban/index.js";
import { loadTask } from "../tasks/registry.js";
import { unskilledBehaviour } from "../train/pretrain/corpus.js";

function rate(n: number, ms: number): string {
  return `${Math.round((n / ms) * 1000).toLocaleString("en-US")}/s`;
}

function sokobanGeneration(count: number): SokobanLevel[] {
  const { minSteps, maxSolSteps, searchDepth } = DEFAULT_SOKOBAN_KNOBS;
  const root = Rng.seeded("bench-sokoban");
  for (let i = 0; i < 200; i++) generateSokobanLevel(root.derive("warm-up", i)); // JIT warm-up
  const t0 = performance.now();
  const levels: SokobanLevel[] = [];
  let attempts = 0;
  for (let i = 0; i < count; i++) {
    const level = generateSokobanLevel(root.derive("task", i));
    attempts += level.attempt + 1;
    levels.push(level);
  }
  const genMs = performance.now() - t0;
  const t1 = performance.now();
  let inWindow = 0;
  const hist = new Map<number, number>();
  for (const level of levels) {
    const res = solve(level.initial, { maxDepth: searchDepth });
    if (res.status === "solved" && res.moves.length >= minSteps && res.moves.length <= maxSolSteps)
      inWindow++;
    if (res.status === "solved") hist.set(res.moves.length, (hist.get(res.moves.length) ?? 0) + 1);
  }
  const verifyMs = performance.now() - t1;
  console.log(
    `sokoban generate ${count} levels (6×6, 2 boxes): ${genMs.toFixed(0)} ms ` +
      `(${(genMs / count).toFixed(3)} ms/level, ${(attempts / count).toFixed(2)} attempts/level)`,
  );
  console.log(
    `sokoban BFS verify: ${inWindow}/${count} within [${minSteps}, ${maxSolSteps}] in ${verifyMs.toFixed(0)} ms; ` +
      `lengths ${[...hist.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([k, v]) => `${k}:${v}`)
        .join(" ")}`,
  );
  return levels;
}

/** Random single moves; restart when solved, dead-locked, or after 30 moves (the gym cap). */
function sokobanSteps(levels: SokobanLevel[], budgetMs: number, checkDeadlock: boolean): void {
  const rng = Rng.seeded("bench-sokoban-steps");
  let steps = 0;
  let episodes = 0;
  let solved = 0;
  const t0 = performance.now();
  let li = 0;
  while (performance.now() - t0 < budgetMs) {
    const level = levels[li++ % levels.length];
    let s = restartSokoban(level);
    for (let m = 0; m < 30; m++) {
      const r = stepMoves(s, [rng.pick(SOKOBAN_MOVES)], { stopOnDeadlock: checkDeadlock });
      s = r.state;
      steps++;
      if (r.solved) solved++;
      if (r.solved || (checkDeadlock && r.deadlocked)) break;
    }
    episodes++;
  }
  const ms = performance.now() - t0;
  console.log(
    `sokoban random steps (${checkDeadlock ? "with" : "without"} dead-lock check): ${rate(steps, ms)} ` +
      `(${steps} steps, ${episodes} episodes, ${solved} solved)`,
  );
}

/** Random reveals (any cell, opened or not); new board when the game ends. */
function minesweeperSteps(budgetMs: number): void {
  const rng = Rng.seeded("bench-minesweeper");
  let steps = 0;
  let games = 0;
  let won = 0;
  const t0 = performance.now();
  let board = newMinesweeper(rng.derive("board", games));
  while (performance.now() - t0 < budgetMs) {
    const r = revealCell(board, rng.int(6), rng.int(6));
    steps++;
    board = r.board;
    if (r.done) {
      if (r.won) won++;
      games++;
      board = newMinesweeper(rng.derive("board", games));
    }
  }
  const ms = performance.now() - t0;
  console.log(
    `minesweeper random reveals (incl. resets): ${rate(steps, ms)} (${steps} steps, ${games} games, ${won} won)`,
  );
  const t1 = performance.now();
  const n = 20_000;
  for (let i = 0; i < n; i++) newMinesweeper(rng.derive("reset", i));
  console.log(`minesweeper resets: ${rate(n, performance.now() - t1)}`);
}

/** Steps/s through the text task (what an iteration calls): answers from the ε = 0.5 scripted player. */
async function taskSteps(game: "sokoban" | "minesweeper", budgetMs: number): Promise<void> {
  const def = await loadTask(game);
  const player = unskilledBehaviour(game, { epsilon: 0.5, malformedRate: 0 });
  const rng = Rng.seeded("bench-task-steps").derive(game);
  let steps = 0;
  let resets = 0;
  let envMs = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < budgetMs) {
    const task = def.create({});
    let t = performance.now();
    await task.reset(rng.derive("task", resets));
    envMs += performance.now() - t;
    resets++;
    for (let turn = 0; turn < def.maxTurns && !task.done; turn++) {
      const answer = player.play(
        [{ role: "user", content: `${task.compactObservation()}\nYour move?` }],
        rng.derive("answer", resets, turn),
      );
      t = performance.now();
      await task.step(answer);
      envMs += performance.now() - t;
      steps++;
    }
  }
  console.log(
    `${game} task steps (text answers, parse + step + render, resets included): ${rate(steps, envMs)} ` +
      `(${steps} steps, ${resets} levels, ${(envMs / resets).toFixed(3)} ms of environment per level)`,
  );
}

/** One short training iteration from a pretrained base: the environment's share of its wall time. */
async function iterationShare(game: "sokoban" | "minesweeper"): Promise<void> {
  const variable = `MAGE_BENCH_PUZZLE_CHECKPOINT_${game.toUpperCase()}`;
  const checkpoint = process.env[variable];
  if (!checkpoint) {
    console.log(
      `${game} environment share of an iteration: skipped (set ${variable}=DIR, a pretrained ${game} base)`,
    );
    return;
  }
  const { mkdtemp, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { validateConfig } = await import("../train/config.js");
  const { train } = await import("../train/trainer.js");
  const out = await mkdtemp(join(tmpdir(), "mage-bench-puzzles-"));
  try {
    const config = validateConfig({
      name: `bench-${game}`,
      game,
      model: { checkpoint },
      rollout: { tasksPerIteration: 8, groupSize: 4 },
      credit: { mode: "per-attempt" },
      advantage: { scope: "task" },
      optim: { lr: 3e-4 },
      train: { iterations: 1, checkpointEvery: 1 },
      eval: { every: 0, finalTrials: 1, transcriptsPerCell: 0 },
    });
    const { summary } = await train({ config, outDir: out, resume: false, progress: false, log: () => {} });
    const m = summary.history[0];
    const total = m.rollout_ms + (m.update_ms ?? 0);
    console.log(
      `${game} one iteration (8 groups × 4 trials × 3 attempts): ${(total / 1000).toFixed(1)} s ` +
        `(rollout ${(m.rollout_ms / 1000).toFixed(1)} s, update ${((m.update_ms ?? 0) / 1000).toFixed(1)} s); ` +
        `environment ${m.env_ms.toFixed(0)} ms over ${m.env_steps} steps = ${((100 * m.env_ms) / total).toFixed(2)}% of the iteration (target ≤ 5%)`,
    );
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

export async function run(): Promise<void> {
  const levels = sokobanGeneration(1000);
  sokobanSteps(levels, 1500, true);
  sokobanSteps(levels, 1500, false);
  minesweeperSteps(1500);
  for (const game of ["sokoban", "minesweeper"] as const) await taskSteps(game, 1500);
  for (const game of ["sokoban", "minesweeper"] as const) await iterationShare(game);
}
