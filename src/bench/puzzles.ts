/**
 * Puzzle engines: environment steps per second with uniformly random actions, and the
 * time to generate Sokoban levels (each re-verified by BFS against the knobs' window).
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

export async function run(): Promise<void> {
  const levels = sokobanGeneration(1000);
  sokobanSteps(levels, 1500, true);
  sokobanSteps(levels, 1500, false);
  minesweeperSteps(1500);
}
