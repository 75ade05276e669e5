import { Rng } from "../../src/core/rng.js";
import { saveCheckpoint } from "../../src/model/checkpoint.js";
import { presetConfig } from "../../src/model/config.js";
import { initParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { byteTokenizer } from "../../src/model/tokenizer.js";

/** A one-layer tiny model with random weights and a byte tokenizer: a base to train or evaluate. */
export async function saveRandomCheckpoint(
  dir: string,
  o: { contextLength: number; seed: number; meta?: Record<string, unknown> },
): Promise<void> {
  const tok = byteTokenizer();
  const model = presetConfig("tiny", {
    vocabSize: tok.vocabSize,
    contextLength: o.contextLength,
    nLayers: 1,
  });
  await saveCheckpoint(dir, {
    config: model,
    params: paramsToMap(initParams(model, Rng.seeded(o.seed))),
    tokenizer: tok,
    ...(o.meta ? { meta: o.meta } : {}),
  });
}
