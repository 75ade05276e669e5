/**
 * The three servers on a shared machine (issue 28), measured against the built CLI in child
 * processes on loopback:
 *
 * 1. env-serve: a `mcts:1000000000` create is refused, and GET /info latency while the heaviest
 *    allowed opponent thinks in another session (the default limit, and a limit 20× higher);
 * 2. env-serve with `--max-sessions 1000 --session-ttl 20` and an API key: 30,000 creates (none
 *    closed), the server's RSS before and after, how many got 503, then a `game: remote` training
 *    run with `env.apiKeyEnv` against the same server;
 * 3. the API key: which endpoints answer 401 without it, for each server;
 * 4. SIGTERM during a long request: exit code and time to exit, for each server.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Rng } from "../core/rng.js";
import { saveCheckpoint } from "../model/checkpoint.js";
import { presetConfig } from "../model/config.js";
import { initParams } from "../model/params.js";
import { paramsToMap } from "../model/params-io.js";
import { byteTokenizer } from "../model/tokenizer.js";
import { validateConfig } from "../train/config.js";
import { train } from "../train/trainer.js";

const KEY = "bench-servers-key";
const KEY_VAR = "MAGE_BENCH_SERVERS_KEY";
const agent = new Agent({ keepAlive: true, maxSockets: 64 });

interface Child {
  url: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}

function startCli(args: string[]): Promise<Child> {
  const cli = fileURLToPath(new URL("../cli/main.js", import.meta.url));
  const child = spawn(process.execPath, [cli, ...args], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, [KEY_VAR]: KEY },
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let err = "";
    child.stderr!.on("data", (c) => {
      err += String(c);
      const m = /(http:\/\/[0-9.:]+)/.exec(err);
      if (m) resolve({ url: m[1], child, exited });
    });
    void exited.then((code) => reject(new Error(`mage ${args[0]} exited ${code}: ${err}`)));
  });
}

function call(
  url: string,
  o: { method?: string; body?: unknown; key?: boolean } = {},
): Promise<{ status: number; text: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (o.key) headers.authorization = `Bearer ${KEY}`;
    const req = request(url, { method: o.method ?? "GET", headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          text: Buffer.concat(chunks).toString("utf8"),
          ms: performance.now() - t0,
        }),
      );
    });
    req.on("error", reject);
    req.end(o.body === undefined ? undefined : JSON.stringify(o.body));
  });
}

function rssMB(pid: number | undefined): string {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? (Number(m[1]) / 1024).toFixed(0) : "n/a";
  } catch {
    return "n/a";
  }
}

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))];

async function stopAndTime(c: Child): Promise<string> {
  const t0 = performance.now();
  c.child.kill("SIGTERM");
  const code = await c.exited;
  return `exit ${code} after ${(performance.now() - t0).toFixed(0)} ms`;
}

/** /info latencies while one create with `spec` (seat second: the opponent opens) is thinking. */
async function infoWhileThinking(url: string, spec: string): Promise<string> {
  let thinking = true;
  const t0 = performance.now();
  const create = call(`${url}/create`, {
    method: "POST",
    body: { env: "tictactoe", seed: 1, opponent: spec, seat: "second" },
  }).finally(() => {
    thinking = false;
  });
  const ms: number[] = [];
  while (thinking) {
    ms.push((await call(`${url}/info`)).ms);
    await new Promise((r) => setTimeout(r, 5));
  }
  const r = await create;
  return `create ${spec} ${r.status} in ${(performance.now() - t0).toFixed(0)} ms; /info during it: n=${ms.length}, median ${quantile(ms, 0.5).toFixed(1)} ms, max ${Math.max(...ms).toFixed(1)} ms`;
}

async function boundedWork(): Promise<void> {
  console.log("\n1. bounded work per request (env-serve, defaults)");
  const s = await startCli(["env-serve", "--port", "0"]);
  try {
    const big = await call(`${s.url}/create`, {
      method: "POST",
      body: { env: "tictactoe", seed: 1, opponent: "mcts:1000000000", seat: "second" },
    });
    const e = JSON.parse(big.text).error;
    console.log(
      `create mcts:1000000000: HTTP ${big.status} ${e.kind} in ${big.ms.toFixed(1)} ms: ${e.message}`,
    );
    await call(`${s.url}/create`, {
      method: "POST",
      body: { env: "tictactoe", seed: 9, opponent: "mcts:5", seat: "second" },
    });
    console.log(await infoWhileThinking(s.url, "mcts:100000"));
  } finally {
    console.log(`SIGTERM: ${await stopAndTime(s)}`);
  }
  const raised = await startCli(["env-serve", "--port", "0", "--opponent-limit", "mcts=2000000"]);
  try {
    await call(`${raised.url}/create`, {
      method: "POST",
      body: { env: "tictactoe", seed: 9, opponent: "mcts:5", seat: "second" },
    });
    console.log(`--opponent-limit mcts=2000000: ${await infoWhileThinking(raised.url, "mcts:2000000")}`);
  } finally {
    await stopAndTime(raised);
  }
}

