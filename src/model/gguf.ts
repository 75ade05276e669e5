/**
 * GGUF v3 export of the embedded model for llama.cpp (node-llama-cpp), and a small reader.
 *
 * Layout: magic "GGUF", version 3, tensor count, metadata count (u64), metadata key/values,
 * tensor infos (name, n_dims, dims innermost-first, ggml type, offset), padding to
 * `general.alignment` (32), then the tensor data, each tensor aligned to 32 bytes.
 *
 * Tensors keep the llama.cpp names of `paramSpecs`. A row-major [out, in] matrix has GGUF
 * dims [in, out] (ne[0] = in-features). The output head is tied to token_embd, so no
 * output.weight is written (llama.cpp then reuses token_embd). The tokenizer is written as a
 * GPT-2-style BPE vocabulary (byte-level unicode tokens, merges, special tokens CONTROL),
 * padded with UNUSED placeholder tokens up to model.vocabSize rows.
 */
import { open, readFile } from "node:fs/promises";
import { endianness } from "node:os";
import { writeAll, writeFileAtomic } from "../core/atomic-write.js";
import { expectChoice } from "../core/errors.js";
import { CHAT_TEMPLATE_JINJA } from "./chat-template.js";
import { type ModelConfig, paramSpecs, validateModelConfig } from "./config.js";
import type { Tokenizer } from "./tokenizer.js";

export const GGUF_MAGIC = 0x46554747; // "GGUF" little-endian
export const GGUF_VERSION = 3;
export const GGUF_ALIGNMENT = 32;

/** GGUF metadata value types. */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** ggml tensor types used here. */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
}

/** llama.cpp token types. */
export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export const GGUF_EXPORT_TYPES = ["F32", "Q8_0"] as const;
export type GgufExportType = (typeof GGUF_EXPORT_TYPES)[number];

/** llama.cpp file types (general.file_type). */
const FILE_TYPE: Record<GgufExportType, number> = { F32: 0, Q8_0: 7 };

export const Q8_0_BLOCK = 32;
const Q8_0_BLOCK_BYTES = 2 + Q8_0_BLOCK;

// ---- values ---------------------------------------------------------------------------------

/** A metadata value with its GGUF type. Arrays hold elements of one type. */
export type GgufValue =
  | { type: GgufValueType.STRING; value: string }
  | { type: GgufValueType.BOOL; value: boolean }
  | {
      type:
        | GgufValueType.UINT8
        | GgufValueType.INT8
        | GgufValueType.UINT16
        | GgufValueType.INT16
        | GgufValueType.UINT32
        | GgufValueType.INT32
        | GgufValueType.FLOAT32
        | GgufValueType.FLOAT64;
      value: number;
    }
  | { type: GgufValueType.UINT64 | GgufValueType.INT64; value: bigint }
  | { type: GgufValueType.ARRAY; itemType: GgufValueType; value: (string | number | boolean | bigint)[] };

export const gv = {
  str: (value: string): GgufValue => ({ type: GgufValueType.STRING, value }),
  u32: (value: number): GgufValue => ({ type: GgufValueType.UINT32, value }),
  i32: (value: number): GgufValue => ({ type: GgufValueType.INT32, value }),
  f32: (value: number): GgufValue => ({ type: GgufValueType.FLOAT32, value }),
  bool: (value: boolean): GgufValue => ({ type: GgufValueType.BOOL, value }),
  strArr: (value: string[]): GgufValue => ({
    type: GgufValueType.ARRAY,
    itemType: GgufValueType.STRING,
    value,
  }),
  i32Arr: (value: number[]): GgufValue => ({
    type: GgufValueType.ARRAY,
    itemType: GgufValueType.INT32,
    value,
  }),
};

// ---- F16 and Q8_0 -----------------------------------------------------------------------------

const f32Buf = new Float32Array(1);
const u32Buf = new Uint32Array(f32Buf.buffer);

