import { UsageError } from "../core/errors.js";

/**
 * Next-token sampling from one row of logits: temperature, then top-k, then top-p
 * (the order of Hugging Face's warpers and vLLM), then an inverse-CDF draw from one
 * uniform number. The log-probability reported for the chosen token is taken under the
 * distribution actually sampled from (after temperature and truncation, renormalised),
 * so at temperature 1 without truncation it is exactly the model's log-softmax.
 *
 * Conventions:
 * - temperature 0 is greedy: the arg-max (lowest index on ties), log-prob 0 (a point mass).
 * - top-k ≤ 0 or ≥ vocabulary size keeps everything; otherwise exactly k tokens are kept,
 *   ranked by logit with ties broken towards the lower token id.
 * - top-p keeps the smallest prefix of the ranked tokens whose probability (after
 *   temperature and top-k) reaches p; at least one token is always kept; p = 1 keeps all.
 */
export interface TruncationParams {
  temperature: number;
  topK: number;
  topP: number;
}

/** Checks sampling settings, throwing a UsageError naming the field. */
export function validateSampling(p: TruncationParams & { maxTokens?: number }, where = "sampling"): void {
  if (!Number.isFinite(p.temperature) || p.temperature < 0)
    throw new UsageError(
      `${where}.temperature must be a finite number ≥ 0 (0 = greedy), got ${p.temperature}`,
    );
  if (!Number.isFinite(p.topP) || p.topP <= 0 || p.topP > 1)
    throw new UsageError(`${where}.topP must be in (0, 1] (1 = no nucleus truncation), got ${p.topP}`);
  if (!Number.isInteger(p.topK))
    throw new UsageError(`${where}.topK must be an integer (0 = no top-k truncation), got ${p.topK}`);
  if (p.maxTokens !== undefined && (!Number.isInteger(p.maxTokens) || p.maxTokens < 0))
    throw new UsageError(`${where}.maxTokens must be an integer ≥ 0, got ${p.maxTokens}`);
}

/**
 * A reusable sampler for one vocabulary size. `sample` allocates nothing; the log-prob of
 * the token it returns is left in `logprob`.
 */
export class TokenSampler {
  readonly vocabSize: number;
  /** Log-probability of the last sampled token under the distribution actually used. */
  logprob = 0;
  private readonly order: Int32Array;
  private readonly weight: Float64Array;
  private cur: Float32Array = new Float32Array(0);
  private curOff = 0;
  /** Descending logit, then ascending id: the ranking used for top-k and top-p. */
  private readonly byLogitDesc = (a: number, b: number): number => {
    const d = this.cur[this.curOff + b] - this.cur[this.curOff + a];
    return d !== 0 ? d : a - b;
  };

  constructor(vocabSize: number) {
    this.vocabSize = vocabSize;
    this.order = new Int32Array(vocabSize);
    this.weight = new Float64Array(vocabSize);
  }

  /**
   * Draws a token from `logits[off .. off + vocabSize)` with the uniform number `u` in [0, 1).
   * Returns the token id; `this.logprob` holds its log-probability.
   */
  sample(logits: Float32Array, off: number, p: TruncationParams, u: number): number {
    const V = this.vocabSize;
    if (p.temperature === 0) {
      let best = 0;
      let bv = logits[off];
      for (let i = 1; i < V; i++) {
        const x = logits[off + i];
        if (x > bv) {
          bv = x;
          best = i;
        }
      }
      this.logprob = 0;
      return best;
    }
    const kept = this.rank(logits, off, p);
    const invT = 1 / p.temperature;
    const w = this.weight;
    const max = this.maxLogit;
    if (kept === -1) {
      // No truncation: weights in token order.
      let sum = 0;
      for (let i = 0; i < V; i++) {
        const e = Math.exp((logits[off + i] - max) * invT);
        w[i] = e;
        sum += e;
      }
      let target = u * sum;
      let chosen = -1;
      for (let i = 0; i < V; i++) {
        target -= w[i];
        if (target < 0) {
          chosen = i;
          break;
        }
      }
      if (chosen < 0)
        for (let i = V - 1; i >= 0; i--)
          if (w[i] > 0) {
            chosen = i;
            break;
          }
      this.logprob = (logits[off + chosen] - max) * invT - Math.log(sum);
      return chosen;
    }
    // Truncated: weights follow the ranked order in `this.order[0 .. n)`, n already fixed by rank().
    const order = this.order;
    const sum = this.keptSum;
    let target = u * sum;
    let j = kept - 1;
    for (let i = 0; i < kept; i++) {
      target -= w[i];
      if (target < 0) {
        j = i;
        break;
      }
    }
    const chosen = order[j];
    this.logprob = (logits[off + chosen] - max) * invT - Math.log(sum);
    return chosen;
  }

