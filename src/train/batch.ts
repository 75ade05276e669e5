import { renderChat } from "../model/chat-template.js";
import type { Tokenizer } from "../model/tokenizer.js";
import type { Batch } from "../model/transformer.js";
import type { ChatMessage } from "../policy/types.js";
import type { Row, TrialRecord } from "../rollout/types.js";

/**
 * Turns rollout rows into learner sequences. With the append-only `compact` prompts a whole
 * trial is ONE sequence (its final transcript), scored in one pass, each response's tokens
 * weighted by its own row's advantage; otherwise (`full` prompts) every row is a sequence.
 * A trial asked for one pass whose rows are not one prefix chain (e.g. its oldest attempts were
 * dropped to fit the context) is cut into its maximal prefix chains (`prefixChains`), one
 * sequence each.
 *
 * Scored tokens are exactly the sampled response tokens (the `<|end|>` stop token included when
 * it was sampled), in sequence order then position order — the order of the learner's
 * TokenStats — and carry their behaviour log-prob and their row's advantage.
 */
export interface TokenBatch {
  batch: Batch;
  /** Per scored token. */
  oldLogp: Float64Array;
  advantages: Float64Array;
  /** Reference-model log-prob per scored token, when the KL term needs it. */
  refLogp?: Float64Array;
  /** Index (into the rows given) of the row each scored token belongs to. */
  rowOfToken: Int32Array;
  /** Index of the trial (into the trials given) of each sequence. */
  trialOfSequence: number[];
}

interface SequencePlan {
  messages: ChatMessage[];
  /** Row index (global) for each assistant message, in message order; -1 for unscored messages. */
  rowsOfSpans: number[];
  trial: number;
}

function transcriptOf(row: Row): ChatMessage[] {
  return [...row.prompt, { role: "assistant", content: row.response, tokenIds: row.responseTokenIds }];
}

function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  if (a.role !== b.role || a.content !== b.content) return false;
  const x = a.tokenIds;
  const y = b.tokenIds;
  if (x === undefined || y === undefined) return x === y;
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

function extendsTranscript(done: readonly ChatMessage[], next: readonly ChatMessage[]): boolean {
  if (next.length < done.length) return false;
  for (let j = 0; j < done.length; j++) if (!sameMessage(done[j], next[j])) return false;
  return true;
}

/**
 * Whether each row's transcript (prompt + response) is a prefix of the next row's prompt, so the
 * last row's transcript holds every row's response (append-only prompts). False, e.g., for a
 * trial whose oldest attempts were dropped to fit the context.
 */
export function isPrefixChain(rows: readonly Row[]): boolean {
  return prefixChains(rows).length <= 1;
}

/**
 * The rows cut, in order, into maximal runs in which each row's transcript is a prefix of the
 * next row's prompt: one run for an append-only trial; a new run wherever a prompt was rebuilt
 * (an attempt dropped to fit the context).
 */
export function prefixChains(rows: readonly Row[]): Row[][] {
  const chains: Row[][] = [];
  let prev: Row | undefined;
  for (const row of rows) {
    if (prev !== undefined && extendsTranscript(transcriptOf(prev), row.prompt))
      chains[chains.length - 1].push(row);
    else chains.push([row]);
    prev = row;
  }
  return chains;
}

/**
 * How many rows each sequence of `buildTokenBatch(tok, trials, …, onePassPerTrial)` scores, in
 * sequence order (for cutting mini-batches by rows).
 */
export function rowsPerSequence(trials: readonly TrialRecord[], onePassPerTrial: boolean): number[] {
  return planSequences(trials, onePassPerTrial).plans.map((p) => p.rowsOfSpans.filter((r) => r >= 0).length);
}

export function planSequences(
  trials: readonly TrialRecord[],
  onePassPerTrial: boolean,
): {
  plans: SequencePlan[];
  rows: Row[];
} {
  const rows: Row[] = [];
  const plans: SequencePlan[] = [];
  trials.forEach((trial, ti) => {
    if (trial.rows.length === 0) return;
    const first = rows.length;
    rows.push(...trial.rows);
    if (onePassPerTrial) {
      let at = first;
      for (const chain of prefixChains(trial.rows)) {
        const messages = transcriptOf(chain[chain.length - 1]);
        // Row k of the chain answered message (its prompt's length); earlier assistant messages
        // (kept from before the chain) are context, not scored.
        const rowAtMessage = new Map(chain.map((row, k) => [row.prompt.length, at + k]));
        const rowsOfSpans: number[] = [];
        messages.forEach((m, i) => {
          if (m.role === "assistant") rowsOfSpans.push(rowAtMessage.get(i) ?? -1);
        });
        plans.push({ messages, rowsOfSpans, trial: ti });
        at += chain.length;
      }
    } else {
      trial.rows.forEach((row, i) => {
        const messages = transcriptOf(row);
        const spans = messages.filter((m) => m.role === "assistant").length;
        const rowsOfSpans = new Array<number>(spans).fill(-1);
        rowsOfSpans[spans - 1] = first + i;
        plans.push({ messages, rowsOfSpans, trial: ti });
      });
    }
  });
  return { plans, rows };
}

export function buildTokenBatch(
  tok: Tokenizer,
  trials: readonly TrialRecord[],
  rowAdvantages: readonly number[],
  onePassPerTrial: boolean,
): TokenBatch {
  const { plans, rows } = planSequences(trials, onePassPerTrial);
  return assembleTokenBatch(
    plans,
    rows,
    plans.map((p) => renderChat(tok, p.messages)),
    rowAdvantages,
  );
}

