import { type Policy, type PromptTokenCounts, reuseSince } from "../policy/types.js";
import type { TrialRecord } from "../rollout/types.js";
import { ProgressBar } from "../train/progress.js";
import type { EvalCell } from "./cell.js";

/**
 * How far an evaluation has come, for a progress display. Every cell's trials run side by side
 * (one batched rollout), so trials finish mostly at attempt boundaries; the count of answers
 * received moves in between, which is what tells a slow model from a hung one.
 */
export interface EvalProgress {
  /** Finished trials over all cells, and how many there are. */
  done: number;
  total: number;
  cells: readonly CellProgress[];
  /** Model answers received so far (play and reflect calls, every trial). */
  answers: number;
  /** Valid share of the play turns of the finished trials; NaN until one of them played a turn. */
  validRate: number;
  /**
   * Share of the prompt tokens fed so far that the backend took from its store of earlier samples
   * (`Policy.promptTokens`); NaN when the policy does not tell or nothing was fed yet.
   */
  promptReuse: number;
}

export interface CellProgress {
  cell: EvalCell;
  done: number;
  total: number;
}

/** Counts what an evaluation has finished; `snapshot` is what `onProgress` receives. */
export class ProgressTally {
  private readonly doneByCell: number[];
  private answers = 0;
  private turns = 0;
  private invalidTurns = 0;

  private readonly promptTokensAtStart: PromptTokenCounts | null;

  constructor(
    private readonly cells: readonly EvalCell[],
    private readonly trialsPerCell: number,
    private readonly policy?: Policy,
  ) {
    this.doneByCell = cells.map(() => 0);
    this.promptTokensAtStart = policy?.promptTokens?.() ?? null;
  }

  /** A trial ended; one cut short by a failing backend (`aborted`) is not done and is left out. */
  trialEnded(cellIndex: number, trial: TrialRecord): void {
    if (trial.aborted) return;
    this.doneByCell[cellIndex] += 1;
    for (const a of trial.attempts) {
      this.turns += a.turns;
      this.invalidTurns += a.invalidActions;
    }
  }

  answered(count: number): void {
    this.answers += count;
  }

  snapshot(): EvalProgress {
    return {
      done: this.doneByCell.reduce((a, b) => a + b, 0),
      total: this.cells.length * this.trialsPerCell,
      cells: this.cells.map((cell, i) => ({ cell, done: this.doneByCell[i], total: this.trialsPerCell })),
      answers: this.answers,
      validRate: this.turns > 0 ? 1 - this.invalidTurns / this.turns : Number.NaN,
      promptReuse: this.promptReuse(),
    };
  }

  private promptReuse(): number {
    return this.policy ? reuseSince(this.policy, this.promptTokensAtStart) : Number.NaN;
  }
}

/** The same policy, telling `onAnswers` how many answers each generate call returned. */
export function countingAnswers(policy: Policy, onAnswers: (count: number) => void): Policy {
  const counted: Policy = {
    name: policy.name,
    generate: async (requests) => {
      const generations = await policy.generate(requests);
      onAnswers(generations.length);
      return generations;
    },
  };
  if (policy.contextError) counted.contextError = (request) => policy.contextError!(request);
  if (policy.promptTokens) counted.promptTokens = () => policy.promptTokens!();
  return counted;
}

export interface EvalProgressBarOptions {
  label: string;
  stream?: NodeJS.WriteStream;
  /** Off a terminal: the most often a line is written (default 10 s, as in training). */
  plainEveryMs?: number;
  /** How often the bar is redrawn without news, so its clock moves (default 1 s; 0: never). */
  tickMs?: number;
  /** Clock for tests. */
  now?: () => number;
}

/**
 * An evaluation's progress as a `ProgressBar` on stderr: trials done of all, elapsed and ETA,
 * answers received, the valid-answer rate, and each cell's trials (as many as fit a terminal line).
 */
export class EvalProgressBar {
  private bar: ProgressBar | null = null;
  private latest: EvalProgress | null = null;
  private readonly ticker: NodeJS.Timeout | null;
  private finished = false;

  constructor(private readonly o: EvalProgressBarOptions) {
    const tickMs = o.tickMs ?? 1000;
    this.ticker = tickMs > 0 ? setInterval(() => this.tick(), tickMs) : null;
    this.ticker?.unref();
  }

  /** The `onProgress` callback of `evaluate` (bound, so it can be passed as it is). */
  readonly update = (progress: EvalProgress): void => {
    if (this.finished) return;
    this.latest = progress;
    this.draw();
  };

  /** Ends the bar's line; later calls do nothing. */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.ticker) clearInterval(this.ticker);
    this.bar?.finish();
  }

  /**
   * A redraw for the clock only. Once every trial is done the last line stands: off a terminal,
   * each redraw of a finished bar would print it again.
   */
  private tick(): void {
    if (this.latest !== null && this.latest.done < this.latest.total) this.draw();
  }

  private draw(): void {
    const p = this.latest;
    if (p === null) return;
    const bar = this.barFor(p.total);
    const overall = overallMetrics(p);
    const room = this.columns() - 1 - bar.line(p.done, overall).length;
    bar.update(p.done, { ...overall, ...cellMetrics(p.cells, room) });
  }

  private barFor(total: number): ProgressBar {
    this.bar ??= new ProgressBar({
      label: this.o.label,
      total,
      ...(this.o.stream ? { stream: this.o.stream } : {}),
      ...(this.o.plainEveryMs !== undefined ? { plainEveryMs: this.o.plainEveryMs } : {}),
      ...(this.o.now ? { now: this.o.now } : {}),
    });
    return this.bar;
  }

  /** A terminal's width; lines written elsewhere may be as long as they need. */
  private columns(): number {
    const stream = this.o.stream ?? process.stderr;
    return stream.isTTY ? (stream.columns ?? 80) : Number.POSITIVE_INFINITY;
  }
}

function overallMetrics(p: EvalProgress): Record<string, string | number> {
  return {
    answers: p.answers,
    ...(Number.isFinite(p.validRate) ? { valid: `${(100 * p.validRate).toFixed(1)}%` } : {}),
    ...(Number.isFinite(p.promptReuse) ? { reuse: `${(100 * p.promptReuse).toFixed(0)}%` } : {}),
  };
}

function cellName(cell: EvalCell): string {
  return [cell.opponent, cell.seat].filter((x) => x !== null).join(" ");
}

/**
 * Each cell's `done/total`, in cell order, within `room` characters; the cells that do not fit are
 * counted instead (a terminal line that wraps cannot be redrawn in place). One cell says nothing
 * the overall count does not.
 */
export function cellMetrics(cells: readonly CellProgress[], room: number): Record<string, string> {
  if (cells.length < 2) return {};
  const entries = cells.map((c): [string, string] => [cellName(c.cell), `${c.done}/${c.total}`]);
  // As ProgressBar writes a metric: two spaces, the key, a space, the value.
  const widthOf = ([key, value]: [string, string]) => 2 + key.length + 1 + value.length;
  const widthShowing = (n: number) =>
    entries.slice(0, n).reduce((w, e) => w + widthOf(e), 0) +
    (n < entries.length ? widthOf(moreCells(entries.length - n)) : 0);
  let shown = entries.length;
  while (shown > 0 && widthShowing(shown) > room) shown--;
  if (widthShowing(shown) > room) return {};
  const kept = entries.slice(0, shown);
  if (shown < entries.length) kept.push(moreCells(entries.length - shown));
  return Object.fromEntries(kept);
}

function moreCells(count: number): [string, string] {
  return [`+${count}`, count === 1 ? "more cell" : "more cells"];
}
