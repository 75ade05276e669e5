/**
 * What logging a run's curves to TensorBoard and W&B costs (README, "Training curves"): the Kuhn
 * quickstart (`configs/quickstart.yaml`: its 150-step pretrained `tiny` base, 12 groups × 8
 * trials × 3 attempts per iteration) trained for a few iterations with logging off, then with
 * TensorBoard and W&B (offline) on, side by side in one process:
 *
 * - the training thread's own cost: encoding and writing the event file, serialising to the W&B
 *   sidecar's pipe (`LOGGING_TOTALS`, timed around each call);
 * - the W&B sidecar's CPU time per iteration, its child processes (wandb-core) included, read
 *   from /proc between the first and the last iteration (so W&B's start-up, printed apart, is
 *   not spread over the iterations): on two cores it competes with training for the CPU;
 * - the iterations' wall time with and without logging, runs alternating (off, on, off, on),
 *   medians over all their iterations (noisy on a shared machine: the calls' own times above are
 *   the figures to keep).
 *
 * MAGE_BENCH_LOGGING_CHECKPOINT=DIR uses that base instead of pretraining one (about a minute);
 * MAGE_BENCH_LOGGING_ITERATIONS sets the iterations per run (default 4; at least 3) and
 * MAGE_BENCH_LOGGING_ROUNDS the pairs of runs (default 2).
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig, type MageConfig } from "../train/config.js";
import { LOGGING_TOTALS } from "../train/logging/run-logger.js";
import { runPretrain } from "../train/pretrain/run.js";
import { train } from "../train/trainer.js";
import { median } from "./median.js";

const ITERATIONS = Number(process.env.MAGE_BENCH_LOGGING_ITERATIONS ?? 4);
const ROUNDS = Number(process.env.MAGE_BENCH_LOGGING_ROUNDS ?? 2);
const CLOCK_TICKS_PER_SECOND = 100;

/** User + system CPU milliseconds of a process and all its descendants, from /proc. */
export function processTreeCpuMs(root: number): number {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    // Fields after the parenthesised command: state ppid … utime(14) stime(15).
    const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
    stats.set(Number(name), { ppid: Number(rest[1]), ticks: Number(rest[11]) + Number(rest[12]) });
  }
  let ticks = 0;
  const pending = [root];
  while (pending.length > 0) {
    const pid = pending.pop()!;
    ticks += stats.get(pid)?.ticks ?? 0;
    for (const [child, s] of stats) if (s.ppid === pid) pending.push(child);
  }
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}

interface Measured {
  /** Wall time of each iteration (between the trainer's checks for a stop). */
  iterationMs: number[];
  tensorboardMs: number;
  wandbPipeMs: number;
  records: number;
  /** The sidecar's CPU over iterations 2..N (W&B has started by then), and before the second iteration. */
  sidecarCpuMs: number | null;
  sidecarStartCpuMs: number | null;
}

async function measure(config: MageConfig, outDir: string): Promise<Measured> {
  const marks: number[] = [];
  const cpu: number[] = [];
  const before = { ...LOGGING_TOTALS };
  await train({
    config,
    outDir,
    resume: false,
    progress: false,
    log: () => {},
    // Asked before every iteration, then between the final evaluation's batches: the first N + 1
    // calls bound the N iterations.
    shouldStop: () => {
      if (marks.length > config.train.iterations) return false;
      marks.push(performance.now());
      const pid = LOGGING_TOTALS.sidecarPid;
      if (config.logging.wandb !== null && pid !== undefined) cpu.push(processTreeCpuMs(pid));
      return false;
    },
  });
  const iterationMs = marks.slice(1).map((t, i) => t - marks[i]);
  return {
    iterationMs,
    tensorboardMs: LOGGING_TOTALS.tensorboardMs - before.tensorboardMs,
    wandbPipeMs: LOGGING_TOTALS.wandbMs - before.wandbMs,
    records: LOGGING_TOTALS.records - before.records,
    sidecarCpuMs: cpu.length > 2 ? cpu[cpu.length - 1] - cpu[1] : null,
    sidecarStartCpuMs: cpu.length > 1 ? cpu[1] : null,
  };
}

