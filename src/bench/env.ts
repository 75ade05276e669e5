/**
 * The environment protocol's cost (docs/env-protocol.md), side by side in one run:
 *
 * 1. environment steps/s of TicTacToe (vs `random`, and vs `mcts:100`, whose moves the server
 *    plays on its worker-thread pool) and Kuhn (vs `intermediate`) played
 *    in-process, and through the protocol against `mage env-serve` in a child process on
 *    loopback: one request at a time, and 16 sessions at once. A "step" is one agent move (the
 *    opponent's reply included); resets and restarts are timed too but not counted as steps.
 * 2. the protocol's share of a training iteration: `mage train` on Kuhn (tiny model, random
 *    weights, so every turn of every attempt is played: the most steps an iteration can take)
 *    in-process and as `game: remote` against the child server, against rule bots (played on the
 *    server's event loop) and against CFR opponents (played on its worker-thread pool); the share
 *    is the wall time with a protocol request outstanding (`ENV_CLIENT_TOTALS.busyMs`) over the
 *    iterations' time.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Rng } from "../core/rng.js";
import { startEnvServer } from "../serve/env-server.js";
import { createTask } from "../tasks/registry.js";
import { openRemoteTask } from "../tasks/remote.js";
import type { TextTask } from "../tasks/types.js";
import { validateConfig } from "../train/config.js";
import { runAgainstAdapter } from "./env-python.js";
import { saveBenchBase, timedTrain } from "./protocol-share.js";

const GAMES = [
  { game: "tictactoe", opponent: "random" },
  { game: "tictactoe", opponent: "mcts:100" },
  { game: "kuhn", opponent: "intermediate" },
] as const;

const SECONDS = Number(process.env.MAGE_BENCH_ENV_SECONDS ?? 2);

async function startChildServer(): Promise<{ url: string; child: ChildProcess }> {
  const cli = fileURLToPath(new URL("../cli/main.js", import.meta.url));
  const child = spawn(process.execPath, [cli, "env-serve", "--port", "0"], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let err = "";
    child.stderr!.on("data", (c) => {
      err += String(c);
      const m = /at (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    child.once("exit", (code) => reject(new Error(`env-serve exited ${code}: ${err}`)));
  });
  return { url, child };
}

interface Played {
  steps: number;
  episodes: number;
  ms: number;
  /** This process's CPU time (all of it, whatever else ran concurrently in the process). */
  cpuMs: number;
}

/** Plays random legal moves for `seconds` on tasks from `make`; returns steps and episodes. */
async function playFor(make: () => TextTask, seconds: number, seed: number): Promise<Played> {
  const rng = Rng.seeded("bench-env").derive(seed);
  let steps = 0;
  let episodes = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const task = make();
  let i = 0;
  while (performance.now() - t0 < seconds * 1000) {
    await task.reset(Rng.seeded("bench-env-task").derive(seed, i++));
    // Two attempts per instance: play to the end, restart, play again.
    for (let attempt = 0; attempt < 2; attempt++) {
      if (attempt > 0) await task.restart();
      while (!task.done) {
        const legal = task.legalActions!();
        await task.step(`<action>${rng.pick(legal)}</action>`);
        steps++;
      }
      episodes++;
    }
  }
  await task.close?.();
  const cpu = process.cpuUsage(c0);
  return { steps, episodes, ms: performance.now() - t0, cpuMs: (cpu.user + cpu.system) / 1000 };
}

