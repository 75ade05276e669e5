import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import {
  groupMembers,
  maxLoraRankFor,
  TCMALLOC_PATHS,
  VllmServer,
  VllmServerError,
  type VllmServerOptions,
  vllmPreloads,
  vllmServerArgs,
  vllmServerEnv,
} from "../../src/learner/torch/vllm-server.js";
import { PACKAGE_ROOT } from "../../src/learner/torch/worker.js";
import { type TorchVllmConfig, TorchVllmSchema, validateConfig } from "../../src/train/config.js";
import { type FakeMode, fakeVllmPython, readPids, survivors } from "./vllm-fakes.js";

/**
 * The vLLM server mage starts for `model.torch.rollout: vllm`, against a stand-in process (no
 * vLLM needed): its command line and environment, waiting for it, its errors, and that stopping
 * it (or mage ending in any way) leaves no process of its group behind.
 */
const LINUX = process.platform === "linux" ? false : "process groups and /proc: Linux";

function vllm(o: Partial<TorchVllmConfig>): TorchVllmConfig {
  return TorchVllmSchema.parse(o);
}

describe("the managed vLLM server's command line and environment", () => {
  it("serves LoRA at a rank vLLM accepts, without chunked prefill, with mage's sampling settings", () => {
    assert.equal(maxLoraRankFor(1), 1);
    assert.equal(maxLoraRankFor(4), 8);
    assert.equal(maxLoraRankFor(16), 16);
    assert.equal(maxLoraRankFor(300), 320);
    assert.throws(() => maxLoraRankFor(513), UsageError);
    const args = vllmServerArgs({
      model: "/m",
      servedName: "base",
      port: 8123,
      loraRank: 16,
      dtype: "float32",
      contextLength: 8192,
      kvCacheGiB: 2,
      extraArgs: ["--enable-chunked-prefill"],
    });
    const text = args.join(" ");
    assert.match(text, /^--model \/m --served-model-name base --host 127\.0\.0\.1 --port 8123 /);
    assert.match(text, /--enable-lora --max-lora-rank 16 /);
    assert.match(text, /--dtype float32 --generation-config vllm /);
    assert.match(text, /--no-enable-chunked-prefill --max-num-batched-tokens 16384 /);
    assert.match(text, / --kv-cache-memory-bytes 2147483648 /);
    // The user's arguments come last, so a repeated flag overrides mage's.
    assert.equal(args.at(-1), "--enable-chunked-prefill");
    // A context longer than 16,384 tokens: a batch must hold a whole prompt.
    const long = vllmServerArgs({
      model: "/m",
      servedName: "b",
      port: 1,
      loraRank: null,
      dtype: "auto",
      contextLength: 40_960,
      kvCacheGiB: null,
      extraArgs: [],
    });
    assert.ok(
      long.includes("40960") && !long.includes("--enable-lora") && !long.includes("--kv-cache-memory-bytes"),
    );
    assert.ok(!long.includes("--worker-extension-cls"));
  });

  it("whole-weight pushes: mage's worker extension, the development endpoints, python/ on PYTHONPATH", () => {
    const args = vllmServerArgs({
      model: "/m",
      servedName: "base",
      port: 1,
      loraRank: null,
      weightPush: true,
      dtype: "bfloat16",
      contextLength: 8192,
      kvCacheGiB: 1,
      extraArgs: [],
    }).join(" ");
    assert.match(args, /--worker-extension-cls mage_learner\.vllm_ext\.MageWorkerExtension/);
    assert.doesNotMatch(args, /--enable-lora/);
    const env = vllmServerEnv({ PYTHONPATH: "/theirs" }, [], { weightPush: true });
    assert.equal(env.VLLM_SERVER_DEV_MODE, "1");
    assert.deepEqual(env.PYTHONPATH?.split(":"), [join(PACKAGE_ROOT, "python"), "/theirs"]);
    assert.ok(existsSync(join(PACKAGE_ROOT, "python", "mage_learner", "vllm_ext.py")));
    const plain = vllmServerEnv({}, []);
    assert.equal(plain.VLLM_SERVER_DEV_MODE, undefined);
    assert.equal(plain.PYTHONPATH, undefined);
  });

  it("uses every core, allows runtime LoRA, and preloads tcmalloc and libiomp5 only where they exist", () => {
    const venvPython = "/venvs/v/bin/python";
    const iomp = "/venvs/v/lib/libiomp5.so";
    assert.deepEqual(
      vllmPreloads(venvPython, () => false),
      [],
    );
    assert.deepEqual(
      vllmPreloads(venvPython, (p) => p === iomp),
      [iomp],
    );
    assert.deepEqual(
      vllmPreloads(venvPython, (p) => p === iomp || p === TCMALLOC_PATHS[0]),
      [TCMALLOC_PATHS[0], iomp],
    );
    const env = vllmServerEnv({ PATH: "/bin", LD_PRELOAD: "/mine.so" }, [TCMALLOC_PATHS[0]]);
    assert.equal(env.VLLM_CPU_NUM_OF_RESERVED_CPU, "0");
    assert.equal(env.VLLM_ALLOW_RUNTIME_LORA_UPDATING, "True");
    assert.equal(env.LD_PRELOAD, `${TCMALLOC_PATHS[0]}:/mine.so`);
    assert.equal(vllmServerEnv({}, []).LD_PRELOAD, undefined);
    // The compile cache that loads back (no AOT path) unless the user says otherwise.
    assert.equal(env.VLLM_USE_AOT_COMPILE, "0");
    assert.equal(vllmServerEnv({ VLLM_USE_AOT_COMPILE: "1" }, []).VLLM_USE_AOT_COMPILE, "1");
    // The user's own setting wins.
    assert.equal(vllmServerEnv({ VLLM_CPU_NUM_OF_RESERVED_CPU: "1" }, []).VLLM_CPU_NUM_OF_RESERVED_CPU, "1");
  });

  it("validates rollout: vllm in the config, naming the field", () => {
    const base = { game: "kuhn", population: { opponents: [{ spec: "aggressive" }] } };
    const torch = (t: Record<string, unknown>) =>
      validateConfig({ ...base, model: { backend: "torch", torch: { path: "/m", ...t } } }, "test.yaml");
    const fails = (t: Record<string, unknown>, re: RegExp) =>
      assert.throws(
        () => torch(t),
        (e: unknown) => e instanceof UsageError && re.test(e.message),
      );
    const ok = torch({ rollout: "vllm", lora: { rank: 8 } }).model.torch;
    assert.deepEqual(ok.vllm, {
      python: null,
      port: null,
      kvCacheGiB: 4,
      extraArgs: [],
      startTimeoutS: 600,
      push: "merged",
      concurrency: 16,
    });
    // Full fine-tuning pushes whole weights; so does a merged LoRA push, from one worker process.
    assert.equal(torch({ rollout: "vllm" }).model.torch.lora, null);
    fails({ rollout: "vllm", processes: 2 }, /model\.torch\.processes: full fine-tuning with rollout: vllm/);
    fails(
      { rollout: "vllm", lora: { rank: 8 }, processes: 2 },
      /model\.torch\.processes: vllm\.push: merged with rollout: vllm writes the weights from one worker process/,
    );
    assert.equal(
      torch({ rollout: "vllm", lora: { rank: 8 }, processes: 2, vllm: { push: "lora" } }).model.torch
        .processes,
      2,
    );
    fails({ rollout: "vllm", lora: { rank: 8 }, vllm: { push: "adapter" } }, /model\.torch\.vllm\.push/);
    // The LoRA rank matters only when adapters are served.
    fails(
      { rollout: "vllm", lora: { rank: 1024 }, vllm: { push: "lora" } },
      /model\.torch\.lora\.rank: at most 512/,
    );
    assert.equal(torch({ rollout: "vllm", lora: { rank: 1024 } }).model.torch.lora?.rank, 1024);
    fails(
      { rollout: "vllm", lora: { rank: 8 }, rolloutUrl: "http://x/v1" },
      /model\.torch\.rolloutUrl: is for a server you run/,
    );
    fails({ rollout: "vllm", lora: { rank: 8 }, vllm: { port: 0 } }, /model\.torch\.vllm\.port/);
    fails(
      { rollout: "vllm", lora: { rank: 8 }, vllm: { startTimeoutS: -1 } },
      /model\.torch\.vllm\.startTimeoutS/,
    );
    fails({ rollout: "vllm", lora: { rank: 8 }, vllm: { args: [] } }, /model\.torch\.vllm/);
    fails(
      { rollout: "vllm", lora: { rank: 8 }, vllm: { concurrency: 0 } },
      /model\.torch\.vllm\.concurrency/,
    );
  });
});

