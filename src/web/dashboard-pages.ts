/**
 * The dashboard's pages: each request is answered from the runs found now, with the reports and
 * trial logs it shows cached while their inputs are unchanged.
 */
import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import type { ServerResponse } from "node:http";
import { join } from "node:path";
import { isOutcome, matchesTrial, type TrialFilter } from "../replay/filter.js";
import { readTrialLog, type TrialLog } from "../replay/read.js";
import { buildReport } from "../report/markdown.js";
import { markdownToHtml, page, query } from "./html.js";
import { indexBody, runBody, runLabel, trialBody, trialsBody } from "./pages.js";
import {
  type DashboardRun,
  isTrialLogKey,
  type RunIndex,
  stampOf,
  TRIAL_LOGS,
  type TrialLogKey,
} from "./runs.js";

const TRIALS_PER_PAGE = 100;
const REPORT_CACHE = 8;
const LOG_CACHE = 4;

export class HttpError extends Error {
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

export interface PageOptions {
  roots: readonly string[];
  smooth?: number;
  now: () => number;
}

export function html(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
  res.end(body);
}

export function json(res: ServerResponse, value: unknown): void {
  res.writeHead(200, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
  res.end(JSON.stringify(value));
}

export class DashboardPages {
  private readonly reports = new Lru<BuiltReport>(REPORT_CACHE);
  private readonly logs = new Lru<{ mtimeMs: number; size: number; log: TrialLog }>(LOG_CACHE);

  constructor(
    readonly index: RunIndex,
    private readonly o: PageOptions,
  ) {}

  private readonly routes = new Map<string, (res: ServerResponse, ids: string[], q: URLSearchParams) => void>(
    [
      ["/", (res) => this.indexPage(res)],
      ["/run", (res, ids) => this.runPage(res, ids)],
      ["/compare", (res, ids) => this.comparePage(res, ids)],
      ["/plot", (res, ids, q) => this.plot(res, ids, q.get("file") ?? "")],
      ["/trials", (res, ids, q) => this.trialsPage(res, ids, q)],
      ["/trial", (res, ids, q) => this.trialPage(res, ids, q)],
      ["/api/stamp", (res, ids) => json(res, { stamp: this.index.stamp(ids.length > 0 ? ids : undefined) })],
      ["/api/runs", (res) => json(res, this.runList())],
    ],
  );

  /** Answers a GET of `url` (key and method already checked); throws `HttpError` for 4xx. */
  answer(url: URL, res: ServerResponse): void {
    const route = this.routes.get(url.pathname);
    if (!route) throw new HttpError(404, `no page ${url.pathname}`);
    route(res, url.searchParams.getAll("id"), url.searchParams);
  }

  /** What a page polls to reload when the runs it shows write something. */
  private live(stampIds?: readonly string[]) {
    return { url: `/api/stamp${query({ id: stampIds })}`, stamp: this.index.stamp(stampIds) };
  }

  private indexPage(res: ServerResponse): void {
    const runs = this.index.scan();
    html(
      res,
      200,
      page({ title: "runs", body: indexBody(runs, this.o.now()), live: this.live(), roots: this.o.roots }),
    );
  }

  private runPage(res: ServerResponse, ids: string[]): void {
    const [run] = this.runsById(ids.slice(0, 1));
    const report = this.reportFor([run]);
    const tail = run.runDir ? tailLines(join(run.runDir, "train.log"), 20) : null;
    html(
      res,
      200,
      page({
        title: runLabel(run.summary),
        body: runBody(run, report.html, this.o.now(), tail),
        live: this.live([run.id]),
        roots: this.o.roots,
      }),
    );
  }

  private comparePage(res: ServerResponse, ids: string[]): void {
    const runs = this.runsById(ids);
    const report = this.reportFor(runs);
    html(
      res,
      200,
      page({ title: `${runs.length} runs`, body: report.html, live: this.live(ids), roots: this.o.roots }),
    );
  }

  private plot(res: ServerResponse, ids: string[], file: string): void {
    const svg = this.reportFor(this.runsById(ids)).plots.get(file);
    if (svg === undefined) throw new HttpError(404, `no plot "${file}" in this report`);
    res.writeHead(200, { "content-type": "image/svg+xml; charset=utf-8", "cache-control": "no-store" });
    res.end(svg);
  }

  /** A run's trial log, the filter the query asks for and the records it selects. */
  private selectTrials(ids: string[], q: URLSearchParams) {
    const [run] = this.runsById(ids.slice(0, 1));
    const { key, file, log } = this.trialLog(run, q.get("log") ?? "transcripts");
    const filter = filterOf(q);
    const selected = log.records.filter((r) => matchesTrial(r, filter));
    return { run, key, file, log, filter, selected };
  }

  private trialsPage(res: ServerResponse, ids: string[], q: URLSearchParams): void {
    const { run, key, file, log, filter, selected } = this.selectTrials(ids, q);
    const opponents = [...new Set(log.records.flatMap((r) => (r.opponent ? [r.opponent] : [])))].sort();
    const iterations = [
      ...new Set(log.records.flatMap((r) => (r.iteration !== undefined ? [r.iteration] : []))),
    ].sort((a, b) => a - b);
    const body = trialsBody({
      run,
      log: key,
      file,
      filter,
      total: log.records.length,
      selected,
      page: intParam(q, "page") ?? 0,
      perPage: TRIALS_PER_PAGE,
      opponents,
      iterations,
      skippedLines: log.skipped.length,
    });
    html(res, 200, page({ title: "trials", body, live: this.live([run.id]), roots: this.o.roots }));
  }

  private trialPage(res: ServerResponse, ids: string[], q: URLSearchParams): void {
    const { run, key, file, filter, selected } = this.selectTrials(ids, q);
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
    html(res, 200, page({ title: `trial ${selected[at].trialId}`, body, roots: this.o.roots }));
  }

  private runList() {
    return this.index.scan().map((r) => ({
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
    }));
  }

  private runsById(ids: readonly string[]): DashboardRun[] {
    if (ids.length === 0) throw new HttpError(400, "name at least one run (?id=…)");
    const all = this.index.scan();
    return ids.map((id) => {
      const run = all.find((r) => r.id === id);
      if (!run) throw new HttpError(404, `no run "${id}" under ${this.o.roots.join(", ")}`);
      return run;
    });
  }

  private reportFor(runs: readonly DashboardRun[]): BuiltReport {
    const ids = runs.map((r) => r.id);
    const key = ids.join("\u0000");
    const stamp = stampOf(runs);
    const hit = this.reports.get(key);
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
        ...(this.o.smooth !== undefined ? { smooth: this.o.smooth } : {}),
      },
    );
    const htmlText = markdownToHtml(built.markdown, (href) =>
      href.endsWith(".svg") ? `/plot${query({ id: ids, file: href })}` : href,
    );
    const report = { stamp, html: htmlText, plots: new Map(built.plots.map((p) => [p.file, p.svg])) };
    this.reports.set(key, report);
    return report;
  }

  private trialLog(run: DashboardRun, key: string): { key: TrialLogKey; file: string; log: TrialLog } {
    if (!isTrialLogKey(key) || !run.logs.includes(key) || run.runDir === null)
      throw new HttpError(404, `run "${run.id}" has no trial log "${key}"`);
    const entry = TRIAL_LOGS.find((l) => l.key === key);
    const file = join(run.runDir, entry?.file ?? "");
    const st = statSync(file);
    const hit = this.logs.get(file);
    if (hit && hit.mtimeMs === st.mtimeMs && hit.size === st.size) return { key, file, log: hit.log };
    const log = readTrialLog(file);
    this.logs.set(file, { mtimeMs: st.mtimeMs, size: st.size, log });
    return { key, file, log };
  }
}
