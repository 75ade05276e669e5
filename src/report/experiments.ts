import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { UsageError } from "../core/errors.js";
import { DIVERSITY_FORMAT, EXPERIMENT_FORMAT, EXPLOITABILITY_FORMAT } from "../core/file-formats.js";
import { parseTargetValue, type TargetValue } from "../train/pretrain/target-text.js";
import { type LoadedSummary, parseSummaryFile, resultEntries } from "./load.js";

/**
 * Loading an experiments folder for the results report (`mage report DIR --results`).
 *
 * Layout: `DIR/<experiment>/<method>-s<seed>.json` run summaries, an optional
 * `DIR/<experiment>/experiment.json` written by `mage experiment`, and optional diversity
 * measurements (`DIR/<experiment>/diversity/*.json`). Every JSON file below an experiment folder is
 * classified by its `format`, wherever it sits; anything else is skipped with a note. When DIR itself
 * holds summaries or an experiment.json, DIR is one experiment.
 */

export interface ExperimentMethod {
  method: string;
  config?: string;
  set?: unknown;
}

export interface ExperimentRunInfo {
  method: string;
  seed: number;
  status?: string;
  wallSeconds?: number;
}

/** `experiment.json` (every field optional: older or partial files are tolerated). */
export interface ExperimentInfo {
  format: typeof EXPERIMENT_FORMAT;
  name?: string;
  command?: string;
  /** The experiment YAML it ran. */
  file?: string;
  seeds?: number[];
  methods?: ExperimentMethod[];
  machine?: { cpu?: string; cores?: number; kernels?: string; node?: string; [k: string]: unknown };
  runs?: ExperimentRunInfo[];
  /** Base models pretrained for the grid (one per seed), with their pretraining seconds and the
   * targets of their own checks that they missed (absent in records made before 2026-11-26). */
  pretrained?: { dir?: string; seconds?: number; missed?: TargetValue[] }[];
  /** Wall-clock seconds of the whole grid so far (of its last invocation in records made before 2026-11-23). */
  wallSeconds?: number;
}

export interface DiversityCell {
  seat: string;
  card?: string | number;
  samples?: number;
  entropyBits: number;
  firstActionEntropyBits?: number;
  distribution?: Record<string, number>;
  /** Share of games with an invalid answer. */
  invalidRate?: number;
}

/** One diversity measurement (`mage diversity`). */
export interface DiversityFile {
  path: string;
  /** The method it measured (`pretrained` for the base model), from the file name or `policy`. */
  label: string;
  seed: number | null;
  policy?: string;
  game?: string;
  opponent?: string;
  samples?: number;
  cells: DiversityCell[];
  meanEntropyBits: number;
  /** Mean entropy of the first action alone (from the summary, else the cells). */
  meanFirstActionEntropyBits?: number;
  /** Mean of the cells' invalid-answer rates, when they carry one. */
  invalidRate?: number;
  bySeat: { first?: number; second?: number };
}

/** One Kuhn exploitability measurement of a run's final model (`mage exploitability --out`). */
export interface ExploitabilityFile {
  path: string;
  /** The method it measured, from the file name. */
  label: string;
  seed: number | null;
  exploitability: number;
  nashConv?: number;
  samples?: number;
}

export interface Experiment {
  name: string;
  dir: string;
  info: ExperimentInfo | null;
  /** Sorted by game, method name, seed. */
  runs: LoadedSummary[];
  diversity: DiversityFile[];
  /** Kuhn exploitability of each run's final model (the grid's `exploitability`), by label and seed. */
  exploitability?: ExploitabilityFile[];
}

export interface ExperimentsLoad {
  experiments: Experiment[];
  /** Skipped files and duplicates, one line each. */
  notes: string[];
}

function jsonFiles(dir: string, out: string[]): void {
  for (const e of resultEntries(dir)) {
    if (e.isDirectory) jsonFiles(e.path, out);
    else if (e.isJson) out.push(e.path);
  }
}

function finite(x: unknown): number | undefined {
  return typeof x === "number" && Number.isFinite(x) ? x : undefined;
}

/** `<label>-s<seed>.json` → label and seed. */
export function labelFromFileName(path: string): { label: string; seed: number | null } {
  const base = basename(path).replace(/\.json$/i, "");
  const m = /^(.*)-s(\d+)$/.exec(base);
  return m ? { label: m[1], seed: Number(m[2]) } : { label: base, seed: null };
}

