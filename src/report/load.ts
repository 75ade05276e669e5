import { readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { UsageError } from "../core/errors.js";
import { DIVERSITY_FORMAT, EXPERIMENT_FORMAT, EXPLOITABILITY_FORMAT } from "../core/file-formats.js";
import { type RunSummary, SUMMARY_FORMAT } from "../train/summary.js";

/**
 * Finding run summaries for `mage report`. An input is a run directory (it holds `summary.json`:
 * only that file is read), a directory of summaries (every `*.json` below it, recursively; a
 * sub-directory holding `summary.json` counts as a run directory), or a summary file itself.
 * JSON files that are not run summaries are skipped with a note, except the companion files an
 * experiment directory holds (`experiment.json`, diversity measurements: formats in
 * `COMPANION_FORMATS`), which are collected in `companions` without a note.
 */

/** Formats of the non-summary JSON files an experiment directory holds (see `report/experiments.ts`). */
export const COMPANION_FORMATS: readonly string[] = [
  EXPERIMENT_FORMAT,
  DIVERSITY_FORMAT,
  EXPLOITABILITY_FORMAT,
];

export interface CompanionFile {
  path: string;
  format: string;
  data: Record<string, unknown>;
}

export interface LoadedSummary {
  /** Absolute path of the summary file. */
  path: string;
  summary: RunSummary;
}

export interface LoadResult {
  /** Sorted by game, name, seed, then path (so the order never depends on the file system). */
  runs: LoadedSummary[];
  /** One line per skipped file, saying why. */
  notes: string[];
  /** Experiment and diversity files met on the way (not summaries, not problems). */
  companions: CompanionFile[];
}

/** JSON files larger than this are not summaries (a summary is a few hundred KiB at most). */
const MAX_SUMMARY_BYTES = 64 * 2 ** 20;
const SKIP_DIRS = new Set(["node_modules", ".git"]);

/** An entry of a results folder: a sub-folder to walk or a JSON file to read. */
export interface ResultEntry {
  name: string;
  path: string;
  isDirectory: boolean;
  isJson: boolean;
}

/**
 * The entries of `dir` that may hold results, in sorted order. Hidden entries are temporaries
 * (atomic writes) or tool state, never results; dangling links are left out.
 */
export function resultEntries(dir: string): ResultEntry[] {
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (err) {
    throw new UsageError(`cannot read directory ${dir}: ${(err as Error).message}`);
  }
  const out: ResultEntry[] = [];
  for (const name of names) {
    if (name.startsWith(".") || SKIP_DIRS.has(name)) continue;
    const path = join(dir, name);
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch {
      continue;
    }
    out.push({
      name,
      path,
      isDirectory: st.isDirectory(),
      isJson: st.isFile() && name.toLowerCase().endsWith(".json"),
    });
  }
  return out;
}

type Parsed =
  | { ok: true; summary: RunSummary }
  | { ok: false; why: string; companion?: { format: string; data: Record<string, unknown> } };

function problems(s: Record<string, unknown>): string | null {
  if (typeof s.name !== "string") return "no run name";
  if (typeof s.game !== "string") return "no game";
  if (typeof s.seed !== "number") return "no seed";
  if (!Array.isArray(s.history)) return "no history array";
  if (s.periodicEval !== undefined && !Array.isArray(s.periodicEval)) return "periodicEval is not an array";
  if (s.finalEval !== undefined && s.finalEval !== null) {
    const f = s.finalEval as { cells?: unknown };
    if (typeof f !== "object" || !Array.isArray(f.cells)) return "finalEval has no cells";
  }
  return null;
}

/** Reads one file as a run summary, or says why it is not one. Throws only when it cannot be read. */
export function parseSummaryFile(path: string): Parsed {
  let text: string;
  try {
    if (statSync(path).size > MAX_SUMMARY_BYTES) return { ok: false, why: "too large to be a run summary" };
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read ${path}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, why: `not valid JSON (${(err as Error).message})` };
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return { ok: false, why: "not a JSON object" };
  }
  const obj = raw as Record<string, unknown>;
  if (obj.format !== SUMMARY_FORMAT) {
    if (typeof obj.format === "string" && COMPANION_FORMATS.includes(obj.format)) {
      return {
        ok: false,
        why: `a ${obj.format} file, not a run summary`,
        companion: { format: obj.format, data: obj },
      };
    }
    return {
      ok: false,
      why: `not a mage run summary (format ${obj.format === undefined ? "missing" : JSON.stringify(obj.format)}, expected "${SUMMARY_FORMAT}")`,
    };
  }
  const bad = problems(obj);
  if (bad !== null) return { ok: false, why: `malformed run summary: ${bad}` };
  const summary = obj as unknown as RunSummary;
  return {
    ok: true,
    summary: { ...summary, periodicEval: summary.periodicEval ?? [], finalEval: summary.finalEval ?? null },
  };
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The summary files under `dir`, in sorted order; run directories contribute only summary.json. */
function collect(dir: string, files: string[], seenDirs: Set<string>): void {
  let real: string;
  try {
    real = realpathSync(dir);
  } catch (err) {
    throw new UsageError(`cannot read directory ${dir}: ${(err as Error).message}`);
  }
  if (seenDirs.has(real)) return;
  seenDirs.add(real);
  const own = join(dir, "summary.json");
  if (isFile(own)) {
    files.push(own);
    return;
  }
  for (const e of resultEntries(dir)) {
    if (e.isDirectory) collect(e.path, files, seenDirs);
    else if (e.isJson) files.push(e.path);
  }
}

export function compareRuns(a: LoadedSummary, b: LoadedSummary): number {
  const s = a.summary;
  const t = b.summary;
  if (s.game !== t.game) return s.game < t.game ? -1 : 1;
  if (s.name !== t.name) return s.name < t.name ? -1 : 1;
  if (s.seed !== t.seed) return s.seed - t.seed;
  return a.path < b.path ? -1 : a.path > b.path ? 1 : 0;
}

interface FoundInput {
  input: string;
  abs: string;
  /** The candidate summary files under it, not already found under an earlier input. */
  files: string[];
}

function findInputs(inputs: readonly string[]): FoundInput[] {
  if (inputs.length === 0) {
    throw new UsageError("no input given: name run directories or directories of summaries");
  }
  const seenFiles = new Set<string>();
  const seenDirs = new Set<string>();
  return inputs.map((input) => {
    const abs = resolve(input);
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(abs);
    } catch (err) {
      throw new UsageError(`cannot read ${input}: ${(err as Error).message}`);
    }
    const found: string[] = [];
    if (st.isDirectory()) collect(abs, found, seenDirs);
    else if (st.isFile()) found.push(abs);
    else throw new UsageError(`${input} is neither a directory nor a file`);
    const files = found.filter((file) => {
      const real = realpathSync(file);
      if (seenFiles.has(real)) return false;
      seenFiles.add(real);
      return true;
    });
    return { input, abs, files };
  });
}

