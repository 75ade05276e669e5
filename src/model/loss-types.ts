/**
 * The contract between the learner (which owns the model graph) and a training loss
 * (PPO clip, KL, entropy…), so the loss is differentiated exactly through the model.
 *
 * The learner computes, for every scored token t of a batch, the log-probability of the
 * target token and the entropy of the next-token distribution. The loss function sees
 * them as flat arrays, returns a scalar loss and its gradient with respect to each of them;
 * the learner backpropagates dLoss/dLogp and dLoss/dEntropy through the model.
 */
export interface TokenStats {
  /** log π(target_t | prefix) for every scored token, in batch order. */
  logp: Float64Array;
  /** Entropy of the next-token distribution at every scored token (nats). */
  entropy: Float64Array;
  /** Index of the sequence each scored token belongs to. */
  sequence: Int32Array;
  /** Index of each scored token within the scored tokens of its sequence. */
  position: Int32Array;
}

export interface LossResult {
  loss: number;
  dLogp: Float64Array;
  dEntropy: Float64Array;
  /** Scalars to log (e.g. clip fraction, approx KL). */
  metrics: Record<string, number>;
}

export type LossFn = (stats: TokenStats) => LossResult;
