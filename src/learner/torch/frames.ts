/**
 * The frames of the learner protocol (`docs/learner-protocol.md`): a 4-byte header length and a
 * 4-byte payload length (unsigned little-endian), a UTF-8 JSON header, then a payload holding the
 * binary arrays the header's `arrays` field describes (little-endian, each at a multiple of 8 bytes).
 */

export type ArrayDtype = "i32" | "f32" | "f64" | "u8";
export type WireArray = Int32Array | Float32Array | Float64Array | Uint8Array;

export interface ArraySpec {
  dtype: ArrayDtype;
  shape: number[];
  offset: number;
}

export interface Frame {
  header: Record<string, unknown>;
  arrays: Record<string, WireArray>;
}

const BYTES: Record<ArrayDtype, number> = { i32: 4, f32: 4, f64: 8, u8: 1 };

function dtypeOf(a: WireArray): ArrayDtype {
  if (a instanceof Int32Array) return "i32";
  if (a instanceof Float32Array) return "f32";
  if (a instanceof Float64Array) return "f64";
  if (a instanceof Uint8Array) return "u8";
  throw new TypeError("frame arrays must be Int32Array, Float32Array, Float64Array or Uint8Array");
}

const align8 = (n: number) => (n + 7) & ~7;

/** One frame as bytes: `header` (without `arrays`, which is filled in here) and the arrays. */
export function encodeFrame(header: Record<string, unknown>, arrays: Record<string, WireArray> = {}): Buffer {
  const specs: Record<string, ArraySpec> = {};
  let size = 0;
  for (const [name, a] of Object.entries(arrays)) {
    size = align8(size);
    specs[name] = { dtype: dtypeOf(a), shape: [a.length], offset: size };
    size += a.byteLength;
  }
  const full = Object.keys(specs).length > 0 ? { ...header, arrays: specs } : header;
  const head = Buffer.from(JSON.stringify(full), "utf8");
  const out = Buffer.alloc(8 + head.length + size);
  out.writeUInt32LE(head.length, 0);
  out.writeUInt32LE(size, 4);
  head.copy(out, 8);
  const base = 8 + head.length;
  for (const [name, a] of Object.entries(arrays)) {
    const bytes = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    bytes.copy(out, base + specs[name].offset);
  }
  return out;
}

/** Thrown for bytes that are not a valid frame (the peer speaks another protocol). */
export class FrameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FrameError";
  }
}

/** The arrays of a frame's payload, copied out into aligned typed arrays. */
export function decodeArrays(specs: unknown, payload: Buffer): Record<string, WireArray> {
  const out: Record<string, WireArray> = {};
  if (specs === undefined || specs === null) return out;
  if (typeof specs !== "object") throw new FrameError("header field arrays is not an object");
  for (const [name, raw] of Object.entries(specs as Record<string, unknown>)) {
    const s = raw as Partial<ArraySpec>;
    if (!s || typeof s.dtype !== "string" || !(s.dtype in BYTES))
      throw new FrameError(`array ${name}: unknown dtype ${JSON.stringify(s?.dtype)}`);
    if (!Array.isArray(s.shape) || !s.shape.every((d) => Number.isInteger(d) && d >= 0))
      throw new FrameError(`array ${name}: bad shape`);
    if (!Number.isInteger(s.offset) || (s.offset as number) < 0)
      throw new FrameError(`array ${name}: bad offset`);
    const count = s.shape.reduce((p, d) => p * d, 1);
    const bytes = count * BYTES[s.dtype as ArrayDtype];
    const off = s.offset as number;
    if (off + bytes > payload.length)
      throw new FrameError(
        `array ${name}: ${bytes} bytes at ${off} overrun the ${payload.length}-byte payload`,
      );
    const copy = new ArrayBuffer(bytes);
    new Uint8Array(copy).set(payload.subarray(off, off + bytes));
    switch (s.dtype as ArrayDtype) {
      case "i32":
        out[name] = new Int32Array(copy);
        break;
      case "f32":
        out[name] = new Float32Array(copy);
        break;
      case "f64":
        out[name] = new Float64Array(copy);
        break;
      case "u8":
        out[name] = new Uint8Array(copy);
        break;
    }
  }
  return out;
}

/** Largest header or payload accepted (guards against reading garbage as a length). */
const MAX_PART = 2 ** 31;

/** Cuts a byte stream into frames; `push` returns every frame completed by the new bytes. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private length = 0;

  push(data: Buffer): Frame[] {
    this.chunks.push(data);
    this.length += data.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.length < 8) break;
      const buf = this.flatten();
      const h = buf.readUInt32LE(0);
      const p = buf.readUInt32LE(4);
      if (h === 0 || h >= MAX_PART || p >= MAX_PART)
        throw new FrameError(`bad frame lengths (header ${h}, payload ${p})`);
      if (buf.length < 8 + h + p) break;
      let header: unknown;
      try {
        header = JSON.parse(buf.subarray(8, 8 + h).toString("utf8"));
      } catch {
        throw new FrameError("frame header is not JSON");
      }
      if (header === null || typeof header !== "object" || Array.isArray(header))
        throw new FrameError("frame header is not a JSON object");
      const payload = buf.subarray(8 + h, 8 + h + p);
      const head = header as Record<string, unknown>;
      frames.push({ header: head, arrays: decodeArrays(head.arrays, payload) });
      const rest = buf.subarray(8 + h + p);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.length = rest.length;
    }
    return frames;
  }

  private flatten(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0];
  }
}
