import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { command as pretrainCommand } from "../../src/cli/commands/pretrain.js";
import { UsageError } from "../../src/core/errors.js";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import { TorchModelSchema } from "../../src/train/config.js";
import { REPORT_FILE } from "../../src/train/pretrain/run.js";
import { sftCheckpointDir } from "../../src/train/pretrain/torch-resume.js";
import { runTorchPretrain, type TorchPretrainReport } from "../../src/train/pretrain/torch-run.js";
import { sftLearningRate, splitWeights } from "../../src/train/pretrain/torch-sft.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";
import { runPretrainCaptured } from "./pretrain-capture.js";

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "mage-pretrain-torch-"));
  dirs.push(d);
  return d;
}

/** Runs the command with its stdout captured. */
const runCommand = async (argv: string[]): Promise<string> => (await runPretrainCaptured(argv)).out;

const sha256 = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");

describe("mage pretrain --backend torch", () => {
  it("sends 0/1 masks with the weights apart, and warms up then decays the learning rate", () => {
    const { batch, weights } = splitWeights({
      sequences: [Int32Array.of(1, 2, 3, 4), Int32Array.of(5, 6, 7)],
      lossMask: [Uint8Array.of(0, 4, 4, 0), Uint8Array.of(0, 0, 1)],
    });
    assert.deepEqual(
      batch.lossMask.map((m) => [...m]),
      [
        [0, 1, 1, 0],
        [0, 0, 1],
      ],
    );
    assert.deepEqual([...weights], [4, 4, 1]);
    const o = { steps: 10, lr: 1e-3, warmupSteps: 2, minLrRatio: 0.1 };
    const lrs = Array.from({ length: 10 }, (_, i) => sftLearningRate(o, i));
    assert.deepEqual(lrs.slice(0, 3), [5e-4, 1e-3, 1e-3]);
    for (let i = 2; i < 9; i++) assert.ok(lrs[i + 1] < lrs[i], `step ${i + 1} lr ${lrs[i + 1]}`);
    assert.ok(lrs[9] > 1e-4);
  });

  it("names the flag that does not fit the backend", async () => {
    const cases: [string[], RegExp][] = [
      [["--game", "kuhn", "--backend", "torch"], /--model DIR is required/],
      [
        ["--game", "kuhn", "--backend", "torch", "--model", "m", "--preset", "tiny"],
        /--preset: only for the embedded/,
      ],
      [["--game", "kuhn", "--model", "m"], /--model: only with --backend torch/],
      [["--game", "kuhn", "--resume"], /--resume: only with --backend torch/],
      [["--game", "kuhn", "--backend", "gpu"], /valid choices: embedded, torch/],
      [
        ["--game", "go", "--backend", "torch", "--model", "m"],
        /valid choices: kuhn, tictactoe, sokoban, minesweeper/,
      ],
      [
        ["--game", "kuhn", "--backend", "torch", "--model", "m", "--epsilon", "0.5"],
        /--epsilon is for the puzzles' corpus player \(sokoban, minesweeper\), not kuhn/,
      ],
      [
        ["--game", "sokoban", "--backend", "torch", "--model", "m", "--first-epsilon", "0.5"],
        /--first-epsilon is for a served environment's warm start \(--config FILE\)/,
      ],
      [
        ["--game", "tictactoe", "--backend", "torch", "--model", "m", "--reflection-moves", "2"],
        /--reflection-moves is for the puzzles' corpus player/,
      ],
      [
        ["--game", "kuhn", "--backend", "torch", "--model", "/nonexistent/model"],
        /--model .*no config\.json/,
      ],
      [["--game", "kuhn", "--backend", "torch", "--model", "m", "--lora-rank", "-1"], /--lora-rank/],
    ];
    for (const [argv, message] of cases)
      await assert.rejects(pretrainCommand.run(argv), (e: unknown) => {
        assert.ok(e instanceof UsageError, String(e));
        assert.match(e.message, message);
        return true;
      });
  });

  it("warm-starts a tiny HF model into a plain directory that TorchLearner.open loads", {
    skip: NO_WORKER,
  }, async () => {
    const root = await tempDir();
    const base = join(root, "base");
    await saveTinyHf(base, { seed: 3, contextLength: 2048 });
    const out = join(root, "warm");
    const printed = await runCommand([
      "--game",
      "kuhn",
      "--backend",
      "torch",
      "--model",
      base,
      "--out",
      out,
      "--steps",
      "3",
      "--lr",
      "0.01",
      "--lora-rank",
      "4",
      "--corpus-trials",
      "8",
      "--batch-tokens",
      "1500",
      "--eval-trials",
      "2",
      "--json",
    ]);
    const report = JSON.parse(printed) as TorchPretrainReport;
    assert.deepEqual(JSON.parse(readFileSync(join(out, REPORT_FILE), "utf8")), report);
    assert.equal(report.backend, "torch");
    assert.deepEqual(report.base, {
      dir: base,
      name: "base",
      sha256: sha256(join(base, "model.safetensors")),
    });
    assert.equal(report.model.lora?.rank, 4);
    assert.equal(report.export.merged, true);
    assert.equal(report.sft.steps, 3);
    assert.equal(report.sft.curve.length, 3);
    assert.ok(report.corpus.scoredTokens > 0 && report.corpus.scoredTokens < report.corpus.tokens);
    const e = report.evaluation;
    assert.ok(e && e.trials === 2 && e.playAnswers > 0);
    assert.equal(e.entropy.states.length > 0, true);
    for (const s of e.entropy.states) {
      assert.ok(s.mass > 0 && s.mass <= 1, `mass ${s.mass}`);
      assert.ok(Math.abs(s.probs.PASS + s.probs.BET - 1) < 1e-9);
    }
    assert.deepEqual(
      e.targets.map((t) => t.threshold),
      [0.95, 0.95, 0.5, 0.5],
    );
    for (const phase of ["corpusMs", "loadMs", "renderMs", "sftMs", "saveMs", "evalMs"] as const)
      assert.ok(report.timings[phase] > 0, phase);

    // A plain HF directory (no adapter, no optimizer) with other weights than the base.
    const files = readdirSync(out);
    for (const f of ["config.json", "model.safetensors", "generation_config.json", "tokenizer.json"])
      assert.ok(files.includes(f), `${f} in ${files.join(", ")}`);
    assert.ok(!files.some((f) => f.startsWith("adapter_") || f === "optimizer.pt"));
    assert.notEqual(sha256(join(out, "model.safetensors")), report.base.sha256);
    assert.ok(!existsSync(join(root, "warm.tmp")));

    const learner = await TorchLearner.open({
      torch: TorchModelSchema.parse({ path: out }),
      optimizer: { lr: 1e-5, weightDecay: 0, gradClip: 1 },
      seed: 0,
      reference: false,
    });
    try {
      assert.equal(learner.info.architecture, "LlamaForCausalLM");
      assert.equal(learner.info.trainableParameters, learner.info.parameters, "loaded as a plain model");
      const [r] = await learner.render([[{ role: "user", content: "Card: K." }]]);
      assert.ok(r.ids.length > 0);
    } finally {
      await learner.close();
    }
  });
  it("warm-starts a puzzle with the embedded path's imperfect corpus player and checks", {
    skip: NO_WORKER,
  }, async () => {
    const root = await tempDir();
    const base = join(root, "base");
    await saveTinyHf(base, { seed: 5, contextLength: 4096 });
    const warm = async (out: string, extra: string[]) =>
      JSON.parse(
        await runCommand([
          ...["--game", "minesweeper", "--backend", "torch", "--model", base, "--out", join(root, out)],
          ...["--steps", "1", "--lora-rank", "2", "--corpus-trials", "12", "--batch-tokens", "1200"],
          ...["--eval-trials", "2", "--knobs", "mines: 3", "--json", ...extra],
        ]),
      ) as TorchPretrainReport;
    const report = await warm("warm", []);
    assert.equal(report.game, "minesweeper");
    assert.equal(report.settings.epsilon, 0.25, "the embedded default");
    assert.equal(report.settings.reflectionMoves, 3);
    assert.equal(report.settings.unlikelihood, 16);
    assert.ok(report.unlikely && report.unlikely.tokens > 0, "revealed cells pushed down");
    // Cells as digits by default, laid under the knobs given.
    assert.deepEqual(report.taskKnobs, { minesweeper: { cells: "digits", mines: 3 } });
    // The imperfect solver wins some corpus trials; a random player (ε = 1) wins fewer.
    const random = await warm("warm-random", ["--epsilon", "1"]);
    assert.equal(random.settings.epsilon, 1);
    assert.ok(
      (report.corpus.won ?? 0) > (random.corpus.won ?? 0),
      `${report.corpus.won} vs ${random.corpus.won}`,
    );
    const e = report.evaluation;
    assert.ok(e && e.trials === 2 && e.playAnswers > 0);
    assert.deepEqual(
      e.targets.map((t) => t.name),
      ["play answers well-formed and legal", "reflections a valid <remark>"],
    );
    assert.deepEqual(e.entropy.states, [], "no opening entropy for the puzzles");
  });

  it("adds the unlikelihood term on TicTacToe's taken cells when asked", { skip: NO_WORKER }, async () => {
    const root = await tempDir();
    const base = join(root, "base");
    await saveTinyHf(base, { seed: 4, contextLength: 4096 });
    const warm = (out: string, alpha: string) =>
      runCommand(
        ["--game", "tictactoe", "--backend", "torch", "--model", base, "--out", join(root, out)]
          .concat(["--steps", "2", "--lora-rank", "4", "--corpus-trials", "6", "--batch-tokens", "4000"])
          .concat(["--eval-trials", "1", `--unlikelihood=${alpha}`, "--json"]),
      ).then((printed) => JSON.parse(printed) as TorchPretrainReport);
    const plain = await warm("plain", "0");
    const pushed = await warm("pushed", "3");
    assert.equal(plain.unlikely, null);
    assert.equal(pushed.settings.unlikelihood, 3);
    assert.ok(pushed.unlikely && pushed.unlikely.tokens > 0, JSON.stringify(pushed.unlikely));
    assert.ok(pushed.unlikely.meanQFirst > 0 && pushed.unlikely.meanQFirst < 1);
    // The same corpus and batches: the first step's NLL is the same, the term comes on top.
    assert.equal(pushed.sft.curve[0][1], plain.sft.curve[0][1]);
    await assert.rejects(warm("bad", "-1"), /--unlikelihood must be a number ≥ 0/);
  });

  it("--resume samples the checks a stopped warm start lacks, without training again", {
    skip: NO_WORKER,
  }, async () => {
    const root = await tempDir();
    const base = join(root, "base");
    await saveTinyHf(base, { seed: 6, contextLength: 2048 });
    const out = join(root, "warm");
    const flags = [
      "--lora-rank",
      "2",
      "--corpus-trials",
      "6",
      "--batch-tokens",
      "1500",
      "--eval-trials",
      "2",
    ];
    const settings = { steps: 2, loraRank: 2, corpusTrials: 6, batchTokens: 1500, evalTrials: 2 };
    // A run stopped after its export: the report is there, its checks are not.
    const cut = await runTorchPretrain({
      game: "kuhn",
      model: base,
      out,
      ...settings,
      progress: null,
      skipEvaluation: true,
    });
    assert.equal(cut.evaluation, null);
    const weights = sha256(join(out, "model.safetensors"));
    const resume = (extra: string[]) =>
      runCommand(
        ["--game", "kuhn", "--backend", "torch", "--model", base, "--out", out, ...flags].concat([
          "--resume",
          "--json",
          ...extra,
        ]),
      ).then((printed) => JSON.parse(printed) as TorchPretrainReport);
    await assert.rejects(resume(["--steps", "3"]), /--resume: .*\(settings\.steps 2, not 3\)/);
    const resumed = await resume(["--steps", "2", "--threads", "1"]);
    assert.equal(sha256(join(out, "model.safetensors")), weights, "not trained again");
    assert.deepEqual(resumed.sft, cut.sft);
    assert.equal(resumed.timings.sftMs, cut.timings.sftMs);
    assert.ok(resumed.checksRun, "the resuming run is recorded");
    const e = resumed.evaluation;
    assert.ok(e && e.trials === 2 && e.playAnswers > 0);
    assert.ok(resumed.timings.evalMs > 0 && resumed.timings.totalMs > cut.timings.totalMs);
    // Complete now: a further --resume returns it as it is.
    assert.deepEqual(await resume(["--steps", "2"]), resumed);
  });

  it("--resume goes on from the SFT checkpoint of a warm start killed mid-SFT, to the weights of an uninterrupted run", {
    skip: NO_WORKER,
  }, async () => {
    const root = await tempDir();
    const base = join(root, "base");
    await saveTinyHf(base, { seed: 8, contextLength: 2048 });
    const settings = { steps: 24, loraRank: 2, corpusTrials: 6, batchTokens: 600, evalTrials: 2 };
    const whole = await runTorchPretrain({
      game: "kuhn",
      model: base,
      out: join(root, "whole"),
      ...settings,
      progress: null,
      skipEvaluation: true,
    });
    assert.ok(whole.sft.epochs > 1, "the kill falls after an epoch boundary of the batch stream");

    const out = join(root, "cut");
    const stepsDone = await killDuringSft(base, out, settings, 10);
    assert.ok(stepsDone >= 10 && stepsDone < settings.steps, `killed after step ${stepsDone}`);
    assert.ok(!existsSync(join(out, REPORT_FILE)), "killed before its export");

    const resume = (steps: number) =>
      runTorchPretrain({
        game: "kuhn",
        model: base,
        out,
        ...settings,
        steps,
        resume: true,
        checkpointSeconds: 0,
        progress: null,
        skipEvaluation: true,
      });
    await assert.rejects(
      resume(25),
      /SFT checkpoint of a different warm start \(settings\.steps 24, not 25\)/,
    );
    const resumed = await resume(settings.steps);
    assert.ok(resumed.sftResumedAfterStep !== undefined && resumed.sftResumedAfterStep >= stepsDone);
    assert.equal(sha256(join(out, "model.safetensors")), sha256(join(root, "whole", "model.safetensors")));
    assert.deepEqual(resumed.sft.curve, whole.sft.curve);
    assert.equal(resumed.sft.epochs, whole.sft.epochs);
    assert.equal(resumed.corpus.tokens, whole.corpus.tokens);
    assert.ok(!existsSync(sftCheckpointDir(out)), "the checkpoint is removed once the report is written");
    assert.ok(resumed.timings.sftMs > 0 && resumed.timings.totalMs >= resumed.timings.sftMs);
  });
});