function toDiversity(path: string, d: Record<string, unknown>): DiversityFile | string {
  const cellsRaw = Array.isArray(d.cells) ? d.cells : [];
  const cells: DiversityCell[] = [];
  for (const c of cellsRaw) {
    if (c === null || typeof c !== "object") continue;
    const o = c as Record<string, unknown>;
    const e = finite(o.entropyBits);
    if (e === undefined) continue;
    cells.push({
      seat: typeof o.seat === "string" ? o.seat : "none",
      ...(typeof o.card === "string" || typeof o.card === "number" ? { card: o.card } : {}),
      ...(finite(o.samples) !== undefined ? { samples: finite(o.samples) } : {}),
      entropyBits: e,
      ...(finite(o.firstActionEntropyBits) !== undefined
        ? { firstActionEntropyBits: finite(o.firstActionEntropyBits) }
        : {}),
      ...(finite(o.invalidRate) !== undefined ? { invalidRate: finite(o.invalidRate) } : {}),
    });
  }
  const summary = (d.summary ?? {}) as Record<string, unknown>;
  const bySeatRaw = (summary.bySeat ?? {}) as Record<string, unknown>;
  let mean = finite(summary.meanEntropyBits);
  if (mean === undefined && cells.length > 0)
    mean = cells.reduce((a, c) => a + c.entropyBits, 0) / cells.length;
  if (mean === undefined) return "a diversity file without entropies";
  const fromName = labelFromFileName(path);
  const seatMean = (seat: string) => {
    const v = finite(bySeatRaw[seat]);
    if (v !== undefined) return v;
    const list = cells.filter((c) => c.seat === seat);
    return list.length > 0 ? list.reduce((a, c) => a + c.entropyBits, 0) / list.length : undefined;
  };
  const meanOf = (xs: (number | undefined)[]) => {
    const ok = xs.filter((x): x is number => x !== undefined);
    return ok.length > 0 ? ok.reduce((a, b) => a + b, 0) / ok.length : undefined;
  };
  const firstAction =
    finite(summary.meanFirstActionEntropyBits) ?? meanOf(cells.map((c) => c.firstActionEntropyBits));
  const invalid = meanOf(cells.map((c) => c.invalidRate));
  const first = seatMean("first");
  const second = seatMean("second");
  return {
    path,
    label: fromName.label,
    seed: fromName.seed ?? finite(d.seed) ?? null,
    ...(typeof d.policy === "string" ? { policy: d.policy } : {}),
    ...(typeof d.game === "string" ? { game: d.game } : {}),
    ...(typeof d.opponent === "string" ? { opponent: d.opponent } : {}),
    ...(finite(d.samples) !== undefined ? { samples: finite(d.samples) } : {}),
    cells,
    meanEntropyBits: mean,
    ...(firstAction !== undefined ? { meanFirstActionEntropyBits: firstAction } : {}),
    ...(invalid !== undefined ? { invalidRate: invalid } : {}),
    bySeat: { ...(first !== undefined ? { first } : {}), ...(second !== undefined ? { second } : {}) },
  };
}

function toInfo(d: Record<string, unknown>): ExperimentInfo {
  const str = (x: unknown) => (typeof x === "string" ? x : undefined);
  const info: ExperimentInfo = { format: EXPERIMENT_FORMAT };
  if (str(d.name)) info.name = str(d.name);
  if (str(d.command)) info.command = str(d.command);
  if (str(d.file)) info.file = str(d.file);
  if (Array.isArray(d.seeds)) info.seeds = d.seeds.filter((s): s is number => finite(s) !== undefined);
  if (Array.isArray(d.methods)) {
    info.methods = d.methods.flatMap((m) => {
      if (m === null || typeof m !== "object") return [];
      const o = m as Record<string, unknown>;
      return typeof o.method === "string"
        ? [{ method: o.method, ...(str(o.config) ? { config: str(o.config) } : {}), set: o.set }]
        : [];
    });
  }
  if (d.machine !== null && typeof d.machine === "object")
    info.machine = d.machine as ExperimentInfo["machine"];
  if (Array.isArray(d.runs)) {
    info.runs = d.runs.flatMap((r) => {
      if (r === null || typeof r !== "object") return [];
      const o = r as Record<string, unknown>;
      if (typeof o.method !== "string" || finite(o.seed) === undefined) return [];
      return [
        {
          method: o.method,
          seed: o.seed as number,
          ...(str(o.status) ? { status: str(o.status) } : {}),
          ...(finite(o.wallSeconds) !== undefined ? { wallSeconds: o.wallSeconds as number } : {}),
        },
      ];
    });
  }
  if (Array.isArray(d.pretrained)) {
    info.pretrained = d.pretrained.flatMap((p) => {
      if (p === null || typeof p !== "object") return [];
      const o = p as Record<string, unknown>;
      return [
        {
          ...(str(o.dir) ? { dir: str(o.dir) } : {}),
          ...(finite(o.seconds) !== undefined ? { seconds: o.seconds as number } : {}),
          ...missedTargetsOf(o.targets),
        },
      ];
    });
  }
  // Older records hold only the last invocation's time.
  const wall = finite(d.totalWallSeconds) ?? finite(d.wallSeconds);
  if (wall !== undefined) info.wallSeconds = wall;
  return info;
}

function missedTargetsOf(targets: unknown): { missed?: TargetValue[] } {
  const missed = (targets as { missed?: unknown } | null | undefined)?.missed;
  if (!Array.isArray(missed)) return {};
  return { missed: missed.map(parseTargetValue).filter((t): t is TargetValue => t !== null) };
}