/** A transcript rendered by a learner's own tokenizer and chat template. */
export interface RenderedIds {
  ids: readonly number[];
  /** Each assistant message's tokens start at `start` (`end` one past its end-of-turn token). */
  assistantSpans: readonly { start: number; end: number }[];
}

/**
 * `buildTokenBatch` with the transcripts rendered by the learner (the PyTorch worker's tokenizer
 * and chat template own the ids of a Hugging Face model): one `render` call for the whole batch.
 */
export async function buildTokenBatchWith(
  render: (transcripts: ChatMessage[][]) => Promise<RenderedIds[]>,
  trials: readonly TrialRecord[],
  rowAdvantages: readonly number[],
  onePassPerTrial: boolean,
): Promise<TokenBatch> {
  const { plans, rows } = planSequences(trials, onePassPerTrial);
  const rendered = plans.length > 0 ? await render(plans.map((p) => p.messages)) : [];
  if (rendered.length !== plans.length)
    throw new Error(`render returned ${rendered.length} transcripts for ${plans.length}`);
  return assembleTokenBatch(plans, rows, rendered, rowAdvantages);
}

function assembleTokenBatch(
  plans: readonly SequencePlan[],
  rows: readonly Row[],
  renderedAll: readonly RenderedIds[],
  rowAdvantages: readonly number[],
): TokenBatch {
  if (rowAdvantages.length !== rows.length) {
    throw new Error(`buildTokenBatch: ${rows.length} rows but ${rowAdvantages.length} advantages`);
  }
  const sequences: Int32Array[] = [];
  const lossMask: Uint8Array[] = [];
  const oldLogp: number[] = [];
  const advantages: number[] = [];
  const rowOfToken: number[] = [];
  const trialOfSequence: number[] = [];
  plans.forEach((plan, pi) => {
    const rendered = renderedAll[pi];
    if (rendered.assistantSpans.length !== plan.rowsOfSpans.length) {
      throw new Error(
        `transcript of trial ${plan.trial} has ${rendered.assistantSpans.length} assistant messages for ${plan.rowsOfSpans.length} rows; prompts were not append-only`,
      );
    }
    const mask = new Uint8Array(rendered.ids.length);
    rendered.assistantSpans.forEach((span, k) => {
      const r = plan.rowsOfSpans[k];
      if (r < 0) return;
      const row = rows[r];
      const n = row.responseTokenIds.length;
      if (row.behaviourLogprobs.length !== n) {
        throw new Error(
          `row of trial ${row.trialId}: ${n} response tokens but ${row.behaviourLogprobs.length} log-probs`,
        );
      }
      for (let j = 0; j < n; j++) {
        if (rendered.ids[span.start + j] !== row.responseTokenIds[j]) {
          throw new Error(`trial ${row.trialId}: transcript tokens differ from the sampled response tokens`);
        }
        mask[span.start + j] = 1;
      }
    });
    // Scored tokens in position order: walk the mask and look up each position's row.
    const owner = new Int32Array(rendered.ids.length).fill(-1);
    const offsetInRow = new Int32Array(rendered.ids.length);
    rendered.assistantSpans.forEach((span, k) => {
      const r = plan.rowsOfSpans[k];
      if (r < 0) return;
      for (let j = 0; j < rows[r].responseTokenIds.length; j++) {
        owner[span.start + j] = r;
        offsetInRow[span.start + j] = j;
      }
    });
    for (let t = 0; t < mask.length; t++) {
      if (!mask[t]) continue;
      const r = owner[t];
      oldLogp.push(rows[r].behaviourLogprobs[offsetInRow[t]]);
      advantages.push(rowAdvantages[r]);
      rowOfToken.push(r);
    }
    sequences.push(Int32Array.from(rendered.ids));
    lossMask.push(mask);
    trialOfSequence.push(plan.trial);
  });
  return {
    batch: { sequences, lossMask },
    oldLogp: Float64Array.from(oldLogp),
    advantages: Float64Array.from(advantages),
    rowOfToken: Int32Array.from(rowOfToken),
    trialOfSequence,
  };
}

/** A subset of sequences of a token batch, with its scored-token arrays (for mini-batches). */
export function sliceTokenBatch(tb: TokenBatch, sequenceIndices: readonly number[]): TokenBatch {
  // Scored-token ranges per sequence.
  const starts: number[] = [];
  let acc = 0;
  for (const m of tb.batch.lossMask) {
    starts.push(acc);
    for (let t = 0; t < m.length; t++) acc += m[t];
  }
  const oldLogp: number[] = [];
  const advantages: number[] = [];
  const refLogp: number[] = [];
  const rowOfToken: number[] = [];
  for (const s of sequenceIndices) {
    let count = 0;
    const m = tb.batch.lossMask[s];
    for (let t = 0; t < m.length; t++) count += m[t];
    for (let j = 0; j < count; j++) {
      oldLogp.push(tb.oldLogp[starts[s] + j]);
      advantages.push(tb.advantages[starts[s] + j]);
      if (tb.refLogp) refLogp.push(tb.refLogp[starts[s] + j]);
      rowOfToken.push(tb.rowOfToken[starts[s] + j]);
    }
  }
  return {
    ...(tb.refLogp ? { refLogp: Float64Array.from(refLogp) } : {}),
    batch: {
      sequences: sequenceIndices.map((s) => tb.batch.sequences[s]),
      lossMask: sequenceIndices.map((s) => tb.batch.lossMask[s]),
    },
    oldLogp: Float64Array.from(oldLogp),
    advantages: Float64Array.from(advantages),
    rowOfToken: Int32Array.from(rowOfToken),
    trialOfSequence: sequenceIndices.map((s) => tb.trialOfSequence[s]),
  };
}