/**
 * The files that may be run summaries under each input (a run directory gives its summary.json, a
 * directory every `*.json` below it), each once, in a stable order. Throws a UsageError when an
 * input does not exist or cannot be read.
 */
export function findSummaryFiles(inputs: readonly string[]): string[] {
  return findInputs(inputs).flatMap((f) => f.files);
}

/**
 * Loads every run summary the inputs name. Throws a UsageError (exit code 2) when an input does
 * not exist or cannot be read, when a file named directly is not a summary, or when nothing is found.
 */
export function loadSummaries(inputs: readonly string[]): LoadResult {
  const notes: string[] = [];
  const runs: LoadedSummary[] = [];
  const companions: CompanionFile[] = [];
  for (const { input, abs, files } of findInputs(inputs)) {
    for (const file of files) {
      const parsed = parseSummaryFile(file);
      if (parsed.ok) runs.push({ path: file, summary: parsed.summary });
      else if (parsed.companion && file !== abs) companions.push({ path: file, ...parsed.companion });
      else if (file === abs) throw new UsageError(`${input}: ${parsed.why}`);
      else notes.push(`skipped ${file}: ${parsed.why}`);
    }
  }
  if (runs.length === 0) {
    const detail = notes.length > 0 ? ` (${notes.length} JSON file(s) skipped: ${notes.join("; ")})` : "";
    throw new UsageError(
      `no run summaries (format "${SUMMARY_FORMAT}") found in ${inputs.join(", ")}${detail}; ` +
        "give run directories (holding summary.json) or directories of summary files",
    );
  }
  runs.sort(compareRuns);
  return { runs, notes, companions };
}