function toExploitability(path: string, d: Record<string, unknown>): ExploitabilityFile | string {
  const exploitability = finite(d.exploitability);
  if (exploitability === undefined) return "an exploitability file without a finite exploitability";
  const { label, seed } = labelFromFileName(path);
  const nashConv = finite(d.nashConv);
  const samples = finite(d.samples);
  return {
    path,
    label,
    seed,
    exploitability,
    ...(nashConv !== undefined ? { nashConv } : {}),
    ...(samples !== undefined ? { samples } : {}),
  };
}

function loadOne(name: string, dir: string, notes: string[]): Experiment {
  const files: string[] = [];
  jsonFiles(dir, files);
  const runs: LoadedSummary[] = [];
  const diversity: DiversityFile[] = [];
  const exploitability: ExploitabilityFile[] = [];
  let info: ExperimentInfo | null = null;
  const seen = new Map<string, string>();
  for (const file of files) {
    const parsed = parseSummaryFile(file);
    if (parsed.ok) {
      const s = parsed.summary;
      const key = `${s.game}\u0000${s.name}\u0000${s.seed}`;
      const first = seen.get(key);
      if (first !== undefined) {
        notes.push(
          `skipped ${file}: a second summary of ${s.name} seed ${s.seed} (${s.game}); kept ${first}`,
        );
        continue;
      }
      seen.set(key, file);
      runs.push({ path: file, summary: s });
    } else if (parsed.companion?.format === EXPERIMENT_FORMAT) {
      if (info === null) info = toInfo(parsed.companion.data);
      else notes.push(`skipped ${file}: a second experiment file in ${dir}`);
    } else if (parsed.companion?.format === DIVERSITY_FORMAT) {
      const d = toDiversity(file, parsed.companion.data);
      if (typeof d === "string") notes.push(`skipped ${file}: ${d}`);
      else diversity.push(d);
    } else if (parsed.companion?.format === EXPLOITABILITY_FORMAT) {
      const x = toExploitability(file, parsed.companion.data);
      if (typeof x === "string") notes.push(`skipped ${file}: ${x}`);
      else exploitability.push(x);
    } else {
      notes.push(`skipped ${file}: ${parsed.why}`);
    }
  }
  runs.sort((a, b) => {
    const s = a.summary;
    const t = b.summary;
    if (s.game !== t.game) return s.game < t.game ? -1 : 1;
    if (s.name !== t.name) return s.name < t.name ? -1 : 1;
    return s.seed - t.seed;
  });
  diversity.sort((a, b) =>
    a.label !== b.label ? (a.label < b.label ? -1 : 1) : (a.seed ?? -1) - (b.seed ?? -1),
  );
  // The folder names the experiment: a grid moved aside (renamed) keeps the name it ran under in
  // `info.name`, and the report says so rather than showing two experiments of one name.
  exploitability.sort((a, b) =>
    a.label !== b.label ? (a.label < b.label ? -1 : 1) : (a.seed ?? -1) - (b.seed ?? -1),
  );
  return { name, dir, info, runs, diversity, ...(exploitability.length > 0 ? { exploitability } : {}) };
}

/** Whether DIR looks like an experiments folder: an experiment.json in it or one level down. */
export function isExperimentsFolder(dir: string): boolean {
  const abs = resolve(dir);
  try {
    if (!statSync(abs).isDirectory()) return false;
  } catch {
    return false;
  }
  if (existsSync(join(abs, "experiment.json"))) return true;
  try {
    return readdirSync(abs).some((n) => !n.startsWith(".") && existsSync(join(abs, n, "experiment.json")));
  } catch {
    return false;
  }
}

/**
 * Loads an experiments folder. DIR is one experiment when it holds JSON files directly (summaries
 * or experiment.json); otherwise every sub-folder is one experiment (sorted by name). Throws a
 * UsageError when DIR cannot be read or holds no run summary at all.
 */
export function loadExperiments(root: string): ExperimentsLoad {
  const abs = resolve(root);
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(abs);
  } catch (err) {
    throw new UsageError(`cannot read ${root}: ${(err as Error).message}`);
  }
  if (!st.isDirectory()) throw new UsageError(`${root} is not a directory (give the experiments folder)`);
  const notes: string[] = [];
  const entries = resultEntries(abs);
  const direct = entries.filter((e) => e.isJson);
  const experiments: Experiment[] = [];
  if (direct.length > 0) {
    experiments.push(loadOne(basename(abs), abs, notes));
  } else {
    for (const entry of entries) {
      if (!entry.isDirectory) continue;
      const e = loadOne(entry.name, entry.path, notes);
      if (e.runs.length === 0 && e.info === null && e.diversity.length === 0) continue;
      experiments.push(e);
    }
  }
  if (!experiments.some((e) => e.runs.length > 0)) {
    const detail = notes.length > 0 ? ` (${notes.join("; ")})` : "";
    throw new UsageError(
      `no run summaries found under ${root}${detail}; expected ${root}/<experiment>/<method>-s<seed>.json`,
    );
  }
  return { experiments, notes };
}
