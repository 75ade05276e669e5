/**
 * Probes for the servers' hostile-client tests (test/serve/*-probes.test.ts,
 * test/web/dashboard-probes.test.ts): raw HTTP exchanges, oversize uploads, stalled sockets and
 * CLI servers in child processes. Loopback only; every loop is bounded by its caller.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { Agent, request } from "node:http";
import { connect, type Socket } from "node:net";

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** One HTTP exchange; rejects only when no reply came. */
export function exchange(
  url: string,
  o: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: o.method ?? "GET", headers: o.headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: Buffer.concat(chunks).toString("utf8"),
        }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(o.body);
  });
}

/**
 * Uploads `bytes` bytes (in 64 KiB chunks, with a Content-Length unless `chunked`; on a
 * keep-alive connection with `keepAlive`, else with `Connection: close`) and returns the reply,
 * which may come while the upload is still going. A server that cuts the connection before
 * answering makes it reject.
 */
export function upload(
  url: string,
  bytes: number,
  o: { headers?: Record<string, string>; chunked?: boolean; keepAlive?: boolean } = {},
): Promise<Reply> {
  const agent = o.keepAlive ? new Agent({ keepAlive: true }) : false;
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { "content-type": "application/json", ...o.headers };
    if (!o.chunked) headers["content-length"] = String(bytes);
    const req = request(url, { method: "POST", headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        req.destroy();
        if (agent) agent.destroy();
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: Buffer.concat(chunks).toString("utf8"),
        });
      });
    });
    req.on("error", (err) => reject(new Error(`no reply to the upload: ${err.message}`)));
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let sent = 0;
    const pump = () => {
      while (sent < bytes) {
        const n = Math.min(chunk.length, bytes - sent);
        sent += n;
        if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
          req.once("drain", pump);
          return;
        }
      }
      req.end();
    };
    pump();
  });
}

/** Opens `n` connections that send half a request line and then nothing. */
export async function stalledSockets(url: string, n: number): Promise<Socket[]> {
  const { hostname, port } = new URL(url);
  const host = hostname.replace(/^\[|\]$/g, "");
  return Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect(Number(port), host, () => {
            s.write("POST /create HTTP/1.1\r\nHost: x\r\nContent-Le");
            resolve(s);
          });
          s.on("error", () => {});
          s.once("error", reject);
        }),
    ),
  );
}

/** Wall time of one GET in ms, and its status. */
export async function timedGet(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ ms: number; status: number }> {
  const t0 = performance.now();
  const r = await exchange(url, { headers });
  return { ms: performance.now() - t0, status: r.status };
}

export interface CliServer {
  url: string;
  child: ChildProcess;
  stderr: () => string;
  /** Resolves with the exit code and the ms from `signalled` (or from start) to exit. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs `mage ARGS` from source in a child process and waits for the URL it prints ("… at http://…" or "mage dashboard: http://…"). */
export function startCli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<CliServer> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
    stdio: ["ignore", "ignore", "pipe"],
    env,
  });
  let err = "";
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  );
  return new Promise((resolve, reject) => {
    child.stderr!.on("data", (c) => {
      err += String(c);
      const m = /(http:\/\/[0-9.:[\]a-z]+)/.exec(err);
      if (m) resolve({ url: m[1].replace(/\/$/, ""), child, stderr: () => err, exited });
    });
    void exited.then(({ code }) =>
      reject(new Error(`mage ${args[0]} exited ${code} before listening: ${err}`)),
    );
  });
}

/** Sends SIGTERM and returns the exit code and how long the exit took. */
export async function terminate(s: CliServer): Promise<{ code: number | null; ms: number }> {
  const t0 = performance.now();
  s.child.kill("SIGTERM");
  const { code } = await s.exited;
  return { code, ms: performance.now() - t0 };
}
