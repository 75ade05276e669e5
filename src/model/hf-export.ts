/**
 * The embedded model as a Hugging Face `LlamaForCausalLM` directory, and back.
 *
 *   config.json              LlamaConfig: sizes, rms_norm_eps, rope_parameters, tied head, float32
 *   model.safetensors        F32 tensors under the transformers names (no lm_head: tied)
 *   tokenizer.json           the embedded BPE tokenizer (`Tokenizer.toHuggingFaceJson`)
 *   tokenizer_config.json    special tokens (eos = `<|end|>`, the end of a turn) and the chat template
 *   special_tokens_map.json  the same special tokens (older readers look here)
 *   generation_config.json   bos, eos (`<|end|>` and `<|eos|>`), pad
 *
 * Every detail of `transformer.ts` has its transformers counterpart: RMSNorm y = x/rms(x)·g with
 * the gain as stored (not 1 + g), attention scale 1/sqrt(headDim), no biases, SwiGLU
 * down(silu(gate(x)) ⊙ up(x)), a head tied to the embedding, positions from 0 in every sequence.
 * One thing differs: RoPE. The embedded model rotates ADJACENT pairs (2i, 2i+1) of each head
 * (llama.cpp "norm", see `ropeInPlace`), transformers' Llama rotates HALVES (i, i + headDim/2)
 * (`rotate_half`), both with θ_i = pos·base^(−2i/headDim). Writing the rows of Wq and Wk of every
 * head in the order 0, 2, 4, …, 1, 3, 5, … turns one into the other: an HF query row j < headDim/2
 * is embedded row 2j, row j ≥ headDim/2 is embedded row 2(j − headDim/2) + 1. The score q·k is a
 * sum over the head's dimensions, so the same permutation of q and k leaves it unchanged. This is
 * the inverse of the permutation llama.cpp's convert_hf_to_gguf.py applies to Q/K.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { UsageError } from "../core/errors.js";
import { tokenizerConfigJson } from "./chat-template.js";
import { exists, writeDirAtomic } from "./checkpoint.js";
import { type ModelConfig, paramSpecs, validateModelConfig } from "./config.js";
import { readSafetensors, writeSafetensors } from "./safetensors.js";
import { Tokenizer } from "./tokenizer.js";

export const HF_ARCHITECTURE = "LlamaForCausalLM";

export const HF_FILES = {
  config: "config.json",
  model: "model.safetensors",
  tokenizer: "tokenizer.json",
  tokenizerConfig: "tokenizer_config.json",
  specialTokens: "special_tokens_map.json",
  generation: "generation_config.json",
} as const;

const LAYER_NAMES: Record<string, string> = {
  "attn_norm.weight": "input_layernorm.weight",
  "attn_q.weight": "self_attn.q_proj.weight",
  "attn_k.weight": "self_attn.k_proj.weight",
  "attn_v.weight": "self_attn.v_proj.weight",
  "attn_output.weight": "self_attn.o_proj.weight",
  "ffn_norm.weight": "post_attention_layernorm.weight",
  "ffn_gate.weight": "mlp.gate_proj.weight",
  "ffn_up.weight": "mlp.up_proj.weight",
  "ffn_down.weight": "mlp.down_proj.weight",
};

/** The transformers name of an embedded (llama.cpp-style) tensor name. */
export function hfTensorName(name: string): string {
  if (name === "token_embd.weight") return "model.embed_tokens.weight";
  if (name === "output_norm.weight") return "model.norm.weight";
  const m = /^blk\.(\d+)\.(.+)$/.exec(name);
  const rest = m ? LAYER_NAMES[m[2]] : undefined;
  if (!m || !rest) throw new RangeError(`no Hugging Face name for tensor "${name}"`);
  return `model.layers.${m[1]}.${rest}`;
}

/** True for the tensors whose rows are reordered between the two RoPE conventions. */
function isRopeProjection(name: string): boolean {
  return name.endsWith("attn_q.weight") || name.endsWith("attn_k.weight");
}

/**
 * Reorders the rows of a [nHeads·headDim, inDim] projection. `toHf`: adjacent-pair rows
 * (embedded) → rotate-half rows (transformers); otherwise the inverse.
 */
export function permuteRopeRows(
  w: Float32Array,
  nHeads: number,
  headDim: number,
  inDim: number,
  toHf: boolean,
): Float32Array {
  if (w.length !== nHeads * headDim * inDim)
    throw new RangeError(`projection has ${w.length} values, expected ${nHeads * headDim * inDim}`);
  const half = headDim / 2;
  const out = new Float32Array(w.length);
  for (let h = 0; h < nHeads; h++) {
    for (let j = 0; j < headDim; j++) {
      const hfRow = h * headDim + j;
      const embRow = h * headDim + (j < half ? 2 * j : 2 * (j - half) + 1);
      const [from, to] = toHf ? [embRow, hfRow] : [hfRow, embRow];
      out.set(w.subarray(from * inDim, (from + 1) * inDim), to * inDim);
    }
  }
  return out;
}

