import type { LossFn, LossResult, TokenStats } from "../model/loss-types.js";

/**
 * The PPO actor loss with dual clip, token-mean aggregation, an entropy bonus and a clamped
 * k3 KL penalty to a reference policy, written as a LossFn: it returns the exact gradient
 * with respect to each token's log-prob and entropy, which the learner backpropagates.
 */
export interface PpoLossOptions {
  clipLow: number;
  clipHigh: number;
  /** Dual-clip constant c for negative advantages (loss ≤ −A·c); ≤ 1 disables it. */
  dualClip: number;
  entropyCoef: number;
  klCoef: number;
  /** k3 values are clamped to [−klClamp, klClamp] (no gradient outside). */
  klClamp: number;
}

export const DEFAULT_PPO_OPTIONS: PpoLossOptions = {
  clipLow: 0.2,
  clipHigh: 0.2,
  dualClip: 3,
  entropyCoef: 0.001,
  klCoef: 0,
  klClamp: 10,
};

export interface PpoTokenInputs {
  /** Behaviour (rollout) log-prob of each scored token, aligned with TokenStats order. */
  oldLogp: Float64Array;
  /** Advantage of each scored token (its row's advantage). */
  advantages: Float64Array;
  /** Reference-model log-prob of each scored token, when the KL term is on. */
  refLogp?: Float64Array;
}

export interface TokenLoss {
  loss: number;
  dLogp: number;
  pgLoss: number;
  clipped: boolean;
  kl: number;
}

/** The policy-gradient part for one token: value and derivative with respect to logp. */
export function clippedPolicyTerm(
  logp: number,
  oldLogp: number,
  advantage: number,
  o: Pick<PpoLossOptions, "clipLow" | "clipHigh" | "dualClip">,
): { value: number; dLogp: number; clipped: boolean } {
  const ratio = Math.exp(logp - oldLogp);
  const unclipped = -advantage * ratio;
  const clippedRatio = Math.min(Math.max(ratio, 1 - o.clipLow), 1 + o.clipHigh);
  const clippedLoss = -advantage * clippedRatio;
  let value: number;
  let dLogp: number;
  let clipped: boolean;
  if (unclipped >= clippedLoss) {
    value = unclipped;
    dLogp = -advantage * ratio;
    clipped = false;
  } else {
    value = clippedLoss;
    dLogp = 0;
    clipped = true;
  }
  if (advantage < 0 && o.dualClip > 1) {
    const cap = -advantage * o.dualClip;
    if (value > cap) {
      value = cap;
      dLogp = 0;
      clipped = true;
    }
  }
  return { value, dLogp, clipped };
}

/** k3 estimator of KL(π‖π_ref) for one token, clamped; derivative with respect to logp. */
export function k3Kl(logp: number, refLogp: number, clamp: number): { value: number; dLogp: number } {
  const x = refLogp - logp;
  const raw = Math.exp(x) - x - 1;
  if (raw > clamp) return { value: clamp, dLogp: 0 };
  if (raw < -clamp) return { value: -clamp, dLogp: 0 };
  return { value: raw, dLogp: 1 - Math.exp(x) };
}

export function makePpoLoss(inputs: PpoTokenInputs, options: Partial<PpoLossOptions> = {}): LossFn {
  const o = { ...DEFAULT_PPO_OPTIONS, ...options };
  return (stats: TokenStats): LossResult => {
    const n = stats.logp.length;
    if (inputs.oldLogp.length !== n || inputs.advantages.length !== n) {
      throw new Error(
        `PPO loss: ${n} scored tokens but ${inputs.oldLogp.length} behaviour log-probs and ${inputs.advantages.length} advantages`,
      );
    }
    if (o.klCoef !== 0 && (!inputs.refLogp || inputs.refLogp.length !== n)) {
      throw new Error("PPO loss: klCoef is set but reference log-probs are missing or misaligned");
    }
    const dLogp = new Float64Array(n);
    const dEntropy = new Float64Array(n);
    if (n === 0)
      return {
        loss: 0,
        dLogp,
        dEntropy,
        metrics: { pg_loss: 0, clipfrac: 0, kl: 0, entropy: 0, ppo_kl: 0, ratio_dev: 0 },
      };
    let pg = 0;
    let clippedCount = 0;
    let kl = 0;
    let entropy = 0;
    let approxKl = 0;
    let ratioDev = 0;
    const inv = 1 / n;
    for (let t = 0; t < n; t++) {
      const term = clippedPolicyTerm(stats.logp[t], inputs.oldLogp[t], inputs.advantages[t], o);
      pg += term.value;
      if (term.clipped) clippedCount++;
      let g = term.dLogp;
      if (o.klCoef !== 0 && inputs.refLogp) {
        const k = k3Kl(stats.logp[t], inputs.refLogp[t], o.klClamp);
        kl += k.value;
        g += o.klCoef * k.dLogp;
      }
      dLogp[t] = g * inv;
      dEntropy[t] = -o.entropyCoef * inv;
      entropy += stats.entropy[t];
      approxKl += inputs.oldLogp[t] - stats.logp[t];
      ratioDev += Math.abs(Math.exp(stats.logp[t] - inputs.oldLogp[t]) - 1);
    }
    const loss = (pg + o.klCoef * kl - o.entropyCoef * entropy) * inv;
    return {
      loss,
      dLogp,
      dEntropy,
      metrics: {
        pg_loss: pg * inv,
        clipfrac: clippedCount * inv,
        kl: kl * inv,
        entropy: entropy * inv,
        ppo_kl: approxKl * inv,
        // Mean |π/π_old − 1|: at an iteration's first mini-batch, how far the learner's log-probs
        // are from the sampler's (dtype, kernels) before any step has moved the policy.
        ratio_dev: ratioDev * inv,
      },
    };
  };
}