/**
 * Runs the warm start in a child process that writes an SFT checkpoint after every step, and
 * kills it (SIGKILL, worker included) once a checkpoint holds at least `after` steps; returns the
 * steps of the last checkpoint.
 */
async function killDuringSft(
  base: string,
  out: string,
  s: { steps: number; loraRank: number; corpusTrials: number; batchTokens: number; evalTrials: number },
  after: number,
): Promise<number> {
  const args = ["--import", "tsx", "src/cli/main.ts", "pretrain", "--game", "kuhn", "--backend", "torch"];
  args.push("--model", base, "--out", out, "--steps", String(s.steps), "--lora-rank", String(s.loraRank));
  args.push("--corpus-trials", String(s.corpusTrials), "--batch-tokens", String(s.batchTokens));
  args.push("--eval-trials", String(s.evalTrials), "--checkpoint-seconds", "0", "--json");
  const child = spawn(process.execPath, args, { detached: true, stdio: "ignore" });
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const progressFile = join(sftCheckpointDir(out), "sft-progress.json");
  const steps = () => {
    try {
      return (JSON.parse(readFileSync(progressFile, "utf8")) as { progress: { steps: number } }).progress
        .steps;
    } catch {
      return 0; // not written yet
    }
  };
  const deadline = Date.now() + 120_000;
  while (steps() < after) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`the warm start ended or hung before step ${after}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  process.kill(-child.pid!, "SIGKILL");
  await exited;
  return steps();
}
