/**
 * safetensors read/write: an 8-byte little-endian header length, a JSON header
 * ({name: {dtype, shape, data_offsets}}, plus an optional "__metadata__" string map) padded
 * with spaces to 8 bytes, then the tensors' bytes back to back in header order.
 */
import { open, readFile } from "node:fs/promises";
import { endianness } from "node:os";
import { writeAll, writeFileAtomic, writeFileDurable } from "../core/atomic-write.js";

export type SafeDType = "F32" | "I32" | "U8";
export type TensorArray = Float32Array | Int32Array | Uint8Array;

export interface Tensor {
  dtype: SafeDType;
  shape: number[];
  data: TensorArray;
}

/** A bare typed array is stored 1-D. */
export type TensorInput = TensorArray | { shape: readonly number[]; data: TensorArray };
export type TensorInputs = ReadonlyMap<string, TensorInput> | Readonly<Record<string, TensorInput>>;

export interface SafetensorsFile {
  tensors: Map<string, Tensor>;
  metadata: Record<string, string>;
}

const BYTES: Record<SafeDType, number> = { F32: 4, I32: 4, U8: 1 };
const HEADER_LIMIT = 100 * 1024 * 1024;

function assertLittleEndian(): void {
  if (endianness() !== "LE") throw new Error("safetensors: only little-endian hosts are supported");
}

export function dtypeOf(data: TensorArray): SafeDType {
  if (data instanceof Float32Array) return "F32";
  if (data instanceof Int32Array) return "I32";
  if (data instanceof Uint8Array) return "U8";
  throw new TypeError("safetensors: tensors must be Float32Array, Int32Array or Uint8Array");
}

function entries(tensors: TensorInputs): [string, TensorInput][] {
  return tensors instanceof Map
    ? [...tensors.entries()]
    : Object.entries(tensors as Record<string, TensorInput>);
}

function normalise(name: string, t: TensorInput): Tensor {
  const data = ArrayBuffer.isView(t) ? t : t.data;
  const shape = ArrayBuffer.isView(t) ? [t.length] : [...t.shape];
  const dtype = dtypeOf(data as TensorArray);
  const n = shape.reduce((a, b) => a * b, 1);
  if (shape.some((d) => !Number.isInteger(d) || d < 0) || n !== data.length)
    throw new RangeError(`safetensors: tensor "${name}" has shape [${shape}] but ${data.length} elements`);
  return { dtype, shape, data: data as TensorArray };
}

function bytesOf(data: TensorArray): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

interface Layout {
  header: Buffer;
  tensors: [string, Tensor][];
  dataBytes: number;
}

function layout(tensors: TensorInputs, metadata: Record<string, string> = {}): Layout {
  assertLittleEndian();
  const list = entries(tensors).map(([name, t]) => [name, normalise(name, t)] as [string, Tensor]);
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) {
    for (const [k, v] of Object.entries(metadata))
      if (typeof v !== "string") throw new TypeError(`safetensors: metadata "${k}" must be a string`);
    header.__metadata__ = { ...metadata };
  }
  let off = 0;
  for (const [name, t] of list) {
    if (name === "__metadata__")
      throw new RangeError('safetensors: "__metadata__" is not a valid tensor name');
    const size = t.data.byteLength;
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + size] };
    off += size;
  }
  let json = JSON.stringify(header);
  const raw = Buffer.byteLength(json, "utf8");
  const padded = Math.ceil((8 + raw) / 8) * 8 - 8;
  json += " ".repeat(padded - raw);
  const buf = Buffer.alloc(8 + padded);
  buf.writeBigUInt64LE(BigInt(padded), 0);
  buf.write(json, 8, "utf8");
  return { header: buf, tensors: list, dataBytes: off };
}

/** The whole file in memory. */
export function serializeSafetensors(tensors: TensorInputs, metadata?: Record<string, string>): Buffer {
  const l = layout(tensors, metadata);
  const out = Buffer.alloc(l.header.length + l.dataBytes);
  l.header.copy(out, 0);
  let off = l.header.length;
  for (const [, t] of l.tensors) {
    out.set(bytesOf(t.data), off);
    off += t.data.byteLength;
  }
  return out;
}

/**
 * Writes a safetensors file, streaming the tensors without copying them. Atomic (temp file +
 * rename) unless `atomic: false`, which writes in place with an fsync (for files inside a
 * temporary directory that is itself renamed into place).
 */
export async function writeSafetensors(
  path: string,
  tensors: TensorInputs,
  metadata?: Record<string, string>,
  opts: { atomic?: boolean } = {},
): Promise<void> {
  const l = layout(tensors, metadata);
  const write = async (handle: import("node:fs/promises").FileHandle) => {
    await writeAll(handle, l.header);
    for (const [, t] of l.tensors) await writeAll(handle, bytesOf(t.data));
  };
  if (opts.atomic ?? true) await writeFileAtomic(path, write);
  else await writeFileDurable(path, write);
}