export interface HfModel {
  config: ModelConfig;
  /** Embedded names (`paramSpecs`) → weights in the embedded layout. */
  params: Map<string, Float32Array>;
  tokenizer: Tokenizer;
}

/** The LlamaConfig object (config.json) for an embedded model. */
export function hfConfigJson(config: ModelConfig, tokenizer: Tokenizer): Record<string, unknown> {
  return {
    architectures: [HF_ARCHITECTURE],
    model_type: "llama",
    vocab_size: config.vocabSize,
    hidden_size: config.dModel,
    intermediate_size: config.dFf,
    num_hidden_layers: config.nLayers,
    num_attention_heads: config.nHeads,
    num_key_value_heads: config.nHeads,
    head_dim: config.dModel / config.nHeads,
    hidden_act: "silu",
    max_position_embeddings: config.contextLength,
    rms_norm_eps: config.normEps,
    rope_parameters: { rope_type: "default", rope_theta: config.ropeBase },
    rope_theta: config.ropeBase,
    attention_bias: false,
    attention_dropout: 0.0,
    mlp_bias: false,
    tie_word_embeddings: true,
    initializer_range: 0.02,
    use_cache: true,
    bos_token_id: tokenizer.bosId,
    eos_token_id: [tokenizer.endId, tokenizer.eosId],
    // No pad_token_id here: LlamaModel would make it the embedding's padding_idx, whose row then
    // gets no gradient from its inputs, unlike the embedded model (the tokenizer and
    // generation_config.json still name <|pad|>).
    pad_token_id: null,
    torch_dtype: "float32",
    dtype: "float32",
  };
}

function jsonText(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

/** The embedded tensors under transformers names, Q/K rows permuted to rotate-half order. */
export function hfTensors(
  config: ModelConfig,
  params: ReadonlyMap<string, Float32Array>,
): Map<string, { shape: number[]; data: Float32Array }> {
  validateModelConfig(config);
  const headDim = config.dModel / config.nHeads;
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const spec of paramSpecs(config)) {
    const w = params.get(spec.name);
    const n = spec.shape.reduce((a, b) => a * b, 1);
    if (!w || w.length !== n)
      throw new RangeError(`export-hf: parameter "${spec.name}" is missing or not ${n} values`);
    const data = isRopeProjection(spec.name)
      ? permuteRopeRows(w, config.nHeads, headDim, config.dModel, true)
      : w;
    out.set(hfTensorName(spec.name), { shape: [...spec.shape], data });
  }
  return out;
}

/** An existing --out may be replaced only when it is empty or an earlier export. */
async function checkReplaceable(target: string): Promise<void> {
  if (!(await exists(target))) return;
  if (!(await stat(target)).isDirectory())
    throw new UsageError(`--out ${target} exists and is not a directory`);
  const names = await readdir(target);
  if (names.length === 0) return;
  let arch: unknown;
  try {
    arch = JSON.parse(await readFile(join(target, HF_FILES.config), "utf8"))?.architectures;
  } catch {
    arch = undefined;
  }
  if (!(Array.isArray(arch) && arch.includes(HF_ARCHITECTURE) && names.includes(HF_FILES.model)))
    throw new UsageError(
      `--out ${target} is a non-empty directory that is not an earlier export; choose a new or empty directory`,
    );
}

/**
 * Writes `model` as a `LlamaForCausalLM` directory at `outDir`, atomically like a checkpoint
 * (`writeDirAtomic`: a hidden sibling `.NAME.tmp-…` renamed into place, an earlier export there
 * replaced), so a killed export never leaves a half-written model.
 */
export async function exportHf(outDir: string, model: HfModel): Promise<void> {
  const { config, tokenizer } = model;
  validateModelConfig(config);
  if (tokenizer.vocabSize > config.vocabSize)
    throw new RangeError(
      `export-hf: tokenizer has ${tokenizer.vocabSize} tokens but model.vocabSize is ${config.vocabSize}`,
    );
  const tensors = hfTensors(config, model.params);
  const target = resolve(outDir);
  await checkReplaceable(target);
  // As in Hugging Face chat models (Qwen's <|im_end|>), the tokenizer's eos is the end-of-turn
  // token: what generation stops at and what closes an assistant turn. <|eos|> stays special.
  const tokConfig: Record<string, unknown> = {
    ...tokenizerConfigJson(config.contextLength),
    eos_token: "<|end|>",
  };
  await writeDirAtomic(target, async (tmp) => {
    await writeSafetensors(join(tmp, HF_FILES.model), tensors, { format: "pt" }, { atomic: false });
    return {
      [HF_FILES.config]: jsonText(hfConfigJson(config, tokenizer)),
      [HF_FILES.tokenizer]: tokenizer.toJsonString(),
      [HF_FILES.tokenizerConfig]: jsonText(tokConfig),
      [HF_FILES.specialTokens]: jsonText({
        bos_token: tokConfig.bos_token,
        eos_token: tokConfig.eos_token,
        pad_token: tokConfig.pad_token,
        additional_special_tokens: ["<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"],
      }),
      [HF_FILES.generation]: jsonText({
        bos_token_id: tokenizer.bosId,
        // A chat turn ends with <|end|>; <|eos|> ends a document.
        eos_token_id: [tokenizer.endId, tokenizer.eosId],
        pad_token_id: tokenizer.padId,
      }),
    };
  });
}

