/** How a pretraining target reads in logs and reports (pure, so `mage report` can use it without the trainer). */

export interface TargetValue {
  name: string;
  value: number;
  threshold: number;
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
