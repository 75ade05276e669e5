/**
 * `npm run bench -- env` against a Python adapter (`MAGE_BENCH_ENV_ADAPTER=openspiel`; `alfworld`
 * measures ALFWorld's server at 1 and 2 worker processes instead, see `alfworldWorkers`): the
 * protocol's cost when the server is `python -m mage_envs.openspiel_server` rather than
 * `mage env-serve`. There is no in-process counterpart for OpenSpiel's games, so it measures agent
 * steps/s through the protocol (one request at a time, and 16 sessions at once) and the protocol's
 * share of a training iteration on `kuhn_poker` (tiny model, random weights), as src/bench/env.ts
 * does for env-serve.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
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

async function startAdapter(
  adapter: string,
  flags: string[] = [],
): Promise<{ url: string; child: ChildProcess; output: () => string }> {
  const child = spawn(python(), ["-m", `mage_envs.${adapter}_server`, "--port", "0", ...flags], {
    cwd: join(ROOT, "python"),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const url = await new Promise<string>((resolve, reject) => {
    const seen = (c: Buffer) => {
      out += String(c);
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]);
    };
    child.stdout!.on("data", seen);
    child.stderr!.on("data", seen);
    child.once("exit", (code) => reject(new Error(`${adapter} server exited ${code}: ${out}`)));
  });
  return { url, child, output: () => out };
}

/** A process's CPU time so far in ms (Linux: /proc/PID/stat's utime + stime, at 100 ticks a second). */
function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
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

/**
 * ALFWorld's server at each worker count (`MAGE_BENCH_ENV_WORKERS`, default "1,2"): 16 sessions
 * created at once (creates/s: the 16 creates' wall time), then played at once for `seconds`,
 * random admissible commands, each restarted when its attempt ends (steps/s over the 16), and one
 * session alone (steps/s with one request in flight). valid_seen, maxSteps 30.
 */
async function alfworldWorkers(seconds: number): Promise<void> {
  const counts = (process.env.MAGE_BENCH_ENV_WORKERS ?? "1,2").split(",").map(Number);
  const SESSIONS = 16;
  console.log(`python -m mage_envs.alfworld_server --workers N; ${seconds} s per measurement`);
  console.log(
    `workers   creates/s (16 at once)   steps/s (16 sessions)   steps/s (1 in flight)   server CPU ms/step   worker CPU ms/step (16 sessions; load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(" ")})`,
  );
  for (const workers of counts) {
    // A long budget: at one worker the 16 creates queue behind each other.
    const { url, child, output } = await startAdapter("alfworld", [
      "--workers",
      String(workers),
      "--time-budget-ms",
      "600000",
    ]);
    try {
      const def = await openRemoteTask({
        url,
        name: "alfworld",
        config: { split: "valid_seen", maxSteps: 30 },
        concurrency: SESSIONS,
        timeoutMs: 300_000,
      });
      const tasks = Array.from({ length: SESSIONS }, () => def.create({}));
      const c0 = performance.now();
      await Promise.all(tasks.map((t, k) => t.reset(Rng.seeded("bench-env-alfworld").derive(workers, k))));
      const createMs = performance.now() - c0;
      const play = async (task: TextTask, seed: number) => {
        const rng = Rng.seeded("bench-env-alfworld-play").derive(seed);
        let steps = 0;
        const t0 = performance.now();
        while (performance.now() - t0 < seconds * 1000) {
          if (task.done) await task.restart();
          await task.step(`<action>${rng.pick(task.legalActions!())}</action>`);
          steps++;
        }
        return { steps, ms: performance.now() - t0 };
      };
      const workerPids = (/engine worker processes \(([\d, ]+)\)/.exec(output())?.[1] ?? "")
        .split(", ")
        .map(Number);
      const cpu = () => ({
        server: processCpuMs(child.pid!),
        workers: workerPids.reduce((n, pid) => n + processCpuMs(pid), 0),
      });
      const cpu0 = cpu();
      const s0 = performance.now();
      const many = await Promise.all(tasks.map((t, k) => play(t, k)));
      const manyMs = performance.now() - s0;
      const cpu1 = cpu();
      const one = await play(tasks[0]!, 99);
      await Promise.all(tasks.map((t) => t.close?.()));
      def.client.destroy();
      const steps16 = many.reduce((n, r) => n + r.steps, 0);
      const perStep = (ms: number) => (ms / steps16).toFixed(2);
      console.log(
        `${String(workers).padStart(7)} ${((SESSIONS / createMs) * 1000).toFixed(2).padStart(24)} ${((steps16 / manyMs) * 1000).toFixed(1).padStart(23)} ${((one.steps / one.ms) * 1000).toFixed(1).padStart(23)} ${perStep(cpu1.server - cpu0.server).padStart(20)} ${perStep(cpu1.workers - cpu0.workers).padStart(20)}`,
      );
    } finally {
      child.kill("SIGTERM");
    }
  }
}

export async function runAgainstAdapter(adapter: string, seconds: number): Promise<void> {
  if (adapter === "alfworld") return alfworldWorkers(seconds);
  if (adapter !== "openspiel")
    throw new Error(
      `MAGE_BENCH_ENV_ADAPTER must be "openspiel" or "alfworld" (their games are the ones measured), got "${adapter}"`,
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
