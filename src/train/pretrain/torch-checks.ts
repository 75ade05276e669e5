/**
 * The warm start's exact first-decision scoring for a model in the PyTorch worker: each candidate
 * answer is rendered as the assistant's reply with the model's own chat template (so it ends with
 * the template's end-of-turn token), and the log-probs of that span come from the worker's
 * `logprobs`, all candidates of a state in one request.
 */
import type { TorchLearner } from "../../learner/torch/learner.js";
import type { AnswerScorer } from "./evaluate.js";

export function torchAnswerScorer(learner: TorchLearner): AnswerScorer {
  return async (messages, candidates) => {
    const rendered = await learner.render(
      candidates.map((c) => [...messages, { role: "assistant" as const, content: `<action>${c}</action>` }]),
    );
    const lossMask = rendered.map((r) => {
      const answer = r.assistantSpans[r.assistantSpans.length - 1];
      if (!answer) throw new Error("render: the candidate answer has no assistant span");
      const mask = new Uint8Array(r.ids.length);
      mask.fill(1, answer.start, answer.end);
      return mask;
    });
    const { logp } = await learner.logprobs({
      sequences: rendered.map((r) => Int32Array.from(r.ids)),
      lossMask,
    });
    const sums = new Array<number>(candidates.length).fill(0);
    let at = 0;
    lossMask.forEach((mask, i) => {
      for (let t = 0; t < mask.length; t++) if (mask[t]) sums[i] += logp[at++];
    });
    return sums.map((l) => Math.exp(l));
  };
}
