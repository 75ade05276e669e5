/**
 * `npm run bench -- env` against a Python adapter (`MAGE_BENCH_ENV_ADAPTER=openspiel`): the
 * protocol's cost when the server is `python -m mage_envs.openspiel_server` rather than
 * `mage env-serve`. There is no in-process counterpart for OpenSpiel's games, so it measures agent
 * steps/s through the protocol (one request at a time, and 16 sessions at once) and the protocol's
 * share of a training iteration on `kuhn_poker` (tiny model, random weights), as src/bench/env.ts
 * does for env-serve.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Rng } from "../core/rng.js";
import { openRemoteTask } from "../tasks/remote.js";
import type { TextTask } from "../tasks/types.js";
import { validateConfig } from "../train/config.js";
import { saveBenchBase, timedTrain } from "./protocol-share.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const GAMES = [
  { game: "tic_tac_toe", opponent: "random" },
  { game: "kuhn_poker", opponent: "random" },
  { game: "kuhn_poker", opponent: "cfr:100" },
] as const;

function python(): string {
  if (process.env.MAGE_PYTHON) return process.env.MAGE_PYTHON;
  const r = spawnSync(process.execPath, [join(ROOT, "scripts", "python-env.mjs")], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) throw new Error(`scripts/python-env.mjs exited with ${r.status}`);
  return r.stdout.trim();
}

async function startAdapter(adapter: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(python(), ["-m", `mage_envs.${adapter}_server`, "--port", "0"], {
    cwd: join(ROOT, "python"),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    const seen = (c: Buffer) => {
      out += String(c);
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]);
    };
    child.stdout!.on("data", seen);
    child.stderr!.on("data", seen);
    child.once("exit", (code) => reject(new Error(`${adapter} server exited ${code}: ${out}`)));
  });
  return { url, child };
}

/** Plays the first legal move for `seconds`, two attempts per instance; returns steps and ms. */
async function playFor(make: () => TextTask, seconds: number, seed: number) {
  const rng = Rng.seeded("bench-env-python").derive(seed);
  let steps = 0;
  const t0 = performance.now();
  const task = make();
  let i = 0;
  while (performance.now() - t0 < seconds * 1000) {
    await task.reset(Rng.seeded("bench-env-python-task").derive(seed, i++));
    for (let attempt = 0; attempt < 2; attempt++) {
      if (attempt > 0) await task.restart();
      while (!task.done) {
        await task.step(`<action>${rng.pick(task.legalActions!())}</action>`);
        steps++;
      }
    }
  }
  await task.close?.();
  return { steps, ms: performance.now() - t0 };
}

async function stepsPerSecond(url: string, seconds: number): Promise<void> {
  console.log("game         opponent   mode                     steps/s");
  for (const { game, opponent } of GAMES) {
    const def = await openRemoteTask({ url, name: game, concurrency: 16 });
    const one = await playFor(() => def.create({ opponent, seat: "first" }), seconds, 1);
    const t0 = performance.now();
    const many = await Promise.all(
      Array.from({ length: 16 }, (_, k) =>
        playFor(() => def.create({ opponent, seat: "first" }), seconds, 100 + k),
      ),
    );
    const ms16 = performance.now() - t0;
    def.client.destroy();
    const steps16 = many.reduce((s, r) => s + r.steps, 0);
    const row = (mode: string, steps: number, ms: number) =>
      console.log(
        `${game.padEnd(12)} ${opponent.padEnd(10)} ${mode.padEnd(22)} ${((steps / ms) * 1000).toFixed(0).padStart(9)}`,
      );
    row("protocol, 1 in flight", one.steps, one.ms);
    row("protocol, 16 sessions", steps16, ms16);
  }
}

async function iterationShare(url: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mage-bench-env-python-"));
  try {
    await saveBenchBase(join(dir, "base"));
    console.log(
      "\nmage train, game: remote kuhn_poker, tiny model (random weights), 1 iteration of 16 trials × 3 attempts:",
    );
    console.log("opponents             rollout ms/it   update ms/it   protocol busy ms/it   protocol share");
    for (const opponents of [["random"], ["cfr:100"]]) {
      const config = validateConfig({
        name: "bench-remote-python",
        seed: 0,
        game: "remote",
        env: { url, name: "kuhn_poker", config: { actions: "pass-bet" } },
        model: { checkpoint: join(dir, "base") },
        task: { attempts: 3 },
        population: { opponents: opponents.map((spec) => ({ spec })) },
        rollout: { tasksPerIteration: 4, groupSize: 4, maxResponseTokens: 16 },
        train: { iterations: 1, checkpointEvery: 100 },
        eval: { every: 0, finalTrials: 1, cells: [{ opponent: opponents[0], seat: "first" }] },
      });
      const out = join(dir, opponents.join("-").replace(/[^a-z0-9]+/g, "-"));
      const { rollout, update, busyPerIt } = await timedTrain(config, out);
      console.log(
        `${opponents.join(",").padEnd(21)} ${rollout.toFixed(0).padStart(13)} ${update.toFixed(0).padStart(14)} ${busyPerIt.toFixed(0).padStart(21)} ${`${((100 * busyPerIt) / (rollout + update)).toFixed(2)}%`.padStart(16)}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runAgainstAdapter(adapter: string, seconds: number): Promise<void> {
  if (adapter !== "openspiel")
    throw new Error(
      `MAGE_BENCH_ENV_ADAPTER must be "openspiel" (its games are the ones measured), got "${adapter}"`,
    );
  const { url, child } = await startAdapter(adapter);
  try {
    console.log(`python -m mage_envs.${adapter}_server at ${url}; ${seconds} s per measurement`);
    await stepsPerSecond(url, seconds);
    await iterationShare(url);
  } finally {
    child.kill("SIGTERM");
  }
}
