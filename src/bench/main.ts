/**
 * `npm run bench`: every benchmark section, run one after another in one process so ratios
 * are measured side by side. Pass section names to run a subset: `node dist/bench/main.js kuhn`.
 * To add a section: write `src/bench/NAME.ts` exporting `run(): Promise<void>` and add it here.
 */
const SECTIONS: Record<string, () => Promise<{ run: () => Promise<void> }>> = {
  kuhn: () => import("./kuhn.js"),
  tictactoe: () => import("./tictactoe.js"),
  puzzles: () => import("./puzzles.js"),
  gemm: () => import("./gemm.js"),
  "train-step": () => import("./train-step.js"),
  "sft-shards": () => import("./sft-shards.js"),
  "torch-compare": () => import("./torch-compare.js"),
  sampling: () => import("./sampling.js"),
  serve: () => import("./serve.js"),
  torch: () => import("./torch.js"),
  env: () => import("./env.js"),
  servers: () => import("./servers.js"),
  real: () => import("./real.js"),
  "vllm-push": () => import("./vllm-push.js"),
  logging: () => import("./logging.js"),
  memory: () => import("./memory.js"),
};

async function main(): Promise<void> {
  const wanted = process.argv.slice(2);
  const names = wanted.length > 0 ? wanted : Object.keys(SECTIONS);
  for (const name of names) {
    const load = SECTIONS[name];
    if (!load) {
      console.error(`unknown bench section "${name}"; valid: ${Object.keys(SECTIONS).join(", ")}`);
      process.exitCode = 2;
      return;
    }
    console.log(`\n=== ${name} ===`);
    const t0 = performance.now();
    await (await load()).run();
    console.log(`(${name}: ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  }
}

await main();
