/** Median of timing samples (the upper middle for an even count), for the benchmark sections. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}
