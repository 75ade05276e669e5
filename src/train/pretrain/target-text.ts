/** How a pretraining target reads in logs and reports (pure, so `mage report` can use it without the trainer). */

export interface TargetValue {
  name: string;
  value: number;
  threshold: number;
}

/** A `{name, value, threshold}` read from JSON, or null when a field is missing or not finite. */
export function parseTargetValue(x: unknown): TargetValue | null {
  const o = (x ?? {}) as Record<string, unknown>;
  const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
  if (typeof o.name !== "string" || !finite(o.value) || !finite(o.threshold)) return null;
  return { name: o.name, value: o.value, threshold: o.threshold };
}

/** "84.7% (target ≥ 95.0%)", or bits with two decimals for the entropy checks. */
export function formatTargetValue(t: TargetValue): string {
  const bits = t.name.includes("bits");
  const show = (x: number) => (bits ? x.toFixed(2) : `${(100 * x).toFixed(1)}%`);
  return `${show(t.value)} (target ≥ ${show(t.threshold)})`;
}

/** "play answers well-formed: 91.0% (target ≥ 95.0%); …" */
export function formatMissedTargets(missed: readonly TargetValue[]): string {
  return missed.map((m) => `${m.name}: ${formatTargetValue(m)}`).join("; ");
}