function field(cfg: Record<string, unknown>, key: string, dir: string): number {
  const v = cfg[key];
  if (typeof v !== "number" || !Number.isFinite(v))
    throw new UsageError(`${join(dir, HF_FILES.config)}: ${key} must be a number, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * Reads a `LlamaForCausalLM` directory of the embedded model's shape (what `exportHf` writes, or
 * what transformers' `save_pretrained` writes after training it) back into the embedded layout.
 * Anything the embedded model cannot represent (grouped KV heads, biases, another activation or
 * RoPE scaling, an untied head, a dtype other than F32) is a usage error naming the field.
 */
export async function importHf(dir: string): Promise<HfModel> {
  const cfgPath = join(dir, HF_FILES.config);
  let cfg: Record<string, unknown>;
  try {
    cfg = JSON.parse(await readFile(cfgPath, "utf8"));
  } catch (err) {
    throw new UsageError(`${cfgPath}: cannot read a Hugging Face config (${(err as Error).message})`);
  }
  const arch = cfg.architectures;
  if (!Array.isArray(arch) || !arch.includes(HF_ARCHITECTURE))
    throw new UsageError(
      `${cfgPath}: architectures must include ${HF_ARCHITECTURE}, got ${JSON.stringify(arch)}`,
    );
  const nHeads = field(cfg, "num_attention_heads", dir);
  const dModel = field(cfg, "hidden_size", dir);
  const rope = (cfg.rope_parameters ?? {}) as Record<string, unknown>;
  const ropeBase = typeof rope.rope_theta === "number" ? rope.rope_theta : field(cfg, "rope_theta", dir);
  const checks: [string, boolean][] = [
    ["num_key_value_heads (must equal num_attention_heads)", (cfg.num_key_value_heads ?? nHeads) === nHeads],
    [
      "head_dim (must be hidden_size / num_attention_heads)",
      (cfg.head_dim ?? dModel / nHeads) === dModel / nHeads,
    ],
    ["hidden_act (must be silu)", (cfg.hidden_act ?? "silu") === "silu"],
    ["attention_bias (must be false)", !cfg.attention_bias],
    ["mlp_bias (must be false)", !cfg.mlp_bias],
    ["tie_word_embeddings (must be true)", cfg.tie_word_embeddings === true],
    ["rope_parameters.rope_type (must be default)", (rope.rope_type ?? "default") === "default"],
  ];
  for (const [what, ok] of checks)
    if (!ok) throw new UsageError(`${cfgPath}: the embedded model cannot represent this ${what}`);
  const config = validateModelConfig({
    vocabSize: field(cfg, "vocab_size", dir),
    dModel,
    nLayers: field(cfg, "num_hidden_layers", dir),
    nHeads,
    dFf: field(cfg, "intermediate_size", dir),
    contextLength: field(cfg, "max_position_embeddings", dir),
    ropeBase,
    normEps: field(cfg, "rms_norm_eps", dir),
  });
  const tokenizer = Tokenizer.fromJsonString(await readFile(join(dir, HF_FILES.tokenizer), "utf8"));
  const file = await readSafetensors(join(dir, HF_FILES.model));
  const headDim = dModel / nHeads;
  const params = new Map<string, Float32Array>();
  for (const spec of paramSpecs(config)) {
    const name = hfTensorName(spec.name);
    const t = file.tensors.get(name);
    if (!t) throw new UsageError(`${join(dir, HF_FILES.model)} lacks "${name}"`);
    if (t.dtype !== "F32" || t.shape.join(",") !== spec.shape.join(","))
      throw new UsageError(
        `${join(dir, HF_FILES.model)}: "${name}" is ${t.dtype} [${t.shape}], expected F32 [${spec.shape}]`,
      );
    const w = t.data as Float32Array;
    params.set(
      spec.name,
      isRopeProjection(spec.name) ? permuteRopeRows(w, nHeads, headDim, dModel, false) : w,
    );
  }
  const head = file.tensors.get("lm_head.weight");
  if (head) {
    const emb = params.get("token_embd.weight")!;
    const d = head.data as Float32Array;
    if (d.length !== emb.length || d.some((v, i) => v !== emb[i]))
      throw new UsageError(`${join(dir, HF_FILES.model)}: lm_head.weight differs from the tied embedding`);
  }
  return { config, params, tokenizer };
}
