import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { isOutcome, matchesTrial, type TrialFilter } from "../replay/filter.js";
import { readTrialLog, type TrialLog } from "../replay/read.js";
import { buildReport } from "../report/markdown.js";
import { STALL_LIMITS } from "../serve/http-body.js";
import { dashboardAccess } from "./auth.js";
import { escapeHtml, markdownToHtml, page, query } from "./html.js";
import { indexBody, runBody, runLabel, trialBody, trialsBody } from "./pages.js";
import { type DashboardRun, isTrialLogKey, RunIndex, stampOf, TRIAL_LOGS, type TrialLogKey } from "./runs.js";

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

const TRIALS_PER_PAGE = 100;
const REPORT_CACHE = 8;
const LOG_CACHE = 4;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A small least-recently-used map: reports and trial logs are rebuilt only when their inputs change. */
class Lru<V> {
  private readonly map = new Map<string, V>();
  constructor(private readonly capacity: number) {}
  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }
  set(key: string, v: V): void {
    this.map.delete(key);
    this.map.set(key, v);
    while (this.map.size > this.capacity) this.map.delete(this.map.keys().next().value as string);
  }
}

interface BuiltReport {
  stamp: string;
  html: string;
  plots: Map<string, string>;
}

/** The last `n` lines of a text file, reading at most its last 64 KiB; null when it cannot be read. */
export function tailLines(path: string, n: number): string[] | null {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const size = fstatSync(fd).size;
    const length = Math.min(size, 64 * 1024);
    const buf = Buffer.alloc(length);
    readSync(fd, buf, 0, length, size - length);
    // Progress bars redraw with carriage returns: keep each line's last state.
    const lines = buf
      .toString("utf8")
      .split("\n")
      .map(
        (l) =>
          l
            .split("\r")
            .filter((part) => part.trim() !== "")
            .pop() ?? "",
      )
      .filter((l) => l.trim() !== "");
    if (length < size) lines.shift(); // the first line may be cut
    return lines.slice(-n);
  } catch {
    return null;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function intParam(q: URLSearchParams, name: string): number | undefined {
  const v = q.get(name);
  if (v === null || v === "") return undefined;
  if (!/^\d+$/.test(v)) throw new HttpError(400, `${name} must be a non-negative integer, got "${v}"`);
  return Number(v);
}

function filterOf(q: URLSearchParams): TrialFilter {
  const outcome = q.get("outcome") || undefined;
  if (outcome !== undefined && !isOutcome(outcome)) throw new HttpError(400, `unknown outcome "${outcome}"`);
  const iteration = intParam(q, "iteration");
  const opponent = q.get("opponent") || undefined;
  const seat = q.get("seat") || undefined;
  return {
    ...(iteration !== undefined ? { iteration } : {}),
    ...(opponent !== undefined ? { opponent } : {}),
    ...(seat !== undefined ? { seat } : {}),
    ...(outcome !== undefined ? { outcome } : {}),
  };
}

export async function startDashboard(o: DashboardOptions): Promise<DashboardHandle> {
  const index = new RunIndex(o.roots, o.now ?? Date.now, o.cwd ?? process.cwd());
  const now = o.now ?? Date.now;
  const reports = new Lru<BuiltReport>(REPORT_CACHE);
  const logs = new Lru<{ mtimeMs: number; size: number; log: TrialLog }>(LOG_CACHE);

  const runsById = (ids: readonly string[]): DashboardRun[] => {
    if (ids.length === 0) throw new HttpError(400, "name at least one run (?id=…)");
    const all = index.scan();
    return ids.map((id) => {
      const run = all.find((r) => r.id === id);
      if (!run) throw new HttpError(404, `no run "${id}" under ${o.roots.join(", ")}`);
      return run;
    });
  };

  const reportFor = (runs: readonly DashboardRun[]): BuiltReport => {
    const ids = runs.map((r) => r.id);
    const key = ids.join("\u0000");
    const stamp = stampOf(runs);
    const hit = reports.get(key);
    if (hit && hit.stamp === stamp) return hit;
    const built = buildReport(
      runs.map((r) => ({ path: r.summaryPath, summary: r.summary })),
      {
        title: runs.length === 1 ? runLabel(runs[0].summary) : `${runs.length} runs compared`,
        plotsLink: "",
        // The runs table links each summary: here, to that run's page.
        linkOf: (p) => {
          const run = runs.find((r) => r.summaryPath === p);
          return run ? `/run${query({ id: run.id })}` : p;
        },
        ...(o.smooth !== undefined ? { smooth: o.smooth } : {}),
      },
    );
    const html = markdownToHtml(built.markdown, (href) =>
      href.endsWith(".svg") ? `/plot${query({ id: ids, file: href })}` : href,
    );
    const report = { stamp, html, plots: new Map(built.plots.map((p) => [p.file, p.svg])) };
    reports.set(key, report);
    return report;
  };

  const trialLog = (run: DashboardRun, key: string): { key: TrialLogKey; file: string; log: TrialLog } => {
    if (!isTrialLogKey(key) || !run.logs.includes(key) || run.runDir === null)
      throw new HttpError(404, `run "${run.id}" has no trial log "${key}"`);
    const entry = TRIAL_LOGS.find((l) => l.key === key);
    const file = join(run.runDir, entry?.file ?? "");
    const st = statSync(file);
    const hit = logs.get(file);
    if (hit && hit.mtimeMs === st.mtimeMs && hit.size === st.size) return { key, file, log: hit.log };
    const log = readTrialLog(file);
    logs.set(file, { mtimeMs: st.mtimeMs, size: st.size, log });
    return { key, file, log };
  };

  const html = (res: ServerResponse, status: number, body: string) => {
    res.writeHead(status, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
    res.end(body);
  };
  const json = (res: ServerResponse, value: unknown) => {
    res.writeHead(200, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
    res.end(JSON.stringify(value));
  };

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
    const q = url.searchParams;
    const ids = q.getAll("id");
    const live = (stampIds?: readonly string[]) => ({
      url: `/api/stamp${query({ id: stampIds })}`,
      stamp: index.stamp(stampIds),
    });
    switch (url.pathname) {
      case "/": {
        const runs = index.scan();
        html(res, 200, page({ title: "runs", body: indexBody(runs, now()), live: live(), roots: o.roots }));
        return;
      }
      case "/run": {
        const [run] = runsById(ids.slice(0, 1));
        const report = reportFor([run]);
        html(
          res,
          200,
          page({
            title: runLabel(run.summary),
            body: runBody(
              run,
              report.html,
              now(),
              run.runDir ? tailLines(join(run.runDir, "train.log"), 20) : null,
            ),
            live: live([run.id]),
            roots: o.roots,
          }),
        );
        return;
      }
      case "/compare": {
        const runs = runsById(ids);
        const report = reportFor(runs);
        html(
          res,
          200,
          page({ title: `${runs.length} runs`, body: report.html, live: live(ids), roots: o.roots }),
        );
        return;
      }
      case "/plot": {
        const file = q.get("file") ?? "";
        const svg = reportFor(runsById(ids)).plots.get(file);
        if (svg === undefined) throw new HttpError(404, `no plot "${file}" in this report`);
        res.writeHead(200, { "content-type": "image/svg+xml; charset=utf-8", "cache-control": "no-store" });
        res.end(svg);
        return;
      }
      case "/trials":
      case "/trial": {
        const [run] = runsById(ids.slice(0, 1));
        const { key, file, log } = trialLog(run, q.get("log") ?? "transcripts");
        const filter = filterOf(q);
        const selected = log.records.filter((r) => matchesTrial(r, filter));
        if (url.pathname === "/trials") {
          const opponents = [...new Set(log.records.flatMap((r) => (r.opponent ? [r.opponent] : [])))].sort();
          const iterations = [
            ...new Set(log.records.flatMap((r) => (r.iteration !== undefined ? [r.iteration] : []))),
          ].sort((a, b) => a - b);
          const pageNo = intParam(q, "page") ?? 0;
          const body = trialsBody({
            run,
            log: key,
            file,
            filter,
            total: log.records.length,
            selected,
            page: pageNo,
            perPage: TRIALS_PER_PAGE,
            opponents,
            iterations,
            skippedLines: log.skipped.length,
          });
          html(res, 200, page({ title: "trials", body, live: live([run.id]), roots: o.roots }));
          return;
        }
        const line = intParam(q, "line");
        const at = selected.findIndex((r) => r.line === line);
        if (at < 0) throw new HttpError(404, `no trial at line ${line} matches in ${file}`);
        const body = trialBody({
          run,
          log: key,
          filter,
          record: selected[at],
          ...(at > 0 ? { previous: selected[at - 1].line } : {}),
          ...(at + 1 < selected.length ? { next: selected[at + 1].line } : {}),
        });
        html(res, 200, page({ title: `trial ${selected[at].trialId}`, body, roots: o.roots }));
        return;
      }
      case "/api/stamp":
        json(res, { stamp: index.stamp(ids.length > 0 ? ids : undefined) });
        return;
      case "/api/runs":
        json(
          res,
          index.scan().map((r) => ({
            id: r.id,
            name: r.summary.name,
            game: r.summary.game,
            seed: r.summary.seed,
            state: r.state,
            iterationsDone: r.summary.iterationsDone,
            iterations: r.summary.config.train.iterations,
            lastWrite: new Date(r.lastWriteMs).toISOString(),
            summaryPath: r.summaryPath,
            logs: r.logs,
          })),
        );
        return;
      default:
        throw new HttpError(404, `no page ${url.pathname}`);
    }
  };

  const server = createServer(STALL_LIMITS, (req, res) => {
    try {
      handle(req, res);
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      const message = (err as Error).message;
      if (status === 500) console.error(`mage dashboard: ${req.url}: ${(err as Error).stack ?? message}`);
      if (res.headersSent) return void res.end();
      html(
        res,
        status,
        page({
          title: String(status),
          body: `<h1>${status === 404 ? "Not found" : status === 400 ? "Bad request" : "Error"}</h1><p>${escapeHtml(message)}</p><p><a href="/">all runs</a></p>`,
          roots: o.roots,
        }),
      );
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
