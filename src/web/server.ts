import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { STALL_LIMITS } from "../serve/http-body.js";
import { dashboardAccess } from "./auth.js";
import { DashboardPages, HttpError, html, json } from "./dashboard-pages.js";
import { escapeHtml, page } from "./html.js";
import { RunIndex } from "./runs.js";

/**
 * `mage dashboard`: a read-only web view of training runs on this machine. Every page is rebuilt
 * from the run folders on request (the report is `mage report`'s, rendered to HTML), and pages
 * reload themselves when a run they show writes something new. It serves only what it finds as
 * run summaries and their trial logs: URLs name runs by id, never by file path.
 */

export interface DashboardOptions {
  roots: readonly string[];
  host?: string;
  port?: number;
  /** Moving-average window for training curves (default: the report's automatic choice). */
  smooth?: number;
  /** Clock for the run states (tests). */
  now?: () => number;
  /** Working directory the run ids are relative to (default: process.cwd()). */
  cwd?: string;
  /** When set, every page but /health needs the key (bearer header, or `?key=` once for a cookie). */
  apiKey?: string | null;
  /** On close, how long responses being written may take before their connections are cut (default 1000 ms). */
  shutdownGraceMs?: number;
}

export interface DashboardHandle {
  url: string;
  server: Server;
  index: RunIndex;
  /** Stops accepting, lets responses being written finish for up to `shutdownGraceMs`, then closes every connection. */
  close(): Promise<void>;
}

export async function startDashboard(o: DashboardOptions): Promise<DashboardHandle> {
  const now = o.now ?? Date.now;
  const index = new RunIndex(o.roots, now, o.cwd ?? process.cwd());
  const pages = new DashboardPages(index, {
    roots: o.roots,
    now,
    ...(o.smooth !== undefined ? { smooth: o.smooth } : {}),
  });
  const access = dashboardAccess(o.apiKey);

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://dashboard.local");
    if (url.pathname === "/health") {
      json(res, { status: "ok" });
      return;
    }
    const allowed = access(req, url);
    if (!allowed.ok) {
      if (allowed.login) {
        res.writeHead(303, { location: allowed.login.location, "set-cookie": allowed.login.cookie });
        res.end();
        return;
      }
      res.writeHead(401, { "content-type": "text/plain; charset=utf-8", "www-authenticate": "Bearer" });
      res.end(
        "this dashboard needs its key: open any page once with ?key=KEY (the value of the variable --api-key-env names), or send 'Authorization: Bearer KEY'\n",
      );
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" });
      res.end("the dashboard only reads: GET or HEAD\n");
      return;
    }
    pages.answer(url, res);
  };

  const server = createServer(STALL_LIMITS, (req, res) => {
    try {
      handle(req, res);
    } catch (err) {
      sendFailure(req, res, err, o.roots);
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port ?? 8080, o.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}/`,
    server,
    index,
    close: async () => {
      // Pages are built synchronously, so what can be in flight is a response still being written.
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const grace = setTimeout(() => server.closeAllConnections(), o.shutdownGraceMs ?? 1000);
      await stopped;
      clearTimeout(grace);
    },
  };
}

/** An error page: 400 and 404 from `HttpError`s, 500 (logged) for anything else. */
function sendFailure(
  req: IncomingMessage,
  res: ServerResponse,
  err: unknown,
  roots: readonly string[],
): void {
  const status = err instanceof HttpError ? err.status : 500;
  const message = (err as Error).message;
  if (status === 500) console.error(`mage dashboard: ${req.url}: ${(err as Error).stack ?? message}`);
  if (res.headersSent) return void res.end();
  const title = status === 404 ? "Not found" : status === 400 ? "Bad request" : "Error";
  html(
    res,
    status,
    page({
      title: String(status),
      body: `<h1>${title}</h1><p>${escapeHtml(message)}</p><p><a href="/">all runs</a></p>`,
      roots,
    }),
  );
}
