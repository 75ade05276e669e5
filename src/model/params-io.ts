import type { ModelConfig } from "./config.js";
import { allocParams, type ModelParams } from "./params.js";

/** Named tensors (as checkpoints store them) → a parameter container; every tensor must be present with its size. */
export function paramsFromMap(config: ModelConfig, tensors: ReadonlyMap<string, Float32Array>): ModelParams {
  const p = allocParams(config);
  p.specs.forEach((spec, i) => {
    const t = tensors.get(spec.name);
    if (!t) throw new Error(`checkpoint has no tensor "${spec.name}"`);
    if (t.length !== p.tensors[i].length) {
      throw new Error(
        `checkpoint tensor "${spec.name}" has ${t.length} values, expected ${p.tensors[i].length}`,
      );
    }
    p.tensors[i].set(t);
  });
  return p;
}

/** A parameter container → named tensors (views, no copy). */
export function paramsToMap(p: ModelParams): Map<string, Float32Array> {
  return new Map(p.specs.map((s, i) => [s.name, p.tensors[i]]));
}