/** float32 → IEEE half bits, round to nearest even (like ggml's FP32_TO_FP16). */
export function f32ToF16Bits(x: number): number {
  f32Buf[0] = x;
  const bits = u32Buf[0];
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow → inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow → ±0
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry into the exponent is the correct rounding (up to inf).
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  return sign | half;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** C `roundf`: halves away from zero. */
function roundAway(x: number): number {
  return x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5);
}

/** Quantises to Q8_0 blocks (F16 scale d = max|x|/127, then 32 int8 round(x/d)). */
export function quantizeQ8_0(x: Float32Array): Uint8Array {
  if (x.length % Q8_0_BLOCK !== 0)
    throw new RangeError(`Q8_0 needs a multiple of ${Q8_0_BLOCK} values, got ${x.length}`);
  const nb = x.length / Q8_0_BLOCK;
  const out = new Uint8Array(nb * Q8_0_BLOCK_BYTES);
  const view = new DataView(out.buffer);
  for (let b = 0; b < nb; b++) {
    const base = b * Q8_0_BLOCK;
    let amax = 0;
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      const a = Math.abs(x[base + j]);
      if (a > amax) amax = a;
    }
    const d = Math.fround(amax / 127);
    const id = d ? Math.fround(1 / d) : 0;
    const o = b * Q8_0_BLOCK_BYTES;
    view.setUint16(o, f32ToF16Bits(d), true);
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      const q = roundAway(Math.fround(x[base + j] * id));
      view.setInt8(o + 2 + j, Math.max(-128, Math.min(127, q)));
    }
  }
  return out;
}

export function dequantizeQ8_0(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q8_0_BLOCK; b++) {
    const o = b * Q8_0_BLOCK_BYTES;
    const d = f16BitsToF32(view.getUint16(o, true));
    for (let j = 0; j < Q8_0_BLOCK; j++) out[b * Q8_0_BLOCK + j] = d * view.getInt8(o + 2 + j);
  }
  return out;
}

// ---- writer ---------------------------------------------------------------------------------

class ByteWriter {
  private chunks: Buffer[] = [];
  length = 0;
  private push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  u8(v: number): void {
    const b = Buffer.alloc(1);
    b.writeUInt8(v);
    this.push(b);
  }
  i8(v: number): void {
    const b = Buffer.alloc(1);
    b.writeInt8(v);
    this.push(b);
  }
  u16(v: number): void {
    const b = Buffer.alloc(2);
    b.writeUInt16LE(v);
    this.push(b);
  }
  i16(v: number): void {
    const b = Buffer.alloc(2);
    b.writeInt16LE(v);
    this.push(b);
  }
  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  i32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.push(b);
  }
  f32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  f64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeDoubleLE(v);
    this.push(b);
  }
  u64(v: number | bigint): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  i64(v: bigint): void {
    const b = Buffer.alloc(8);
    b.writeBigInt64LE(v);
    this.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, "utf8");
    this.u64(b.length);
    this.push(b);
  }
  zeros(n: number): void {
    if (n > 0) this.push(Buffer.alloc(n));
  }
  scalar(type: GgufValueType, v: string | number | boolean | bigint): void {
    switch (type) {
      case GgufValueType.UINT8:
        this.u8(v as number);
        break;
      case GgufValueType.INT8:
        this.i8(v as number);
        break;
      case GgufValueType.UINT16:
        this.u16(v as number);
        break;
      case GgufValueType.INT16:
        this.i16(v as number);
        break;
      case GgufValueType.UINT32:
        this.u32(v as number);
        break;
      case GgufValueType.INT32:
        this.i32(v as number);
        break;
      case GgufValueType.FLOAT32:
        this.f32(v as number);
        break;
      case GgufValueType.FLOAT64:
        this.f64(v as number);
        break;
      case GgufValueType.BOOL:
        this.u8(v ? 1 : 0);
        break;
      case GgufValueType.STRING:
        this.str(v as string);
        break;
      case GgufValueType.UINT64:
        this.u64(v as bigint);
        break;
      case GgufValueType.INT64:
        this.i64(v as bigint);
        break;
      default:
        throw new RangeError(`GGUF: cannot write a scalar of type ${type}`);
    }
  }
  value(v: GgufValue): void {
    this.u32(v.type);
    if (v.type === GgufValueType.ARRAY) {
      if (v.itemType === GgufValueType.ARRAY) throw new RangeError("GGUF: nested arrays are not supported");
      this.u32(v.itemType);
      this.u64(v.value.length);
      for (const item of v.value) this.scalar(v.itemType, item);
    } else this.scalar(v.type, v.value);
  }
  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}

