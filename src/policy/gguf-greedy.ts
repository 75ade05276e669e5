/**
 * Greedy continuations of raw prompt token ids by llama.cpp (node-llama-cpp), with exact settings
 * (F32 KV cache, no flash attention). The reference an imported GGUF is checked against: the same
 * ids go to the PyTorch worker's greedy `generate`, so any difference is the models', not the
 * prompt rendering's.
 *
 *   const runs = await llamaCppGreedy("models/gguf/SmolLM2-135M-Instruct.F32.gguf", [[1, 2, 3]], 32);
 */
import { loadNodeLlamaCpp, type NlcModel } from "./gguf.js";

export interface GreedyOptions {
  threads?: number;
  contextSize?: number;
}

export async function llamaCppGreedy(
  path: string,
  prompts: readonly (readonly number[])[],
  maxNewTokens: number,
  opts: GreedyOptions = {},
): Promise<number[][]> {
  const nlc = await loadNodeLlamaCpp();
  const llama = await nlc.getLlama({ gpu: false, build: "never", logLevel: "error" });
  let model: NlcModel | undefined;
  try {
    model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
    const longest = Math.max(0, ...prompts.map((p) => p.length));
    const context = await model.createContext({
      contextSize: opts.contextSize ?? Math.max(256, longest + maxNewTokens + 8),
      sequences: 1,
      threads: opts.threads ?? 2,
      flashAttention: false,
      experimentalKvCacheKeyType: "F32",
      experimentalKvCacheValueType: "F32",
    });
    try {
      const sequence = context.getSequence();
      const out: number[][] = [];
      for (const prompt of prompts) {
        await sequence.clearHistory();
        out.push(await continueGreedy(model, sequence, prompt, maxNewTokens));
      }
      return out;
    } finally {
      await context.dispose();
    }
  } finally {
    if (model) await model.dispose().catch(() => {});
    await llama.dispose().catch(() => {});
  }
}

async function continueGreedy(
  model: NlcModel,
  sequence: ReturnType<Awaited<ReturnType<NlcModel["createContext"]>>["getSequence"]>,
  prompt: readonly number[],
  maxNewTokens: number,
): Promise<number[]> {
  const tokens: number[] = [];
  if (maxNewTokens === 0) return tokens;
  const stream = sequence.evaluateWithMetadata([...prompt], { confidence: true }, { temperature: 0 });
  for await (const { token } of stream) {
    tokens.push(token);
    if (model.isEogToken(token) || tokens.length >= maxNewTokens) break;
  }
  return tokens;
}
