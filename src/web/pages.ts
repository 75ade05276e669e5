import { join } from "node:path";
import type { TrialFilter } from "../replay/filter.js";
import { OUTCOMES } from "../replay/filter.js";
import { countAttemptOutcomes } from "../replay/outcomes.js";
import type { TrialRecord } from "../replay/read.js";
import { renderTrial, trialLine } from "../replay/render.js";
import { formatDuration, formatPercent, formatScore, scoreFirst, scoreName } from "../report/markdown.js";
import { modelDetails } from "../report/model.js";
import type { EvalSnapshot, RunSummary } from "../train/summary.js";
import { escapeHtml, href } from "./html.js";
import { type DashboardRun, TRIAL_LOGS, type TrialLogKey } from "./runs.js";

/** The bodies of the dashboard's pages, as HTML strings built from plain data. */

export function runLabel(s: RunSummary): string {
  return `${s.name} · seed ${s.seed}`;
}

function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 90 ? `${s} s ago` : `${formatDuration(s)} ago`;
}

function progressBar(done: number, total: number): string {
  const pct = total > 0 ? Math.min(100, (100 * done) / total) : 0;
  return `<span class="bar" title="${done} of ${total} iterations"><span style="width:${pct.toFixed(1)}%"></span></span>${done}/${total}`;
}

function stateText(run: DashboardRun, nowMs: number): string {
  const s = run.summary;
  const total = s.config.train.iterations;
  if (run.state === "finished") return `<span class="state-finished">finished</span>`;
  if (run.state === "active") {
    const doing = s.iterationsDone >= total ? "final evaluation" : `iteration ${s.iterationsDone + 1}`;
    return `<span class="state-active">running</span> <span class="muted">(${doing}; last write ${ago(nowMs - run.lastWriteMs)})</span>`;
  }
  return `<span class="state-stopped">stopped</span> <span class="muted">(last write ${ago(nowMs - run.lastWriteMs)})</span>`;
}

/** The newest evaluation of a run: the final one, else the last periodic one. */
export function latestEval(s: RunSummary): EvalSnapshot | null {
  if (s.finalEval) return s.finalEval;
  return s.periodicEval.length > 0 ? s.periodicEval[s.periodicEval.length - 1] : null;
}

/** One line per evaluation cell: the game's headline measure at the last attempt, with its interval. */
function evalHeadline(s: RunSummary): string {
  const snap = latestEval(s);
  if (!snap || snap.cells.length === 0) return `<span class="muted">no evaluation yet</span>`;
  const lines = snap.cells.map((c) => {
    const m = c.metrics;
    const K = m.attempts;
    const vs = `${c.opponent}${c.seat !== "none" ? `, ${c.seat}` : ""}`;
    const value = scoreFirst(s.game)
      ? `final ${scoreName(s.game)} ${formatScore(m.final.mean)}`
      : `success@${K} ${formatPercent(m.successAt[K - 1]?.mean ?? Number.NaN)}`;
    const cats = Object.entries(c.byCategory ?? {}).map(
      ([cat, cm]) =>
        `<br><span class="muted">${escapeHtml(cat)}: success@${K} ${formatPercent(cm.successAt[K - 1]?.mean ?? Number.NaN)} (${cm.trials})</span>`,
    );
    return `${escapeHtml(vs)}: ${value}${cats.join("")}`;
  });
  const when = s.finalEval ? "final" : `iteration ${snap.iteration}`;
  return `${lines.join("<br>")}<br><span class="muted">${when}, ${snap.trialsPerCell} trials per cell</span>`;
}

function runRow(r: DashboardRun, nowMs: number): string {
  const s = r.summary;
  return `<tr>
<td><input type="checkbox" name="id" value="${escapeHtml(r.id)}" aria-label="compare ${escapeHtml(runLabel(s))}"></td>
<td><a href="${href("/run", { id: r.id })}">${escapeHtml(s.name)}</a> <span class="muted">s${s.seed}</span><br><span class="muted">${escapeHtml(r.id)}</span></td>
<td>${escapeHtml(s.game)}</td>
<td>${progressBar(s.iterationsDone, s.config.train.iterations)}</td>
<td>${stateText(r, nowMs)}</td>
<td>${evalHeadline(s)}</td>
<td class="num">${formatDuration(s.wallSeconds)}</td>
</tr>`;
}

