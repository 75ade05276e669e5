/**
 * The embedded TypeScript transformer as a `TrainLearner`: the chat template of
 * `src/model/chat-template.ts`, `Learner` (AdamW, micro-batches) and `makePpoLoss`.
 */
import { makePpoLoss, type PpoLossOptions, type PpoTokenInputs } from "../algo/ppo-loss.js";
import { renderChat } from "../model/chat-template.js";
import { loadCheckpoint, saveCheckpoint } from "../model/checkpoint.js";
import type { Learner, OptimizerState } from "../model/learner.js";
import type { ModelParams } from "../model/params.js";
import { paramsFromMap, paramsToMap } from "../model/params-io.js";
import type { Tokenizer } from "../model/tokenizer.js";
import { type Batch, scoreBatch } from "../model/transformer.js";
import type { ChatMessage } from "../policy/types.js";
import type {
  LearnerUpdateResult,
  RenderedTranscript,
  RunStateInput,
  ScoredTokens,
  TrainLearner,
} from "./types.js";

export class EmbeddedLearner implements TrainLearner {
  readonly backend = "embedded" as const;

  constructor(
    readonly learner: Learner,
    readonly tokenizer: Tokenizer,
    /** Frozen starting weights for the KL term (null when it is off). */
    readonly reference: ModelParams | null,
    private readonly preset: string | null,
  ) {}

  get contextLength(): number {
    return this.learner.config.contextLength;
  }

  get hasReference(): boolean {
    return this.reference !== null;
  }

  async render(transcripts: readonly (readonly ChatMessage[])[]): Promise<RenderedTranscript[]> {
    return transcripts.map((m) => {
      const r = renderChat(this.tokenizer, m);
      return { ids: r.ids, assistantSpans: r.assistantSpans.map((s) => ({ start: s.start, end: s.end })) };
    });
  }

  async logprobs(batch: Batch, model: "policy" | "reference" = "policy"): Promise<ScoredTokens> {
    if (model === "reference" && !this.reference) throw new Error("this learner keeps no reference model");
    const params = model === "reference" ? this.reference! : this.learner.params;
    const s = scoreBatch(params, batch, this.learner.kernels);
    return { logp: s.logp, entropy: s.entropy };
  }

  async update(
    batch: Batch,
    inputs: PpoTokenInputs,
    loss: PpoLossOptions,
    opts: { microBatchTokens: number },
  ): Promise<LearnerUpdateResult> {
    const m = this.learner.update(batch, makePpoLoss(inputs, loss), opts);
    return {
      loss: m.loss,
      metrics: m.metrics,
      gradNorm: m.gradNorm,
      lr: m.lr,
      clipped: m.clipped,
      skipped: m.skipped,
      step: m.step,
    };
  }

  async save(dir: string, run: RunStateInput): Promise<void> {
    const state = this.learner.exportState();
    await saveCheckpoint(dir, {
      config: this.learner.config,
      preset: this.preset,
      params: paramsToMap(this.learner.params),
      tokenizer: this.tokenizer,
      trainingState: {
        tensors: state.tensors,
        json: { ...(run.json as Record<string, unknown>), optimizerMeta: state.meta },
      },
      meta: run.meta,
    });
  }

  async restore(dir: string): Promise<unknown> {
    const ck = await loadCheckpoint(dir, { trainingState: true });
    const state = ck.trainingState?.json as
      | ({ optimizerMeta: OptimizerState["meta"] } & Record<string, unknown>)
      | undefined;
    if (!state) throw new Error(`checkpoint ${dir} has no training state to resume from`);
    // Weights are copied into the learner's own container, which the rollout policy reads.
    this.learner.params.flat.set(paramsFromMap(ck.config, ck.params).flat);
    const tensors: Record<string, Float32Array> = {};
    for (const [name, t] of ck.trainingState!.tensors) tensors[name] = t.data as Float32Array;
    this.learner.restoreState({ tensors, meta: state.optimizerMeta });
    return state;
  }

  async close(): Promise<void> {}
}