/** Parses and validates a safetensors buffer; tensor data are copied into fresh typed arrays. */
export function parseSafetensors(buf: Uint8Array): SafetensorsFile {
  assertLittleEndian();
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  if (b.length < 8) throw new Error("safetensors: file shorter than its 8-byte header length");
  const n64 = b.readBigUInt64LE(0);
  if (n64 > BigInt(Math.min(HEADER_LIMIT, b.length - 8)))
    throw new Error(`safetensors: header length ${n64} exceeds the file`);
  const n = Number(n64);
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(b.toString("utf8", 8, 8 + n));
  } catch (err) {
    throw new Error(`safetensors: header is not valid JSON (${(err as Error).message})`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header))
    throw new Error("safetensors: header must be a JSON object");
  const dataStart = 8 + n;
  const dataLen = b.length - dataStart;
  const metadata: Record<string, string> = {};
  const spans: { name: string; begin: number; end: number }[] = [];
  const tensors = new Map<string, Tensor>();
  for (const [name, raw] of Object.entries(header)) {
    if (name === "__metadata__") {
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== "string") throw new Error(`safetensors: metadata "${k}" is not a string`);
        metadata[k] = v;
      }
      continue;
    }
    const info = raw as { dtype?: string; shape?: number[]; data_offsets?: [number, number] };
    const dtype = info.dtype as SafeDType;
    if (!(dtype in BYTES))
      throw new Error(`safetensors: tensor "${name}" has unsupported dtype ${info.dtype}`);
    const shape = info.shape;
    if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 0))
      throw new Error(`safetensors: tensor "${name}" has an invalid shape`);
    const [begin, end] = info.data_offsets ?? [Number.NaN, Number.NaN];
    const count = shape.reduce((a, c) => a * c, 1);
    if (
      !Number.isInteger(begin) ||
      !Number.isInteger(end) ||
      begin < 0 ||
      end > dataLen ||
      end - begin !== count * BYTES[dtype]
    )
      throw new Error(`safetensors: tensor "${name}" has invalid data_offsets [${begin}, ${end}]`);
    spans.push({ name, begin, end });
    const bytes = new Uint8Array(end - begin);
    bytes.set(b.subarray(dataStart + begin, dataStart + end));
    const data =
      dtype === "F32"
        ? new Float32Array(bytes.buffer, 0, count)
        : dtype === "I32"
          ? new Int32Array(bytes.buffer, 0, count)
          : bytes;
    tensors.set(name, { dtype, shape: [...shape], data });
  }
  spans.sort((x, y) => x.begin - y.begin || x.end - y.end);
  let expect = 0;
  for (const s of spans) {
    if (s.begin !== expect)
      throw new Error(`safetensors: tensor "${s.name}" overlaps or leaves a gap at byte ${expect}`);
    expect = s.end;
  }
  if (expect !== dataLen)
    throw new Error(`safetensors: ${dataLen - expect} trailing bytes after the last tensor`);
  return { tensors, metadata };
}

export async function readSafetensors(path: string): Promise<SafetensorsFile> {
  return parseSafetensors(await readFile(path));
}

/** Reads only the header (names, dtypes, shapes, metadata) without loading tensor data. */
export async function readSafetensorsHeader(path: string): Promise<{
  tensors: Map<string, { dtype: SafeDType; shape: number[] }>;
  metadata: Record<string, string>;
}> {
  const handle = await open(path, "r");
  try {
    const lenBuf = Buffer.alloc(8);
    await handle.read(lenBuf, 0, 8, 0);
    const n = Number(lenBuf.readBigUInt64LE(0));
    const { size } = await handle.stat();
    if (n > Math.min(HEADER_LIMIT, size - 8))
      throw new Error(`safetensors: header length ${n} exceeds the file`);
    const hb = Buffer.alloc(n);
    await handle.read(hb, 0, n, 8);
    const header = JSON.parse(hb.toString("utf8")) as Record<string, unknown>;
    const tensors = new Map<string, { dtype: SafeDType; shape: number[] }>();
    let metadata: Record<string, string> = {};
    for (const [name, raw] of Object.entries(header)) {
      if (name === "__metadata__") metadata = raw as Record<string, string>;
      else {
        const info = raw as { dtype: SafeDType; shape: number[] };
        tensors.set(name, { dtype: info.dtype, shape: info.shape });
      }
    }
    return { tensors, metadata };
  } finally {
    await handle.close();
  }
}