/** The folder a run id lies in ("." for a run at the top). */
export function folderOf(id: string): string {
  const cut = id.lastIndexOf("/");
  return cut < 0 ? "." : id.slice(0, cut);
}

export function indexBody(runs: readonly DashboardRun[], nowMs: number): string {
  if (runs.length === 0) {
    return `<h1>No runs yet</h1>
<p>Nothing under these folders holds a run summary. Start one, and it appears here within seconds:</p>
<pre>mage train --config configs/quickstart.yaml</pre>`;
  }
  // One table per folder: an experiment's runs share one, with a link comparing all of them.
  const folders = new Map<string, DashboardRun[]>();
  for (const r of [...runs].sort((a, b) =>
    folderOf(a.id) < folderOf(b.id) ? -1 : folderOf(a.id) > folderOf(b.id) ? 1 : 0,
  )) {
    const f = folderOf(r.id);
    folders.set(f, [...(folders.get(f) ?? []), r]);
  }
  const active = runs.filter((r) => r.state === "active").length;
  const sections = [...folders].map(([folder, list]) => {
    const compareAll =
      list.length > 1
        ? ` <a href="${href("/compare", { id: list.map((r) => r.id) })}">compare all ${list.length}</a>`
        : "";
    return `<h2>${escapeHtml(folder)}${compareAll}</h2>
<table>
<thead><tr><th></th><th>run</th><th>game</th><th>iterations</th><th>state</th><th>latest evaluation</th><th>wall</th></tr></thead>
<tbody>
${list.map((r) => runRow(r, nowMs)).join("\n")}
</tbody>
</table>`;
  });
  return `<h1>Runs</h1>
<p>${runs.length} run${runs.length === 1 ? "" : "s"}, ${active} running. This page reloads when a run writes.</p>
<form method="get" action="/compare">
<p><button type="submit">Compare ticked runs</button> <span class="muted">one report over them: methods side by side, seeds pooled</span></p>
${sections.join("\n")}
</form>`;
}

/** Which model the run trained: an embedded preset, or a torch run's model, backend, LoRA and weights hash. */
function modelLine(s: RunSummary): string {
  return `<p class="model">model: ${modelDetails(s).map(escapeHtml).join(" · ")}</p>`;
}

function resumeHint(run: DashboardRun): string {
  if (run.state !== "stopped" || run.runDir === null) return "";
  const dir = run.id;
  return `<p>Resume it with <code>mage train --config ${escapeHtml(join(dir, "config.yaml"))} --out ${escapeHtml(dir)} --resume</code></p>`;
}

function logLinks(run: DashboardRun): string {
  if (run.logs.length === 0) {
    return run.runDir === null
      ? `<p class="muted">A committed summary: its trials stay in the run directory it came from.</p>`
      : `<p class="muted">No trial logs in this run directory yet.</p>`;
  }
  const links = TRIAL_LOGS.filter((l) => run.logs.includes(l.key)).map(
    (l) => `<a href="${href("/trials", { id: run.id, log: l.key })}">${escapeHtml(l.label)}</a>`,
  );
  return `<p>Replay trials: ${links.join(" · ")}</p>`;
}

/** The end of a run's train.log: what it is doing now (pretraining, evaluating, stopping). */
function logTail(lines: readonly string[] | null): string {
  if (lines === null || lines.length === 0) return "";
  return `<details><summary>train.log, last ${lines.length} line${lines.length === 1 ? "" : "s"}</summary>
<pre>${escapeHtml(lines.join("\n"))}</pre>
</details>`;
}

/** Training metrics of the remark table, in its column order. */
const REMARK_COLUMNS = [
  { key: "valid_action", label: "valid actions" },
  { key: "valid_reflection", label: "valid remarks" },
  { key: "informative_reflection", label: "informative remarks" },
] as const;

/** The mean of `key` over history lines that have it (NaN when none). */
function historyMean(lines: readonly Record<string, number>[], key: string): number {
  const xs = lines.map((h) => h[key]).filter((x): x is number => Number.isFinite(x));
  return xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : Number.NaN;
}