async function stepsPerSecond(url: string, sameProcessUrl: string): Promise<void> {
  console.log(
    "game       opponent      mode                      steps/s   episodes/s   vs in-process   cpu µs/step (this process: the client; with the server in-proc, both ends)",
  );
  for (const { game, opponent } of GAMES) {
    const local = await playFor(() => syncCreate(game, opponent), SECONDS, 1);
    const def = await openRemoteTask({ url, name: game, concurrency: 16 });
    const remote1 = await playFor(() => def.create({ opponent, seat: "first" }), SECONDS, 1);
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const many = await Promise.all(
      Array.from({ length: 16 }, (_, k) =>
        playFor(() => def.create({ opponent, seat: "first" }), SECONDS, 100 + k),
      ),
    );
    const ms16 = performance.now() - t0;
    const cpu16 = process.cpuUsage(c0);
    const remote16 = {
      steps: many.reduce((s, r) => s + r.steps, 0),
      episodes: many.reduce((s, r) => s + r.episodes, 0),
      ms: ms16,
      cpuMs: (cpu16.user + cpu16.system) / 1000,
    };
    const same = await openRemoteTask({ url: sameProcessUrl, name: game });
    const remoteSame = await playFor(() => same.create({ opponent, seat: "first" }), SECONDS, 1);
    same.client.destroy();
    def.client.destroy();
    const base = (local.steps / local.ms) * 1000;
    const row = (mode: string, r: Played) => {
      const sps = (r.steps / r.ms) * 1000;
      console.log(
        `${game.padEnd(10)} ${opponent.padEnd(13)} ${mode.padEnd(24)} ${sps.toFixed(0).padStart(9)} ${((r.episodes / r.ms) * 1000).toFixed(0).padStart(12)}   ${(sps / base).toFixed(4).padStart(8)}×   ${((1000 * r.cpuMs) / r.steps).toFixed(0).padStart(8)}`,
      );
    };
    row("in-process", local);
    row("protocol, 1 in flight", remote1);
    row("protocol, 16 sessions", remote16);
    row("protocol, server in-proc", remoteSame);
  }
}

/** The registry's tasks, built the way `mage env-serve` builds them (createTask is async; this awaits it up front). */
const created = new Map<string, TextTask[]>();
function syncCreate(game: string, opponent: string): TextTask {
  const list = created.get(`${game}/${opponent}`);
  if (!list || list.length === 0) throw new Error("prepare tasks first");
  return list.pop()!;
}

async function prepare(): Promise<void> {
  for (const { game, opponent } of GAMES) {
    created.set(`${game}/${opponent}`, [await createTask(game, { opponent, seat: "first" })]);
  }
}

async function iterationShare(url: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mage-bench-env-"));
  try {
    await saveBenchBase(join(dir, "base"));
    const iterations = 1;
    const common = {
      seed: 0,
      model: { checkpoint: join(dir, "base") },
      task: { attempts: 3 },
      population: { opponents: [{ spec: "intermediate" }, { spec: "aggressive" }] },
      rollout: { tasksPerIteration: 4, groupSize: 4, maxResponseTokens: 16 },
      train: { iterations, checkpointEvery: 100 },
      eval: { every: 0, finalTrials: 1, cells: [{ opponent: "intermediate", seat: "first" }] },
    };
    console.log(
      `\nmage train, Kuhn, tiny model (random weights), ${iterations} iteration(s) of 16 trials × 3 attempts × 6 turns:`,
    );
    console.log("task                  rollout ms/it   update ms/it   protocol busy ms/it   protocol share");
    const pooled = { opponents: [{ spec: "cfr-mixed" }, { spec: "cfr-plus" }] };
    const runs = [
      { label: "kuhn in-process", remote: false, population: common.population },
      { label: "game: remote (kuhn)", remote: true, population: common.population },
      { label: "remote, pool (cfr)", remote: true, population: pooled },
    ];
    for (const { label, remote, population } of runs) {
      const config = validateConfig(
        remote
          ? { ...common, population, name: "bench-remote", game: "remote", env: { url, name: "kuhn" } }
          : { ...common, name: "bench-local", game: "kuhn" },
      );
      const out = join(dir, label.replace(/[^a-z]+/g, "-"));
      const { rollout, update, busyPerIt } = await timedTrain(config, out);
      console.log(
        `${label.padEnd(21)} ${rollout.toFixed(0).padStart(13)} ${update.toFixed(0).padStart(14)} ${(remote ? busyPerIt.toFixed(0) : "-").padStart(21)} ${(remote ? `${((100 * busyPerIt) / (rollout + update)).toFixed(2)}%` : "-").padStart(16)}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function run(): Promise<void> {
  // MAGE_BENCH_ENV_ADAPTER=openspiel measures the Python OpenSpiel adapter instead (env-python.ts).
  const adapter = process.env.MAGE_BENCH_ENV_ADAPTER;
  if (adapter) return runAgainstAdapter(adapter, SECONDS);
  const { url, child } = await startChildServer();
  const inProcess = await startEnvServer();
  try {
    console.log(
      `env-serve child process at ${url} ("server in-proc": in this process); ${SECONDS} s per measurement (MAGE_BENCH_ENV_SECONDS); load average ${loadavg()
        .map((x) => x.toFixed(1))
        .join(" ")}`,
    );
    await prepare();
    await stepsPerSecond(url, inProcess.url);
    await iterationShare(url);
  } finally {
    child.kill("SIGTERM");
    await inProcess.close();
  }
}
