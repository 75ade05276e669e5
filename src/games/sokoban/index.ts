/**
 * Sokoban as a single-player puzzle: immutable boards (`level.ts`), gym-sokoban style
 * dynamics and rewards (`step.ts`), BFS solver and dead-lock tests (`solver.ts`), and the
 * reverse-play level generator (`generator.ts`).
 */
export * from "./generator.js";
export * from "./level.js";
export * from "./solver.js";
export * from "./step.js";
