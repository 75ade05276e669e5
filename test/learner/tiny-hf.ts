import { Rng } from "../../src/core/rng.js";
import { presetConfig } from "../../src/model/config.js";
import { exportHf } from "../../src/model/hf-export.js";
import { initParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";

/**
 * A one-layer `tiny` embedded model with random weights and the byte tokenizer, exported as a
 * Hugging Face LlamaForCausalLM directory (with its chat template): a model the PyTorch worker
 * loads in about a second on a CPU.
 */
export async function saveTinyHf(dir: string, o: { seed: number; contextLength?: number }): Promise<void> {
  const tok = byteTokenizer();
  const config = presetConfig("tiny", {
    vocabSize: tok.vocabSize,
    contextLength: o.contextLength ?? 512,
    nLayers: 1,
  });
  await exportHf(dir, {
    config,
    params: paramsToMap(initParams(config, Rng.seeded(o.seed))),
    tokenizer: tok,
  });
}

/** The interpreter `npm test` provides (MAGE_PYTHON); tests that need the worker skip without it. */
export const WORKER_PYTHON = process.env.MAGE_PYTHON;
export const NO_WORKER = WORKER_PYTHON ? false : "needs MAGE_PYTHON (npm test sets it)";
