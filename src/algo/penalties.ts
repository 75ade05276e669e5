/**
 * Penalties applied to a row's episode-level score (never to its step return, as the reference).
 */

export interface PenaltyOptions {
  /** Subtracted when the row's action (or reflection) was invalid. */
  invalidActionCoef: number;
  /** Maximum length penalty; 0 turns it off. */
  lengthCoef: number;
  /** The response-length limit L_max; the penalty grows linearly from L_max/2 to L_max. */
  maxResponseTokens: number;
}

export function lengthPenalty(length: number, coef: number, maxTokens: number): number {
  if (coef === 0) return 0;
  const soft = maxTokens / 2;
  if (length <= soft) return 0;
  if (length >= maxTokens) return coef;
  return (coef * (length - soft)) / (maxTokens - soft);
}

export function penalisedScore(
  score: number,
  valid: boolean,
  responseTokens: number,
  opts: PenaltyOptions,
): number {
  return (
    score -
    (valid ? 0 : opts.invalidActionCoef) -
    lengthPenalty(responseTokens, opts.lengthCoef, opts.maxResponseTokens)
  );
}
