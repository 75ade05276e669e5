import type { CellResult } from "../evaluate/evaluate.js";
import type { MageConfig } from "../train/config.js";
import type { EvalSnapshot } from "../train/summary.js";
import type { BootstrapEstimate, HierarchicalBootstrap, SeedMetrics } from "./bootstrap.js";
import type { Experiment } from "./experiments.js";
import type { LoadedSummary } from "./load.js";
import { incompleteRun, type LeftOutSeed, type PairedEstimate, pairingProblem } from "./pairing.js";

/**
 * The results report's view of the data: methods (runs of one experiment sharing a game and a
 * name, one per seed), evaluation cells, and the per-seed metrics the bootstrap resamples.
 */

/** The main comparison of the results issue, in report order. */
export const MAIN_METHODS: readonly string[] = ["mage", "lamer", "grpo", "gigpo", "zeroshot", "reflexion"];
/** MAGE's ablations (Kuhn; the coin collector's memory modes), in report order. */
export const ABLATION_METHODS: readonly string[] = [
  "mage-history",
  "mage-both",
  "mage-task-scope",
  "mage-gamma0",
  "mage-gamma0.9",
  "mage-wide-pool",
  "lamer-agent-scope",
  "mage-kl1",
];
export const MAGE = "mage";
export const LAMER = "lamer";
/** Single-episode RL baselines. */
export const RL_BASELINES: readonly string[] = ["grpo", "gigpo"];

export const METHOD_DESCRIPTIONS: Record<string, string> = {
  mage: "MAGE: final-episode (differential) reward, normalisation per agent (task × opponent × seat), reflection",
  lamer: "LaMer-style: per-attempt reward, task scope",
  grpo: "single-episode RL (GRPO)",
  gigpo: "single-episode RL (GiGPO)",
  zeroshot: "pretrained model, no training, no reflection",
  reflexion: "pretrained model, no training, Reflexion-style prompting",
  "mage-history": "MAGE with the history of past attempts instead of reflections",
  "mage-both": "MAGE with both the history of past attempts and reflections",
  "mage-task-scope": "MAGE with task-scope instead of agent-scope normalisation",
  "mage-gamma0": "MAGE with γ_traj = 0",
  "mage-gamma0.9": "MAGE with γ_traj = 0.9",
  "mage-wide-pool": "MAGE trained against the wider pool (adds bots that call bluffs and bet strong hands)",
  "lamer-agent-scope":
    "MAGE with LaMer's per-attempt reward instead of the differential one (agent scope kept)",
  "mage-kl1": "MAGE with KL weight 1.0 (the stand-in presets') instead of the grid's",
};

/**
 * What a run was trained with, read from its config, e.g. "differential credit, γ_step 0.95,
 * γ_traj 0.9, GiGPO advantages over task scope, 3 attempts, reflection_only": the grid's own
 * settings next to the method's generic description (a preset's γ_traj differs by game).
 */
export function methodSettings(config: MageConfig): string | null {
  // Summaries written by older versions may lack fields: say nothing rather than guess.
  const { task, train, credit, advantage } = config as Partial<MageConfig>;
  if (task?.attempts === undefined || task.reflection === undefined) return null;
  const play = (attempts: number, reflection: string) =>
    `${attempts} attempt${attempts === 1 ? "" : "s"}` +
    (attempts > 1 ? `, ${reflection === "none" ? "no reflection" : reflection}` : "");
  const trained = play(task.attempts, task.reflection);
  const evalAttempts = config.eval?.attempts ?? task.attempts;
  const evalReflection = config.eval?.reflection ?? task.reflection;
  const evaluated = play(evalAttempts, evalReflection);
  if (train?.updates === false) return `no training; evaluated with ${evaluated}`;
  if (credit?.mode === undefined || advantage?.scope === undefined) return null;
  const estimator = advantage.estimator === "gigpo" ? "GiGPO" : "GRPO";
  return (
    `${credit.mode} credit, γ_step ${credit.stepGamma}, γ_traj ${credit.trajGamma}, ` +
    `${estimator} advantages over ${advantage.scope} scope, ${trained}` +
    (evaluated !== trained ? `; evaluated with ${evaluated}` : "")
  );
}

export function methodRank(name: string): number {
  const i = MAIN_METHODS.indexOf(name);
  if (i >= 0) return i;
  const j = ABLATION_METHODS.indexOf(name);
  if (j >= 0) return MAIN_METHODS.length + j;
  return MAIN_METHODS.length + ABLATION_METHODS.length;
}