/**
 * The rates of valid actions and of valid and informative remarks (among reflect calls): the last
 * training iteration, the mean of the last 10, and each cell of the newest evaluation. Empty
 * when the run recorded no remark rate (a run before they existed, or one without reflections).
 */
export function remarkRatesTable(s: RunSummary): string {
  const snap = latestEval(s);
  const evalCells = (snap?.cells ?? []).filter((c) => c.metrics.validReflectionRate !== undefined);
  const trained = s.history.some((h) => Number.isFinite(h.valid_reflection));
  if (!trained && evalCells.length === 0) return "";
  const rate = (x: number | undefined) => `<td class="num">${formatPercent(x ?? Number.NaN)}</td>`;
  const rows: string[] = [];
  if (trained) {
    const last = s.history[s.history.length - 1];
    const recent = s.history.slice(-10);
    rows.push(
      `<tr><td>training, iteration ${last.iteration}</td>${REMARK_COLUMNS.map((c) => rate(last[c.key])).join("")}</tr>`,
      `<tr><td>training, mean of the last ${recent.length}</td>${REMARK_COLUMNS.map((c) => rate(historyMean(recent, c.key))).join("")}</tr>`,
    );
  }
  const when = s.finalEval ? "final evaluation" : `evaluation at iteration ${snap?.iteration}`;
  for (const c of evalCells) {
    const m = c.metrics;
    const vs = `${c.opponent}${c.seat !== "none" ? `, ${c.seat}` : ""}`;
    rows.push(
      `<tr><td>${escapeHtml(`${when}: ${vs}`)} <span class="muted">(${m.reflections ?? 0} remarks)</span></td>${rate(1 - m.invalidRate)}${rate(m.validReflectionRate)}${rate(m.informativeReflectionRate)}</tr>`,
    );
  }
  return `<table class="remarks">
<thead><tr><th>remarks</th>${REMARK_COLUMNS.map((c) => `<th>${c.label}</th>`).join("")}</tr></thead>
<tbody>${rows.join("\n")}</tbody>
</table>
<p class="muted">Valid remarks: well-formed reflections that carry something (not empty, no tags, within 2,000 characters, not only an action command); informative: those that name something the attempt saw, by the task's rule (– where it has none). Both among reflect calls.</p>`;
}

export function runBody(
  run: DashboardRun,
  reportHtml: string,
  nowMs: number,
  trainLogTail: readonly string[] | null = null,
): string {
  const s = run.summary;
  // The report opens with its own title: the run's state goes between that and the report.
  const title = /^\s*<h1>.*?<\/h1>/s.exec(reportHtml);
  return `${title ? title[0] : `<h1>${escapeHtml(runLabel(s))}</h1>`}
<p>${stateText(run, nowMs)} · ${progressBar(s.iterationsDone, s.config.train.iterations)} · ${escapeHtml(run.summaryPath)}</p>
${modelLine(s)}
${resumeHint(run)}
${logLinks(run)}
${logTail(trainLogTail)}
${remarkRatesTable(s)}
${title ? reportHtml.slice(title[0].length) : reportHtml}`;
}

export interface TrialsView {
  run: DashboardRun;
  log: TrialLogKey;
  file: string;
  filter: TrialFilter;
  /** Every record of the log, and the ones the filter keeps. */
  total: number;
  selected: readonly TrialRecord[];
  page: number;
  perPage: number;
  /** Values offered in the filter's menus. */
  opponents: readonly string[];
  iterations: readonly number[];
  skippedLines: number;
}

/** How each attempt of the selected trials ended: whether later attempts win more often, or only get played. */
function attemptOutcomesTable(selected: readonly TrialRecord[]): string {
  const rows = countAttemptOutcomes(selected);
  if (rows.length === 0) return "";
  const cell = (n: number, of: number) =>
    `<td class="num">${n} (${formatPercent(of > 0 ? n / of : Number.NaN)})</td>`;
  const body = rows.map(
    (r) =>
      `<tr><td class="num">${r.attempt}</td><td class="num">${r.played}</td>${cell(r.won, r.played)}${cell(r.draw, r.played)}${cell(r.lost, r.played)}${cell(r.cutOff, r.played)}<td class="num">${formatScore(r.meanScore)}</td></tr>`,
  );
  return `<table class="outcomes">
<thead><tr><th>attempt</th><th>played</th><th>won</th><th>draw</th><th>lost</th><th>cut off</th><th>mean score</th></tr></thead>
<tbody>${body.join("")}</tbody>
</table>`;
}

