import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { createInterface } from "node:readline";
import { PACKAGE_ROOT, resolvePython } from "../../learner/torch/worker.js";
import type { ScalarKind } from "./scalars.js";

/**
 * The Node side of the W&B sidecar (`python -m mage_logging.wandb_sidecar`): started only when a
 * run asks for W&B, fed JSON lines over its stdin, never waited on while training. Whatever goes
 * wrong on that side (no wandb installed, no API key, no network, the process dying) becomes one
 * warning, after which the run goes on without W&B.
 */

export interface WandbInit {
  project: string;
  entity: string | null;
  name: string;
  group: string | null;
  mode: "online" | "offline";
  /** The run directory; W&B writes under `<dir>/wandb/`. */
  dir: string;
  /** Continue the W&B run this run directory started (its id is kept in `<dir>/wandb/`). */
  resume: boolean;
  config: unknown;
}

export interface WandbSidecarOptions {
  /** The interpreter (default: as the PyTorch worker's, `resolvePython`). */
  python?: string | null;
  /** Where the one warning and the start line go. */
  log: (message: string) => void;
  env?: NodeJS.ProcessEnv;
}

/** How long `close` waits for W&B to finish (an online run uploads here) before leaving it to finish alone. */
export const WANDB_CLOSE_TIMEOUT_MS = 60_000;

export class WandbSidecar {
  private readonly child: ChildProcess;
  private readonly log: (message: string) => void;
  private readonly logFile: string;
  private failed = false;
  private closing = false;
  private readonly exited: Promise<void>;
  /** The sidecar's process id (the bench reads its CPU time). */
  readonly pid: number | undefined;

  private constructor(child: ChildProcess, logFile: string, log: (message: string) => void) {
    this.child = child;
    this.pid = child.pid;
    this.logFile = logFile;
    this.log = log;
    this.exited = new Promise((resolve) => {
      child.once("error", (err) => {
        this.warn(`cannot start the W&B sidecar: ${err.message}`);
        resolve();
      });
      // "close", not "exit": it comes after the last line of stdout (an error message) was read.
      child.once("close", (code, signal) => {
        if (!this.closing || code !== 0) {
          const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
          this.warn(`the W&B sidecar ${how}${this.lastLines()}`);
        }
        resolve();
      });
    });
    // A write after the sidecar died fails with EPIPE; the exit handler has said why.
    child.stdin?.on("error", () => {});
    if (child.stdout) {
      createInterface({ input: child.stdout }).on("line", (line) => this.onEvent(line));
    }
  }

  static start(init: WandbInit, opts: WandbSidecarOptions): WandbSidecar {
    const { python } = resolvePython(opts.python);
    const env = opts.env ?? process.env;
    const pyPath = join(PACKAGE_ROOT, "python");
    const dir = join(init.dir, "wandb");
    mkdirSync(dir, { recursive: true });
    const logFile = join(dir, "mage-sidecar.log");
    const errFd = openSync(logFile, "a");
    // Its own process group: a Ctrl-C in the terminal reaches mage, which stops cleanly and then
    // closes the sidecar, rather than killing W&B mid-write.
    const child = spawn(python, ["-m", "mage_logging.wandb_sidecar"], {
      stdio: ["pipe", "pipe", errFd],
      detached: true,
      env: {
        ...env,
        PYTHONPATH: env.PYTHONPATH ? `${pyPath}${delimiter}${env.PYTHONPATH}` : pyPath,
        PYTHONUNBUFFERED: "1",
        WANDB_SILENT: "true",
      },
    });
    closeSync(errFd);
    const sidecar = new WandbSidecar(child, logFile, opts.log);
    sidecar.send({ op: "init", ...init });
    return sidecar;
  }

  get active(): boolean {
    return !this.failed;
  }

  record(kind: ScalarKind, step: number, values: Record<string, number>): void {
    this.send({ op: "log", kind, step, values });
  }

  final(table: { key: string; columns: string[]; rows: unknown[][] }, summary: Record<string, number>): void {
    this.send({ op: "final", table, summary });
  }

  /** Asks W&B to finish and waits up to `timeoutMs`; past that the sidecar finishes on its own. */
  async close(timeoutMs = WANDB_CLOSE_TIMEOUT_MS): Promise<void> {
    if (this.closing) return this.exited;
    this.closing = true;
    this.send({ op: "finish" });
    this.child.stdin?.end();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), timeoutMs);
    });
    const outcome = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    if (outcome === "late") {
      this.log(
        `W&B is still finishing after ${Math.round(timeoutMs / 1000)} s; it goes on in the background (log: ${this.logFile})`,
      );
      this.child.unref();
      this.child.stdout?.destroy();
    }
  }

  private send(message: Record<string, unknown>): void {
    if (this.failed || !this.child.stdin?.writable) return;
    this.child.stdin.write(`${JSON.stringify(message)}\n`);
  }

  private onEvent(line: string): void {
    let event: { event?: string; message?: string; id?: string; mode?: string; dir?: string; url?: string };
    try {
      event = JSON.parse(line);
    } catch {
      return;
    }
    if (event.event === "error") this.warn(event.message ?? "unknown error");
    else if (event.event === "started") {
      const where =
        event.mode === "offline"
          ? `offline in ${event.dir} (upload later with: wandb sync ${event.dir})`
          : (event.url ?? "online");
      this.log(`W&B run ${event.id}: ${where}`);
    }
  }

  private warn(reason: string): void {
    if (this.failed) return;
    this.failed = true;
    const hint = /No module named '?(wandb|mage_logging)/.test(reason)
      ? " (run `node scripts/python-env.mjs` for the project's Python environment, or set MAGE_PYTHON)"
      : "";
    const said = reason.trim().replace(/\.+$/, "");
    this.log(`warning: W&B logging is off for the rest of this run: ${said}${hint}. Training goes on.`);
  }

  private lastLines(): string {
    try {
      const lines = readFileSync(this.logFile, "utf8").trim().split("\n").slice(-5);
      return lines.length > 0 && lines[0] !== ""
        ? ` (last lines of ${this.logFile}:\n  ${lines.join("\n  ")})`
        : "";
    } catch {
      return "";
    }
  }
}
