import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import type { TorchLearner } from "../../src/learner/torch/learner.js";
import { TorchWorkerError } from "../../src/learner/torch/worker.js";
import { loadConfig, type MageConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";

/**
 * `mage train` with `model.backend: torch` against the real PyTorch worker on a tiny exported
 * Llama: checkpoints, resume after kill -9 of the trainer, the worker killed mid-update, and
 * `mage eval --checkpoint` on the result.
 */
/** Timings and memory vary between runs and processes (every `*_ms`, `wall_s`, the worker's peak RSS), and so does prefix reuse (a resumed worker starts with an empty store). */
function isTiming(key: string): boolean {
  return key.endsWith("_ms") || key === "wall_s" || key === "worker_peak_rss_mb" || key === "prompt_reuse";
}

function metricsOf(dir: string): Record<string, number>[] {
  const file = join(dir, "metrics.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l))
    .map(
      (m) => Object.fromEntries(Object.entries(m).filter(([k]) => !isTiming(k))) as Record<string, number>,
    );
}

function transcriptIterations(dir: string): number[] {
  const file = join(dir, "transcripts.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l).iteration as number);
}

async function waitFor(pred: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error("timed out waiting for the run to progress");
    await new Promise((r) => setTimeout(r, 50));
  }
}

const quiet = { progress: false, log: () => {} } as const;

describe("mage train with model.backend: torch", { skip: NO_WORKER }, () => {
  let root: string;
  let cfgPath: string;
  let config: MageConfig;
  let straight: string;

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-torch-train-"));
    await saveTinyHf(join(root, "hf"), { seed: 4, contextLength: 512 });
    cfgPath = join(root, "run.yaml");
    writeFileSync(
      cfgPath,
      [
        "name: torch-test",
        "seed: 3",
        "game: kuhn",
        `model: { backend: torch, torch: { path: ${JSON.stringify(join(root, "hf"))}, microBatchTokens: 256 } }`,
        "task: { attempts: 2, maxTurns: 2 }",
        "population: { opponents: [{ spec: aggressive }, { spec: cfr-mixed }] }",
        "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 6 }",
        "optim: { lr: 1.0e-3, klCoef: 0.1, miniBatchRows: 6 }",
        "advantage: { roleBaselineDecay: 0.9 }",
        "train: { iterations: 4, checkpointEvery: 1, keepLast: 2 }",
        "eval: { every: 2, trials: 2, finalTrials: 2 }",
        "",
      ].join("\n"),
    );
    config = loadConfig(cfgPath);
    straight = join(root, "straight");
    await train({ config, outDir: straight, resume: false, ...quiet });
  });

  it("trains, writes torch checkpoints, and mage eval plays the checkpoint through the worker", () => {
    const metrics = metricsOf(straight);
    assert.equal(metrics.length, 4);
    for (const m of metrics) {
      assert.ok(m.optimizer_steps >= 1 && Number.isFinite(m.loss) && Number.isFinite(m.grad_norm));
      assert.ok(m.scored_tokens > 0);
    }
    const raw = readFileSync(join(straight, "metrics.jsonl"), "utf8").trim().split("\n");
    for (const line of raw) {
      const reuse = JSON.parse(line).prompt_reuse;
      // Later turns extend earlier samples, so the worker's prefix store serves part of every rollout.
      assert.ok(reuse > 0 && reuse < 1, `prompt_reuse ${reuse}`);
    }
    const ck = join(straight, "checkpoints", "iter-000004");
    assert.deepEqual(readdirSync(ck).sort(), ["learner", "meta.json", "torch.json", "training-state.json"]);
    const meta = JSON.parse(readFileSync(join(ck, "meta.json"), "utf8"));
    assert.equal(meta.kernel, "torch");
    assert.equal(meta.game, "kuhn");

    const out = join(root, "eval.jsonl");
    const r = spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "eval",
        "--checkpoint",
        straight,
        "--opponent",
        "aggressive",
        "--trials",
        "2",
        "--attempts",
        "1",
        "--out",
        out,
        "--json",
      ],
      { encoding: "utf8", timeout: 180_000 },
    );
    assert.equal(r.status, 0, r.stderr);
    const res = JSON.parse(r.stdout.trim().split("\n").pop()!);
    assert.equal(res.cells.length, 1);
    assert.equal(res.cells[0].opponent, "aggressive");
    assert.equal(res.cells[0].unseen, false, "the checkpoint records its training pool");
    const trials = readFileSync(out, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.equal(trials.length, 2);
    // The played responses are the model's: the trials ran through the worker's sampler.
    assert.ok(trials.every((t) => t.memory.attempts.length === 1 && !t.aborted));
  });

  it("the worker killed mid-update: a clear error, nothing recorded for that iteration, and --resume ends where an uninterrupted run ends", async () => {
    const outDir = join(root, "worker-killed");
    let killedAt = -1;
    const err = await train({
      config,
      outDir,
      resume: false,
      ...quiet,
      onBackend: (b) => {
        const learner = b.learner as TorchLearner;
        const update = learner.update.bind(learner);
        let killed = false;
        learner.update = (...args) => {
          const p = update(...args);
          // The first update call after an iteration was recorded: kill -9 the Python process with the request in flight.
          if (!killed && metricsOf(outDir).length >= 1) {
            killed = true;
            killedAt = metricsOf(outDir).length;
            setImmediate(() => process.kill(learner.worker.pid!, "SIGKILL"));
          }
          return p;
        };
      },
    }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof TorchWorkerError, `expected a TorchWorkerError, got ${err}`);
    assert.equal(err.kind, "died");
    assert.match(err.message, /killed by SIGKILL during `update`/);
    assert.match(err.message, /--resume/);
    assert.ok(killedAt >= 1);
    // Only iterations that finished are recorded: no metrics or transcripts of the interrupted one.
    assert.equal(metricsOf(outDir).length, killedAt);
    assert.ok(transcriptIterations(outDir).every((i) => i < killedAt));

    await train({ config, outDir, resume: true, ...quiet });
    assertSameRun(outDir, straight);
  });

  it("kill -9 of the trainer mid-iteration, then --resume, ends where an uninterrupted run ends", async () => {
    const killed = join(root, "trainer-killed");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "train", "--config", cfgPath, "--out", killed, "--no-progress"],
      { stdio: "ignore" },
    );
    await waitFor(() => metricsOf(killed).length >= 2, 180_000);
    await new Promise((r) => setTimeout(r, 300)); // inside the next iteration
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    assert.ok(metricsOf(killed).length < 4, "the run was killed before it finished");
    await train({ config, outDir: killed, resume: true, ...quiet });
    assertSameRun(killed, straight);
  });

  it("Ctrl-C (SIGINT to the terminal's process group) stops after the iteration and checkpoints; the worker is not hit", async () => {
    const outDir = join(root, "ctrl-c");
    // Its own process group, like a shell job: the signal goes to the whole group.
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "train", "--config", cfgPath, "--out", outDir, "--no-progress"],
      { stdio: ["ignore", "ignore", "pipe"], detached: true },
    );
    let stderr = "";
    child.stderr!.on("data", (d) => {
      stderr += String(d);
    });
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    await waitFor(() => metricsOf(outDir).length >= 1, 180_000);
    process.kill(-child.pid!, "SIGINT");
    const code = await exited;
    assert.equal(code, 130, stderr);
    assert.match(stderr, /stopped at iteration (\d+); checkpoint saved/);
    const done = Number(/stopped at iteration (\d+)/.exec(stderr)![1]);
    assert.equal(metricsOf(outDir).length, done);
    assert.ok(existsSync(join(outDir, "checkpoints", `iter-${String(done).padStart(6, "0")}`, "learner")));
    assert.doesNotMatch(stderr, /KeyboardInterrupt|learner worker/);
  });

  it("model.torch.processes 2 (torchrun, FSDP on gloo) trains and resumes as one process does, its frozen reference sharded too", async () => {
    const outDir = join(root, "two-ranks");
    const ranks = (iterations: number) =>
      loadConfig(cfgPath, ["model.torch.processes=2", `train.iterations=${iterations}`]);
    await train({ config: ranks(2), outDir, resume: false, ...quiet });
    assert.equal(metricsOf(outDir).length, 2);
    await train({ config: ranks(4), outDir, resume: true, ...quiet });
    // The same samples (rank 0 samples for both); the update's sums differ only in rounding.
    assertSameUpToRounding(outDir, straight);
  });

  it("a run resumes with another model.torch.processes (1 to 2 ranks) as if it had not stopped", async () => {
    const outDir = join(root, "one-then-two");
    const withRanks = (processes: number, iterations: number) =>
      loadConfig(cfgPath, [`model.torch.processes=${processes}`, `train.iterations=${iterations}`]);
    await train({ config: withRanks(1, 2), outDir, resume: false, ...quiet });
    await train({ config: withRanks(2, 4), outDir, resume: true, ...quiet });
    assertSameUpToRounding(outDir, straight);
  });

  it("a missing Python environment is a UsageError that says what to run", async () => {
    const bad = loadConfig(cfgPath, ["model.torch.python=/nowhere/bin/python"]);
    await assert.rejects(
      train({ config: bad, outDir: join(root, "no-python"), resume: false, ...quiet }),
      (e: unknown) =>
        e instanceof UsageError &&
        /model\.torch\.python: \/nowhere\/bin\/python does not exist/.test(e.message) &&
        /node scripts\/python-env\.mjs/.test(e.message),
    );
  });
});

/** Two runs scored the same tokens each iteration, with loss, grad norm and KL within 1e-5. */
function assertSameUpToRounding(a: string, b: string): void {
  const got = metricsOf(a);
  const want = metricsOf(b);
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) {
    assert.equal(got[i].scored_tokens, want[i].scored_tokens, `iteration ${i}`);
    for (const k of ["loss", "grad_norm", "kl"])
      assert.ok(
        Math.abs(got[i][k] - want[i][k]) <= 1e-5 * Math.max(1, Math.abs(want[i][k])),
        `iteration ${i} ${k}: ${got[i][k]} vs ${want[i][k]}`,
      );
  }
}

/** Metrics (timings aside), evaluations and the final summary of two runs are identical. */
function assertSameRun(a: string, b: string): void {
  assert.deepEqual(metricsOf(a), metricsOf(b));
  const sa = JSON.parse(readFileSync(join(a, "summary.json"), "utf8"));
  const sb = JSON.parse(readFileSync(join(b, "summary.json"), "utf8"));
  assert.deepEqual(sa.periodicEval, sb.periodicEval);
  assert.deepEqual(sa.finalEval, sb.finalEval);
}
