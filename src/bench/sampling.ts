/**
 * Sampling throughput of the embedded model: batched KV-cache decoding for the `tiny`,
 * `small` and `base` presets (random weights, vocabulary 1,024), 128-token prompts (all
 * different, so no prefill is shared), 64 new tokens at temperature 1, with 1 and 16
 * concurrent sequences. Printed side by side, per kernel that loads here:
 *
 *   prefill ms   time to prefill all prompts and sample each first token
 *   decode tok/s tokens per second of the decode steps alone (all but each first token)
 *   total tok/s  new tokens per second end to end (prefill included)
 *
 * MAGE_BENCH_KERNELS=js,wasm,native picks kernels (default: every one that loads, js for
 * `tiny` only since it takes minutes on the bigger ones); MAGE_BENCH_PRESETS=tiny,small
 * narrows the presets.
 */
import { Rng } from "../core/rng.js";
import { PRESETS, type PresetName } from "../model/config.js";
import { availableKernels } from "../model/kernels/select.js";
import type { Kernels } from "../model/kernels/types.js";
import { randomWeights, type SampleRequest, Sampler } from "../model/sampler.js";

const PROMPT = 128;
const NEW = 64;

function requests(n: number, maxTokens: number, vocab: number): SampleRequest[] {
  return Array.from({ length: n }, (_, i) => {
    const r = Rng.seeded(1234).derive("bench-prompt", i);
    return {
      promptIds: Array.from({ length: PROMPT }, () => r.int(vocab)),
      sampling: { temperature: 1, topK: 0, topP: 1, maxTokens },
      seed: i,
    };
  });
}

interface Row {
  preset: string;
  kernel: string;
  seqs: number;
  prefillMs: number;
  decodeTokS: number;
  totalTokS: number;
}

function measure(preset: PresetName, kernels: Kernels, seqs: number): Row {
  const config = PRESETS[preset];
  const weights = randomWeights(config, 1);
  const sampler = new Sampler(config, kernels);
  // Warm-up (JIT, work buffers, cache pool) on short prompts, then the measured run.
  sampler.generate(
    weights,
    requests(seqs, 4, config.vocabSize).map((r) => ({ ...r, promptIds: r.promptIds.slice(0, 8) })),
  );
  const t = performance.now();
  const outs = sampler.generate(weights, requests(seqs, NEW, config.vocabSize));
  const totalMs = performance.now() - t;
  const tokens = outs.reduce((s, o) => s + o.tokenIds.length, 0);
  const st = sampler.stats;
  return {
    preset,
    kernel: kernels.name,
    seqs,
    prefillMs: st.prefillMs,
    decodeTokS: st.decodeTokens / (st.decodeMs / 1000),
    totalTokS: tokens / (totalMs / 1000),
  };
}

export async function run(): Promise<void> {
  const wantKernels = process.env.MAGE_BENCH_KERNELS?.split(",").filter(Boolean);
  const wantPresets = (process.env.MAGE_BENCH_PRESETS?.split(",").filter(Boolean) ?? [
    "tiny",
    "small",
    "base",
  ]) as PresetName[];
  const kernels = (await availableKernels()).filter((k) => !wantKernels || wantKernels.includes(k.name));
  console.log(
    `prompts ${PROMPT} tokens, ${NEW} new tokens each, temperature 1; kernels: ${kernels.map((k) => k.name).join(", ")}`,
  );
  console.log("preset  kernel  seqs  prefill ms  decode tok/s  total tok/s");
  const rows: Row[] = [];
  for (const preset of wantPresets) {
    for (const k of kernels) {
      if (k.name === "js" && preset !== "tiny" && !wantKernels) continue;
      for (const seqs of [1, 16]) {
        const r = measure(preset, k, seqs);
        rows.push(r);
        console.log(
          `${r.preset.padEnd(6)}  ${r.kernel.padEnd(6)}  ${String(r.seqs).padStart(4)}  ${r.prefillMs.toFixed(0).padStart(10)}  ${r.decodeTokS.toFixed(0).padStart(12)}  ${r.totalTokS.toFixed(0).padStart(11)}`,
        );
      }
    }
  }
  // Batching gain: 16 sequences vs 1, per preset and kernel.
  for (let i = 0; i + 1 < rows.length; i += 2) {
    const [a, b] = [rows[i], rows[i + 1]];
    console.log(
      `${a.preset}/${a.kernel}: 16 sequences decode ${(b.decodeTokS / a.decodeTokS).toFixed(1)}× the tokens/s of 1`,
    );
  }
}
