/** Numbers and tables as the reports print them. */

export const DASH = "–";

export function formatPercent(x: number, decimals = 1): string {
  return Number.isFinite(x) ? `${(100 * x).toFixed(decimals)}%` : DASH;
}

/** A score (chips, game points): signed, 3 decimals. */
export function formatScore(x: number): string {
  if (!Number.isFinite(x)) return DASH;
  const t = x.toFixed(3);
  if (/^-0\.0+$/.test(t)) return t.slice(1);
  return x >= 0 ? `+${t}` : t;
}

/** `mean [lo, hi]`, percentages for rates (the bracket without the % sign), 3 decimals for scores. */
export function formatEstimate(e: { mean: number; lo: number; hi: number }, kind: "rate" | "score"): string {
  if (!Number.isFinite(e.mean)) return DASH;
  if (kind === "rate") {
    const bracket =
      Number.isFinite(e.lo) && Number.isFinite(e.hi)
        ? ` [${(100 * e.lo).toFixed(1)}, ${(100 * e.hi).toFixed(1)}]`
        : "";
    return `${formatPercent(e.mean)}${bracket}`;
  }
  const bracket =
    Number.isFinite(e.lo) && Number.isFinite(e.hi) ? ` [${formatScore(e.lo)}, ${formatScore(e.hi)}]` : "";
  return `${formatScore(e.mean)}${bracket}`;
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return DASH;
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  return `${m}m ${String(sec).padStart(2, "0")}s`;
}

/** Learning rates and similar small numbers: 1e-4, 3e-4, 1.5e-4, 0.01. */
export function formatSmall(x: number | undefined): string {
  if (x === undefined || !Number.isFinite(x)) return DASH;
  if (x !== 0 && Math.abs(x) < 0.001) {
    const [m, e] = x.toExponential().split("e");
    return `${Number(Number(m).toPrecision(3))}e${Number(e)}`;
  }
  return String(Number(x.toPrecision(3)));
}

function cellText(s: string): string {
  return s.replace(/\|/g, "\\|").replace(/\r?\n/g, " ");
}

export function table(
  head: readonly string[],
  rows: readonly (readonly string[])[],
  align?: readonly string[],
): string {
  const sep = head.map((_, i) => align?.[i] ?? "---");
  return [head, sep, ...rows].map((r) => `| ${r.map(cellText).join(" | ")} |`).join("\n");
}
