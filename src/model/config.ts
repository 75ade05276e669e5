import { UsageError } from "../core/errors.js";

/** Architecture of the embedded llama-style decoder (RMSNorm, RoPE, SwiGLU, no biases, tied head). */
export interface ModelConfig {
  vocabSize: number;
  dModel: number;
  nLayers: number;
  nHeads: number;
  /** Hidden width of the SwiGLU MLP. */
  dFf: number;
  contextLength: number;
  ropeBase: number;
  normEps: number;
}

export const PRESET_NAMES = ["tiny", "small", "base"] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

const COMMON = { vocabSize: 1024, contextLength: 1024, ropeBase: 10000, normEps: 1e-5 };

/** ≈0.56M, ≈3.1M and ≈25M parameters at vocabulary 1,024. */
export const PRESETS: Record<PresetName, ModelConfig> = {
  tiny: { ...COMMON, dModel: 128, nLayers: 2, nHeads: 4, dFf: 384 },
  small: { ...COMMON, dModel: 256, nLayers: 4, nHeads: 8, dFf: 576 },
  base: { ...COMMON, dModel: 512, nLayers: 8, nHeads: 8, dFf: 1344 },
};

export function presetConfig(name: string, overrides: Partial<ModelConfig> = {}): ModelConfig {
  if (!(PRESET_NAMES as readonly string[]).includes(name)) {
    throw new UsageError(`unknown model preset "${name}"; valid choices: ${PRESET_NAMES.join(", ")}`);
  }
  return validateModelConfig({ ...PRESETS[name as PresetName], ...overrides });
}

export function validateModelConfig(c: ModelConfig): ModelConfig {
  const positive: (keyof ModelConfig)[] = [
    "vocabSize",
    "dModel",
    "nLayers",
    "nHeads",
    "dFf",
    "contextLength",
  ];
  for (const k of positive) {
    if (!Number.isInteger(c[k]) || c[k] <= 0)
      throw new UsageError(`model.${k} must be a positive integer, got ${c[k]}`);
  }
  if (c.dModel % c.nHeads !== 0)
    throw new UsageError(`model.dModel (${c.dModel}) must be divisible by model.nHeads (${c.nHeads})`);
  if ((c.dModel / c.nHeads) % 2 !== 0)
    throw new UsageError("model.dModel / model.nHeads must be even for rotary positions");
  return c;
}

/**
 * Parameter tensors in a fixed order with llama.cpp-style names. Every matrix is stored
 * row-major as [out, in] (PyTorch `nn.Linear` layout): y = x · Wᵀ.
 */
export interface ParamSpec {
  name: string;
  shape: number[];
}

export function paramSpecs(c: ModelConfig): ParamSpec[] {
  const d = c.dModel;
  const specs: ParamSpec[] = [{ name: "token_embd.weight", shape: [c.vocabSize, d] }];
  for (let l = 0; l < c.nLayers; l++) {
    const p = `blk.${l}.`;
    specs.push(
      { name: `${p}attn_norm.weight`, shape: [d] },
      { name: `${p}attn_q.weight`, shape: [d, d] },
      { name: `${p}attn_k.weight`, shape: [d, d] },
      { name: `${p}attn_v.weight`, shape: [d, d] },
      { name: `${p}attn_output.weight`, shape: [d, d] },
      { name: `${p}ffn_norm.weight`, shape: [d] },
      { name: `${p}ffn_gate.weight`, shape: [c.dFf, d] },
      { name: `${p}ffn_up.weight`, shape: [c.dFf, d] },
      { name: `${p}ffn_down.weight`, shape: [d, c.dFf] },
    );
  }
  specs.push({ name: "output_norm.weight", shape: [d] });
  return specs;
}

export function parameterCount(c: ModelConfig): number {
  return paramSpecs(c).reduce((s, p) => s + p.shape.reduce((a, b) => a * b, 1), 0);
}