function select(name: string, values: readonly string[], current: string | undefined): string {
  const options = ["", ...values].map(
    (v) =>
      `<option value="${escapeHtml(v)}"${v === (current ?? "") ? " selected" : ""}>${v === "" ? "all" : escapeHtml(v)}</option>`,
  );
  return `<label>${name}<select name="${name}">${options.join("")}</select></label>`;
}

function filterParams(v: { run: DashboardRun; log: TrialLogKey; filter: TrialFilter }) {
  return {
    id: v.run.id,
    log: v.log,
    iteration: v.filter.iteration,
    opponent: v.filter.opponent,
    seat: v.filter.seat,
    outcome: v.filter.outcome,
  };
}

export function trialsBody(v: TrialsView): string {
  const f = v.filter;
  const label = TRIAL_LOGS.find((l) => l.key === v.log)?.label ?? v.log;
  const form = `<form class="filters" method="get" action="/trials">
<input type="hidden" name="id" value="${escapeHtml(v.run.id)}"><input type="hidden" name="log" value="${escapeHtml(v.log)}">
${v.iterations.length > 0 ? select("iteration", v.iterations.map(String), f.iteration?.toString()) : ""}
${select("opponent", v.opponents, f.opponent)}
${select("seat", ["first", "second"], f.seat)}
${select("outcome", OUTCOMES, f.outcome)}
<button type="submit">Filter</button>
</form>`;
  const start = v.page * v.perPage;
  const shown = v.selected.slice(start, start + v.perPage);
  const items = shown.map(
    (r) =>
      `<li><a href="${href("/trial", { ...filterParams(v), line: r.line })}">${escapeHtml(trialLine(r))}</a></li>`,
  );
  const pages = Math.ceil(v.selected.length / v.perPage);
  const pager =
    pages > 1
      ? `<nav class="pager">${v.page > 0 ? `<a href="${href("/trials", { ...filterParams(v), page: v.page - 1 })}">← previous</a>` : ""}page ${v.page + 1} of ${pages}${v.page + 1 < pages ? ` <a href="${href("/trials", { ...filterParams(v), page: v.page + 1 })}">next →</a>` : ""}</nav>`
      : "";
  const skipped =
    v.skippedLines > 0
      ? `<p class="muted">${v.skippedLines} line(s) of the file are not trial records (a partial last line while the run writes): skipped.</p>`
      : "";
  return `<p><a href="${href("/run", { id: v.run.id })}">← ${escapeHtml(runLabel(v.run.summary))}</a></p>
<h1>${escapeHtml(label)}</h1>
<p class="muted">${escapeHtml(v.file)}: ${v.selected.length} of ${v.total} trials match.</p>
${form}
${skipped}
${attemptOutcomesTable(v.selected)}
${items.length > 0 ? `<ol class="trials">${items.join("\n")}</ol>` : "<p>No trial matches.</p>"}
${pager}`;
}

export interface TrialView {
  run: DashboardRun;
  log: TrialLogKey;
  filter: TrialFilter;
  record: TrialRecord;
  /** Neighbours within the filtered list, by line. */
  previous?: number;
  next?: number;
}

export function trialBody(v: TrialView): string {
  const params = filterParams(v);
  const nav = [
    `<a href="${href("/trials", params)}">← all matching trials</a>`,
    v.previous !== undefined
      ? `<a href="${href("/trial", { ...params, line: v.previous })}">previous</a>`
      : "",
    v.next !== undefined ? `<a href="${href("/trial", { ...params, line: v.next })}">next</a>` : "",
  ].filter((x) => x !== "");
  return `<p><a href="${href("/run", { id: v.run.id })}">${escapeHtml(runLabel(v.run.summary))}</a> · ${nav.join(" · ")}</p>
<h1>${escapeHtml(trialLine(v.record))}</h1>
<pre>${escapeHtml(renderTrial(v.record))}</pre>`;
}