/** One tensor to write: its data already in the ggml type's byte form. */
export interface GgufTensorOut {
  name: string;
  /** Innermost first (ne[0] = row length). */
  dims: number[];
  type: GgmlType;
  data: Uint8Array;
}

function alignUp(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}

/** Writes a GGUF v3 file (atomically) from metadata and prepared tensors. */
export async function writeGguf(
  path: string,
  metadata: ReadonlyMap<string, GgufValue>,
  tensors: readonly GgufTensorOut[],
  alignment = GGUF_ALIGNMENT,
): Promise<void> {
  if (endianness() !== "LE") throw new Error("GGUF: only little-endian hosts are supported");
  const kv = new Map(metadata);
  kv.set("general.alignment", gv.u32(alignment));
  const w = new ByteWriter();
  w.u32(GGUF_MAGIC);
  w.u32(GGUF_VERSION);
  w.u64(tensors.length);
  w.u64(kv.size);
  for (const [key, value] of kv) {
    w.str(key);
    w.value(value);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    w.str(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(t.type);
    w.u64(offset);
    offsets.push(offset);
    offset = alignUp(offset + t.data.byteLength, alignment);
  }
  w.zeros(alignUp(w.length, alignment) - w.length);
  const head = w.toBuffer();
  await writeFileAtomic(path, async (handle) => {
    await writeAll(handle, head);
    let pos = 0;
    for (let i = 0; i < tensors.length; i++) {
      const pad = offsets[i] - pos;
      if (pad > 0) await writeAll(handle, new Uint8Array(pad));
      await writeAll(handle, tensors[i].data);
      pos = offsets[i] + tensors[i].data.byteLength;
    }
    const tail = alignUp(pos, alignment) - pos;
    if (tensors.length > 0 && tail > 0) await writeAll(handle, new Uint8Array(tail));
  });
}

export interface ExportGgufInput {
  config: ModelConfig;
  params: ReadonlyMap<string, Float32Array> | Readonly<Record<string, Float32Array>>;
  tokenizer: Tokenizer;
  type: GgufExportType;
  /** general.name (default "mage"). */
  name?: string;
  /** Extra metadata, written last (may override defaults). */
  extraMetadata?: ReadonlyMap<string, GgufValue>;
}

/** The GPT-2-style tokenizer metadata for `vocabRows` rows (placeholders pad the tail). */
export function tokenizerMetadata(tok: Tokenizer, vocabRows: number): Map<string, GgufValue> {
  if (tok.vocabSize > vocabRows)
    throw new RangeError(`GGUF: tokenizer has ${tok.vocabSize} tokens but the model only ${vocabRows} rows`);
  const tokens: string[] = [...tok.vocab];
  const types: number[] = tokens.map((_, id) => (tok.isSpecial(id) ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.NORMAL));
  for (let id = tok.vocabSize; id < vocabRows; id++) {
    tokens.push(`<|unused_${id}|>`);
    types.push(TOKEN_TYPE.UNUSED);
  }
  const m = new Map<string, GgufValue>();
  m.set("tokenizer.ggml.model", gv.str("gpt2"));
  m.set("tokenizer.ggml.pre", gv.str("gpt-2"));
  m.set("tokenizer.ggml.tokens", gv.strArr(tokens));
  m.set("tokenizer.ggml.token_type", gv.i32Arr(types));
  m.set("tokenizer.ggml.merges", gv.strArr(tok.merges.map(([a, b]) => `${a} ${b}`)));
  m.set("tokenizer.ggml.bos_token_id", gv.u32(tok.bosId));
  m.set("tokenizer.ggml.eos_token_id", gv.u32(tok.eosId));
  m.set("tokenizer.ggml.eot_token_id", gv.u32(tok.endId));
  m.set("tokenizer.ggml.padding_token_id", gv.u32(tok.padId));
  m.set("tokenizer.ggml.add_bos_token", gv.bool(false));
  m.set("tokenizer.ggml.add_eos_token", gv.bool(false));
  m.set("tokenizer.chat_template", gv.str(CHAT_TEMPLATE_JINJA));
  return m;
}

/** Model hyper-parameters as llama.* metadata. */
export function llamaMetadata(c: ModelConfig, fileType: number, name: string): Map<string, GgufValue> {
  const m = new Map<string, GgufValue>();
  m.set("general.architecture", gv.str("llama"));
  m.set("general.name", gv.str(name));
  m.set("general.file_type", gv.u32(fileType));
  if (fileType !== 0) m.set("general.quantization_version", gv.u32(2));
  m.set("llama.context_length", gv.u32(c.contextLength));
  m.set("llama.embedding_length", gv.u32(c.dModel));
  m.set("llama.block_count", gv.u32(c.nLayers));
  m.set("llama.feed_forward_length", gv.u32(c.dFf));
  m.set("llama.attention.head_count", gv.u32(c.nHeads));
  m.set("llama.attention.head_count_kv", gv.u32(c.nHeads));
  m.set("llama.rope.dimension_count", gv.u32(c.dModel / c.nHeads));
  m.set("llama.rope.freq_base", gv.f32(c.ropeBase));
  m.set("llama.attention.layer_norm_rms_epsilon", gv.f32(c.normEps));
  m.set("llama.vocab_size", gv.u32(c.vocabSize));
  return m;
}

/**
 * Exports the model as GGUF. With "Q8_0", matrices whose rows are a multiple of 32 are
 * quantised; 1-D norm weights (and any matrix with another row length) stay F32.
 */
export async function exportGguf(path: string, input: ExportGgufInput): Promise<void> {
  const type = expectChoice("GGUF export type", input.type, GGUF_EXPORT_TYPES);
  const config = validateModelConfig(input.config);
  const params =
    input.params instanceof Map
      ? (input.params as ReadonlyMap<string, Float32Array>)
      : new Map(Object.entries(input.params as Record<string, Float32Array>));
  const tensors: GgufTensorOut[] = [];
  for (const spec of paramSpecs(config)) {
    const data = params.get(spec.name);
    const n = spec.shape.reduce((a, b) => a * b, 1);
    if (!data) throw new RangeError(`GGUF: parameter "${spec.name}" is missing`);
    if (data.length !== n)
      throw new RangeError(
        `GGUF: parameter "${spec.name}" has ${data.length} values, expected ${n} [${spec.shape}]`,
      );
    const dims = [...spec.shape].reverse();
    const quantise = type === "Q8_0" && spec.shape.length >= 2 && dims[0] % Q8_0_BLOCK === 0;
    tensors.push({
      name: spec.name,
      dims,
      type: quantise ? GgmlType.Q8_0 : GgmlType.F32,
      data: quantise ? quantizeQ8_0(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    });
  }
  const metadata = llamaMetadata(config, FILE_TYPE[type], input.name ?? "mage");
  for (const [k, v] of tokenizerMetadata(input.tokenizer, config.vocabSize)) metadata.set(k, v);
  for (const [k, v] of input.extraMetadata ?? []) metadata.set(k, v);
  await writeGguf(path, metadata, tensors);
}

// ---- reader ---------------------------------------------------------------------------------

export interface GgufTensorInfo {
  name: string;
  dims: number[];
  type: GgmlType | number;
  /** Offset relative to the start of the data section. */
  offset: number;
  /** The tensor's raw bytes. */
  data: Uint8Array;
}

export interface GgufFile {
  version: number;
  /** Metadata with plain JS values (u64/i64 as bigint). */
  metadata: Map<string, unknown>;
  /** Metadata value types (for arrays, the element type as `[ARRAY, item]`). */
  metadataTypes: Map<string, GgufValueType | [GgufValueType, GgufValueType]>;
  alignment: number;
  dataOffset: number;
  tensors: GgufTensorInfo[];
}

class ByteReader {
  pos = 0;
  private readonly view: DataView;
  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  private need(n: number): void {
    if (this.pos + n > this.buf.byteLength)
      throw new Error(`GGUF: unexpected end of file at byte ${this.pos}`);
  }
  u8(): number {
    this.need(1);
    return this.view.getUint8(this.pos++);
  }
  i8(): number {
    this.need(1);
    return this.view.getInt8(this.pos++);
  }
  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return v;
  }
  i16(): number {
    this.need(2);
    const v = this.view.getInt16(this.pos, true);
    this.pos += 2;
    return v;
  }
  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  i32(): number {
    this.need(4);
    const v = this.view.getInt32(this.pos, true);
    this.pos += 4;
    return v;
  }
  f32(): number {
    this.need(4);
    const v = this.view.getFloat32(this.pos, true);
    this.pos += 4;
    return v;
  }
  f64(): number {
    this.need(8);
    const v = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }
  u64(): bigint {
    this.need(8);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }
  i64(): bigint {
    this.need(8);
    const v = this.view.getBigInt64(this.pos, true);
    this.pos += 8;
    return v;
  }
  size(): number {
    const v = this.u64();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error("GGUF: size too large");
    return Number(v);
  }
  str(): string {
    const n = this.size();
    this.need(n);
    const s = Buffer.from(this.buf.buffer, this.buf.byteOffset + this.pos, n).toString("utf8");
    this.pos += n;
    return s;
  }
  scalar(type: GgufValueType): string | number | boolean | bigint {
    switch (type) {
      case GgufValueType.UINT8:
        return this.u8();
      case GgufValueType.INT8:
        return this.i8();
      case GgufValueType.UINT16:
        return this.u16();
      case GgufValueType.INT16:
        return this.i16();
      case GgufValueType.UINT32:
        return this.u32();
      case GgufValueType.INT32:
        return this.i32();
      case GgufValueType.FLOAT32:
        return this.f32();
      case GgufValueType.FLOAT64:
        return this.f64();
      case GgufValueType.BOOL: {
        const b = this.u8();
        if (b > 1) throw new Error(`GGUF: invalid bool ${b}`);
        return b === 1;
      }
      case GgufValueType.STRING:
        return this.str();
      case GgufValueType.UINT64:
        return this.u64();
      case GgufValueType.INT64:
        return this.i64();
      default:
        throw new Error(`GGUF: unknown value type ${type}`);
    }
  }
}

const TYPE_SIZE: Record<number, { block: number; bytes: number }> = {
  [GgmlType.F32]: { block: 1, bytes: 4 },
  [GgmlType.F16]: { block: 1, bytes: 2 },
  [GgmlType.Q8_0]: { block: Q8_0_BLOCK, bytes: Q8_0_BLOCK_BYTES },
};

/** Bytes a tensor of `type` with `count` elements occupies. */
export function ggmlTensorBytes(type: number, count: number): number {
  const t = TYPE_SIZE[type];
  if (!t) throw new Error(`GGUF: unsupported ggml type ${type}`);
  if (count % t.block !== 0) throw new Error(`GGUF: ${count} elements is not a whole number of blocks`);
  return (count / t.block) * t.bytes;
}

export function parseGguf(buf: Uint8Array): GgufFile {
  const r = new ByteReader(buf);
  if (r.u32() !== GGUF_MAGIC) throw new Error("GGUF: bad magic");
  const version = r.u32();
  if (version !== 3) throw new Error(`GGUF: unsupported version ${version}`);
  const nTensors = r.size();
  const nKv = r.size();
  const metadata = new Map<string, unknown>();
  const metadataTypes = new Map<string, GgufValueType | [GgufValueType, GgufValueType]>();
  for (let i = 0; i < nKv; i++) {
    const key = r.str();
    const type = r.u32() as GgufValueType;
    if (type === GgufValueType.ARRAY) {
      const item = r.u32() as GgufValueType;
      const n = r.size();
      if (item === GgufValueType.ARRAY) throw new Error("GGUF: nested arrays are not supported");
      const arr: unknown[] = new Array(n);
      for (let j = 0; j < n; j++) arr[j] = r.scalar(item);
      metadata.set(key, arr);
      metadataTypes.set(key, [type, item]);
    } else {
      metadata.set(key, r.scalar(type));
      metadataTypes.set(key, type);
    }
  }
  const alignment = Number(metadata.get("general.alignment") ?? GGUF_ALIGNMENT);
  const infos: Omit<GgufTensorInfo, "data">[] = [];
  for (let i = 0; i < nTensors; i++) {
    const name = r.str();
    const nd = r.u32();
    const dims: number[] = [];
    for (let d = 0; d < nd; d++) dims.push(r.size());
    const type = r.u32();
    const offset = r.size();
    if (offset % alignment !== 0) throw new Error(`GGUF: tensor ${name} offset ${offset} is not aligned`);
    infos.push({ name, dims, type, offset });
  }
  const dataOffset = alignUp(r.pos, alignment);
  const tensors = infos.map((t) => {
    const count = t.dims.reduce((a, b) => a * b, 1);
    const bytes = ggmlTensorBytes(t.type, count);
    const start = dataOffset + t.offset;
    if (start + bytes > buf.byteLength)
      throw new Error(`GGUF: tensor ${t.name} runs past the end of the file`);
    return { ...t, data: buf.subarray(start, start + bytes) };
  });
  return { version, metadata, metadataTypes, alignment, dataOffset, tensors };
}

export async function readGguf(path: string): Promise<GgufFile> {
  return parseGguf(await readFile(path));
}

/** A tensor's values as float32 (dequantised when needed). */
export function ggufTensorToFloat32(t: GgufTensorInfo): Float32Array {
  const count = t.dims.reduce((a, b) => a * b, 1);
  switch (t.type) {
    case GgmlType.F32: {
      // Copy first: the data may sit unaligned inside a larger (Buffer) allocation.
      const bytes = new Uint8Array(count * 4);
      bytes.set(t.data.subarray(0, count * 4));
      return new Float32Array(bytes.buffer);
    }
    case GgmlType.F16: {
      const view = new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength);
      const out = new Float32Array(count);
      for (let i = 0; i < count; i++) out[i] = f16BitsToF32(view.getUint16(2 * i, true));
      return out;
    }
    case GgmlType.Q8_0:
      return dequantizeQ8_0(t.data, count);
    default:
      throw new Error(`GGUF: cannot convert ggml type ${t.type} to float32`);
  }
}

/** Quick check that a file starts with the GGUF magic (without reading it all). */
export async function isGgufFile(path: string): Promise<boolean> {
  const handle = await open(path, "r");
  try {
    const b = Buffer.alloc(4);
    const { bytesRead } = await handle.read(b, 0, 4, 0);
    return bytesRead === 4 && b.readUInt32LE(0) === GGUF_MAGIC;
  } finally {
    await handle.close();
  }
}
