/**
 * A one-line progress bar with ETA and current metrics, written to stderr. On a terminal it
 * redraws in place; elsewhere (CI, pipes) it prints a plain line at most every `plainEveryMs`.
 */
export interface ProgressOptions {
  label: string;
  total: number;
  stream?: NodeJS.WriteStream;
  width?: number;
  plainEveryMs?: number;
  /** Clock for tests. */
  now?: () => number;
}

function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "--:--";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const mm = String(m).padStart(2, "0");
  const ss = String(sec).padStart(2, "0");
  return h > 0 ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

export class ProgressBar {
  private readonly stream: NodeJS.WriteStream;
  private readonly now: () => number;
  private readonly start: number;
  private lastPlain = Number.NEGATIVE_INFINITY;
  private done = 0;
  private lastLine = "";

  constructor(private readonly o: ProgressOptions) {
    this.stream = o.stream ?? process.stderr;
    this.now = o.now ?? (() => performance.now());
    this.start = this.now();
  }

  /** The text of the bar for `done` of `total` with the given metrics. */
  line(done: number, metrics: Record<string, string | number> = {}): string {
    const total = Math.max(this.o.total, 1);
    const frac = Math.min(done / total, 1);
    const width = this.o.width ?? 24;
    const filled = Math.round(frac * width);
    const elapsed = (this.now() - this.start) / 1000;
    const eta = done > 0 ? (elapsed / done) * (total - done) : Number.NaN;
    const parts = Object.entries(metrics).map(
      ([k, v]) => `${k} ${typeof v === "number" ? formatNumber(v) : v}`,
    );
    return `${this.o.label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${this.o.total} ${formatDuration(elapsed)} eta ${formatDuration(eta)}${parts.length ? `  ${parts.join("  ")}` : ""}`;
  }

  update(done: number, metrics: Record<string, string | number> = {}): void {
    this.done = done;
    this.lastLine = this.line(done, metrics);
    if (this.stream.isTTY) {
      this.stream.write(`\r\x1b[2K${this.lastLine}`);
    } else {
      const t = this.now();
      if (t - this.lastPlain >= (this.o.plainEveryMs ?? 10_000) || done >= this.o.total) {
        this.lastPlain = t;
        this.stream.write(`${this.lastLine}\n`);
      }
    }
  }

  /** Prints a message above the bar without breaking it. */
  log(message: string): void {
    if (this.stream.isTTY) this.stream.write(`\r\x1b[2K${message}\n${this.lastLine}`);
    else this.stream.write(`${message}\n`);
  }

  finish(): void {
    if (this.stream.isTTY) this.stream.write("\n");
    else if (this.done < this.o.total && this.lastLine) this.stream.write(`${this.lastLine}\n`);
  }
}

export function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(1);
  if (a >= 0.01) return v.toFixed(3);
  return v.toExponential(2);
}
