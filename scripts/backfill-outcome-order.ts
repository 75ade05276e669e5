/**
 * Backfills `outcomeOrder` (each trial's outcome pattern in trial order, see
 * src/evaluate/metrics.ts) into the final-evaluation cells of committed run summaries, from the
 * per-trial file their run directories keep (eval-trials.jsonl). With it the results report pairs
 * two methods' trials by deal within a seed.
 *
 *   node --import tsx scripts/backfill-outcome-order.ts <experiments-folder> [--root DIR] [--dry-run]
 *
 * <experiments-folder> holds one folder per experiment (experiment.json and <method>-s<seed>.json
 * summaries), or is one such folder. A summary's run directory is the `runDir` that experiment.json
 * lists for its method and seed (relative to --root, default the current directory), else
 * <root>/runs/experiments/<experiment>/<method>-s<seed>. Run directories are only read.
 *
 * For each summary whose run directory has eval-trials.jsonl, the script rebuilds every
 * finalEval cell's trials from it (trial ids are cell-major: cell c, trial i → c·trialsPerCell + i)
 * and writes `outcomeOrder` only when ALL checks pass: every line belongs to the final evaluation
 * (its iteration), ids cover 0 … cells·trialsPerCell − 1 exactly once, each line's opponent and seat
 * match its cell, and each cell's rebuilt histogram equals the summary's `outcomes` exactly (and an
 * `outcomeOrder` already there equals the rebuilt one). Otherwise the summary is left untouched and
 * reported. The write is atomic, and refused if the summary changed on disk since it was read.
 * The scaling evaluation has no per-trial file and is left as it is. Exit code 1 when any summary
 * was refused.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { writeFileAtomic } from "../src/core/atomic-write.js";
import { encodeOutcomeOrder, outcomePattern, type TrialOutcome } from "../src/evaluate/metrics.js";
import { type RunSummary, SUMMARY_FORMAT } from "../src/train/summary.js";

interface Args {
  folder: string;
  root: string;
  dryRun: boolean;
}

function parseArgs(argv: string[]): Args {
  let folder: string | null = null;
  let root = process.cwd();
  let dryRun = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--root") root = argv[++i] ?? "";
    else if (a === "--dry-run") dryRun = true;
    else if (a.startsWith("--")) throw new Error(`unknown option ${a} (valid: --root DIR, --dry-run)`);
    else if (folder === null) folder = a;
    else throw new Error(`one experiments folder expected, got also ${a}`);
  }
  if (folder === null || root === "") {
    throw new Error(
      "usage: node --import tsx scripts/backfill-outcome-order.ts <experiments-folder> [--root DIR] [--dry-run]",
    );
  }
  return { folder: resolve(folder), root: resolve(root), dryRun };
}

/** The experiment folders: the folder itself when it has experiment.json, else its subfolders that do. */
function experimentFolders(folder: string): string[] {
  if (existsSync(join(folder, "experiment.json"))) return [folder];
  return readdirSync(folder)
    .map((n) => join(folder, n))
    .filter((p) => statSync(p).isDirectory() && existsSync(join(p, "experiment.json")))
    .sort();
}

interface RunEntry {
  method: string;
  seed: number;
  runDir: string;
}

function runDirs(expDir: string): { name: string; runs: RunEntry[] } {
  const info = JSON.parse(readFileSync(join(expDir, "experiment.json"), "utf8")) as {
    name?: string;
    runs?: RunEntry[];
  };
  return { name: info.name ?? basename(expDir), runs: Array.isArray(info.runs) ? info.runs : [] };
}

interface TrialLine {
  iteration: number;
  trialId: number;
  opponent: string | null;
  seat: string | null;
  attempts: TrialOutcome["attempts"];
}

type Outcome =
  | { kind: "written"; cells: number; trials: number }
  | { kind: "checked"; cells: number; trials: number }
  | { kind: "unchanged" }
  | { kind: "skipped"; why: string }
  | { kind: "refused"; why: string };