  /**
   * Writes the full sampling distribution (probabilities, zero for truncated tokens) into
   * `out` (length ≥ vocabSize). For tests and diagnostics; greedy gives a one-hot vector.
   */
  distribution(logits: Float32Array, off: number, p: TruncationParams, out: Float64Array): void {
    const V = this.vocabSize;
    out.fill(0, 0, V);
    if (p.temperature === 0) {
      out[this.sample(logits, off, p, 0)] = 1;
      return;
    }
    const kept = this.rank(logits, off, p);
    const invT = 1 / p.temperature;
    const max = this.maxLogit;
    if (kept === -1) {
      let sum = 0;
      for (let i = 0; i < V; i++) sum += out[i] = Math.exp((logits[off + i] - max) * invT);
      for (let i = 0; i < V; i++) out[i] /= sum;
      return;
    }
    for (let i = 0; i < kept; i++) out[this.order[i]] = this.weight[i] / this.keptSum;
  }

  private maxLogit = 0;
  private keptSum = 0;

  /**
   * Finds the max logit and, when truncating, ranks the candidates into `order`, fills
   * `weight[i]` for ranked position i and `keptSum`, and returns how many are kept.
   * Returns -1 when nothing is truncated (weights are then not filled).
   */
  private rank(logits: Float32Array, off: number, p: TruncationParams): number {
    const V = this.vocabSize;
    let max = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < V; i++) {
      const x = logits[off + i];
      if (x > max) max = x;
    }
    if (!Number.isFinite(max)) throw new Error(`sampling: logits are not finite (max ${max})`);
    this.maxLogit = max;
    const useK = p.topK > 0 && p.topK < V;
    if (!useK && p.topP >= 1) return -1;
    const order = this.order;
    let n: number;
    if (useK) {
      n = this.selectTopK(logits, off, p.topK);
    } else {
      for (let i = 0; i < V; i++) order[i] = i;
      this.cur = logits;
      this.curOff = off;
      order.sort(this.byLogitDesc);
      n = V;
    }
    const invT = 1 / p.temperature;
    const w = this.weight;
    let sum = 0;
    for (let i = 0; i < n; i++) sum += w[i] = Math.exp((logits[off + order[i]] - max) * invT);
    if (p.topP < 1) {
      const threshold = p.topP * sum;
      let cum = 0;
      for (let i = 0; i < n; i++) {
        cum += w[i];
        if (cum >= threshold) {
          n = i + 1;
          break;
        }
      }
      // Re-add in the same order so the kept sum is exactly the sum of the kept weights.
      sum = 0;
      for (let i = 0; i < n; i++) sum += w[i];
    }
    this.keptSum = sum;
    return n;
  }

  /** Puts the k best ids in `order[0 .. k)`, best first (ties: lower id first). Insertion into a sorted prefix. */
  private selectTopK(logits: Float32Array, off: number, k: number): number {
    const order = this.order;
    let n = 0;
    for (let i = 0; i < this.vocabSize; i++) {
      const x = logits[off + i];
      if (n === k) {
        // Strictly greater than the current k-th: ties keep the lower id already there.
        if (!(x > logits[off + order[k - 1]])) continue;
        n--;
      }
      let j = n;
      while (j > 0 && x > logits[off + order[j - 1]]) {
        order[j] = order[j - 1];
        j--;
      }
      order[j] = i;
      n++;
    }
    return n;
  }
}

/** Log-softmax of one logits row in float64 (the model log-prob at temperature 1). */
export function logSoftmaxAt(logits: Float32Array, off: number, n: number, id: number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < n; i++) if (logits[off + i] > max) max = logits[off + i];
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(logits[off + i] - max);
  return logits[off + id] - max - Math.log(sum);
}