export function compareMethodNames(a: string, b: string): number {
  const d = methodRank(a) - methodRank(b);
  if (d !== 0) return d;
  return a < b ? -1 : a > b ? 1 : 0;
}

export interface MethodRuns {
  experiment: string;
  game: string;
  name: string;
  /** One run per seed, ascending seeds. */
  runs: LoadedSummary[];
}

/** One experiment's runs of one game, grouped by method (report order). */
export interface ExperimentGame {
  experiment: Experiment;
  game: string;
  methods: MethodRuns[];
}

export function experimentGames(e: Experiment): ExperimentGame[] {
  const games = [...new Set(e.runs.map((r) => r.summary.game))].sort();
  return games.map((game) => {
    const byName = new Map<string, LoadedSummary[]>();
    for (const r of e.runs) {
      if (r.summary.game !== game) continue;
      const list = byName.get(r.summary.name) ?? [];
      list.push(r);
      byName.set(r.summary.name, list);
    }
    const methods = [...byName.entries()]
      .sort((a, b) => compareMethodNames(a[0], b[0]))
      .map(([name, runs]) => ({
        experiment: e.name,
        game,
        name,
        runs: [...runs].sort((x, y) => x.summary.seed - y.summary.seed),
      }));
    return { experiment: e, game, methods };
  });
}

/**
 * Which evaluation of a run: the final one, test-time scaling, the harder held-out set, or the
 * final evaluation's cells and seeds replayed with no memory between attempts (`independentEval`:
 * the same model retried independently).
 */
export type EvalSource = "final" | "scaling" | "harder" | "independent";

export function snapshotOf(r: LoadedSummary, source: EvalSource): EvalSnapshot | null {
  const s = r.summary;
  const snap = {
    final: s.finalEval,
    scaling: s.scalingEval,
    harder: s.harderEval,
    independent: s.independentEval,
  }[source];
  return snap ?? null;
}

/** An opponent spec names `base` ("cfr" matches "cfr" and "cfr:1000", not "cfr-mixed"). */
export function sameOpponent(spec: string, base: string): boolean {
  if (spec === base) return true;
  const colon = (s: string) => (s.includes(":") ? s.slice(0, s.indexOf(":")) : s);
  // "mcts:100" names exactly that; "cfr" matches any cfr:N.
  if (base.includes(":")) return false;
  return colon(spec) === base;
}

export interface CellRef {
  opponent: string;
  seat: string;
  unseen: boolean;
}

export function cellKey(c: { opponent: string; seat: string }): string {
  return `${c.opponent}\u0000${c.seat}`;
}

export function cellLabel(c: CellRef): string {
  if (c.opponent === "none" && c.seat === "none") return "all tasks";
  const parts = [`vs ${c.opponent}`];
  if (c.seat !== "none") parts.push(`agent ${c.seat}`);
  parts.push(c.unseen ? "unseen" : "seen");
  return parts.join(", ");
}

/** The evaluation cells of these methods in first-seen order (unseen cells first). */
export function cellsOf(methods: readonly MethodRuns[], source: EvalSource): CellRef[] {
  const out = new Map<string, CellRef>();
  for (const m of methods) {
    for (const r of m.runs) {
      for (const c of snapshotOf(r, source)?.cells ?? []) {
        const key = cellKey(c);
        if (!out.has(key)) out.set(key, { opponent: c.opponent, seat: c.seat, unseen: c.unseen });
      }
    }
  }
  const list = [...out.values()];
  return [...list.filter((c) => c.unseen), ...list.filter((c) => !c.unseen)];
}

/** The cell of a snapshot facing `opponent` (a base name or a full spec) in `seat` ("any" for the first). */
export function findCell(
  snap: EvalSnapshot | null | undefined,
  opponent: string,
  seat: string,
): CellResult | undefined {
  const cells = snap?.cells ?? [];
  return (
    cells.find((c) => c.opponent === opponent && (seat === "any" || c.seat === seat)) ??
    cells.find((c) => sameOpponent(c.opponent, opponent) && (seat === "any" || c.seat === seat))
  );
}

/** Per-seed metrics of a method in one cell (seeds without that cell are left out). */
export function seedMetrics(
  m: MethodRuns,
  opponent: string,
  seat: string,
  source: EvalSource,
): SeedMetrics[] {
  return m.runs.flatMap((r) => {
    const c = findCell(snapshotOf(r, source), opponent, seat);
    return c ? [{ seed: r.summary.seed, metrics: c.metrics }] : [];
  });
}

