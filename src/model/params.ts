import type { Rng } from "../core/rng.js";
import { type ModelConfig, type ParamSpec, paramSpecs, validateModelConfig } from "./config.js";

/**
 * The parameter container: every tensor of `paramSpecs(config)`, in that order, as a view
 * into one contiguous Float32Array (`flat`). The optimizer and gradient clipping work on
 * `flat`; the model code works on the named views. Gradients use the same container type.
 */
export interface ModelParams {
  readonly config: ModelConfig;
  readonly specs: readonly ParamSpec[];
  /** All parameters, concatenated in spec order. */
  readonly flat: Float32Array;
  /** One view into `flat` per spec, in spec order. */
  readonly tensors: readonly Float32Array[];
  /** Start of each tensor within `flat`. */
  readonly offsets: readonly number[];
}

/** The weights of one decoder layer (views into a ModelParams). Matrices are [out, in]. */
export interface LayerWeights {
  attnNorm: Float32Array;
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  ffnNorm: Float32Array;
  wGate: Float32Array;
  wUp: Float32Array;
  wDown: Float32Array;
}

export interface ModelWeights {
  /** [vocab, d]; also the (tied) output head. */
  tokEmbd: Float32Array;
  layers: LayerWeights[];
  outputNorm: Float32Array;
}

function numel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Tensor specs of `config`, each tensor's start in the flat array, and the total. */
function layoutOf(config: ModelConfig): { specs: readonly ParamSpec[]; offsets: number[]; total: number } {
  validateModelConfig(config);
  const specs = paramSpecs(config);
  const offsets: number[] = [];
  let total = 0;
  for (const s of specs) {
    offsets.push(total);
    total += numel(s.shape);
  }
  return { specs, offsets, total };
}

function viewsOn(
  config: ModelConfig,
  flat: Float32Array,
  specs: readonly ParamSpec[],
  offsets: number[],
): ModelParams {
  const tensors = specs.map((s, i) => flat.subarray(offsets[i], offsets[i] + numel(s.shape)));
  return { config: { ...config }, specs, flat, tensors, offsets };
}

/**
 * A container whose tensors are views into `flat` (not copied), e.g. a Float32Array over a
 * SharedArrayBuffer that another thread reads or writes.
 */
export function paramsOn(config: ModelConfig, flat: Float32Array): ModelParams {
  const { specs, offsets, total } = layoutOf(config);
  if (flat.length !== total)
    throw new RangeError(`parameter buffer holds ${flat.length} floats, the model needs ${total}`);
  return viewsOn(config, flat, specs, offsets);
}

/** A zero-filled container for `config` (also what gradients start as). */
export function allocParams(config: ModelConfig): ModelParams {
  const { specs, offsets, total } = layoutOf(config);
  return viewsOn(config, new Float32Array(total), specs, offsets);
}

/** A zero-filled container with the same layout as `p` (for gradients). */
export function zerosLike(p: ModelParams): ModelParams {
  return allocParams(p.config);
}

/** A deep copy (its own `flat`). */
export function cloneParams(p: ModelParams): ModelParams {
  const q = allocParams(p.config);
  q.flat.set(p.flat);
  return q;
}

export function parameterTotal(p: ModelParams): number {
  return p.flat.length;
}

export function tensorIndex(p: ModelParams, name: string): number {
  const i = p.specs.findIndex((s) => s.name === name);
  if (i < 0) throw new RangeError(`no parameter tensor named "${name}"`);
  return i;
}

export function getTensor(p: ModelParams, name: string): Float32Array {
  return p.tensors[tensorIndex(p, name)];
}

/** Named, typed views of the weights (layout follows `paramSpecs`). */
export function weightsOf(p: ModelParams): ModelWeights {
  const t = p.tensors;
  const layers: LayerWeights[] = [];
  for (let l = 0; l < p.config.nLayers; l++) {
    const b = 1 + 9 * l;
    layers.push({
      attnNorm: t[b],
      wq: t[b + 1],
      wk: t[b + 2],
      wv: t[b + 3],
      wo: t[b + 4],
      ffnNorm: t[b + 5],
      wGate: t[b + 6],
      wUp: t[b + 7],
      wDown: t[b + 8],
    });
  }
  return { tokEmbd: t[0], layers, outputNorm: t[t.length - 1] };
}

/** Norm gains are one-dimensional; every other tensor is a matrix. */
export function isNormTensor(spec: ParamSpec): boolean {
  return spec.shape.length === 1;
}

/** Projections whose output is added to the residual stream (scaled down at init, GPT-2 style). */
export function isResidualOutput(spec: ParamSpec): boolean {
  return spec.name.endsWith("attn_output.weight") || spec.name.endsWith("ffn_down.weight");
}

export interface InitOptions {
  /** Standard deviation of the normal init of every matrix (default 0.02). */
  std?: number;
}

/**
 * Deterministic init: matrices ~ N(0, std²) (std 0.02), residual output projections scaled
 * by 1/sqrt(2·nLayers), norm gains 1. Each tensor draws from `rng.derive("param", name)`, so a
 * tensor's values do not depend on the other tensors.
 */
export function initParams(config: ModelConfig, rng: Rng, opts: InitOptions = {}): ModelParams {
  const p = allocParams(config);
  const std = opts.std ?? 0.02;
  const residualScale = 1 / Math.sqrt(2 * config.nLayers);
  p.specs.forEach((spec, i) => {
    const t = p.tensors[i];
    if (isNormTensor(spec)) {
      t.fill(1);
      return;
    }
    const s = isResidualOutput(spec) ? std * residualScale : std;
    const r = rng.derive("param", spec.name);
    for (let j = 0; j < t.length; j++) t[j] = s * r.normal();
  });
  return p;
}