/** Rebuilds every finalEval cell's outcome order from the run's trial lines (throws on a mismatch). */
function rebuild(summary: RunSummary, lines: readonly TrialLine[]): string[] {
  const fe = summary.finalEval!;
  const T = fe.trialsPerCell;
  const C = fe.cells.length;
  const patterns: (string | undefined)[] = new Array(C * T);
  for (const l of lines) {
    if (l.iteration !== fe.iteration) {
      throw new Error(
        `trial ${l.trialId} is of iteration ${l.iteration}, the final evaluation's is ${fe.iteration}`,
      );
    }
    if (!Number.isInteger(l.trialId) || l.trialId < 0 || l.trialId >= C * T) {
      throw new Error(`trial id ${l.trialId} outside 0 … ${C * T - 1} (${C} cells × ${T} trials)`);
    }
    if (patterns[l.trialId] !== undefined) throw new Error(`trial ${l.trialId} appears twice`);
    const cell = fe.cells[Math.floor(l.trialId / T)];
    const opponent = l.opponent ?? "none";
    const seat = l.seat ?? "none";
    if (cell.opponent !== opponent || cell.seat !== seat) {
      throw new Error(
        `trial ${l.trialId} faced ${opponent} (seat ${seat}) but its cell is ${cell.opponent} (seat ${cell.seat})`,
      );
    }
    if (!Array.isArray(l.attempts) || l.attempts.length === 0)
      throw new Error(`trial ${l.trialId} has no attempts`);
    patterns[l.trialId] = outcomePattern({ opponent, seat, taskId: "", attempts: l.attempts });
  }
  const missing = patterns.length - patterns.filter((p) => p !== undefined).length;
  if (missing > 0) throw new Error(`${missing} of ${C * T} trials missing from eval-trials.jsonl`);
  return fe.cells.map((cell, c) => {
    const mine = patterns.slice(c * T, (c + 1) * T) as string[];
    const hist: Record<string, number> = {};
    for (const p of mine) hist[p] = (hist[p] ?? 0) + 1;
    const want = cell.metrics.outcomes;
    const label = `cell ${c} (${cell.opponent}, seat ${cell.seat})`;
    if (!want) throw new Error(`${label} has no outcomes histogram to check against`);
    if (cell.metrics.trials !== T) throw new Error(`${label} has ${cell.metrics.trials} trials, not ${T}`);
    const keys = new Set([...Object.keys(hist), ...Object.keys(want)]);
    const diffs = [...keys].filter((k) => hist[k] !== want[k]);
    if (diffs.length > 0) {
      const shown = diffs
        .slice(0, 4)
        .map((k) => `"${k}": rebuilt ${hist[k] ?? 0}, summary ${want[k] ?? 0}`)
        .join("; ");
      throw new Error(`${label}: rebuilt histogram differs from the summary's (${shown})`);
    }
    const order = encodeOutcomeOrder(mine);
    if (cell.metrics.outcomeOrder !== undefined && cell.metrics.outcomeOrder !== order) {
      throw new Error(`${label} already has an outcomeOrder that differs from the rebuilt one`);
    }
    return order;
  });
}

async function backfillOne(file: string, runDir: string, dryRun: boolean): Promise<Outcome> {
  const text = readFileSync(file, "utf8");
  let summary: RunSummary;
  try {
    summary = JSON.parse(text) as RunSummary;
  } catch (err) {
    return { kind: "refused", why: `not JSON: ${(err as Error).message}` };
  }
  if (summary.format !== SUMMARY_FORMAT)
    return { kind: "skipped", why: `not a run summary (${summary.format})` };
  if (!summary.finalEval) return { kind: "skipped", why: "no final evaluation" };
  const trialsPath = join(runDir, "eval-trials.jsonl");
  if (!existsSync(trialsPath)) return { kind: "skipped", why: `no ${trialsPath}` };
  let orders: string[];
  try {
    const lines = readFileSync(trialsPath, "utf8")
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l, i) => {
        try {
          return JSON.parse(l) as TrialLine;
        } catch {
          throw new Error(`line ${i + 1} of ${trialsPath} is not JSON`);
        }
      });
    orders = rebuild(summary, lines);
  } catch (err) {
    return { kind: "refused", why: (err as Error).message };
  }
  const cells = summary.finalEval.cells;
  const trials = cells.length * summary.finalEval.trialsPerCell;
  if (cells.every((c, i) => c.metrics.outcomeOrder === orders[i])) return { kind: "unchanged" };
  if (dryRun) return { kind: "checked", cells: cells.length, trials };
  cells.forEach((c, i) => {
    c.metrics.outcomeOrder = orders[i];
  });
  if (readFileSync(file, "utf8") !== text)
    return { kind: "refused", why: "the summary changed while it was read" };
  // The same layout as writeSummary (src/train/summary.ts).
  await writeFileAtomic(file, `${JSON.stringify(summary, null, 1)}\n`);
  return { kind: "written", cells: cells.length, trials };
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const folders = experimentFolders(args.folder);
  if (folders.length === 0)
    throw new Error(`no experiment folders (with experiment.json) under ${args.folder}`);
  let refused = 0;
  const tally = new Map<string, number>();
  for (const expDir of folders) {
    const { name, runs } = runDirs(expDir);
    const files = readdirSync(expDir)
      .filter((n) => n.endsWith(".json") && n !== "experiment.json")
      .sort();
    for (const n of files) {
      const m = /^(.+)-s(\d+)\.json$/.exec(n);
      const label = `${basename(expDir)}/${n}`;
      if (!m) {
        console.log(`${label}: skipped (not named <method>-s<seed>.json)`);
        continue;
      }
      const entry = runs.find((r) => r.method === m[1] && r.seed === Number(m[2]));
      const runDir = resolve(
        args.root,
        entry?.runDir ?? join("runs", "experiments", name, `${m[1]}-s${m[2]}`),
      );
      const r = await backfillOne(join(expDir, n), runDir, args.dryRun);
      tally.set(r.kind, (tally.get(r.kind) ?? 0) + 1);
      if (r.kind === "refused") refused++;
      let detail: string;
      if (r.kind === "written" || r.kind === "checked") {
        const what = r.kind === "written" ? "outcomeOrder written" : "checks pass (dry run, not written)";
        detail = `${what}: ${r.cells} cells, ${r.trials} trials`;
      } else if (r.kind === "unchanged") detail = "already has the same outcomeOrder";
      else detail = `${r.kind === "refused" ? "REFUSED" : "skipped"}: ${r.why}`;
      console.log(`${label}: ${detail}`);
    }
  }
  console.log(
    [...tally.entries()]
      .sort()
      .map(([k, v]) => `${v} ${k}`)
      .join(", "),
  );
  return refused > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`backfill-outcome-order: ${(err as Error).message}`);
    process.exit(2);
  },
);