describe("the managed vLLM server's lifecycle (a stand-in server)", { skip: LINUX }, () => {
  let root: string;
  let n = 0;
  const started: VllmServer[] = [];
  const fake = (mode: FakeMode) => fakeVllmPython(root, mode, `py${n++}`);
  const start = async (
    python: string,
    o: Partial<TorchVllmConfig> = {},
    extra: Partial<VllmServerOptions> = {},
  ) => {
    const s = await VllmServer.start({
      model: "/models/m",
      servedName: "base",
      vllm: vllm({ python, startTimeoutS: 60, ...o }),
      loraRank: 16,
      dtype: "float32",
      contextLength: 2048,
      logFile: join(root, `server${n}.log`),
      ...extra,
    });
    started.push(s);
    return s;
  };

  before(() => {
    root = mkdtempSync(join(tmpdir(), "mage-vllm-server-"));
  });
  after(async () => {
    for (const s of started) await s.stop();
  });

  it("starts the server with vLLM's command line and environment, waits for it, and stops its whole group", async () => {
    const f = fake("ok");
    const server = await start(f.python);
    const res = await fetch(`${server.baseUrl}/models`);
    assert.equal(res.status, 200);
    const pids = readPids(f.pidsFile);
    assert.deepEqual(pids.argv.slice(0, 4), ["--model", "/models/m", "--served-model-name", "base"]);
    assert.ok(pids.argv.includes(String(server.port)) && pids.argv.includes("--no-enable-chunked-prefill"));
    assert.equal(pids.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING, "True");
    assert.equal(pids.env.VLLM_CPU_NUM_OF_RESERVED_CPU, "0");
    const group = groupMembers(server.pid);
    assert.ok(group.includes(pids.server) && group.includes(pids.engine), "server and engine in the group");
    await server.stop();
    assert.deepEqual(await survivors([server.pid, pids.server, pids.engine], 2_000), []);
    assert.deepEqual(groupMembers(server.pid), []);
    assert.match(readFileSync(server.logFile!, "utf8"), /fake vLLM: starting on port/);
    await server.stop(); // twice is fine
  });

  it("a server that dies at start fails the start with its exit code and the last lines of its log", async () => {
    const f = fake("die-at-start");
    const t0 = Date.now();
    await assert.rejects(start(f.python), (e: unknown) => {
      assert.ok(e instanceof VllmServerError, String(e));
      assert.match(e.message, /the vLLM server exited with code 3 before it was ready/);
      assert.match(e.message, /last lines of the vLLM server's output/);
      assert.match(e.message, /ValueError: fake vLLM cannot start: out of fake memory/);
      return true;
    });
    assert.ok(Date.now() - t0 < 30_000, "fails as soon as the server exits, not at the timeout");
    const pids = readPids(f.pidsFile);
    assert.deepEqual(await survivors([pids.server, pids.engine], 2_000), [], "the engine it left is killed");
  });

  it("a server that never answers is stopped at startTimeoutS, with its log in the error", async () => {
    const f = fake("never-ready");
    await assert.rejects(start(f.python, { startTimeoutS: 3 }), (e: unknown) => {
      assert.ok(e instanceof VllmServerError, String(e));
      assert.match(
        e.message,
        /did not answer GET http:\/\/127\.0\.0\.1:\d+\/v1\/models within 3 s \(model\.torch\.vllm\.startTimeoutS\)/,
      );
      assert.match(e.message, /fake vLLM: starting on port/);
      return true;
    });
    const pids = readPids(f.pidsFile);
    assert.deepEqual(await survivors([pids.server, pids.engine], 2_000), []);
  });

  it("a server that ignores SIGTERM is killed after the grace period", async () => {
    const f = fake("stubborn");
    const server = await start(f.python, {}, { graceMs: 1_000 });
    const pids = readPids(f.pidsFile);
    const t0 = Date.now();
    await server.stop();
    assert.ok(Date.now() - t0 >= 900, "SIGTERM first, then the grace period");
    assert.deepEqual(await survivors([server.pid, pids.server, pids.engine], 2_000), []);
  });

  it("a configured port that is in use, or a missing interpreter, fails at once naming it", async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    const port = (busy.address() as { port: number }).port;
    try {
      await assert.rejects(
        start(fake("ok").python, { port }),
        (e: unknown) =>
          e instanceof UsageError && /model\.torch\.vllm\.port: 127\.0\.0\.1:\d+ is in use/.test(e.message),
      );
    } finally {
      busy.close();
    }
    await assert.rejects(
      start(join(root, "no-such-python")),
      (e: unknown) =>
        e instanceof UsageError &&
        /model\.torch\.vllm\.python\): .*no-such-python does not exist/.test(e.message) &&
        /node scripts\/vllm-env\.mjs/.test(e.message),
    );
  });

  it("a port taken before the server binds it fails the start naming the port", async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    const port = (busy.address() as { port: number }).port;
    try {
      await assert.rejects(
        start(fake("ok").python, { extraArgs: ["--port", String(port)] }),
        (e: unknown) =>
          e instanceof UsageError &&
          e.message.includes(
            `could not listen on 127.0.0.1:${port}: the port is in use (a --port in model.torch.vllm.extraArgs)`,
          ),
      );
    } finally {
      busy.close();
    }
  });

  it("a server process killed by a signal is named so in the error", async () => {
    const f = fake("ok");
    const server = await start(f.python);
    process.kill(readPids(f.pidsFile).server, "SIGKILL");
    const deadline = Date.now() + 10_000;
    while (!server.exit && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.match(
      server.deathError().message,
      /exited with code 137, its server process killed by SIGKILL \(a crash, running out of memory, or a kill\)/,
    );
    assert.deepEqual(groupMembers(server.pid), []);
  });

  for (const how of ["exit", "throw", "kill -9"] as const) {
    it(`mage ending without stopping it (${how}) leaves no process behind`, async () => {
      const f = fake("ok");
      const holder = spawn(
        process.execPath,
        ["--import", "tsx", "test/learner/vllm-holder.ts", how === "kill -9" ? "wait" : how, f.python],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let out = "";
      holder.stdout.on("data", (d: Buffer) => {
        out += d.toString();
      });
      holder.stderr.on("data", (d: Buffer) => {
        out += d.toString();
      });
      const exited = new Promise<number | null>((r) => holder.on("exit", (code) => r(code)));
      const deadline = Date.now() + 60_000;
      while (!/ready \d+/.test(out) && Date.now() < deadline && holder.exitCode === null)
        await new Promise((r) => setTimeout(r, 100));
      const pgid = Number(/ready (\d+)/.exec(out)?.[1]);
      assert.ok(pgid > 0, `the holder started the server: ${out}`);
      const pids = readPids(f.pidsFile);
      if (how === "kill -9") holder.kill("SIGKILL");
      const code = await exited;
      if (how === "exit") assert.equal(code, 7);
      if (how === "throw") assert.notEqual(code, 0);
      // exit/throw: the exit hook kills the group at once; kill -9: the guard sees its stdin close.
      assert.deepEqual(await survivors([pgid, pids.server, pids.engine], 15_000), [], out);
      assert.ok(existsSync(f.pidsFile));
    });
  }
});