async function floodThenTrain(dir: string): Promise<void> {
  console.log(
    "\n2. 30,000 creates against --max-sessions 1000 --session-ttl 20 (keyed), then a remote training run",
  );
  const s = await startCli([
    "env-serve",
    "--port",
    "0",
    "--max-sessions",
    "1000",
    "--session-ttl",
    "20",
    "--api-key-env",
    KEY_VAR,
  ]);
  try {
    await call(`${s.url}/info`, { key: true });
    const before = rssMB(s.child.pid);
    const counts = new Map<number, number>();
    const t0 = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < 30_000) {
        const i = next++;
        const r = await call(`${s.url}/create`, {
          method: "POST",
          body: { env: "kuhn", seed: i },
          key: true,
        });
        counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    const floodS = (performance.now() - t0) / 1000;
    console.log(
      `RSS before ${before} MB, after ${rssMB(s.child.pid)} MB; ${[...counts].map(([k, v]) => `${v}× HTTP ${k}`).join(", ")} in ${floodS.toFixed(1)} s`,
    );
    const unauth = await Promise.all(
      ["/info", "/create", "/step", "/restart", "/close"].map((p) =>
        call(`${s.url}${p}`, {
          method: p === "/info" ? "GET" : "POST",
          body: p === "/info" ? undefined : {},
        }),
      ),
    );
    const health = await call(`${s.url}/health`);
    console.log(
      `without the key: ${unauth.filter((r) => r.status === 401).length}/5 endpoints 401, /health ${health.status}`,
    );
    process.env[KEY_VAR] = KEY;
    const config = validateConfig({
      name: "bench-servers",
      seed: 0,
      game: "remote",
      env: { url: s.url, name: "kuhn", apiKeyEnv: KEY_VAR, retries: 6 },
      model: { checkpoint: join(dir, "base") },
      task: { attempts: 3 },
      population: { opponents: [{ spec: "intermediate" }, { spec: "cfr-mixed" }] },
      rollout: { tasksPerIteration: 4, groupSize: 4, maxResponseTokens: 16 },
      train: { iterations: 1, checkpointEvery: 100 },
      eval: { every: 0, finalTrials: 4, cells: [{ opponent: "cfr", seat: "second" }] },
    });
    const t1 = performance.now();
    const res = await train({
      config,
      outDir: join(dir, "run"),
      resume: false,
      progress: false,
      log: () => {},
    });
    console.log(
      `game: remote training run (apiKeyEnv, server full when it started): ${res.summary.iterationsDone} iteration(s) done, ${res.summary.finalEval?.cells.length ?? 0} eval cell(s), ${((performance.now() - t1) / 1000).toFixed(1)} s; server RSS now ${rssMB(s.child.pid)} MB`,
    );
  } finally {
    delete process.env[KEY_VAR];
    console.log(`SIGTERM: ${await stopAndTime(s)}`);
  }
}

async function keysAndShutdowns(dir: string): Promise<void> {
  console.log("\n3-4. API key and SIGTERM during a long request, per server");
  const env = await startCli([
    "env-serve",
    "--port",
    "0",
    "--api-key-env",
    KEY_VAR,
    "--opponent-limit",
    "mcts=50000000",
    "--time-budget-ms",
    "120000",
  ]);
  const long = call(`${env.url}/create`, {
    method: "POST",
    body: { env: "tictactoe", seed: 1, opponent: "mcts:50000000", seat: "second" },
    key: true,
  }).catch((e: Error) => ({ status: 0, text: e.message, ms: 0 }));
  await new Promise((r) => setTimeout(r, 1000));
  console.log(
    `env-serve, SIGTERM 1 s into a ~25 s opponent move: ${await stopAndTime(env)}; the request got HTTP ${(await long).status}`,
  );

  const serve = await startCli([
    "serve",
    "--checkpoint",
    join(dir, "base"),
    "--port",
    "0",
    "--api-key-env",
    KEY_VAR,
    "--kernels",
    "js",
    "--max-tokens",
    "600",
    "--model-name",
    "m",
  ]);
  const models = await call(`${serve.url}/v1/models`);
  const health = await call(`${serve.url}/health`);
  const body = {
    model: "m",
    messages: [{ role: "user", content: "hi" }],
    max_tokens: 600,
    n: 16,
    temperature: 1,
  };
  const gen = call(`${serve.url}/v1/chat/completions`, { method: "POST", body, key: true });
  await new Promise((r) => setTimeout(r, 500));
  console.log(
    `mage serve: without the key /v1/models ${models.status}, /health ${health.status}; SIGTERM 0.5 s into a 16×600-token request: ${await stopAndTime(serve)}; the request got HTTP ${(await gen).status}`,
  );

  const dash = await startCli(["dashboard", dir, "--port", "0", "--api-key-env", KEY_VAR]);
  const pages = await Promise.all(
    ["/", "/api/runs", "/api/stamp", "/run?id=x"].map((p) => call(`${dash.url}${p}`)),
  );
  const keyed = await call(`${dash.url}/api/runs`, { key: true });
  const dhealth = await call(`${dash.url}/health`);
  console.log(
    `dashboard: without the key ${pages.filter((p) => p.status === 401).length}/4 pages 401, /health ${dhealth.status}, with it /api/runs ${keyed.status}; SIGTERM: ${await stopAndTime(dash)}`,
  );
}

export async function run(): Promise<void> {
  console.log(
    `load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(" ")}`,
  );
  const dir = mkdtempSync(join(tmpdir(), "mage-bench-servers-"));
  try {
    const tok = byteTokenizer();
    const model = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 1024 });
    await saveCheckpoint(join(dir, "base"), {
      config: model,
      params: paramsToMap(initParams(model, Rng.seeded("bench-servers-model"))),
      tokenizer: tok,
    });
    mkdirSync(join(dir, "runs"));
    writeFileSync(join(dir, "runs", ".keep"), "");
    await boundedWork();
    await floodThenTrain(dir);
    await keysAndShutdowns(dir);
  } finally {
    agent.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}