async function quickstartBase(dir: string, config: MageConfig): Promise<string> {
  const given = process.env.MAGE_BENCH_LOGGING_CHECKPOINT;
  if (given) return given;
  const out = join(dir, "base");
  const t0 = performance.now();
  await runPretrain({
    game: "kuhn",
    preset: config.model.preset,
    out,
    seed: config.seed,
    steps: config.pretrain.steps,
    progress: null,
    skipEvaluation: true,
  });
  console.log(
    `pretrained the quickstart's base (${config.pretrain.steps} steps) in ${((performance.now() - t0) / 1000).toFixed(0)} s`,
  );
  return out;
}

const pct = (part: number, whole: number) => `${((100 * part) / whole).toFixed(3)}%`;

export async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mage-bench-logging-"));
  try {
    const quick = loadConfig("configs/quickstart.yaml");
    const base = await quickstartBase(dir, quick);
    // The quickstart's iterations; its evaluations (minutes of sampling) are not what is measured.
    const sets = [
      `model.checkpoint=${JSON.stringify(base)}`,
      `train.iterations=${ITERATIONS}`,
      "eval.atStart=false",
      "eval.finalTrials=4",
    ];
    const off = loadConfig("configs/quickstart.yaml", sets);
    const on = loadConfig("configs/quickstart.yaml", [
      ...sets,
      `logging.tensorboard=${JSON.stringify(join(dir, "tb"))}`,
      "logging.wandb={project: mage-bench, mode: offline}",
    ]);
    if (!existsSync(base)) throw new Error(`no base model at ${base}`);
    console.log(
      `Kuhn quickstart, ${ROUNDS} × (${ITERATIONS} iterations without logging, ${ITERATIONS} with) (12 groups × 8 trials × 3 attempts), load average ${loadavg()[0].toFixed(1)}:`,
    );
    const plain: Measured[] = [];
    const logged: Measured[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      plain.push(await measure(off, join(dir, `off-${round}`)));
      logged.push(await measure(on, join(dir, `on-${round}`)));
    }
    const sum = (xs: Measured[], f: (m: Measured) => number) => xs.reduce((a, m) => a + f(m), 0);
    const offMs = median(plain.flatMap((m) => m.iterationMs));
    const it = median(logged.flatMap((m) => m.iterationMs));
    const n = sum(logged, (m) => m.iterationMs.length);
    const tb = sum(logged, (m) => m.tensorboardMs) / n;
    const pipe = sum(logged, (m) => m.wandbPipeMs) / n;
    // The sidecar's CPU over iterations 2..N of each run.
    const side = sum(logged, (m) => m.sidecarCpuMs ?? Number.NaN) / (n - ROUNDS);
    const startCpu = logged.map((m) => m.sidecarStartCpuMs?.toFixed(0) ?? "?").join(", ");
    const records = sum(logged, (m) => m.records);
    const row = (what: string, ms: number, share: string) =>
      console.log(`${what.padEnd(58)} ${ms.toFixed(2).padStart(10)} ms   ${share}`);
    console.log(`${"".padEnd(58)} ${"per iteration".padStart(13)}   share of an iteration`);
    row("iteration, logging off (median)", offMs, "");
    row(
      "iteration, TensorBoard + W&B offline (median)",
      it,
      `${pct(it - offMs, offMs)} vs off (machine noise included)`,
    );
    row("TensorBoard: encode + write (training thread)", tb, pct(tb, it));
    row("W&B: serialise + pipe to the sidecar (training thread)", pipe, pct(pipe, it));
    row("W&B sidecar + wandb-core CPU (other processes)", side, pct(side, it));
    row("all logging", tb + pipe + side, `${pct(tb + pipe + side, it)} (target ≤ 1%)`);
    console.log(
      `(${records} records logged; the sidecar's CPU before each run's second iteration, W&B's start-up: ${startCpu} ms, once per run; its per-iteration CPU is over iterations 2-${ITERATIONS} of each run, in 10 ms clock ticks; load average now ${loadavg()[0].toFixed(1)})`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