export function findMethod(methods: readonly MethodRuns[], name: string): MethodRuns | undefined {
  return methods.find((m) => m.name === name);
}

/** A method's statistic in a cell, bootstrapped (NaN estimate when it has no data there). */
export function methodEstimate(
  bs: HierarchicalBootstrap,
  m: MethodRuns,
  cell: { opponent: string; seat: string },
  stat: string,
  source: EvalSource = "final",
): BootstrapEstimate {
  return bs.estimate(seedMetrics(m, cell.opponent, cell.seat, source), stat);
}

/**
 * The paired difference A − B in a cell over the seeds both have, less those where either run is
 * incomplete (pairing.ts): they are listed in `leftOut`.
 */
export function pairedDifference(
  bs: HierarchicalBootstrap,
  a: MethodRuns,
  b: MethodRuns,
  cell: { opponent: string; seat: string },
  stat: string,
  source: EvalSource = "final",
): PairedEstimate {
  const left = seedMetrics(a, cell.opponent, cell.seat, source);
  const right = seedMetrics(b, cell.opponent, cell.seat, source);
  const both = (seed: number) => left.some((s) => s.seed === seed) && right.some((s) => s.seed === seed);
  const leftOut = unpairableSeeds(a, b).filter((l) => both(l.seed));
  const kept = (list: SeedMetrics[]) => list.filter((s) => !leftOut.some((l) => l.seed === s.seed));
  return { ...bs.difference(kept(left), kept(right), stat), leftOut };
}

/**
 * The paired difference of one method's own two evaluations, `a` − `b` (e.g. "final" −
 * "independent": with memory − the same model retried independently), each seed's run paired with
 * itself. A run that `train.maxMinutes` stopped early is left out and named in `leftOut`, as in
 * `pairedDifference`: it is not the method as its grid trains it.
 */
export function withinRunDifference(
  bs: HierarchicalBootstrap,
  m: MethodRuns,
  cell: { opponent: string; seat: string },
  stat: string,
  a: EvalSource,
  b: EvalSource,
): PairedEstimate {
  const left = seedMetrics(m, cell.opponent, cell.seat, a);
  const right = seedMetrics(m, cell.opponent, cell.seat, b);
  const both = (seed: number) => left.some((s) => s.seed === seed) && right.some((s) => s.seed === seed);
  const leftOut = m.runs.flatMap(({ summary }) => {
    const why = incompleteRun(summary);
    return why && both(summary.seed) ? [{ seed: summary.seed, why }] : [];
  });
  const kept = (list: SeedMetrics[]) => list.filter((s) => !leftOut.some((l) => l.seed === s.seed));
  return { ...bs.difference(kept(left), kept(right), stat), leftOut };
}

/** A method's runs less those `train.maxMinutes` stopped early (what `withinRunDifference` keeps). */
export function completeRuns(m: MethodRuns): MethodRuns {
  return { ...m, runs: m.runs.filter((r) => incompleteRun(r.summary) === null) };
}

/** The seeds of A and B whose runs cannot be paired, with why. */
function unpairableSeeds(a: MethodRuns, b: MethodRuns): LeftOutSeed[] {
  return a.runs.flatMap(({ summary }) => {
    const partner = b.runs.find((r) => r.summary.seed === summary.seed);
    const why = partner ? pairingProblem(summary, partner.summary) : null;
    return why ? [{ seed: summary.seed, why }] : [];
  });
}

/** The RL baseline (of `RL_BASELINES` present) with the highest mean of `stat` in the cell. */
export function bestBaseline(
  bs: HierarchicalBootstrap,
  methods: readonly MethodRuns[],
  candidates: readonly string[],
  cell: { opponent: string; seat: string },
  stat: string,
): { method: MethodRuns; estimate: BootstrapEstimate } | null {
  let best: { method: MethodRuns; estimate: BootstrapEstimate } | null = null;
  for (const name of candidates) {
    const m = findMethod(methods, name);
    if (!m) continue;
    const e = methodEstimate(bs, m, cell, stat);
    if (!Number.isFinite(e.mean)) continue;
    if (best === null || e.mean > best.estimate.mean) best = { method: m, estimate: e };
  }
  return best;
}

/** Whether every seed of these metrics carries its outcome histogram. */
export function allHaveOutcomes(list: readonly SeedMetrics[]): boolean {
  return list.every((s) => s.metrics.outcomes !== undefined && Object.keys(s.metrics.outcomes).length > 0);
}
