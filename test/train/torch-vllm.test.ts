import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { before, describe, it } from "node:test";
import { command as evalCommand } from "../../src/cli/commands/eval.js";
import { VllmServerError } from "../../src/learner/torch/vllm-server.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { runCommand } from "../cli/run-command.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";
import { type FakeMode, fakeVllmPython, readPids, survivors } from "../learner/vllm-fakes.js";

/**
 * `model.torch.rollout: vllm`: `mage train` starts the vLLM server itself (here a stand-in
 * process, `test/learner/fake-vllm-server.ts`, given as model.torch.vllm.python), samples from it,
 * pushes every update's adapter to it, and stops it when the run ends, fails or is interrupted
 * with Ctrl-C: no process of the server's group is left.
 */
const LINUX = process.platform === "linux" ? false : "process groups: Linux";

describe("mage train with a vLLM server it starts itself", { skip: NO_WORKER || LINUX }, () => {
  let root: string;
  let n = 0;
  const write = (
    name: string,
    python: string,
    iterations: number,
    o: { lora?: string; push?: string } = {},
  ) => {
    const file = join(root, `${name}.yaml`);
    writeFileSync(
      file,
      [
        `name: ${name}`,
        "seed: 1",
        "game: kuhn",
        `model: { backend: torch, torch: { path: ${JSON.stringify(join(root, "hf"))}, lora: ${o.lora ?? "{ rank: 4 }"}, rollout: vllm, vllm: { python: ${JSON.stringify(python)}, startTimeoutS: 120, push: ${o.push ?? "merged"} } } }`,
        "task: { attempts: 2, maxTurns: 2 }",
        "population: { opponents: [{ spec: aggressive }] }",
        "rollout: { tasksPerIteration: 2, groupSize: 2, maxResponseTokens: 8 }",
        "optim: { lr: 1.0e-3, miniBatchRows: 1000 }",
        `train: { iterations: ${iterations}, checkpointEvery: 1 }`,
        "eval: { every: 0, finalTrials: 1 }",
        "",
      ].join("\n"),
    );
    return file;
  };
  const fake = (mode: FakeMode) => fakeVllmPython(root, mode, `py${n++}`);

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-torch-vllm-"));
    await saveTinyHf(join(root, "hf"), { seed: 6, contextLength: 512 });
  });

  it("starts the server on the run's model, pushes an adapter after every update (vllm.push: lora), and stops it at the end", async () => {
    const f = fake("ok");
    const out = join(root, "ok-run");
    const lines: string[] = [];
    await train({
      config: loadConfig(write("ok", f.python, 2, { push: "lora" })),
      outDir: out,
      resume: false,
      progress: false,
      log: (m) => lines.push(m),
    });
    const pids = readPids(f.pidsFile);
    assert.deepEqual(await survivors([pids.server, pids.engine], 5_000), [], "the server's group is gone");
    const args = pids.argv.join(" ");
    assert.match(args, new RegExp(`--model ${join(root, "hf")} --served-model-name base`));
    assert.match(
      args,
      /--enable-lora --max-lora-rank 8 --dtype float32 --generation-config vllm --no-enable-chunked-prefill/,
    );
    assert.ok(
      lines.some((l) => /vLLM server for the rollouts at http:\/\/127\.0\.0\.1:\d+\/v1/.test(l)),
      lines.join("\n"),
    );
    const log = readFileSync(join(out, "vllm.log"), "utf8");
    assert.match(log, /Application startup complete/);
    // One adapter directory left: the last push's (each push replaces the one before).
    const served = readdirSync(join(out, "served"));
    assert.equal(served.length, 1);
    assert.match(served[0], /^mage-000002-3$/);
    assert.ok(existsSync(join(out, "summary.json")));

    // mage eval --checkpoint on that run samples through a server it starts on the base model, with
    // the checkpoint's adapter loaded; --rollout worker samples with the worker, no server.
    const firstServer = pids.server;
    const evaluated = await runCommand(evalCommand, [
      "--checkpoint",
      out,
      "--opponent",
      "cfr",
      "--seat",
      "second",
      "--trials",
      "2",
      "--json",
      "--quiet",
      "--out",
      join(root, "eval.jsonl"),
    ]);
    assert.equal(evaluated.code, 0, evaluated.err);
    assert.equal(JSON.parse(evaluated.out).cells[0].metrics.trials, 2);
    const evalPids = readPids(f.pidsFile);
    assert.notEqual(evalPids.server, firstServer, "a server of its own");
    assert.match(evalPids.argv.join(" "), new RegExp(`--model ${join(root, "hf")} .*--max-lora-rank 8`));
    assert.deepEqual(await survivors([evalPids.server, evalPids.engine], 5_000), []);
    const byWorker = await runCommand(evalCommand, [
      "--checkpoint",
      out,
      "--rollout",
      "worker",
      "--opponent",
      "cfr",
      "--trials",
      "1",
      "--json",
      "--quiet",
      "--out",
      join(root, "eval-worker.jsonl"),
    ]);
    assert.equal(byWorker.code, 0, byWorker.err);
    assert.equal(readPids(f.pidsFile).server, evalPids.server, "no server started");
  });

  for (const kind of ["merged", "full"] as const)
    it(`${kind === "merged" ? "vllm.push: merged: the adapter merged into the weights" : "full fine-tuning: the whole weights"}, written per push and reloaded by the server through mage's extension, its prefix cache emptied`, async () => {
      const f = fake("ok");
      const out = join(root, `${kind}-run`);
      await train({
        config: loadConfig(write(kind, f.python, 2, kind === "full" ? { lora: "null" } : {})),
        outDir: out,
        resume: false,
        progress: false,
        log: () => {},
      });
      const pids = readPids(f.pidsFile);
      assert.deepEqual(await survivors([pids.server, pids.engine], 5_000), []);
      const args = pids.argv.join(" ");
      assert.doesNotMatch(args, /--enable-lora/, "the base model is served with no adapter");
      assert.match(args, /--worker-extension-cls mage_learner\.vllm_ext\.MageWorkerExtension/);
      assert.equal(pids.env.VLLM_SERVER_DEV_MODE, "1");
      assert.ok(pids.env.PYTHONPATH?.split(":").includes(resolve("python")), String(pids.env.PYTHONPATH));

      // The access log: per push one reload of a directory that held the weights (else the fake
      // answers 500), then one prefix-cache reset, before any chat that follows.
      const log = readFileSync(join(out, "vllm.log"), "utf8")
        .split("\n")
        .filter((l) => l.includes('HTTP/1.1"'));
      const reloads = log.filter((l) => l.includes("/collective_rpc"));
      assert.equal(reloads.length, 3, "at the start and after each of the 2 iterations");
      const dirs = reloads.map((l) => {
        assert.match(l, /" 200 /, l);
        const body = JSON.parse(l.slice(l.indexOf("{")));
        assert.equal(body.method, "mage_reload_weights");
        return body.args[0] as string;
      });
      assert.deepEqual(
        dirs.map((d) => d.slice(join(out, "served").length + 1)),
        ["weights-000000-1", "weights-000001-2", "weights-000002-3"],
      );
      const order = log.map((l) =>
        l.includes("/collective_rpc")
          ? "R"
          : l.includes("/reset_prefix_cache")
            ? "C"
            : l.includes("/chat/")
              ? "g"
              : "",
      );
      assert.match(order.join(""), /^RCg+RCg+RCg*$/, order.join(""));
      assert.ok(!log.some((l) => l.includes("lora_adapter")));
      assert.ok(log.filter((l) => l.includes("/chat/")).every((l) => l.includes('"model":"base"')));
      // Only the last push's directory is left; it holds the weights of the final checkpoint.
      assert.deepEqual(readdirSync(join(out, "served")), ["weights-000002-3"]);
      assert.deepEqual(readdirSync(join(out, "served", "weights-000002-3")), ["model.safetensors"]);
      if (kind !== "full") return;
      // mage eval --checkpoint of a full fine-tuning run (refused before whole weights could be
      // pushed): a server of its own on the base model, the checkpoint's weights reloaded into it.
      const evaluated = await runCommand(evalCommand, [
        "--checkpoint",
        out,
        "--opponent",
        "cfr",
        "--trials",
        "1",
        "--json",
        "--quiet",
        "--out",
        join(root, "eval-full.jsonl"),
      ]);
      assert.equal(evaluated.code, 0, evaluated.err);
      const evalPids = readPids(f.pidsFile);
      assert.notEqual(evalPids.server, pids.server);
      assert.match(
        evalPids.argv.join(" "),
        /--worker-extension-cls mage_learner\.vllm_ext\.MageWorkerExtension/,
      );
      assert.deepEqual(await survivors([evalPids.server, evalPids.engine], 5_000), []);
    });

  it("a server that dies mid-run fails the run with its exit status and last lines, and leaves nothing behind", async () => {
    const f = fake("die-after:3");
    await assert.rejects(
      train({
        config: loadConfig(write("dies", f.python, 3)),
        outDir: join(root, "dies-run"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      (e: unknown) => {
        // The rollout stops on it (RolloutAbortedError), with the server's error as the cause.
        assert.ok(e instanceof Error && e.cause instanceof VllmServerError, String(e));
        assert.match(
          e.message,
          /the vLLM server mage started \(http:\/\/127\.0\.0\.1:\d+\/v1\) exited with code 9/,
        );
        assert.match(e.message, /EngineDeadError at request 3/);
        return true;
      },
    );
    const pids = readPids(f.pidsFile);
    assert.deepEqual(await survivors([pids.server, pids.engine], 5_000), []);
  });

  it("Ctrl-C: mage finishes the iteration, checkpoints, and stops the server", async () => {
    const f = fake("ok");
    const out = join(root, "sigint-run");
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "train",
        "--config",
        write("sigint", f.python, 50),
        "--out",
        out,
        "--no-progress",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    const metrics = join(out, "metrics.jsonl");
    const deadline = Date.now() + 180_000;
    while (!(existsSync(metrics) && readFileSync(metrics, "utf8").trim() !== "") && Date.now() < deadline) {
      if (child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(existsSync(metrics), `the first iteration finished:\n${output}`);
    const pids = readPids(f.pidsFile);
    child.kill("SIGINT");
    assert.equal(await exited, 130, output);
    assert.ok(readdirSync(join(out, "checkpoints")).length > 0, "checkpointed before stopping");
    assert.deepEqual(await survivors([pids.server, pids.engine], 5_000), [], output);
  });
});
